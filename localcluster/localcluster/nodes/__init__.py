"""Nodes and their runtime: real kubelets with containerd (``realnode``), the node agent
(``nodeagent/``, pods as processes), the pod spec helpers and each container's first
program (``containerinit``). Imports no cluster module."""
