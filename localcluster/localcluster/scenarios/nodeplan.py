"""A scenario's node plan: each node's topology (NICs, addresses, decoys, routes, hosts,
firewall, env) from its settings, and the checks that refuse a plan the cluster cannot run
(overlaps with the pod network or Service range, duplicate addresses, interface names too
long, router addresses)."""
from __future__ import annotations

import ipaddress
from typing import Optional

from localcluster.common.config import (
    MAX_NODES,
    node_index,
    node_name,
    pod_cidr,
)
from localcluster.network import routing
from localcluster.network.topology import DEFAULT_DECOYS, DEFAULT_NICS, Link, NodeTopology
from localcluster.scenarios.scenario import (
    IFNAMSIZ,
    RESERVED_RANGES,
    Decoy,
    Nic,
    NodeConfig,
    Scenario,
    ScenarioError,
    Segment,
    expand,
)


def _host(subnet: str, index: int, segment: str = "?") -> str:
    """Node ``index``'s default address on ``subnet``: host .(11+index), as addr/prefix.
    Raises ScenarioError when the subnet has no such host (naming the segment)."""
    net = ipaddress.ip_network(subnet)
    last = net.num_addresses - (1 if net.version == 6 else 2)  # the highest usable host
    if 11 + index > last:
        raise ScenarioError(f"segments.{segment}: {subnet} has no host .{11 + index} for "
                            f"{node_name(index)} (nodes get host 11+i; {last - 10} node(s) fit): "
                            f"use a larger subnet (a /24 holds {MAX_NODES})")
    return f"{net.network_address + 11 + index}/{net.prefixlen}"


def check_address_plan(topos: list["NodeTopology"], segments: dict[str, "Segment"],
                       where: str = "scenario") -> None:
    """Refuse an address plan the cluster cannot run: segment subnets that overlap the
    cluster's pod network (10.244.0.0/16) or Service range (10.96.0.0/16) (two segments may
    share a subnet: separate bridges, as two-nics-one-subnet needs); a
    NIC or decoy address inside those ranges (a decoy may hold an address of its own node's
    pod CIDR, as flannel.1 does); one address on two NICs (decoys are
    node-local and may repeat, like docker0); a NIC whose fabric end
    (``<segment><k>-<node>``) exceeds the 15 bytes of an interface name. Pure.
    Raises ScenarioError naming the field, the nodes and what to change."""
    reserved = {k: ipaddress.ip_network(v) for k, v in RESERVED_RANGES.items()}

    def clash(net) -> Optional[str]:
        return next((f"the {what} {r}" for what, r in reserved.items()
                     if r.version == net.version and r.overlaps(net)), None)

    nets = [(name, ipaddress.ip_network(c)) for name, seg in segments.items()
            for c in (seg.subnet, seg.subnet6) if c]
    for name, net in nets:
        if (what := clash(net)) is not None:
            raise ScenarioError(f"{where}: segments.{name}: {net} overlaps {what}; "
                                f"pick another subnet")
    owner: dict = {}
    for t in topos:
        own_pods = ipaddress.ip_network(pod_cidr(node_index(t.name)))
        for ln in t.links:
            for a in ln.addresses:
                iface = ipaddress.ip_interface(a)
                if ln.segment is None and iface.version == 4 and iface.network.subnet_of(own_pods):
                    continue  # a node-local device of the node's own pod network (an overlay)
                if (what := clash(iface.network)) is not None:
                    raise ScenarioError(f"{where}: {t.name}: {ln.name} {a} overlaps {what}; "
                                        f"pick another address")
                if ln.segment is None:
                    continue
                if iface.ip in owner:
                    raise ScenarioError(f"{where}: {t.name}: {ln.name} {iface.ip} is also "
                                        f"{owner[iface.ip]}'s address: duplicate addresses on "
                                        f"the fabric; give each NIC its own")
                owner[iface.ip] = f"{t.name} {ln.name}"
            if ln.fabric_peer and len(ln.fabric_peer.encode()) > IFNAMSIZ:
                room = IFNAMSIZ - len(ln.fabric_peer.encode()) + len(ln.segment)
                raise ScenarioError(f"{where}: segments.{ln.segment}: the fabric end of "
                                    f"{t.name}'s {ln.name}, {ln.fabric_peer!r}, is longer than "
                                    f"the {IFNAMSIZ} bytes of an interface name: use a segment "
                                    f"name of at most {max(room, 1)} characters")


