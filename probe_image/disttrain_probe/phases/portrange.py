"""Phase 4, interface choice: a firewall over part of the ephemeral port range. Pure.

The mesh dials one listener per address, on a port the kernel picked from
``net.ipv4.ip_local_port_range``; a firewall that admits only part of that range passes
the mesh whenever that one port falls in the open part, and NCCL or gloo then hang on the
ports that do not. So every rank also dials, on every address, the listeners of every
peer it dials in the plan (every other rank up to the full-mesh limit) spread over the
whole range, both ends included (:func:`~disttrain_probe.phases.connectivity.range_ports`;
``range: [[port, result], ...]`` on the mesh entry). A node whose listeners answered on
some of those ports and not on others (refused or timed out, the same dialler, the same
address) has a firewall over part of its range: ``EphemeralPortsBlocked`` naming the node,
the peers it blocks when only some are (a rule against one source), the ports that
answered and those that did not, its range, and the fix. When one dialler alone saw
several nodes' ranges in part while the others reached every sampled port, its own
outbound rule is named instead.

Evidence is weighed across networks (:func:`untested_failure`): a pair blocked on one
network (its mesh dial refused or timed out, or part of its samples) validates another
network only when the same pair, in the same direction, was sampled there and answered on
every sampled port; a rule on one NIC is often on the others too.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.paths import is_loopback
from disttrain_probe.ground.shapes import Mesh, Peer
from disttrain_probe.phases.networks import nodes_text, others_text

_BLOCKED = ("refused", "timeout")
_PASSED = ("ok", "slow")  # slow: connected, the identity late (a starved peer): the port is open
_MESH_WORDS = {"refused": "the mesh dial was refused", "timeout": "the mesh dial timed out"}


@dataclass
class _Seen:
    """What the diallers saw of one node's sampled ports (port numbers)."""

    ok: Set[int] = field(default_factory=set)
    bad: Set[int] = field(default_factory=set)
    mesh_ok: bool = False  # the mesh's own port answered the same dialler
    by: Set[int] = field(default_factory=set)  # the diallers' ranks that saw part blocked
    addrs: Set[str] = field(default_factory=set)
    clean: Set[int] = field(default_factory=set)  # diallers that reached every sampled port


def _samples(res: Any) -> List[tuple]:
    out = []
    for x in (res.get("range") if isinstance(res, dict) else None) or []:
        if isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], int):
            out.append((x[0], x[1]))
    return out


def _entries(mesh: Mesh):
    """(dialler, target, addr, result) for every well-formed mesh entry."""
    for i, row in (mesh or {}).items():
        for j, per_addr in (row if isinstance(row, dict) else {}).items():
            for addr, res in (per_addr if isinstance(per_addr, dict) else {}).items():
                yield i, j, addr, res


def partial_blocks(mesh: Mesh,
                   addrs: Optional[Dict[int, str]] = None) -> Dict[int, _Seen]:
    """Rank -> what was seen of its sampled ports, for every rank some dialler reached on a
    part of its range and not on another (same dialler, same address). ``mesh``: rank ->
    peer -> addr -> result; ``addrs``: rank -> the one address to judge (the chosen
    network's), None: every address. ``clean``: the diallers that sampled it there and
    reached every port."""
    seen: Dict[int, _Seen] = {}
    clean: Dict[int, Set[int]] = {}
    for i, j, addr, res in _entries(mesh):
        if addrs is not None and addrs.get(j) != addr:
            continue
        got = _samples(res)
        ok = {p for p, r in got if r == "ok"}
        bad = {p for p, r in got if r in _BLOCKED}
        mesh_ok = isinstance(res, dict) and res.get("r") == "ok"
        if got and all(r in _PASSED for _p, r in got):
            clean.setdefault(j, set()).add(i)
        if bad and (ok or mesh_ok):
            s = seen.setdefault(j, _Seen())
            s.ok |= ok
            s.bad |= bad
            s.mesh_ok |= mesh_ok
            s.by.add(i)
            s.addrs.add(addr)
    for j, s in seen.items():
        s.clean = clean.get(j, set()) - s.by
    return seen


