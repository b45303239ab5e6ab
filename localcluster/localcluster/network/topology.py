"""The node topology: what a scenario decides about each node (its links, addresses,
hosts lines, firewall, routes, env), which ``netns.py`` builds and the nodes read.

:class:`NodeTopology` travels as JSON (``<state>/nodes/<node>.topology.json``, written by
`up`); :func:`default_topology` is the plain cluster of ``localcluster up`` (the same plan
``scenarios.nodeplan.topology`` makes of a scenario with no settings), so the network and
the nodes need no scenario to run. Pure.
"""
from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Optional

from localcluster.common.config import node_name

DEFAULT_SEGMENTS = {"mgmt": {"subnet": "10.100.0.0/24"}, "data": {"subnet": "10.101.0.0/24"}}
DEFAULT_DECOYS = [{"name": "docker0", "addresses": ["172.17.0.1/16"]}]
DEFAULT_NICS = [{"name": "eth0", "segment": "mgmt"}, {"name": "eth1", "segment": "data"}]


@dataclass
class Link:
    """One interface to create in a node namespace."""

    name: str
    addresses: list[str]
    mtu: Optional[int] = None
    segment: Optional[str] = None  # None: a decoy bridge
    fabric_peer: Optional[str] = None  # the veth end on the segment's bridge
    rate_mbit: Optional[int] = None  # tbf rate limit (Mb/s) on both veth ends; None: none
    up: bool = True  # False: left down in the node (a NIC that is down)


@dataclass
class NodeTopology:
    """Everything about one node that the scenario decides."""

    name: str
    index: int
    links: list[Link]  # decoys first (lower ifindex), then the NICs, in order
    internal_ip: str  # the Node's InternalIP: the first NIC's first IPv4 address
    hosts: list[str] = field(default_factory=list)  # extra hosts lines (first)
    firewall: Optional[dict] = None
    dns_records: dict[str, str] = field(default_factory=dict)  # its node-local DNS answers these
    routes: list[dict[str, str]] = field(default_factory=list)  # {to, via, dev}: routing.node_routes
    env: dict[str, str] = field(default_factory=dict)
    library_paths: list[str] = field(default_factory=list)
    pythonpath: list[str] = field(default_factory=list)
    gpus: Optional[int] = None
    sysctls: dict[str, str] = field(default_factory=dict)  # the node namespace's own, e.g. the ephemeral range

    def to_json(self) -> dict:
        d = asdict(self)
        for ln in d["links"]:
            if ln.get("rate_mbit") is None:  # unset: the same document (and digest) as before
                ln.pop("rate_mbit", None)
            if ln.get("up", True):
                ln.pop("up", None)
        if not d["dns_records"]:
            d.pop("dns_records")
        if not d["routes"]:  # no routers: the same document (and digest) as before
            d.pop("routes")
        if not d["sysctls"]:
            d.pop("sysctls")
        return d

    @classmethod
    def from_json(cls, d: dict) -> "NodeTopology":
        d = dict(d)
        d["links"] = [Link(**x) for x in d.get("links") or []]
        return cls(**d)


def default_host(subnet: str, index: int) -> str:
    """Node ``index``'s default address on ``subnet``: host .(11+index), as addr/prefix."""
    net = ipaddress.ip_network(subnet)
    return f"{net.network_address + 11 + index}/{net.prefixlen}"


def default_topology(nodes: int) -> list[NodeTopology]:
    """The plain cluster of ``localcluster up``: docker0 decoy, eth0 mgmt, eth1 data (host
    .(11+i) of each default segment); ``nodes`` at most config.MAX_NODES."""
    out = []
    for i in range(nodes):
        name = node_name(i)
        links = [Link(d["name"], list(d["addresses"])) for d in DEFAULT_DECOYS]
        links += [Link(n["name"], [default_host(DEFAULT_SEGMENTS[n["segment"]]["subnet"], i)], None,
                       n["segment"], f"{n['segment']}-{name}") for n in DEFAULT_NICS]
        out.append(NodeTopology(name=name, index=i, links=links,
                                internal_ip=links[len(DEFAULT_DECOYS)].addresses[0].split("/")[0]))
    return out


def peer_hosts(topos: list[NodeTopology]) -> list[str]:
    """Hosts lines naming every node's NIC addresses: first NIC = the node's name, others
    ``<node>-<segment>``; IPv4 also as v4-mapped IPv6 (c10d reverse-resolves those)."""
    out = []
    for t in topos:
        first = True
        for ln in t.links:
            if ln.segment is None:
                continue
            alias = t.name if first else f"{t.name}-{ln.segment}"
            first = False
            for a in ln.addresses:
                ip = ipaddress.ip_interface(a).ip
                out.append(f"{ip} {alias}")
                if ip.version == 4:
                    out.append(f"::ffff:{ip} {alias}")
    return out
