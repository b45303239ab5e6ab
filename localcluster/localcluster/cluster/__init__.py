"""The cluster's control plane and what runs beside it: etcd, the apiserver and its egress
to the nodes, Kueue, Kubeflow's training operator, the operator under test, and the add-ons
a scenario turns on (NetworkPolicy enforcement, a service mesh). Imports no node module."""
