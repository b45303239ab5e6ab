"""Phase 4, interface choice: a firewall over part of the ephemeral port range. Pure.

The mesh dials one listener per address, on a port the kernel picked from
``net.ipv4.ip_local_port_range``; a firewall that admits only part of that range passes
the mesh whenever that one port falls in the open part, and NCCL or gloo then hang on the
ports that do not. So every rank also dials its ring neighbours' listeners spread over
the whole range, both ends included (:func:`~disttrain_probe.phases.connectivity.range_ports`;
``range: [[port, result], ...]`` on the mesh entry). A node whose listeners answered on
some of those ports and not on others (refused or timed out, the same dialler, the same
address) has a firewall over part of its range: ``EphemeralPortsBlocked`` naming the node,
the ports that answered and those that did not, its range, and the fix.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.shapes import Mesh, Peer
from disttrain_probe.phases.networks import nodes_text

_BLOCKED = ("refused", "timeout")


@dataclass
class _Seen:
    """What the diallers saw of one node's sampled ports (port numbers)."""

    ok: Set[int] = field(default_factory=set)
    bad: Set[int] = field(default_factory=set)
    mesh_ok: bool = False  # the mesh's own port answered the same dialler
    by: Set[int] = field(default_factory=set)  # the diallers' ranks
    addrs: Set[str] = field(default_factory=set)


def _samples(res: Any) -> List[tuple]:
    out = []
    for x in (res.get("range") if isinstance(res, dict) else None) or []:
        if isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[0], int):
            out.append((x[0], x[1]))
    return out


def partial_blocks(mesh: Mesh,
                   addrs: Optional[Dict[int, str]] = None) -> Dict[int, _Seen]:
    """Rank -> what was seen of its sampled ports, for every rank some dialler reached on a
    part of its range and not on another (same dialler, same address). ``mesh``: rank ->
    peer -> addr -> result; ``addrs``: rank -> the one address to judge (the chosen
    network's), None: every address."""
    seen: Dict[int, _Seen] = {}
    for i, row in mesh.items():
        for j, per_addr in (row or {}).items():
            for addr, res in (per_addr or {}).items():
                if addrs is not None and addrs.get(j) != addr:
                    continue
                got = _samples(res)
                ok = {p for p, r in got if r == "ok"}
                bad = {p for p, r in got if r in _BLOCKED}
                mesh_ok = isinstance(res, dict) and res.get("r") == "ok"
                if bad and (ok or mesh_ok):
                    s = seen.setdefault(j, _Seen())
                    s.ok |= ok
                    s.bad |= bad
                    s.mesh_ok |= mesh_ok
                    s.by.add(i)
                    s.addrs.add(addr)
    return seen


def _ports(ports: Set[int]) -> str:
    xs = sorted(ports)
    if len(xs) == 1:
        return f"port {xs[0]}"
    return "ports " + ", ".join(str(p) for p in xs[:-1]) + f" and {xs[-1]}"


def partial_range_failure(peers: Dict[int, Peer],
                          mesh: Mesh,
                          addrs: Optional[Dict[int, str]] = None) -> Optional[Dict[str, str]]:
    """``{"reason": EphemeralPortsBlocked, "message"}`` naming the node(s) a firewall blocks
    over part of their ephemeral range (:func:`partial_blocks`), else None. ``peers``: rank
    -> published summary (``node``, ``portRange``)."""
    seen = partial_blocks(mesh, addrs)
    if not seen:
        return None
    j = min(seen)
    s = seen[j]
    node = nodes_text(peers, [j])
    rng = peers.get(j, {}).get("portRange")
    rng_s = f" {rng[0]}-{rng[1]}" if isinstance(rng, (list, tuple)) and len(rng) == 2 else ""
    answered = _ports(s.ok) if s.ok else "the mesh's port"
    others = sorted(set(seen) - {j})
    also = f" (also {nodes_text(peers, others)})" if others else ""
    where = sorted(s.addrs)
    where_s = where[0] + (f" (+{len(where) - 1})" if len(where) > 1 else "")
    return {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": (
        f"{node}: part of its ephemeral port range is blocked{also}: {nodes_text(peers, sorted(s.by))} "
        f"reached {answered} but not {_ports(s.bad)} on {where_s}; NCCL and gloo listen on "
        f"ports the kernel picks anywhere in net.ipv4.ip_local_port_range{rng_s}, so some "
        f"connections hang; open the whole range to the other nodes on {node}'s firewall, or "
        f"set network.portRange to a range it admits")}


__all__ = ["partial_blocks", "partial_range_failure"]
