"""The oracle: from a generated fault alone (``grammar``), what a right verdict holds.

An :class:`Expectation` gives the job's verdict (``status`` of ``Validated``, or of the
warning check for a look-alike that trains with a warning), the reasons acceptable, the
strings the message must hold (nodes by name, ``{node:0}`` for rank 0's node: the scheduler
places rank 0, ``scenariorun.substitute`` resolves it), the nodes it must not name (nodes
that only waited), the object of the fix (one of ``fix`` must appear), what it must never say
(``firewall`` where the fault has none), the interface the job must train on, and the
interfaces the fault breaks: a ``Validated=True`` on one of them, or on anything when the
verdict must be False, is a silent pass. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from disttrain_probe.contract import vocabulary as V
from localcluster.common.config import node_name
from localcluster.faults import grammar as G
from localcluster.scenarios.scenario import Expect

FIREWALL = "firewall"


@dataclass(frozen=True)
class Expectation:
    """What a right verdict holds (see the module docstring). ``condition``: the condition
    graded for a ``True`` verdict and written into a regression scenario (a ``False``
    verdict is graded on ``Validated``, which carries the cause's reason and message)."""

    condition: str
    status: str  # "True" | "False"
    reasons: tuple[str, ...] = ()
    must_name: tuple[str, ...] = ()
    must_not_name: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()
    never_say: tuple[str, ...] = ()
    socket_ifname: Optional[str] = None
    broken_ifnames: tuple[str, ...] = ()
    why: str = ""

    def inconsistencies(self) -> list[str]:
        """What makes this expectation impossible to meet (empty: none): a string both
        required and forbidden, a forbidden string inside a required one, a reason no
        condition carries, a True verdict required on an interface the fault breaks."""
        out = []
        required = self.must_name + (self.fix if len(self.fix) == 1 else ())
        for bad in self.must_not_name + self.never_say:
            out += [f"{req!r} is required but holds the forbidden {bad!r}" for req in required if bad in req]
            if self.fix and all(bad in f for f in self.fix):
                out.append(f"every fix {self.fix} holds the forbidden {bad!r}")
        out += [f"{r!r} is no reason" for r in self.reasons if V.get(r) is None]
        if self.status == "True" and self.socket_ifname in self.broken_ifnames:
            out.append(f"trains on {self.socket_ifname}, which the fault breaks")
        if self.status not in ("True", "False"):
            out.append(f"status {self.status!r}")
        return out

    def expect(self) -> Expect:
        """The scenario ``expect`` a right verdict meets (for a regression file): one reason
        when only one is acceptable, the fix object when there is only one, a healthy job
        trains to the end."""
        return Expect(
            condition=self.condition, status=self.status,
            reason=self.reasons[0] if len(self.reasons) == 1 else None,
            messageContains=list(self.must_name) + (list(self.fix) if len(self.fix) == 1 else []),
            messageLacks=list(self.must_not_name + self.never_say),
            socketIfname=self.socket_ifname if self.status == "True" else None,
            phase="Succeeded" if self.status == "True" else None,
            withinSeconds=300.0 if self.status == "True" else 60.0)


def others(nodes: tuple[str, ...], all_nodes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in all_nodes if n not in nodes)


def _firewall(f: G.FirewallFault, all_nodes: tuple[str, ...]) -> Expectation:
    if f.target == "master":
        reason = V.MASTER_PORT_TIMEOUT if f.action == "drop" else V.MASTER_PORT_REFUSED
        return Expectation(V.MASTER_REACHABLE, "False", (reason,), ("{node:0}", str(G.MASTER_PORT)),
                           fix=(FIREWALL,), why=f"rank 0's node's firewall {f.action}s the master port")
    blocked = (f.nic,) if f.nic else G.NICS
    involved = (f.node,) + f.sources
    if f.forced is None and len(blocked) == 1:  # the other NIC is clean: train on it
        clean = next(n for n in G.NICS if n not in blocked)
        return Expectation(V.VALIDATED, "True", socket_ifname=clean, broken_ifnames=blocked,
                           why=f"{f.nic} is blocked, {clean} is clean: validate and train on {clean}")
    if f.forced is not None and f.forced not in blocked:
        return Expectation(V.VALIDATED, "True", socket_ifname=f.forced, broken_ifnames=blocked,
                           why=f"the rule holds on {f.nic} only; the job uses {f.forced}")
    # With two nodes the lone peer is the only dialler: its outbound rule to the node reads
    # exactly as the node's inbound rule against it, so a right verdict may name it.
    bystanders = others(involved, all_nodes) if len(all_nodes) > 2 else ()
    peers = G.names(f.sources) if f.sources else "every peer"
    return Expectation(
        V.NETWORK_VALIDATED, "False",
        (V.EPHEMERAL_PORTS_BLOCKED, V.INTERFACE_UNREACHABLE, V.NO_COMMON_INTERFACE),
        must_name=involved, must_not_name=bystanders,
        fix=(FIREWALL, "ip_local_port_range", "portRange"),
        why=f"{f.node} blocks ephemeral ports " + (
            f"it dials on {peers} (egress)" if f.direction == "out" else f"from {peers}") + " on the job's network")


def _nicdown(f: G.NicDownFault, all_nodes: tuple[str, ...]) -> Expectation:
    if not f.forced:
        return Expectation(V.VALIDATED, "True", socket_ifname="eth0", broken_ifnames=("eth1",),
                           why="eth1 is down on some nodes, eth0 is up everywhere: train on eth0")
    return Expectation(V.NETWORK_VALIDATED, "False",
                       (V.INTERFACE_UNREACHABLE, V.NO_COMMON_INTERFACE, V.INTERFACE_NOT_FOUND),
                       must_name=f.nodes + ("eth1",), must_not_name=others(f.nodes, all_nodes),
                       fix=("down",), never_say=(FIREWALL,),
                       why="forced eth1 is down on each named node: those nodes, their link, no firewall")


def _portrange(f: G.PortRangeFault, all_nodes: tuple[str, ...]) -> Expectation:
    if not f.hardened:
        return Expectation(V.VALIDATED, "True", why="a node's own ephemeral range, no firewall: the job trains")
    return Expectation(V.NETWORK_VALIDATED, "False",
                       (V.EPHEMERAL_PORTS_BLOCKED, V.INTERFACE_UNREACHABLE, V.NO_COMMON_INTERFACE),
                       must_name=(f.node,),
                       must_not_name=others((f.node,), all_nodes) if len(all_nodes) > 2 else (),
                       fix=("ip_local_port_range",),
                       why=f"{f.node}'s listeners take ports of its own range, which its firewall drops")


def _names(f: G.NamesFault, all_nodes: tuple[str, ...]) -> Expectation:
    if f.what == "hostname":
        return Expectation(V.NETWORK_VALIDATED, "True", (V.HOSTNAME_LOOPBACK,), f.nodes + ("127.0.1.1",),
                           others(f.nodes, all_nodes),
                           why="a warning naming each node whose hostname is loopback; the job trains")
    if f.what == "master-loopback":
        return Expectation(V.MASTER_REACHABLE, "False", (V.MASTER_ADDR_LOOPBACK,), f.nodes + ("127.0.0.1",),
                           fix=("/etc/hosts",), never_say=(FIREWALL,),
                           why="each odd node's MASTER_ADDR resolves to loopback")
    # each odd node's own source: both when some answer from /etc/hosts and others from DNS
    sources = (("/etc/hosts",) if f.hosts_nodes() else ()) + ((G.NODE_DNS,) if f.dns_nodes else ())
    return Expectation(V.MASTER_REACHABLE, "False",
                       (V.MASTER_PORT_TIMEOUT, V.MASTER_ADDR_RESOLVES_ELSEWHERE),
                       f.nodes + (G.STALE_ADDRESS,) + (sources if len(sources) > 1 else ()),
                       fix=sources if len(sources) == 1 else (), never_say=(FIREWALL, "InternalIP"),
                       why=f"each odd node's {' or '.join(sources)} answers {G.STALE_ADDRESS} for MASTER_ADDR")


def _islands(f: G.IslandsFault, all_nodes: tuple[str, ...]) -> Expectation:
    if not f.forced:
        return Expectation(V.VALIDATED, "True", socket_ifname="eth0", broken_ifnames=("eth1",),
                           why="eth1 is split, eth0 is shared: validate and train on eth0")
    subnets = tuple(f.subnet(i) for i in range(len(f.groups)))
    return Expectation(V.NETWORK_VALIDATED, "False", (V.NO_COMMON_INTERFACE, V.INTERFACE_UNREACHABLE),
                       must_name=all_nodes + subnets, fix=("route", "every node shares"),
                       never_say=(FIREWALL,), why="forced eth1 is partitioned: every group, no firewall")


def _slow(f: G.SlowLinkFault, all_nodes: tuple[str, ...]) -> Expectation:
    if f.refuse:
        return Expectation(V.NETWORK_VALIDATED, "False", (V.SLOW_LINK,), (f.node, "eth0"),
                           never_say=(FIREWALL,), why=f"{f.node} is a straggler past maxLinkImbalance")
    return Expectation(V.NETWORK_VALIDATED, "True", (V.SLOW_LINK,), (f.node, "eth0"),
                       never_say=(FIREWALL,), why=f"a SlowLink warning naming {f.node}; the job trains")


def _mtu(f: G.MtuFault, all_nodes: tuple[str, ...]) -> Expectation:
    if f.icmp == "pass":
        return Expectation(V.VALIDATED, "True", socket_ifname="eth1" if f.forced else None,
                           why="path MTU discovery works: the job trains")
    if not f.forced:
        return Expectation(V.VALIDATED, "True", socket_ifname="eth0", broken_ifnames=("eth1",),
                           why="eth1 is a path-MTU black hole, eth0 is clean: train on eth0")
    return Expectation(V.NETWORK_VALIDATED, "False", (V.PATH_MTU_BLACK_HOLE,), ("eth1",),
                       fix=("MTU",), never_say=(FIREWALL,), why="forced eth1 is a path-MTU black hole")


def _policy(f: G.PolicyFault, all_nodes: tuple[str, ...]) -> Expectation:
    if f.shape == "admits-job":
        return Expectation(V.VALIDATED, "True", why="the policies admit the job: it trains")
    return Expectation(V.VALIDATED, "False", (V.NETWORK_POLICY_BLOCKS,), (f"NetworkPolicy {f.policy_name()}",),
                       never_say=(FIREWALL,), why=f"the NetworkPolicy {f.policy_name()} drops the job's traffic")


def _combo(f: G.Combo, nodes: int) -> Expectation:
    first = expectation(f.first, nodes)
    if first.status == "False":  # the failure decides; the hostname warning must not hide it
        return first
    # the hostname warning among the network check's warnings (not necessarily its reason)
    return Expectation(V.NETWORK_VALIDATED, "True", (), f.second.nodes + ("127.0.1.1",),
                       never_say=first.never_say, socket_ifname=first.socket_ifname,
                       broken_ifnames=first.broken_ifnames,
                       why=f"{first.why}, with a warning naming each node whose hostname is loopback")


def expectation(fault: G.Fault, nodes: int) -> Expectation:
    """What a right verdict on ``fault`` in a cluster of ``nodes`` nodes holds."""
    if isinstance(fault, G.Combo):
        return _combo(fault, nodes)
    by_class: dict[type, Callable[[Any, tuple[str, ...]], Expectation]] = {
        G.FirewallFault: _firewall, G.NamesFault: _names, G.IslandsFault: _islands,
        G.NicDownFault: _nicdown, G.PortRangeFault: _portrange, G.SlowLinkFault: _slow, G.MtuFault: _mtu, G.PolicyFault: _policy}
    rule = by_class.get(type(fault))
    if rule is None:
        return Expectation(V.VALIDATED, "True", why="no fault: the job validates and trains")
    return rule(fault, tuple(node_name(i) for i in range(nodes)))
