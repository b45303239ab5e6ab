"""Paths, ports and names shared by every part of the local cluster."""
from __future__ import annotations

import os
import string
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
VERSIONS_FILE = REPO_ROOT / "localcluster" / "build" / "versions.env"
IMAGES_FILE = REPO_ROOT / "localcluster" / "images.yaml"
# An image every node holds (real nodes import it, ``make images``), with sh, sleep and
# python: what a test's or scenario's helper pod runs (a quota holder, a pod that sleeps).
# No registry is reachable here, so a public name such as busybox would never pull.
UTILITY_IMAGE = "ghcr.io/disttrain/disttrain-probe:0.1.0"

MAX_INSTANCE = 9


def cluster_instance() -> int:
    """$DISTTRAIN_CLUSTER_INSTANCE (0..9, default 0): several local clusters side by side.

    Instance 0 is the default cluster (namespaces dtj-*, apiserver :16443, state dir
    .localcluster). Instance N > 0 shifts every host port by N*1000 and uses namespaces
    dtjN-* and the state dir .localcluster-N. Raises ValueError for anything else.
    """
    raw = os.environ.get("DISTTRAIN_CLUSTER_INSTANCE", "").strip() or "0"
    if not raw.isdigit() or not 0 <= int(raw) <= MAX_INSTANCE:
        raise ValueError(f"DISTTRAIN_CLUSTER_INSTANCE must be 0..{MAX_INSTANCE}, got {raw!r}")
    return int(raw)


INSTANCE = cluster_instance()
_PORT_OFFSET = 1000 * INSTANCE

ETCD_CLIENT_PORT = 23790 + _PORT_OFFSET
ETCD_PEER_PORT = 23800 + _PORT_OFFSET
APISERVER_PORT = 16443 + _PORT_OFFSET
CONTROLLER_MANAGER_PORT = 16457 + _PORT_OFFSET
SCHEDULER_PORT = 16459 + _PORT_OFFSET
KUBELET_PORT_BASE = 16500 + _PORT_OFFSET  # node i serves its kubelet API on 127.0.0.1:(base+i)
OPERATOR_LIVENESS_PORT = 18080 + _PORT_OFFSET  # localcluster.cluster.operator_install's host process
OPERATOR_METRICS_PORT = 18090 + _PORT_OFFSET
# Kubeflow's training operator (`up --kubeflow`, kubeflow.py): its webhook server, metrics
# and health endpoints. Bases are distinct modulo 1000 from every port above (and from the
# kubelet ports 16500..16563), so no two instances' ports collide.
KUBEFLOW_WEBHOOK_PORT = 18070 + _PORT_OFFSET
KUBEFLOW_METRICS_PORT = 18071 + _PORT_OFFSET
KUBEFLOW_HEALTH_PORT = 18072 + _PORT_OFFSET
KUEUE_WEBHOOK_PORT = 16471 + _PORT_OFFSET  # Kueue's webhook server (https, 127.0.0.1)
KUEUE_HEALTH_PORT = 16472 + _PORT_OFFSET  # Kueue's healthz/readyz (http, 127.0.0.1)
JOBSET_WEBHOOK_PORT = 18073 + _PORT_OFFSET  # JobSet's webhook server (https, 127.0.0.1)
JOBSET_HEALTH_PORT = 18074 + _PORT_OFFSET  # JobSet's healthz/readyz (http, 127.0.0.1)
TRAINER_WEBHOOK_PORT = 18075 + _PORT_OFFSET  # Kubeflow Trainer v2's webhook server (https)
TRAINER_HEALTH_PORT = 18076 + _PORT_OFFSET  # Kubeflow Trainer v2's healthz/readyz (http)

SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service ClusterIP (see serviceproxy.py)
KUBERNETES_SERVICE_PORT = 443
# Pod network (localcluster/network/podnet.py): node i's pods get 10.244.i.0/24, gateway .1 on the
# node's `cni0` bridge; cluster DNS (CoreDNS, localcluster/network/dns.py) answers on the kube-dns
# Service ClusterIP, put directly on the DNS namespace's loopback (there is no kube-proxy).
POD_CIDR_TEMPLATE = "10.244.{index}.0/24"
POD_NETWORK_CIDR = "10.244.0.0/16"  # every node's pod CIDR lies in it
CLUSTER_DOMAIN = "cluster.local"
DNS_SERVICE_IP = "10.96.0.10"


def pod_cidr(index: int) -> str:
    """Node ``index``'s pod CIDR, e.g. 0 -> "10.244.0.0/24"."""
    return POD_CIDR_TEMPLATE.format(index=index)


MGMT_PREFIX = "10.100.0."
DATA_PREFIX = "10.101.0."
DECOY_DOCKER_ADDR = "172.17.0.1/16"
NODE_NS_PREFIX = "dtj-" if INSTANCE == 0 else f"dtj{INSTANCE}-"
FABRIC_NS = NODE_NS_PREFIX + "fabric"
DNS_NS = NODE_NS_PREFIX + "dns"
MAX_NODES = 64  # node-a .. node-z, node-aa .. node-bl (see node_name)


def versions() -> dict[str, str]:
    """Read ``localcluster/build/versions.env`` into a dict (K8S_VERSION, ETCD_VERSION, ...)."""
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def cache_dir() -> Path:
    """The binary cache: $DISTTRAIN_CACHE or ~/.cache/disttrain."""
    return Path(os.environ.get("DISTTRAIN_CACHE") or Path.home() / ".cache" / "disttrain")


