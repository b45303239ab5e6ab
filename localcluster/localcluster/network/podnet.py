"""Pod networking for the simulated nodes: a minimal CNI (bridge + host-local IPAM + routes).

Ordinary pods (``hostNetwork: false``) get their own network namespace with an ``eth0``
veth whose other end is a port of the node's ``cni0`` bridge; the pod's address comes
from the node's pod CIDR (``config.pod_cidr(index)``: node i owns 10.244.i.0/24, gateway
.1 on cni0). Nodes forward between their pods and the node network, and each node routes
the other nodes' pod CIDRs via their InternalIPs (as flannel's host-gw or Calico without
encapsulation do), so pod-to-pod traffic crosses the same NICs, bridges and firewalls as
node traffic::

    netns dtj-node-a-p2 (pod):  eth0 10.244.0.2/24, default via 10.244.0.1
                                  | veth
    netns dtj-node-a:           cni0 10.244.0.1/24 (bridge)   eth0 10.100.0.11 ...
                                route 10.244.1.0/24 via 10.100.0.12 (node-b)

Pod namespaces are named ``<node namespace>-p<last octet>`` so ``localcluster down``
removes them with the node's. Safe sysctls (Kubernetes' safe set, namespaced by the pod's
network namespace) are written inside the pod's namespace; others are refused as kubelet
refuses them without ``--allowed-unsafe-sysctls``.

Functions shell out to ``ip``/``sysctl`` and raise network.NetworkError on failure.
"""
from __future__ import annotations

import ipaddress
import subprocess
from typing import Iterable, Optional

from localcluster.network.netns import NetworkError, _ip, _link_exists, delete_netns, list_netns

BRIDGE = "cni0"
POD_IFNAME = "eth0"

# Kubernetes' safe sysctls (pkg/kubelet/sysctl/safe_sysctls.go, v1.37): namespaced, and
# allowed on every node without --allowed-unsafe-sysctls.
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced",  # accepted; not applied (containers share the IPC namespace)
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
})


class SysctlForbidden(ValueError):
    """A pod asks for a sysctl outside the safe set (kubelet's reason: SysctlForbidden)."""


def gateway(cidr: str) -> str:
    """The first host of the pod CIDR, e.g. "10.244.0.0/24" -> "10.244.0.1" (on cni0)."""
    return str(next(ipaddress.ip_network(cidr).hosts()))


def pod_netns(node_ns: str, ip: str) -> str:
    """The pod namespace's name for address ``ip`` on the node ``node_ns``."""
    return f"{node_ns}-p{ip.rsplit('.', 1)[1]}"


def host_veth(ip: str) -> str:
    """The node-side veth name for pod address ``ip`` (<= 15 bytes: IFNAMSIZ)."""
    return "vp" + ip.rsplit(".", 1)[1]


def _sysctl(ns: str, key: str, value: str) -> None:
    p = subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise NetworkError(f"sysctl {key}={value} in {ns}: {p.stderr.strip()}")


def ensure_node(node_ns: str, cidr: str, peers: Iterable[tuple[str, str]]) -> None:
    """Give node namespace ``node_ns`` its pod bridge (cni0 with the CIDR's gateway),
    IP forwarding, and a route per other node: ``peers`` is ``[(pod CIDR, InternalIP)]``.
    Idempotent. Raises NetworkError."""
    if not _link_exists(node_ns, BRIDGE):
        _ip("-n", node_ns, "link", "add", BRIDGE, "type", "bridge", "forward_delay", "0",
            "stp_state", "0")
    prefix = ipaddress.ip_network(cidr).prefixlen
    addr = f"{gateway(cidr)}/{prefix}"
    if f" {addr} " not in _ip("-n", node_ns, "-o", "addr", "show", "dev", BRIDGE).stdout:
        _ip("-n", node_ns, "addr", "add", addr, "dev", BRIDGE)
    _ip("-n", node_ns, "link", "set", BRIDGE, "up")
    _sysctl(node_ns, "net.ipv4.ip_forward", "1")
    for peer_cidr, via in peers:
        if peer_cidr != cidr:
            _ip("-n", node_ns, "route", "replace", peer_cidr, "via", via)


def used_addresses(node_ns: str) -> set[str]:
    """Pod addresses in use on this node (their namespaces exist)."""
    pre = node_ns + "-p"
    return {n[len(pre):] for n in list_netns() if n.startswith(pre) and n[len(pre):].isdigit()}


