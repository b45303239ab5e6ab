"""Phase 4, interface choice: the failure when no network is usable.

InterfaceNotFound (socketIfname names no interface on some node), EphemeralPortsBlocked
(the paths exist but a firewall drops connections to the ephemeral ports), otherwise
InterfaceUnreachable (socketIfname named) or NoCommonInterface, with the rejections as
detail. Each failure is ``{"reason": vocabulary.*, "message": str}``. Pure.
"""
from __future__ import annotations

import ipaddress
from typing import Any, Callable, Dict, List, Optional, Sequence

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.config import ifname_matches
from disttrain_probe.ground.shapes import Peer
from disttrain_probe.phases.networks import ChoiceInputs, Network, nodes_text, others_text


def interface_not_found(inputs: ChoiceInputs) -> Optional[Dict[str, str]]:
    """InterfaceNotFound when socketIfname names interfaces (include mode) and some node has
    none of them, else None."""
    peers, spec = inputs.peers, inputs.spec
    if inputs.mode != "include":
        return None
    missing = {r: peers[r] for r in sorted(peers) if not any(
        ifname_matches(i["name"], inputs.pats) for i in peers[r].get("interfaces") or [])}
    if not missing:
        return None
    groups: Dict[str, List[int]] = {}
    for r, p in missing.items():
        have = ", ".join(i["name"] for i in p.get("interfaces") or []) or "none"
        groups.setdefault(have, []).append(r)
    return {"reason": vocabulary.INTERFACE_NOT_FOUND, "message": "; ".join(
        f"{nodes_text(peers, rs)}: no interface matches socketIfname={spec} "
        f"({'it has' if len(rs) == 1 else 'they have'} {have})"
        for have, rs in groups.items()) + "; set network.socketIfname to an interface "
        "every node has, or auto"}


def no_network_failure(inputs: ChoiceInputs, nets: List[Network],
                       auto_choice: Callable[[], Any]) -> Dict[str, str]:
    """The failure when every network was rejected: EphemeralPortsBlocked when the pattern
    fits a firewall on the ephemeral ports, else :func:`unusable_failure`. ``auto_choice``
    runs the choice with socketIfname=auto (called only when socketIfname is not auto)."""
    peers, mesh, ranks = inputs.peers, inputs.mesh, sorted(inputs.peers)
    blocked = _blocked(nets, mesh)
    any_ok = any(isinstance(res, dict) and res.get("r") == "ok"
                 for n in blocked for i in ranks for j in inputs.dial_plan.get(i, [])
                 if i != j and j in n.pick
                 for res in [(mesh.get(i) or {}).get(j, {}).get(n.pick[j]["addr"])])
    inbound = _inbound_blocked(blocked, ranks, mesh, inputs.dial_plan)
    port_s = f" {inputs.master_port}" if inputs.master_port else ""
    dials = [(i, j, res.get("r")) for n in blocked for i in ranks for j in inputs.dial_plan.get(i, [])
             if i != j and j in n.pick
             for res in [(mesh.get(i) or {}).get(j, {}).get(n.pick[j]["addr"])] if isinstance(res, dict)]
    if {r for _, _, r in dials} - {"ok"} == {"closed"}:  # every failed dial accepted, then closed
        nics = "/".join(dict.fromkeys(i for n in blocked for i in n.ifnames()))
        closed = [(i, j) for i, j, r in dials if r == "closed"]
        return {"reason": vocabulary.CONNECTION_INTERCEPTED, "message": (
            f"{nodes_text(peers, sorted({i for i, _ in closed}))}: connections to the ephemeral "
            f"ports of {nodes_text(peers, sorted({j for _, j in closed}))} on {nics} "
            f"(net.ipv4.ip_local_port_range {_range_text(peers, ranks)}) were accepted and then "
            f"closed before the peer's probe answered, while the master port{port_s} worked: a "
            f"proxy intercepts them, such as a service-mesh sidecar (istio-proxy, "
            f"linkerd-proxy); exclude that range from it too, or disable injection for the "
            f"job's pods")}
    if inbound:
        others = [r for r in ranks if r not in inbound]
        where = nodes_text(peers, inbound)
        nics = "/".join(dict.fromkeys(i for n in blocked for i in n.ifnames()))
        return {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": (
            f"{where}: inbound TCP to its ephemeral ports (net.ipv4.ip_local_port_range "
            f"{_range_text(peers, inbound)}, where NCCL and gloo listen) is blocked: nothing "
            f"from {others_text(peers, others, inbound, lone=False)} got through on {nics}, while {where}'s own "
            f"connections out and the master port{port_s} worked; open that TCP range to the "
            f"other nodes on {where}'s firewall, or set network.portRange to the range it "
            f"admits")}
    if blocked and not any_ok:
        n = blocked[0]
        return {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": (
            f"the master port{port_s} answered, but no connection to an ephemeral port "
            f"(net.ipv4.ip_local_port_range {_range_text(peers, ranks)}, where NCCL and gloo "
            f"listen) got through on {n.where()}: a firewall admits the master port but not "
            f"that range; open it between nodes, or set network.portRange to the open range; "
            f"{n.message}")}
    return unusable_failure(inputs, nets, auto_choice)