def _ports(ports: Set[int], grid: Optional[Set[int]] = None, most: int = 3) -> str:
    """``port 40000``, ``ports 32768, 38414 and 44060``, or with many samples the runs of
    ``ports`` that are neighbours among the sampled ``grid`` (default: ``ports`` alone):
    ``ports 32768-44060 (14 sampled) and 60999``; at most ``most`` runs, then how many more
    ports."""
    xs = sorted(ports)
    if len(xs) == 1:
        return f"port {xs[0]}"
    if len(xs) <= 4:
        return "ports " + ", ".join(str(p) for p in xs[:-1]) + f" and {xs[-1]}"
    order = sorted(set(grid or ()) | set(xs))
    at = {p: k for k, p in enumerate(order)}
    runs: List[List[int]] = []
    for p in xs:
        if runs and at[p] == at[runs[-1][-1]] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    said = [f"{r[0]}" if len(r) == 1 else f"{r[0]}-{r[-1]} ({len(r)} sampled)" for r in runs[:most]]
    rest = sum(len(r) for r in runs[most:])
    if rest:
        said.append(f"{rest} more")
    return "ports " + (", ".join(said[:-1]) + f" and {said[-1]}" if len(said) > 1 else said[0])


def _range_s(peers: Dict[int, Peer], j: int) -> str:
    rng = (peers.get(j) or {}).get("portRange")
    return f" {rng[0]}-{rng[1]}" if isinstance(rng, (list, tuple)) and len(rng) == 2 else ""


def _where(s: _Seen) -> str:
    where = sorted(s.addrs)
    return where[0] + (f" (+{len(where) - 1})" if len(where) > 1 else "")


LIMIT = 400  # characters in a verdict's message


def _fit(variants: List[str]) -> str:
    """The first of ``variants`` (fullest first) within :data:`LIMIT` characters, else the
    last one cut at a word."""
    for v in variants:
        if len(v) <= LIMIT:
            return v
    return variants[-1][:LIMIT - 3].rsplit(" ", 1)[0] + "..."


_HANG = "NCCL and gloo listen anywhere in net.ipv4.ip_local_port_range{}, so connections hang"


def _outbound(peers: Dict[int, Peer], mesh: Mesh, addrs: Optional[Dict[int, str]],
              seen: Dict[int, _Seen]) -> Optional[Dict[str, str]]:
    """One dialler alone saw part of the range blocked on several nodes, each of which the
    other diallers reached on every sampled port: that dialler is the common factor (its
    outbound rule, one rule rather than one per node), else None. When it reached some
    other node in full, the nodes' own inbound rules against it are named as well."""
    diallers = set().union(*(s.by for s in seen.values()))
    if len(diallers) != 1 or len(seen) < 2 or not all(s.clean for s in seen.values()):
        return None
    d = next(iter(diallers))
    sampled = {j for i, j, addr, res in _entries(mesh) if i == d and _samples(res)
               and (addrs is None or addrs.get(j) == addr)}
    node = nodes_text(peers, [d])
    every = sampled <= set(seen)
    targets = "every other node" if every and len(sampled) == len(peers) - 1 else nodes_text(peers, sorted(seen))
    ok = set().union(*(s.ok for s in seen.values()))
    bad = set().union(*(s.bad for s in seen.values()))
    answered = _ports(ok, ok | bad) if ok else "the mesh's port"
    inbound = "" if every else f", or their inbound rules against {node}"
    head = (f"{node}: its connections to part of the ephemeral port range of {targets} are "
            f"blocked: it reached {answered} but not {_ports(bad, ok | bad)}")
    tail = f"; open {node}'s outbound firewall to their whole range{inbound}"
    return {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": _fit([
        f"{head}, which the other nodes reached; {_HANG.format('')}{tail}", head + tail])}


def partial_range_failure(peers: Dict[int, Peer],
                          mesh: Mesh,
                          addrs: Optional[Dict[int, str]] = None) -> Optional[Dict[str, str]]:
    """``{"reason": EphemeralPortsBlocked, "message"}`` naming the node(s) a firewall blocks
    over part of their ephemeral range (:func:`partial_blocks`), and the peers it blocks
    when others reached every sampled port (a rule against some sources), else None; one
    dialler that alone saw several nodes blocked in part is named for its outbound rule.
    ``peers``: rank -> published summary (``node``, ``portRange``)."""
    seen = partial_blocks(mesh, addrs)
    if not seen:
        return None
    out = _outbound(peers, mesh, addrs, seen)
    if out is not None:
        return out
    # the node the most diallers saw blocked in part, the lowest rank of those
    j = min(seen, key=lambda r: (-len(seen[r].by), r))
    s = seen[j]
    node = nodes_text(peers, [j])
    answered = _ports(s.ok, s.ok | s.bad) if s.ok else "the mesh's port"
    others = sorted(set(seen) - {j})
    also = f" (also {nodes_text(peers, others)})" if others else ""
    by = nodes_text(peers, sorted(s.by))
    only = f" to {by}" if s.clean else ""
    clean = f", while {others_text(peers, sorted(s.clean), [j, *s.by])} reached them all" if s.clean else ""
    fix = (f"; open the whole range to {by if s.clean else 'the other nodes'} on {node}'s "
           f"firewall, or set network.portRange to a range it admits")
    head = f"{node}: part of its ephemeral port range is blocked{only}"
    # witnesses, not culprits: every other node is said as such, not listed (a lone one is a suspect)
    said_by = by if s.clean else others_text(peers, sorted(s.by), [j], lone=False)
    seen_s = f": {said_by} reached {answered} but not {_ports(s.bad, s.ok | s.bad)} on {_where(s)}"
    hang = "; " + _HANG.format(_range_s(peers, j))
    return {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": _fit([
        head + also + seen_s + clean + hang + fix, head + also + seen_s + hang + fix,
        head + seen_s + hang + fix, head + seen_s + fix])}


