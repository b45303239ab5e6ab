"""The fault grammar: typed, immutable descriptions of what is wrong with a generated
cluster (or, for a healthy look-alike, what looks wrong and is not). Nodes are named as the
scenario names them (``node-a`` ..); which node runs rank 0 is the scheduler's choice, so no
fault names a rank. Each class has a ``describe()`` (one sentence, for the scenario's
description) and ``CLASS`` (the name ``--classes`` takes). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

MASTER_PORT = 29500
EPHEMERAL = (32768, 60999)  # the kernel's default ip_local_port_range
MASTER_NAME = "ddp-digits-0.ddp-digits"  # rank 0's headless-Service name (the example job)
STALE_ADDRESS = "10.100.0.99"  # on the management subnet, held by no node
NODE_DNS = "169.254.20.10"  # the node-local DNS cache's address (nodedns.py)
NICS = ("eth0", "eth1")
SUBNETS = {"eth0": "10.100.0", "eth1": "10.101.0"}  # the default segments' first three octets


def node_ip(nic: str, index: int) -> str:
    """Node ``index``'s default address on ``nic``'s default segment (host .(11+index))."""
    return f"{SUBNETS[nic]}.{11 + index}"


def names(nodes: tuple[str, ...]) -> str:
    return ", ".join(nodes)


@dataclass(frozen=True)
class FirewallFault:
    """Node ``node``'s input firewall drops or rejects new TCP to ports ``ports`` (lo, hi)
    from ``sources`` (node names; empty: from everyone), on ``nic`` (None: every NIC).
    ``target`` ``master``: the rule sits on every node (it bites on rank 0's, where the
    store listens; ``node`` is then ``*``). ``forced``: the job's socketIfname (None: auto).
    ``direction`` ``out``: an egress rule instead: ``node`` drops or rejects the new TCP it
    sends to those ports of ``sources`` (then the destinations; empty: every peer)."""

    node: str
    sources: tuple[str, ...]
    ports: tuple[int, int]
    nic: Optional[str]
    action: Literal["drop", "reject"]
    target: Literal["ephemeral", "master"]
    forced: Optional[str] = None
    direction: Literal["in", "out"] = "in"
    CLASS = "firewall"

    def describe(self) -> str:
        where = "every node" if self.target == "master" else self.node
        peers = names(self.sources) if self.sources else "every peer"
        on = f"on {self.nic}" if self.nic else "on every NIC"
        lo, hi = self.ports
        rng = str(lo) if lo == hi else f"{lo}-{hi}"
        force = f"; socketIfname {self.forced}" if self.forced else ""
        if self.direction == "out":
            return f"{where}'s egress firewall {self.action}s the new TCP it sends to {rng} of {peers} {on}{force}"
        return f"{where}'s firewall {self.action}s new TCP to {rng} from {peers} {on}{force}"


@dataclass(frozen=True)
class NamesFault:
    """Name resolution on ``nodes``: ``what`` ``hostname``: each node's own name resolves to
    127.0.1.1 (its /etc/hosts; a warning, the job trains); ``master-stale``: the job's
    MASTER_ADDR name resolves to an address no node holds, from the node's /etc/hosts, or
    from its node-local DNS cache for the nodes in ``dns_nodes`` (each odd node has its own
    source, so one verdict may need two fixes); ``master-loopback``: MASTER_ADDR resolves to
    127.0.0.1 (/etc/hosts; hostNetwork with DNS hostnames)."""

    nodes: tuple[str, ...]
    what: Literal["hostname", "master-stale", "master-loopback"]
    dns_nodes: tuple[str, ...] = ()
    CLASS = "names"

    def hosts_nodes(self) -> tuple[str, ...]:
        return tuple(n for n in self.nodes if n not in self.dns_nodes)

    def describe(self) -> str:
        if self.what == "hostname":
            return f"{names(self.nodes)}: the node's own hostname resolves to 127.0.1.1 (/etc/hosts)"
        addr = STALE_ADDRESS if self.what == "master-stale" else "127.0.0.1"
        srcs = [f"{names(ns)} by {src}" for ns, src in ((self.hosts_nodes(), "/etc/hosts"),
                                                         (self.dns_nodes, f"node-local DNS ({NODE_DNS})")) if ns]
        return f"{MASTER_NAME} (MASTER_ADDR) resolves to {addr} on {' and '.join(srcs)}"


@dataclass(frozen=True)
class IslandsFault:
    """eth1 is split: ``groups`` (tuples of node names) each on its own segment with no route
    between them; eth0 stays shared. ``forced``: the job forces socketIfname eth1."""

    groups: tuple[tuple[str, ...], ...]
    forced: bool
    CLASS = "islands"

    def subnet(self, g: int) -> str:
        return f"10.{101 + g}.0.0/24"

    def describe(self) -> str:
        parts = "; ".join(f"{{{names(g)}}} on {self.subnet(i)}" for i, g in enumerate(self.groups))
        return f"eth1 forms {len(self.groups)} networks: {parts}" + (
            "; socketIfname eth1" if self.forced else "")


@dataclass(frozen=True)
class NicDownFault:
    """eth1 is down on ``nodes`` (its address kept, as after ``ip link set eth1 down``);
    eth0 stays up everywhere. ``forced``: the job forces socketIfname eth1."""

    nodes: tuple[str, ...]
    forced: bool
    CLASS = "nicdown"

    def describe(self) -> str:
        return f"eth1 is down on {names(self.nodes)}" + ("; socketIfname eth1" if self.forced else "")


@dataclass(frozen=True)
class PortRangeFault:
    """Node ``node``'s net.ipv4.ip_local_port_range is ``ports`` (lo, hi), outside the
    default 32768-60999. ``hardened``: every node's firewall admits new TCP only to the
    master port and the default range (a rule written for the default), so nothing reaches
    ``node``'s listeners; otherwise no firewall (a look-alike: the job trains)."""

    node: str
    ports: tuple[int, int]
    hardened: bool
    CLASS = "sysctl"

    def describe(self) -> str:
        lo, hi = self.ports
        fw = ("; every node admits new TCP only to 29500 and 32768-60999" if self.hardened
              else "; no firewall")
        return f"{self.node}'s net.ipv4.ip_local_port_range is {lo}-{hi}{fw}"


