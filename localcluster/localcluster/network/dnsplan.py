"""Where cluster DNS sits on the fabric: one attachment per segment the nodes' NICs are
on, with a free address on it (the nodes' gateway to the DNS Service address), as a
pure :class:`Plan` that `up` stores and the nodes read."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Iterable

from localcluster.common.config import (
    pod_cidr,
)


def pick_address(subnet: str, used: Iterable[str]) -> str:
    """The highest usable host of IPv4 ``subnet`` (e.g. "10.100.0.0/24" -> "10.100.0.254")
    that is not in ``used`` (addresses, with or without a prefix length).
    Raises ValueError if every host is used or the subnet is not IPv4."""
    net = ipaddress.ip_network(subnet, strict=False)
    if net.version != 4:
        raise ValueError(f"{subnet}: cluster DNS needs an IPv4 subnet")
    taken = {ipaddress.ip_interface(u).ip for u in used}
    first, last = int(net.network_address), int(net.broadcast_address)
    if net.prefixlen < 31:
        first, last = first + 1, last - 1
    for a in range(last, first - 1, -1):
        ip = ipaddress.IPv4Address(a)
        if ip not in taken:
            return str(ip)
    raise ValueError(f"no free address for cluster DNS in {subnet}")


@dataclass(frozen=True)
class Attachment:
    """The DNS namespace's NIC on one fabric segment."""

    segment: str
    addresses: tuple[str, ...]  # addr/prefix, one per subnet of the nodes' InternalIPs

    @property
    def ifname(self) -> str:
        """The NIC's name in the DNS namespace, ``eth-<segment>`` (<= 11 bytes)."""
        return f"eth-{self.segment}"

    @property
    def fabric_peer(self) -> str:
        """The veth end on ``br-<segment>`` in the fabric, ``<segment>-dns``."""
        return f"{self.segment}-dns"


@dataclass(frozen=True)
class Plan:
    """Where cluster DNS sits: its NICs, and per node the gateway and the pod route."""

    attachments: tuple[Attachment, ...]
    gateways: dict[str, str] = field(default_factory=dict)  # node -> DNS address (no prefix)
    pod_routes: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (CIDR, via)

    def to_json(self) -> dict:
        """A JSON-able dict (what ``<state>/dns/plan.json`` holds)."""
        return {"attachments": [{"segment": a.segment, "addresses": list(a.addresses)}
                                for a in self.attachments],
                "gateways": dict(self.gateways),
                "podRoutes": {k: list(v) for k, v in self.pod_routes.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Plan":
        """Inverse of :meth:`to_json`. Raises KeyError/TypeError for a malformed dict."""
        return cls(tuple(Attachment(a["segment"], tuple(a["addresses"]))
                         for a in d["attachments"]),
                   dict(d["gateways"]), {k: (v[0], v[1]) for k, v in d["podRoutes"].items()})


def plan(topos: list) -> Plan:
    """Plan cluster DNS for nodes with these ``topology.NodeTopology`` objects: one NIC per
    segment that carries some node's InternalIP, on each subnet of those InternalIPs the
    highest host no node uses there; each node routes the DNS ClusterIP via the address on
    its InternalIP's subnet, and the DNS namespace routes node i's pod CIDR via its
    InternalIP. Pure. Raises ValueError if a node's InternalIP is on none of its NICs or a
    subnet has no free address."""
    used: dict[str, set[str]] = {}  # segment -> every address on it
    for t in topos:
        for ln in t.links:
            if ln.segment is not None:
                used.setdefault(ln.segment, set()).update(ln.addresses)
    subnets: dict[str, list[str]] = {}  # segment -> subnets of InternalIPs, in node order
    node_subnet: dict[str, tuple[str, str]] = {}
    for t in topos:
        hit = next(((ln.segment, ipaddress.ip_interface(a).network) for ln in t.links
                    if ln.segment is not None for a in ln.addresses
                    if ipaddress.ip_interface(a).ip == ipaddress.ip_address(t.internal_ip)), None)
        if hit is None:
            raise ValueError(f"{t.name}: InternalIP {t.internal_ip} is on none of its NICs")
        seg, net = hit[0], str(hit[1])
        if net not in subnets.setdefault(seg, []):
            subnets[seg].append(net)
        node_subnet[t.name] = (seg, net)
    # A subnet carried by several segments (a scenario's isolated segment sharing the
    # management subnet): DNS joins only the segment with the most nodes' InternalIPs on it
    # (then the most nodes with any NIC there, then the first). On two it would itself have
    # two NICs on one subnet, its replies leaving by the wrong one; a node whose InternalIP
    # is on another segment routes DNS to an address it cannot reach there, as a real node
    # on an isolated NIC would.
    def nodes_on(seg: str, net: str) -> int:
        return sum(1 for t in topos if any(
            ln.segment == seg and ipaddress.ip_interface(a).network == ipaddress.ip_network(net)
            for ln in t.links for a in ln.addresses))

    count = {sn: (sum(1 for v in node_subnet.values() if v == sn), nodes_on(*sn))
             for sn in set(node_subnet.values())}
    for seg, nets in list(subnets.items()):
        for net in list(nets):
            best = max((sn for sn in count if sn[1] == net), key=lambda sn: (
                *count[sn], -list(subnets).index(sn[0])))
            if best[0] != seg:
                nets.remove(net)
                for name, sn in node_subnet.items():
                    if sn == (seg, net):
                        node_subnet[name] = best
    subnets = {seg: nets for seg, nets in subnets.items() if nets}
    addr: dict[tuple[str, str], str] = {}
    attachments = []
    for seg, nets in subnets.items():
        cidrs = []
        for net in nets:
            a = pick_address(net, used[seg])
            addr[(seg, net)] = a
            cidrs.append(f"{a}/{ipaddress.ip_network(net).prefixlen}")
        attachments.append(Attachment(seg, tuple(cidrs)))
    return Plan(tuple(attachments),
                {t.name: addr[node_subnet[t.name]] for t in topos},
                {t.name: (pod_cidr(t.index), t.internal_ip) for t in topos})