def allocate(node_ns: str, cidr: str, taken: Iterable[str] = ()) -> str:
    """The lowest free pod address in ``cidr`` (after the gateway), skipping the pods whose
    namespaces exist and ``taken`` (last octets or full addresses). Raises NetworkError
    when the CIDR is full."""
    used = used_addresses(node_ns) | {t.rsplit(".", 1)[-1] for t in taken}
    gw = gateway(cidr)
    for h in ipaddress.ip_network(cidr).hosts():
        ip = str(h)
        if ip != gw and ip.rsplit(".", 1)[1] not in used:
            return ip
    raise NetworkError(f"pod CIDR {cidr} on {node_ns} is full")


def check_sysctls(sysctls: Optional[list[dict]], host_network: bool) -> list[tuple[str, str]]:
    """Validate a pod's ``spec.securityContext.sysctls`` as kubelet does: only the safe set,
    and none of the net.* ones with hostNetwork (they would change the node's namespace).
    Returns ``[(name, value)]``; raises SysctlForbidden naming the sysctl."""
    out = []
    for s in sysctls or []:
        name, value = s.get("name", "").replace("/", "."), str(s.get("value", ""))
        if name not in SAFE_SYSCTLS:
            raise SysctlForbidden(f"forbidden sysctl: \"{name}\" not allowlisted")
        if host_network and name.startswith("net."):
            raise SysctlForbidden(f"sysctl \"{name}\" not allowed with host net enabled")
        if name.startswith("net."):
            out.append((name, value))
    return out


def setup_pod(node_ns: str, cidr: str, ip: str, sysctls: list[tuple[str, str]] = (),
              mtu: Optional[int] = None) -> str:
    """Create the pod's namespace with ``eth0`` = ``ip`` on the node's cni0, a default
    route via the gateway, and ``sysctls`` applied inside it. Returns the namespace name.
    Raises NetworkError (the half-made namespace is removed)."""
    ns = pod_netns(node_ns, ip)
    hv = host_veth(ip)
    prefix = ipaddress.ip_network(cidr).prefixlen
    try:
        if ns not in list_netns():
            _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        if _link_exists(node_ns, hv):
            _ip("-n", node_ns, "link", "del", hv, check=False)
        _ip("-n", node_ns, "link", "add", hv, "type", "veth", "peer", "name", POD_IFNAME,
            "netns", ns)
        if mtu:
            for n, dev in ((node_ns, hv), (ns, POD_IFNAME)):
                _ip("-n", n, "link", "set", dev, "mtu", str(mtu))
        _ip("-n", node_ns, "link", "set", hv, "master", BRIDGE)
        _ip("-n", node_ns, "link", "set", hv, "up")
        _ip("-n", ns, "addr", "add", f"{ip}/{prefix}", "dev", POD_IFNAME)
        _ip("-n", ns, "link", "set", POD_IFNAME, "up")
        _ip("-n", ns, "route", "add", "default", "via", gateway(cidr))
        for key, value in sysctls:
            _sysctl(ns, key, value)
    except NetworkError:
        teardown_pod(node_ns, ip)
        raise
    return ns


def netns_inode(node_ns: str, ip: str) -> Optional[int]:
    """The inode of the pod namespace for ``ip`` (its identity: a later pod given the same
    address gets a new namespace with another inode), or None when it does not exist."""
    import os

    try:
        return os.stat(f"/run/netns/{pod_netns(node_ns, ip)}").st_ino
    except OSError:
        return None


def teardown_pod(node_ns: str, ip: str, inode: Optional[int] = None) -> bool:
    """Remove the pod's namespace and veth (no error if already gone). With ``inode`` (from
    :func:`netns_inode` at set-up), only when the namespace is still that one: a teardown
    that comes late (a second deletion of the same pod) must not remove the namespace and
    veth of the next pod given the same address (seen in CI: ``Cannot open network
    namespace "dtj-node-b-p2"``). Returns whether it removed anything."""
    if inode is not None and netns_inode(node_ns, ip) != inode:
        return False
    delete_netns(pod_netns(node_ns, ip))
    _ip("-n", node_ns, "link", "del", host_veth(ip), check=False)
    return True


__all__ = ["BRIDGE", "SAFE_SYSCTLS", "SysctlForbidden", "allocate", "check_sysctls",
           "ensure_node", "gateway", "host_veth", "netns_inode", "pod_netns", "setup_pod", "teardown_pod",
           "used_addresses"]