def k8s_bin_dir() -> Path:
    """Directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kubectl."""
    return cache_dir() / f"k8s-{versions()['K8S_VERSION']}" / "bin"


def etcd_bin() -> Path:
    """Path of the etcd binary."""
    return cache_dir() / f"etcd-{versions()['ETCD_VERSION']}" / "bin" / "etcd"


def coredns_bin() -> Path:
    """Path of the CoreDNS binary (built by ``build-k8s.sh coredns``; it may not exist)."""
    return cache_dir() / f"coredns-{versions()['COREDNS_VERSION']}" / "bin" / "coredns"


def training_operator_dir() -> Path:
    """Kubeflow's training operator, built by ``build-k8s.sh kubeflow``:
    ``<cache>/training-operator-<version>`` with ``bin/training-operator.v1`` and
    ``manifests/`` (the PyTorchJob CRD, ClusterRole and webhook configuration of the same
    module). The files may not exist yet."""
    return cache_dir() / f"training-operator-{versions()['TRAINING_OPERATOR_VERSION']}"
def jobset_dir() -> Path:
    """``<cache>/jobset-<JOBSET_VERSION>``: ``bin/jobset`` and ``config/`` (its CRD,
    ClusterRole and webhooks, copied from the same module version by ``build-k8s.sh jobset``)."""
    return cache_dir() / f"jobset-{versions()['JOBSET_VERSION']}"


def trainer_dir() -> Path:
    """``<cache>/trainer-<TRAINER_VERSION>``: ``bin/trainer-controller-manager`` and
    ``config/`` (CRDs, ClusterRole, webhooks, the torch runtime; ``build-k8s.sh trainer``)."""
    return cache_dir() / f"trainer-{versions()['TRAINER_VERSION']}"


def kueue_dir() -> Path:
    """``<cache>/kueue-<KUEUE_VERSION>``: ``bin/kueue`` and ``config/`` (its CRDs,
    ClusterRole and webhooks, copied from the same module version by ``build-k8s.sh kueue``)."""
    return cache_dir() / f"kueue-{versions()['KUEUE_VERSION']}"


def state_dir() -> Path:
    """The state dir: $DISTTRAIN_STATE_DIR or ``<repo>/.localcluster`` (instance N > 0:
    ``<repo>/.localcluster-N``)."""
    default = REPO_ROOT / (".localcluster" if INSTANCE == 0 else f".localcluster-{INSTANCE}")
    return Path(os.environ.get("DISTTRAIN_STATE_DIR") or default).resolve()


def venv_python() -> str:
    """The Python interpreter that runs the node processes (the one running us)."""
    return sys.executable


def venv_bin() -> str:
    """The bin dir of the project's venv (first on containers' PATH)."""
    return str(Path(sys.executable).parent)


def node_name(index: int) -> str:
    """Node ``index``'s name (0-based): node-a .. node-z, then node-aa, node-ab, ...,
    node-az, node-ba, ... (letters counted as spreadsheet columns are: bijective base 26).
    Raises ValueError for a negative index."""
    if index < 0:
        raise ValueError(f"node index must be >= 0, got {index}")
    letters = ""
    n = index + 1
    while n:
        n, r = divmod(n - 1, 26)
        letters = string.ascii_lowercase[r] + letters
    return f"node-{letters}"


def node_index(name: str) -> int:
    """Inverse of :func:`node_name`. Raises ValueError for a name not of the form
    ``node-<letters>`` (1 to 3 lower-case letters)."""
    letters = name[5:] if name.startswith("node-") else ""
    if not 1 <= len(letters) <= 3 or any(c not in string.ascii_lowercase for c in letters):
        raise ValueError(f"not a local node name: {name}")
    n = 0
    for c in letters:
        n = n * 26 + string.ascii_lowercase.index(c) + 1
    return n - 1


@dataclass(frozen=True)
class NodeSpec:
    """A simulated node: index i gives name :func:`node_name` (node-a, ..., node-z,
    node-aa, ...), addresses 10.10{0,1}.0.(11+i)."""

    index: int

    @property
    def name(self) -> str:
        """node-a, node-b, ..., node-z, node-aa, ..."""
        return node_name(self.index)

    @property
    def netns(self) -> str:
        """The node's network namespace, dtj-<name>."""
        return NODE_NS_PREFIX + self.name

    @property
    def mgmt_ip(self) -> str:
        """eth0's address (the Node's InternalIP), 10.100.0.(11+index)."""
        return f"{MGMT_PREFIX}{10 + self.index + 1}"

    @property
    def data_ip(self) -> str:
        """eth1's address (fast data NIC), 10.101.0.(11+index)."""
        return f"{DATA_PREFIX}{10 + self.index + 1}"

    @property
    def kubelet_port(self) -> int:
        """Port of the agent's kubelet API on 127.0.0.1, 16500+index."""
        return KUBELET_PORT_BASE + self.index


def node_specs(n: int) -> list[NodeSpec]:
    """Specs for the first ``n`` nodes (node-a ...). Raises ValueError if n is not in
    1..MAX_NODES (64)."""
    if not 1 <= n <= MAX_NODES:
        raise ValueError(f"--nodes must be between 1 and {MAX_NODES}, got {n}")
    return [NodeSpec(i) for i in range(n)]


def node_spec_by_name(name: str) -> NodeSpec:
    """Inverse of NodeSpec.name. Raises ValueError for a name that is no node's
    (see :func:`node_index`)."""
    return NodeSpec(node_index(name))
