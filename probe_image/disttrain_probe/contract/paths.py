"""Evidence per path, compact (pure): what this rank's dial to each peer on each network did.

``paths`` in the report maps a network to a row of one character per peer rank (index =
rank), so 64 ranks on four networks take about 350 bytes and fit the 4 KiB report:

====  =========================================================================
``.``  this rank
``-``  not dialled (outside the dial plan, or the peer has no address there)
``o``  connected, and the right peer answered (rank and nonce)
``w``  answered by the wrong host (a dial that landed on a local bridge: docker0)
``c``  accepted, then closed before the peer's probe answered (an intercepting proxy: a
       service-mesh sidecar)
``r``  refused (a reset: a firewall's reject, or nothing listening)
``t``  timed out (dropped: a firewall's drop, or no route back)
``u``  unreachable (no route, or no ARP answer)
``e``  another error
``m``  mixed: the peer has several addresses there and they did not all answer alike
====  =========================================================================

An upper-case letter means the kernel sent the dial from an address that is not this
rank's own on that network (two NICs on one subnet, or a route out another NIC).

Networks are keyed as the interface choice keys them (``interfaces.py``): the IPv4 subnet
(``10.101.0.0/24``) when it spans two or more ranks, else ``ifname:<name>`` for a routed
network whose interface has the same name on every node (a pod network: one subnet per
node). Every rank computes the same keys from the same all-gathered listeners.
"""
from __future__ import annotations

import ipaddress
from typing import Any, Dict, List, Mapping, Optional, Tuple

CODE = {"ok": "o", "wrong": "w", "closed": "c", "refused": "r", "timeout": "t",
        "unreachable": "u", "error": "e"}
SELF, NOT_DIALLED, MIXED = ".", "-", "m"
OUTCOME = {v: k for k, v in CODE.items()}


def is_loopback(addr: Optional[str]) -> bool:
    """Whether ``addr`` (an IPv4 or IPv6 address as text; an IPv6 zone ``%eth0`` is ignored)
    is a loopback address (127.0.0.0/8, ::1): the one loopback rule of probe and operator.
    False for None and for text that is not an address; raises nothing."""
    try:
        return addr is not None and ipaddress.ip_address(str(addr).split("%")[0]).is_loopback
    except ValueError:
        return False


def _subnet(addr: str, prefix: int) -> str:
    return str(ipaddress.IPv4Network(f"{addr}/{prefix}", strict=False))


def network_keys(listeners: Mapping[int, Mapping[str, Any]]) -> Dict[Tuple[int, str], str]:
    """(rank, addr) -> network key for every listener address of every rank
    (``listeners``: rank -> {"l": [[ifname, addr, prefix, port], ...]})."""
    ranks_of: Dict[str, set] = {}
    names: Dict[str, Dict[int, set]] = {}
    for r, info in listeners.items():
        for ifname, addr, prefix, _port in info.get("l", []):
            s = _subnet(addr, prefix)
            ranks_of.setdefault(s, set()).add(r)
            names.setdefault(ifname, {}).setdefault(r, set()).add(s)
    out: Dict[Tuple[int, str], str] = {}
    for r, info in listeners.items():
        for ifname, addr, prefix, _port in info.get("l", []):
            s = _subnet(addr, prefix)
            routed = len(names.get(ifname, {})) >= 2 and len(
                set().union(*names[ifname].values())) >= 2
            out[(r, addr)] = s if len(ranks_of[s]) >= 2 or not routed else f"ifname:{ifname}"
    return out


def rows(rank: int, world: int, listeners: Mapping[int, Mapping[str, Any]],
         results: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Dict[str, str]:
    """This rank's row per network: one character per peer rank (see the module doc).
    ``results``: str(peer) -> addr -> {r, src, ...} (this rank's dials)."""
    keys = network_keys(listeners)
    mine: Dict[str, List[str]] = {}  # key -> this rank's own addresses there
    for (r, addr), k in keys.items():
        if r == rank:
            mine.setdefault(k, []).append(addr)
    cells: Dict[str, Dict[int, List[str]]] = {}
    for (peer, addr), k in keys.items():
        if peer == rank:
            continue
        res = (results.get(str(peer)) or {}).get(addr)
        if not isinstance(res, dict):
            continue
        outcome = res.get("r")
        c = CODE.get(outcome, "e") if isinstance(outcome, str) else "e"
        src = res.get("src")
        if src and mine.get(k) and not k.startswith("ifname:") and src not in mine[k]:
            c = c.upper()
        cells.setdefault(k, {}).setdefault(peer, []).append(c)
    out: Dict[str, str] = {}
    for k in sorted(set(keys.values())):
        row = []
        for p in range(world):
            got = cells.get(k, {}).get(p)
            if p == rank:
                row.append(SELF)
            elif not got:
                row.append(NOT_DIALLED)
            elif len(set(got)) == 1:
                row.append(got[0])
            else:
                row.append(MIXED)
        if any(ch not in (SELF, NOT_DIALLED) for ch in row):
            out[k] = "".join(row)
    return out


def measured(rank: int, listeners: Mapping[int, Mapping[str, Any]],
             results: Mapping[str, Mapping[str, Mapping[str, Any]]], field: str = "mbps") -> Dict[str, Dict[str, float]]:
    """Network -> str(peer) -> the Mb/s this rank measured downloading from that peer there
    (only the sampled pairs): the best round (``field`` ``mbps``) or the typical one
    (``mbpsLow``)."""
    keys = network_keys(listeners)
    out: Dict[str, Dict[str, float]] = {}
    for (peer, addr), k in keys.items():
        res = (results.get(str(peer)) or {}).get(addr)
        v = res.get(field) if isinstance(res, dict) else None
        if peer != rank and isinstance(v, (int, float)):
            out.setdefault(k, {})[str(peer)] = round(float(v), 1)
    return out


def outcome(ch: str) -> Optional[str]:
    """The mesh result a row character stands for (None for self / not dialled)."""
    if ch in (SELF, NOT_DIALLED):
        return None
    if ch == MIXED:
        return "mixed"
    return OUTCOME.get(ch.lower(), "error")


__all__ = ["CODE", "MIXED", "NOT_DIALLED", "SELF", "measured", "network_keys", "outcome", "rows"]
