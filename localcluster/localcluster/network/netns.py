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
import time
from typing import Iterable, Optional

from localcluster.common.config import FABRIC_NS, KUBERNETES_SERVICE_IP, NODE_NS_PREFIX, NodeSpec
from localcluster.network import firewall
from localcluster.network.topology import NodeTopology, default_topology


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


def ensure_fabric(segments: Iterable[str] = ("mgmt", "data"), fabric: str = FABRIC_NS) -> None:
    """Create the fabric namespace ``fabric`` (default: the cluster's) with one bridge
    ``br-<segment>`` per segment (idempotent; default: br-mgmt and br-data), after raising
    the machine's neighbour-table limits (:func:`ensure_neighbour_capacity`). Raises
    NetworkError if `ip` fails."""
    ensure_neighbour_capacity()
    if fabric not in list_netns():
        _ip("netns", "add", fabric)
    _ip("-n", fabric, "link", "set", "lo", "up")
    for seg in segments:
        br = f"br-{seg}"
        if not _link_exists(fabric, br):
            _ip("-n", fabric, "link", "add", br, "type", "bridge", "forward_delay", "0",
                "stp_state", "0")
        _ip("-n", fabric, "link", "set", br, "up")


# The kernel's neighbour (ARP/ND) tables are shared by every network namespace of the
# machine, with limits made for one host (gc_thresh3 1024 entries): 32 simulated nodes, each
# reaching 31 peers on three networks plus their pods, overflowed it ("neighbour: arp_cache:
# neighbor table overflow!"), and whole groups of node pairs could no longer reach each
# other (a false NoCommonInterface at 32 nodes in make bench-scale).
NEIGH_THRESHOLDS = {"gc_thresh1": 4096, "gc_thresh2": 16384, "gc_thresh3": 32768}


def neighbour_limits(current: dict[str, int], wanted: dict[str, int] = NEIGH_THRESHOLDS) -> dict[str, int]:
    """The thresholds to write: each of ``wanted`` that is above ``current`` (never
    lowers a value the machine's owner set higher). Pure."""
    return {k: v for k, v in wanted.items() if current.get(k, 0) < v}


def ensure_neighbour_capacity(root: str = "/proc/sys/net") -> dict[str, int]:
    """Raise the machine's IPv4 and IPv6 neighbour-table limits to :data:`NEIGH_THRESHOLDS`
    where they are lower (idempotent). Returns what was written ({"ipv4.gc_thresh3": n,
    ...}); a limit that cannot be read or written is skipped (NetworkError is not raised:
    small clusters work without it)."""
    written: dict[str, int] = {}
    for fam in ("ipv4", "ipv6"):
        base = f"{root}/{fam}/neigh/default"
        cur: dict[str, int] = {}
        for k in NEIGH_THRESHOLDS:
            try:
                with open(f"{base}/{k}") as f:
                    cur[k] = int(f.read().strip())
            except (OSError, ValueError):
                cur[k] = 1 << 30  # unknown: leave it
        # gc_thresh1 <= gc_thresh2 <= gc_thresh3: raise the largest first
        for k, v in sorted(neighbour_limits(cur).items(), key=lambda kv: -kv[1]):
            try:
                with open(f"{base}/{k}", "w") as f:
                    f.write(str(v))
                written[f"{fam}.{k}"] = v
            except OSError:
                pass
    return written


def _add_addrs(ns: str, dev: str, addrs: list[str]) -> None:
    have = _ip("-n", ns, "-o", "addr", "show", "dev", dev).stdout
    for a in addrs:
        if f" {a} " in have:
            continue
        extra = ["nodad"] if ":" in a else []  # IPv6: usable at once, no duplicate detection
        _ip("-n", ns, "addr", "add", a, "dev", dev, *extra)


def _decoy_port(name: str, k: int) -> str:
    return f"veth-{name}" if len(name) <= 9 else f"vdecoy{k}"


