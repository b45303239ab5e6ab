"""The ground every room stands on: paths, ports and names (config), tracked processes,
certificates, kubeconfigs and a small Kubernetes API client. Imports no other room."""