def _holders(peers: Dict[int, Peer]) -> Dict[str, Set[int]]:
    """addr -> the ranks whose published interfaces hold it."""
    out: Dict[str, Set[int]] = {}
    for r, p in peers.items():
        for i in (p.get("interfaces") or []) if isinstance(p, dict) else []:
            for a in (i.get("addrs") or []) if isinstance(i, dict) else []:
                if isinstance(a, str):
                    out.setdefault(a.partition("/")[0], set()).add(r)
    return out


def _ifname(peers: Dict[int, Peer], rank: int, addr: str) -> str:
    for i in (peers.get(rank) or {}).get("interfaces") or []:
        if isinstance(i, dict) and any(isinstance(a, str) and a.partition("/")[0] == addr
                                       for a in i.get("addrs") or []):
            return f"{i.get('name')} ({addr})"
    return addr


def blocked_pairs(peers: Dict[int, Peer], mesh: Mesh,
                  addrs: Dict[int, str]) -> Dict[Tuple[int, int], Tuple[str, str]]:
    """(dialler, target) -> (the target's address, what was seen) for every pair blocked on
    an address other than ``addrs[target]`` (the chosen network's): its mesh dial refused
    or timed out, or part of its sampled ports did. Addresses that are not one node's own
    (loopback, the same bridge address on several nodes, the dialler's) say nothing about
    the pair and are left out."""
    holders = _holders(peers)
    out: Dict[Tuple[int, int], Tuple[str, str]] = {}
    for i, j, addr, res in _entries(mesh):
        if not isinstance(res, dict) or j not in addrs or i not in addrs or addr == addrs[j]:
            continue
        if not isinstance(addr, str) or is_loopback(addr) or holders.get(addr, {j}) != {j}:
            continue
        bad = sorted(p for p, r in _samples(res) if r in _BLOCKED)
        if res.get("r") in _BLOCKED:
            out.setdefault((i, j), (addr, _MESH_WORDS[str(res.get("r"))]))
        elif bad:
            grid = {p for p, _r in _samples(res)}
            out.setdefault((i, j), (addr, _ports(set(bad), grid) + " not answering"))
    return out


def untested_failure(peers: Dict[int, Peer], mesh: Mesh,
                     addrs: Dict[int, str]) -> Optional[Dict[str, str]]:
    """EphemeralPortsBlocked when a pair blocked on another network (:func:`blocked_pairs`)
    was not sampled on the chosen one (``addrs``: rank -> its address there) in the same
    direction, every sampled port answering: the chosen network is not validated for that
    pair. A pair sampled there and answering everywhere is cleared (a rule on the other NIC
    only); a pair sampled there in part is :func:`partial_range_failure`'s. None when every
    such pair is cleared."""
    for (i, j), (addr, what) in sorted(blocked_pairs(peers, mesh, addrs).items()):
        here = ((mesh.get(i) or {}).get(j) or {}).get(addrs[j])
        got = _samples(here)
        if isinstance(here, dict) and here.get("r") == "ok" and got and all(r in _PASSED for _p, r in got):
            continue
        src, dst = nodes_text(peers, [i]), nodes_text(peers, [j])
        chosen = _ifname(peers, j, addrs[j])
        head = (f"{dst}: new connections from {src} to its ports were blocked on "
                f"{_ifname(peers, j, addr)} ({what}), and that pair was not tested over the "
                f"ephemeral range{_range_s(peers, j)} on {chosen}, so {chosen.split(' ')[0]} is "
                f"not validated")
        return {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": _fit([
            f"{head}: the same rule may hold there; open the range to {src} on {dst}'s "
            f"firewall, or give the probe more time (probe.timeoutSeconds) to sample every pair",
            f"{head}; open the range to {src} on {dst}'s firewall"])}
    return None


__all__ = ["blocked_pairs", "partial_blocks", "partial_range_failure", "untested_failure"]