def node_config(sc: Scenario, node: str) -> NodeConfig:
    """The defaults with the node's overrides applied (field by field)."""
    merged = sc.defaults.model_dump(exclude_none=True)
    if node in sc.nodeOverrides:
        merged.update(sc.nodeOverrides[node].model_dump(exclude_none=True))
    return NodeConfig(**merged)


def topology(sc: Scenario, segments: Optional[dict[str, Segment]] = None) -> list[NodeTopology]:
    """One NodeTopology per node (names: config.node_name), its address plan checked
    (:func:`check_address_plan`). Raises ScenarioError for a node without an IPv4 NIC,
    a segment too small for the nodes, or a plan the checks refuse."""
    segs = segments or sc.segments
    pairs = routing.plan(sc.routers, {k: v.subnet for k, v in segs.items()}, "")
    out = []
    for i in range(sc.nodes):
        name = node_name(i)
        cfg = node_config(sc, name)
        decoys = cfg.decoys if cfg.decoys is not None else [Decoy(**d) for d in DEFAULT_DECOYS]
        nics = cfg.nics if cfg.nics is not None else [Nic(**n) for n in DEFAULT_NICS]
        links = [Link(d.name, list(d.addresses), d.mtu) for d in decoys]
        used: dict[str, int] = {}
        internal = None
        for nic in nics:
            seg = segs[nic.segment]
            if nic.addresses is not None:
                addrs = list(nic.addresses)
            else:
                addrs = [_host(seg.subnet, i, nic.segment)] + \
                    ([_host(seg.subnet6, i, nic.segment)] if seg.subnet6 else [])
            k = used.get(nic.segment, 0)
            used[nic.segment] = k + 1
            peer = f"{nic.segment}{k if k else ''}-{name}"
            links.append(Link(nic.name, addrs, nic.mtu, nic.segment, peer, nic.rateMbit, nic.up))
            if internal is None:
                internal = next((a.split("/")[0] for a in addrs
                                 if ipaddress.ip_interface(a).version == 4), None)
        names = [ln.name for ln in links]
        dup = {n for n in names if names.count(n) > 1}
        if dup or "lo" in names:
            raise ScenarioError(f"{sc.name or 'scenario'}: {name}: interface name(s) "
                                f"{', '.join(sorted(dup or {'lo'}))} used twice")
        if internal is None:
            raise ScenarioError(f"{sc.name or 'scenario'}: {name}: no NIC with an IPv4 address "
                                "(the first one is the Node's InternalIP)")
        out.append(NodeTopology(
            name=name, index=i, links=links, internal_ip=internal,
            hosts=[h.replace("{node}", name) for h in cfg.hosts or []],
            firewall=cfg.firewall.model_dump() if cfg.firewall else None,
            dns_records=dict(cfg.dns.records) if cfg.dns else {},
            env={k: expand(v) for k, v in (cfg.env or {}).items()},
            library_paths=[expand(p) for p in cfg.libraryPaths or []],
            pythonpath=[expand(p) for p in cfg.pythonpath or []], gpus=cfg.gpus,
            sysctls=dict(cfg.sysctls or {}),
            routes=routing.node_routes(pairs, {n.name: n.segment for n in nics})))
    check_address_plan(out, segs, sc.name or "scenario")
    _check_router_addresses(out, pairs, sc.name or "scenario")
    return out


def _check_router_addresses(topos: list[NodeTopology], pairs: list, where: str) -> None:
    """Refuse a NIC address a router takes (host .1 of a routed segment). Pure."""
    legs = routing.leg_addresses(pairs)
    for t in topos:
        for ln in t.links:
            for a in ln.addresses:
                ip = a.split("/")[0]
                if ln.segment is not None and ip in legs:
                    raise ScenarioError(f"{where}: {t.name}: {ln.name} {ip} is the address of "
                                        f"the {legs[ip]}; give the NIC another address")