def ensure_node(node: NodeSpec, topo: Optional[NodeTopology] = None, netns: Optional[str] = None,
                fabric: str = FABRIC_NS) -> None:
    """Create the node's namespace and interfaces (idempotent), as ``topo`` says (default:
    decoy docker0 first, then eth0 on br-mgmt and eth1 on br-data), and load its firewall.
    ``netns`` and ``fabric``: the namespaces to use (default: the cluster's, ``node.netns``
    and FABRIC_NS; the generated faults' direct path passes its own).

    Decoys are bridges kept UP by a veth port pair inside the node (as Docker's container
    veths are), created first so they are listed before the real NICs (lower ifindex);
    each NIC is a veth whose other end is on its segment's bridge in the fabric.
    Raises NetworkError (or firewall.FirewallError) on failure.
    """
    topo = topo or default_topology(node.index + 1)[node.index]
    ns = netns or node.netns
    if ns not in list_netns():
        _ip("netns", "add", ns)
    _ip("-n", ns, "link", "set", "lo", "up")
    # The `kubernetes` Service ClusterIP, served by the node agent or real node (serviceproxy.py).
    if KUBERNETES_SERVICE_IP not in _ip("-n", ns, "addr", "show", "dev", "lo").stdout:
        _ip("-n", ns, "addr", "add", f"{KUBERNETES_SERVICE_IP}/32", "dev", "lo")
    for k, link in enumerate(ln for ln in topo.links if ln.segment is None):
        port = _decoy_port(link.name, k)
        if not _link_exists(ns, link.name):
            _ip("-n", ns, "link", "add", link.name, "type", "bridge", "forward_delay", "0",
                "stp_state", "0")
        _add_addrs(ns, link.name, link.addresses)
        if not _link_exists(ns, port):
            _ip("-n", ns, "link", "add", port, "type", "veth", "peer", "name", port + "p")
        _ip("-n", ns, "link", "set", port, "master", link.name)
        if link.mtu:
            _ip("-n", ns, "link", "set", link.name, "mtu", str(link.mtu))
        for dev in (port, port + "p", link.name):
            _ip("-n", ns, "link", "set", dev, "up")
    for link in (ln for ln in topo.links if ln.segment is not None):
        peer = link.fabric_peer
        if not _link_exists(ns, link.name):
            # A peer left from a just-deleted node namespace goes away asynchronously (the
            # kernel tears namespaces down in a workqueue): delete it if it is still there,
            # tolerate it vanishing meanwhile, and wait until the name is free.
            if _link_exists(fabric, peer):
                _ip("-n", fabric, "link", "del", peer, check=False)
            deadline = time.monotonic() + 10
            while _link_exists(fabric, peer) and time.monotonic() < deadline:
                time.sleep(0.1)
            _ip("-n", fabric, "link", "add", peer, "type", "veth", "peer", "name", link.name,
                "netns", ns)
        _add_addrs(ns, link.name, link.addresses)
        if link.mtu:
            _ip("-n", fabric, "link", "set", peer, "mtu", str(link.mtu))
            _ip("-n", ns, "link", "set", link.name, "mtu", str(link.mtu))
        _ip("-n", fabric, "link", "set", peer, "master", f"br-{link.segment}")
        _ip("-n", fabric, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", link.name, "up" if getattr(link, "up", True) else "down")
        if getattr(link, "rate_mbit", None):
            rate_limit(fabric, peer, link.rate_mbit)
            rate_limit(ns, link.name, link.rate_mbit)
    for r in getattr(topo, "routes", None) or []:  # to other segments via their routers
        _ip("-n", ns, "route", "replace", r["to"], "via", r["via"], "dev", r["dev"])
    for key, value in (getattr(topo, "sysctls", None) or {}).items():
        path = "/proc/sys/" + key.replace(".", "/")  # no procps needed, and no shell
        p = subprocess.run(["ip", "netns", "exec", ns, "tee", path], input=f"{value}\n",
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise NetworkError(f"sysctl {key}={value} in {ns}: {p.stderr.strip()}")
    if topo.firewall:
        firewall.apply(ns, topo.firewall)
    else:
        firewall.clear(ns)


def tbf_args(rate_mbit: int) -> list[str]:
    """``tc qdisc`` arguments of a token bucket at ``rate_mbit`` Mb/s: burst = 2 ms of
    traffic but at least 256 KiB (bytes; a 64 KiB GSO packet must fit), queue up to 50 ms."""
    burst = max(256 * 1024, rate_mbit * 1_000_000 // 8 // 500)
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "50ms"]


def rate_limit(ns: str, dev: str, rate_mbit: int) -> None:
    """Limit what ``dev`` in namespace ``ns`` sends to ``rate_mbit`` Mb/s (a tbf root
    qdisc, replaced if present). Raises NetworkError if `tc` fails."""
    p = subprocess.run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", *tbf_args(rate_mbit)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise NetworkError(f"tc -n {ns} qdisc replace dev {dev} root tbf: {p.stderr.strip()}")


def node_healthy(node: NodeSpec, topo: Optional[NodeTopology] = None) -> bool:
    """True if the node's namespace exists and its NICs carry their addresses."""
    topo = topo or default_topology(node.index + 1)[node.index]
    if node.netns not in list_netns():
        return False
    out = _ip("-n", node.netns, "-o", "addr", "show", check=False).stdout
    return all(f" {a} " in out for ln in topo.links if ln.segment for a in ln.addresses)


def flush_neighbours(ns: str) -> None:
    """Forget the namespace's ARP/NDP cache (after a peer's NICs were recreated)."""
    _ip("-n", ns, "neigh", "flush", "all", check=False)


def flush_route_cache(ns: str) -> None:
    """Forget the namespace's cached routes, path MTU exceptions among them (a path MTU
    learnt through a router of an earlier scenario would hide this one's black hole)."""
    _ip("-n", ns, "route", "flush", "cache", check=False)


def netns_pids(ns: str) -> list[int]:
    """PIDs of processes whose network namespace is ``ns`` (``ip netns pids``)."""
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(x) for x in out.split() if x.isdigit()]


def delete_netns(ns: str) -> None:
    """Delete a namespace (its veths go with it); no error if it does not exist."""
    _ip("netns", "del", ns, check=False)


__all__ = [
    "NetworkError", "flush_neighbours", "flush_route_cache", "list_netns", "our_netns", "ensure_fabric", "ensure_node", "node_healthy",
    "netns_pids", "delete_netns",
]
