"""Real nodes: a real kubelet with its own containerd (runc, the CNI reference plugins)
inside each simulated node's network namespace, running the project's images.

One node is two processes (``supervisor.py``) (``python -m localcluster.nodes.realnode run|inner``):

``run`` (tracked as ``node-<name>``, in the machine's namespaces) relays the ``kubernetes``
Service address 10.96.0.1:443 inside the node's namespace to the apiserver (as the node
agent does, ``serviceproxy.py``: the kubelet and the pods reach the API there), gives the
node its pod bridge and routes (``podnet.ensure_node``), places itself in the node's own
cgroup, then starts ``inner`` with ``nsenter --net=<node netns> unshare --mount
--propagation slave`` and waits. SIGTERM, or ``inner`` ending, stops the whole node: every
process in the node's cgroups (kubelet, containerd, shims, containers) is killed, which
is what a lost node looks like.

``inner`` (in the node's network namespace, its own UTS namespace with the node's name as
hostname, and a private mount namespace, so containerd, the kubelet and runc see the same
mounts) bind-mounts private directories and files over
the host paths that containerd 1.6, the kubelet and libcni hard-code or write
(``/run/containerd``: shim sockets; ``/var/lib/cni``: libcni's cache; ``/var/log``:
``/var/log/containers`` links; ``/etc/hosts`` and ``/etc/resolv.conf``: the node's own,
which host-network pods get; ``vm/overcommit_memory``, ``kernel/panic``,
``kernel/panic_on_oops`` under /proc/sys: the kubelet writes them at start, and they are
machine-wide), starts containerd, imports the images that changed, then runs the kubelet.

Layout (``<dir>`` = ``<state>/realnodes/<node>``): ``containerd.toml``, ``kubelet.yaml``,
``kubelet.kubeconfig``, ``cni/10-disttrain.conflist``, ``hosts``, ``resolv.conf``,
``kubelet/`` (--root-dir), ``pod-logs/``, ``private/`` (the bind-mounted directories),
``ipam/``, ``runc/``; logs ``<state>/logs/node-<name>.log``, ``containerd-<name>.log``,
``kubelet-<name>.log``. containerd's root (images, snapshots) is kept across ``down`` in
``$DISTTRAIN_CACHE/nodes/<netns>/`` with one marker per imported archive.

Facts this relies on (measured on this machine kind; localcluster/README.md, "Real
nodes"): no CAP_SYS_RESOURCE (containerd's ``restrict_oom_score_adj``), cgroup v1 (the kubelet's
``failCgroupV1: false``), no registry (the pause image is built here, ``images/pause``).
"""
