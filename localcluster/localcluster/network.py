"""Network namespaces for the simulated nodes.

Topology (nothing is created in the root namespace, and no namespace has a default
route, so a node can only reach the cluster's own addresses)::

    netns dtj-fabric:  br-mgmt (10.100.0.0/24)      br-data (10.101.0.0/24)
                         |  mgmt-node-a ...            |  data-node-a ...
    netns dtj-node-a:  eth0 10.100.0.11/24           eth1 10.101.0.11/24
                       docker0 172.17.0.1/16 (decoy bridge, UP via a veth port)
    netns dtj-node-b:  eth0 10.100.0.12/24           eth1 10.101.0.12/24 ...
"""
from __future__ import annotations

import subprocess

from .config import DECOY_DOCKER_ADDR, FABRIC_NS, KUBERNETES_SERVICE_IP, NODE_NS_PREFIX, NodeSpec


class NetworkError(RuntimeError):
    """An `ip` command failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {p.stderr.strip()}")
    return p


def list_netns() -> list[str]:
    """Names of all network namespaces (``ip netns list``)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def our_netns() -> list[str]:
    """Names of the namespaces this project created (prefix ``dtj-``)."""
    return [n for n in list_netns() if n.startswith(NODE_NS_PREFIX)]


def _link_exists(ns: str, dev: str) -> bool:
    return _ip("-n", ns, "link", "show", dev, check=False).returncode == 0


def ensure_fabric() -> None:
    """Create netns dtj-fabric with bridges br-mgmt and br-data (idempotent).

    Raises NetworkError if an `ip` command fails.
    """
    if FABRIC_NS not in list_netns():
        _ip("netns", "add", FABRIC_NS)
    _ip("-n", FABRIC_NS, "link", "set", "lo", "up")
    for br in ("br-mgmt", "br-data"):
        if not _link_exists(FABRIC_NS, br):
            _ip("-n", FABRIC_NS, "link", "add", br, "type", "bridge", "forward_delay", "0",
                "stp_state", "0")
        _ip("-n", FABRIC_NS, "link", "set", br, "up")


def ensure_node(node: NodeSpec) -> None:
    """Create the node's namespace and NICs (idempotent): decoy docker0 first, then eth0
    on br-mgmt and eth1 on br-data. Raises NetworkError on failure."""
    ns = node.netns
    if ns not in list_netns():
        _ip("netns", "add", ns)
    _ip("-n", ns, "link", "set", "lo", "up")
    # The `kubernetes` Service ClusterIP, served by the node agent (serviceproxy.py).
    if KUBERNETES_SERVICE_IP not in _ip("-n", ns, "addr", "show", "dev", "lo").stdout:
        _ip("-n", ns, "addr", "add", f"{KUBERNETES_SERVICE_IP}/32", "dev", "lo")
    # Decoy docker0 first, so it is listed before the real NICs (lower ifindex). Its port is
    # a veth pair inside the node (as Docker's container veths are), which keeps it UP.
    if not _link_exists(ns, "docker0"):
        _ip("-n", ns, "link", "add", "docker0", "type", "bridge", "forward_delay", "0",
            "stp_state", "0")
        _ip("-n", ns, "addr", "add", DECOY_DOCKER_ADDR, "dev", "docker0")
    if not _link_exists(ns, "veth-docker0"):
        _ip("-n", ns, "link", "add", "veth-docker0", "type", "veth", "peer", "name", "veth-docker0p")
    _ip("-n", ns, "link", "set", "veth-docker0", "master", "docker0")
    for dev in ("veth-docker0", "veth-docker0p", "docker0"):
        _ip("-n", ns, "link", "set", dev, "up")
    for dev, br, prefix, ip in (
        ("eth0", "br-mgmt", "mgmt", node.mgmt_ip),
        ("eth1", "br-data", "data", node.data_ip),
    ):
        peer = f"{prefix}-{node.name}"
        if not _link_exists(ns, dev):
            if _link_exists(FABRIC_NS, peer):
                _ip("-n", FABRIC_NS, "link", "del", peer)
            _ip("-n", FABRIC_NS, "link", "add", peer, "type", "veth", "peer", "name", dev,
                "netns", ns)
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
        _ip("-n", FABRIC_NS, "link", "set", peer, "master", br)
        _ip("-n", FABRIC_NS, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", dev, "up")


def node_healthy(node: NodeSpec) -> bool:
    """True if the node's namespace exists with eth0/eth1 carrying their addresses."""
    if node.netns not in list_netns():
        return False
    out = _ip("-n", node.netns, "-4", "-o", "addr", "show", check=False).stdout
    return f"{node.mgmt_ip}/24" in out and f"{node.data_ip}/24" in out


def netns_pids(ns: str) -> list[int]:
    """PIDs of processes whose network namespace is ``ns`` (``ip netns pids``)."""
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(x) for x in out.split() if x.isdigit()]


def delete_netns(ns: str) -> None:
    """Delete a namespace (its veths go with it); no error if it does not exist."""
    _ip("netns", "del", ns, check=False)


__all__ = [
    "NetworkError", "list_netns", "our_netns", "ensure_fabric", "ensure_node", "node_healthy",
    "netns_pids", "delete_netns",
]