def unusable_failure(inputs: ChoiceInputs, nets: List[Network],
                     auto_choice: Callable[[], Any]) -> Dict[str, str]:
    """InterfaceUnreachable (socketIfname names interfaces) or NoCommonInterface, with up to
    four rejections as detail and, when auto would choose, the socketIfname to set."""
    peers, spec, ranks = inputs.peers, inputs.spec, sorted(inputs.peers)
    relevant = [n for n in nets if n.reason not in (vocabulary.REJ_NOT_REQUESTED, vocabulary.REJ_LOOPBACK)] \
        or [n for n in nets if n.reason != vocabulary.REJ_NOT_REQUESTED] or nets
    detail = "; ".join(f"{n.reason}: {n.message}" for n in relevant[:4])
    hint = ""
    if inputs.mode != "auto":
        auto = auto_choice()
        if auto.get("network"):
            hint = "; set network.socketIfname=" + ",".join(
                sorted({c["ifname"] for c in auto["chosen"].values()}))
    if not detail:
        detail = "no interface with an IPv4 address was reported"
    v6 = _ipv6_only(peers, ranks)
    if v6:  # say why those NICs were never candidates
        detail += (
            f"; {v6}: only IPv6 (global) addresses, and this probe validates IPv4 "
            f"paths only: give the NICs IPv4 addresses, or run without the probe "
            f"(probe.enabled: false) on an IPv6-only cluster")
    if inputs.mode == "include":
        return {"reason": vocabulary.INTERFACE_UNREACHABLE,
                "message": f"socketIfname={spec} is not usable: {detail}{hint}"}
    return {"reason": vocabulary.NO_COMMON_INTERFACE, "message": (
        f"no network joins all {len(ranks)} nodes: {detail}"
        + (hint or "; give the nodes a common reachable network and name it in "
                   "network.socketIfname"))}


def _blocked(nets: List[Network], mesh: Dict[int, Dict[int, Any]]) -> List[Network]:
    """Structurally fine networks where not a single pair connected (firewalled ports). Not
    a network whose dials left by another one (each dialler's route to the peers' addresses
    had a source address other than its own there: islands on separate subnets without a
    route between them over it, not a firewall)."""
    out = []
    for n in nets:
        if n.reason == vocabulary.REJ_UNREACHABLE and n.pick and not _routed_elsewhere(n, mesh):
            out.append(n)
    return out


def _routed_elsewhere(n: Network, mesh: Dict[int, Dict[int, Any]]) -> bool:
    """Whether every dial on ``n`` whose route is known left from an address that is not the
    dialler's own on ``n``, or found no route at all (ENETUNREACH: no packet left, so no
    firewall saw it); at least one such dial."""
    srcs = [(None if res.get("noroute") else res.get("src"), n.pick[i]["addr"])
            for i in n.pick for j in n.pick if i != j
            for res in [(mesh.get(i) or {}).get(j, {}).get(n.pick[j]["addr"])]
            if isinstance(res, dict) and (res.get("src") or res.get("noroute"))]
    return bool(srcs) and all(src != own for src, own in srcs)


def _dial_ok(mesh: Dict[int, Dict[int, Any]], i: int, j: int, addr: str) -> bool:
    res = (mesh.get(i) or {}).get(j, {}).get(addr)
    return isinstance(res, dict) and res.get("r") == "ok"


def _inbound_blocked(blocked: List[Network], ranks: Sequence[int],
                     mesh: Dict[int, Dict[int, Any]], dial_plan: Dict[int, List[int]]) -> List[int]:
    """Ranks that no peer reached on any blocked network although their own connections
    out worked there: a firewall on those nodes drops/rejects new inbound connections to
    ephemeral ports (the master port passed, or we would not be here). [] if the failures
    do not fit that pattern (then the path itself may be broken)."""
    if not blocked:
        return []
    pairs = [(n, i, j) for n in blocked for i in ranks for j in dial_plan.get(i, [])
             if i != j and i in n.pick and j in n.pick]
    dead = [j for j in ranks if any(jj == j for _, _, jj in pairs)
            and not any(_dial_ok(mesh, i, jj, n.pick[jj]["addr"]) for n, i, jj in pairs if jj == j)]
    if not dead or len(dead) == len(ranks):
        return []
    for n, i, j in pairs:
        ok = _dial_ok(mesh, i, j, n.pick[j]["addr"])
        if not ok and j not in dead:
            return []  # a failure elsewhere: not (only) an inbound filter on `dead`
        if i in dead and j not in dead and not ok:
            return []
    # each dead rank's own dials out must have worked on every blocked network
    for d in dead:
        outs = [(n, j) for n, i, j in pairs if i == d and j not in dead]
        if not outs or not all(_dial_ok(mesh, d, j, n.pick[j]["addr"]) for n, j in outs):
            return []
    return dead


def _range_text(peers: Dict[int, Peer], ranks: Sequence[int]) -> str:
    rngs = sorted({tuple(peers[r].get("portRange") or ()) for r in ranks if peers[r].get("portRange")})
    return ", ".join(f"{lo}-{hi}" for lo, hi in rngs) or "(unknown)"


def _ipv6_only(peers: Dict[int, Peer], ranks: List[int]) -> str:
    """"eth0 on node-a, node-b" for the up, non-loopback interfaces that have global IPv6
    addresses and no IPv4 one (grouped by name; several joined by "; "), or ''."""
    by_name: Dict[str, List[int]] = {}
    for r in ranks:
        for i in peers[r].get("interfaces") or []:
            addrs = [a.partition("/")[0] for a in i.get("addrs") or []]
            if i.get("loopback") or i.get("up") is False or any(":" not in a for a in addrs):
                continue
            if any(not ipaddress.ip_address(a.split("%")[0]).is_link_local for a in addrs):
                by_name.setdefault(i["name"], []).append(r)
    return "; ".join(f"{name} on {nodes_text(peers, rs)}" for name, rs in sorted(by_name.items()))
