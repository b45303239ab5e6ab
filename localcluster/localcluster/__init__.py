"""The proving ground: a real Kubernetes control plane and simulated nodes (network namespaces,
real kubelets or the node agent) on this machine, for ``make demo``, the scenarios, the e2e
tests and the benchmarks. Not part of the product: the operator and the probe never import it
(``make lint``). See localcluster/README.md.
"""
