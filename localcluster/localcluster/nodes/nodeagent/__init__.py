"""The node agent: a small virtual kubelet for one simulated node.

Runs in the root network namespace and talks to the apiserver with the node's client
certificate (CN=system:node:<node>), so the Node authorizer and NodeRestriction apply.
It registers the Node, renews its Lease, and runs each pod bound to the node as
processes inside the node's network namespace (see containerinit.py). It also serves
the kubelet's ``/containerLogs`` endpoint over HTTPS on 127.0.0.1 for ``kubectl logs``.

Usage: python -m localcluster.nodes.nodeagent --node node-a --gpus 0 --state <state dir>

Modules, by concern:
- ``__main__``: the entry point (arguments, logging, signals).
- ``agent``: :class:`~.agent.Agent`, one node's agent (state, events, start-up).
- ``node``: Node registration, node status, Lease renewal, the heartbeat loop.
- ``watch``: the pod watch and dispatch to one worker per pod.
- ``logs``: the kubelet API subset (``/containerLogs``, ``/healthz``) over HTTPS.
- ``lifecycle``: :class:`~.lifecycle.PodWorker`, one pod's thread (steps, deletion).
- ``podstate``: a pod worker's state, pod events and API reads.
- ``sandbox``: the pod's network sandbox, hostname, /etc/hosts and /etc/resolv.conf.
- ``volumes``: volumes (emptyDir, hostPath, configMap, secret, downwardAPI, projected).
- ``container``: container processes: start, exit, restart back-off, kill.
- ``podstatus``: the pod status (phase, conditions, container statuses) and its write.
- ``shared``: the agent's logger and timestamps.
"""