@dataclass(frozen=True)
class SlowLinkFault:
    """Node ``node``'s only NIC (eth0) is rate-limited to ``mbit`` Mb/s; ``refuse``: the job
    sets probe.maxLinkImbalance 4, so the straggler fails the preflight."""

    node: str
    mbit: int
    refuse: bool
    CLASS = "slow"

    def describe(self) -> str:
        return f"{self.node}'s eth0 is limited to {self.mbit} Mb/s" + (
            "; probe.maxLinkImbalance 4" if self.refuse else "")


@dataclass(frozen=True)
class MtuFault:
    """``behind`` (node names) have eth1 on a second segment joined to the first through
    routers with a middle link of ``mtu``; ``icmp`` ``drop``: a path-MTU black hole.
    ``forced``: socketIfname eth1."""

    behind: tuple[str, ...]
    mtu: int
    icmp: Literal["pass", "drop"]
    forced: bool
    CLASS = "mtu"

    def describe(self) -> str:
        return (f"{names(self.behind)} reach the others' eth1 through a middle link of MTU "
                f"{self.mtu} whose routers {'drop' if self.icmp == 'drop' else 'pass'} ICMP "
                f"fragmentation-needed" + ("; socketIfname eth1" if self.forced else ""))


@dataclass(frozen=True)
class PolicyFault:
    """NetworkPolicies in the job's namespace (the job on the pod network): ``shape``
    ``default-deny`` (ingress denied to every pod), ``rendezvous-only`` (the job's pods
    admitted on 29500 only), ``namespace-label`` (admitted only from namespaces with a label
    the job's namespace lacks), ``admits-job`` (the job's pods admitted on 29500-29501 and
    the ephemeral range: a look-alike)."""

    shape: Literal["default-deny", "rendezvous-only", "namespace-label", "admits-job"]
    CLASS = "netpol"

    def policy_name(self) -> str:
        return {"default-deny": "default-deny", "rendezvous-only": "job-peers-rendezvous-only",
                "namespace-label": "job-peers-team-only", "admits-job": "job-peers"}[self.shape]

    def describe(self) -> str:
        return f"NetworkPolicy {self.policy_name()} ({self.shape})"


@dataclass(frozen=True)
class Healthy:
    """No fault: ``shape`` ``plain`` (the default cluster), ``closed-ports`` (node ``node``
    drops new TCP to a range no job uses), ``port-range`` (node ``node`` admits only
    29500 and 61000-62000, and the job's network.portRange is 61000-62000 on the pod
    network)."""

    shape: Literal["plain", "closed-ports", "port-range"]
    node: str = ""
    ports: tuple[int, int] = (0, 0)
    CLASS = "healthy"

    def describe(self) -> str:
        if self.shape == "closed-ports":
            return f"healthy: {self.node} drops new TCP to {self.ports[0]}-{self.ports[1]}, which no job uses"
        if self.shape == "port-range":
            return f"healthy: {self.node} admits only 29500 and 61000-62000, the job's portRange"
        return "healthy: no fault"


@dataclass(frozen=True)
class Combo:
    """Two faults at once: ``first`` (any fault on the node network: firewall, MASTER_ADDR
    resolution, islands, MTU, a healthy look-alike) decides the verdict, and ``second``
    (hostnames resolving to loopback on some nodes: a warning only) must neither hide it
    nor be blamed for it."""

    first: Union[FirewallFault, NamesFault, IslandsFault, MtuFault, Healthy]
    second: NamesFault
    CLASS = "combo"

    def describe(self) -> str:
        return f"{self.first.describe()}; and {self.second.describe()}"


Fault = Union[FirewallFault, NamesFault, IslandsFault, NicDownFault, PortRangeFault, SlowLinkFault, MtuFault,
              PolicyFault, Healthy, Combo]
CLASSES = {c.CLASS: c for c in (FirewallFault, NamesFault, IslandsFault, NicDownFault, PortRangeFault,
                                SlowLinkFault, MtuFault, PolicyFault, Healthy, Combo)}
