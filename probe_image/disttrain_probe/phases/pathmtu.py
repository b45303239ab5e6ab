"""Path MTU black holes: connections open and small messages pass, full-size segments are lost.

A link in the middle of a path (a router's leg, a tunnel, a switch port) with a smaller
MTU than the nodes' interfaces drops every full-size packet; the router says so with ICMP
"fragmentation needed", and when that ICMP is filtered on the way back the sender never
learns it, so TCP retransmits the same full-size segment forever: NCCL and gloo connect,
exchange their small bootstrap messages and then hang on the first large transfer
(NVIDIA/nccl#1524). The connectivity phase's identity line is small, so the mesh passes.

What the probe does about it (no privilege needed): a bulk download whose identity line
arrived but whose bytes never did is retried with the socket's MSS clamped
(``TCP_MAXSEG`` before ``connect``: the MSS this end advertises, so the peer's segments
shrink), bisecting the largest segment that passes (:func:`search`). The result,
``pmtu: {"passes": bytes, "lost": bytes}`` (IP packet sizes: MSS + 40), goes into the mesh
entry of that path; :func:`black_hole_failure` turns the chosen network's black holes
into ``PathMTUBlackHole`` naming the nodes, the interface MTUs, the size that passes
and the fix.
"""
from __future__ import annotations

import json
import socket
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.shapes import Mesh, NetEntry, Peer

MIN_MSS = 536  # RFC 879: every IPv4 path carries 576-byte packets
HEADERS = 40  # IPv4 + TCP headers: the packet is MSS + 40 bytes
PROBE_BYTES = 64 * 1024  # bytes per try of the search
TRY_SECONDS = 0.3  # a try that moves nothing in this long is lost
SEARCH_STEP = 1  # bytes: the search stops when passing and lost are this close (about 10 tries)


def transfer(addr: str, port: int, want: Tuple[int, Optional[str]], nbytes: int, limit: float,
             mss: Optional[int] = None) -> Optional[Tuple[int, float]]:
    """Ask a peer's listener (``want``: its rank and nonce) for ``nbytes`` bytes and read
    them for at most ``limit`` seconds: ``(bytes received, seconds)`` from the request to
    the last byte; None when the connection or the identity line failed (not this peer,
    nothing listening). ``mss``: clamp the segment size (``TCP_MAXSEG``) first. Never
    raises."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(max(0.05, min(limit, 2.0)))
    try:
        if mss:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        s.connect((addr, port))
        buf = b""
        while b"\n" not in buf and len(buf) < 512:
            chunk = s.recv(512)
            if not chunk:
                return None
            buf += chunk
        try:
            who = json.loads(buf.partition(b"\n")[0].decode("utf-8", "replace") or "{}")
        except ValueError:
            return None
        if not isinstance(who, dict) or who.get("nonce") != want[1] or who.get("rank") != want[0]:
            return None
        return _download(s, nbytes, limit)
    except OSError:
        return None
    finally:
        s.close()


def _download(s: socket.socket, nbytes: int, limit: float) -> Tuple[int, float]:
    sink = bytearray(1 << 20)
    got = 0
    t0 = time.monotonic()
    s.sendall(b"BULK %d\n" % nbytes)
    while got < nbytes:
        left = t0 + limit - time.monotonic()
        if left <= 0:
            break
        s.settimeout(left)
        try:
            n = s.recv_into(sink)
        except (socket.timeout, OSError):
            break
        if not n:
            break
        got += n
    return got, time.monotonic() - t0


def search(passes: Callable[[int], bool], mtu: int, deadline: float) -> Optional[Dict[str, int]]:
    """Bisect the largest MSS in [:data:`MIN_MSS`, ``mtu`` - 40] for which ``passes(mss)``
    holds, stopping at ``deadline`` (time.monotonic()): ``{"passes": P, "lost": L}`` as IP
    packet sizes in bytes (P < L); None when even :data:`MIN_MSS` is lost (not an MTU
    fault: the path moves nothing large at all), the full size passes now (nothing to
    explain) or was not seen lost before ``deadline``, or ``mtu`` leaves nothing to bisect
    (576 or less). ``passes`` is called about log2(mtu / 8) times."""
    lo, hi = MIN_MSS, mtu - HEADERS
    if hi <= lo or time.monotonic() >= deadline or not passes(lo):
        return None
    if time.monotonic() >= deadline or passes(hi):  # the full size must be seen lost
        return None
    while hi - lo > SEARCH_STEP and time.monotonic() < deadline:
        mid = (lo + hi) // 2
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return {"passes": lo + HEADERS, "lost": hi + HEADERS}


def probe_path(addr: str, port: int, want: Tuple[int, Optional[str]], mtu: int,
               seconds: float) -> Optional[Dict[str, int]]:
    """:func:`search` over real downloads from a peer's listener, within ``seconds``: a
    try passes when at least two full segments of its size arrived. Never raises."""
    def passes(mss: int) -> bool:
        got = transfer(addr, port, want, PROBE_BYTES, TRY_SECONDS, mss)
        return got is not None and got[0] >= 2 * mss

    return search(passes, mtu, time.monotonic() + max(0.0, seconds))


def _mtu_of(peer: Any, addr: str) -> Optional[int]:
    ifaces = peer.get("interfaces") if isinstance(peer, dict) else None
    for i in ifaces if isinstance(ifaces, list) else []:
        addrs = i.get("addrs") if isinstance(i, dict) else None
        if isinstance(addrs, list) and any(str(a).split("/")[0] == addr for a in addrs):
            mtu = i.get("mtu")
            return mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else None
    return None


def _size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def black_holes(mesh: Mesh, addrs: Dict[int, str]
                ) -> List[Tuple[int, int, Dict[str, int]]]:
    """(sender rank, receiver rank, pmtu) for every path between the ranks' ``addrs`` (the
    chosen network) whose download found a black hole. ``mesh``: rank -> peer -> addr ->
    entry (the receiver dialled the sender's listener); anything else in it is skipped.
    Pure."""
    out = []
    for receiver, row in sorted(mesh.items(), key=lambda kv: str(kv[0])):
        if not isinstance(row, dict):
            continue
        for sender, entries in sorted(row.items(), key=lambda kv: str(kv[0])):
            e = entries.get(addrs.get(sender, "")) if isinstance(entries, dict) else None
            p = e.get("pmtu") if isinstance(e, dict) else None
            if (isinstance(p, dict) and _size(p.get("passes")) and _size(p.get("lost"))
                    and p["passes"] < p["lost"]):
                out.append((sender, receiver, {"passes": p["passes"], "lost": p["lost"]}))
    return out


def black_hole_failure(peers: Dict[int, Peer],
                       mesh: Mesh,
                       picks: Dict[int, NetEntry]) -> Optional[Dict[str, str]]:
    """``{"reason": PathMTUBlackHole, "message"}`` when a path of the chosen network
    (``picks``: rank -> {ifname, addr}) loses full-size packets, naming the first such
    path's nodes, both interfaces' MTUs, the largest size that passed and the fix; None
    otherwise. At most 400 characters. Pure."""
    addrs = {r: p["addr"] for r, p in picks.items()
             if isinstance(p, dict) and isinstance(p.get("addr"), str) and p["addr"]}
    holes = black_holes(mesh, addrs)
    if not holes:
        return None
    sender, receiver, p = holes[0]
    info: Dict[int, Peer] = {}
    for r in (sender, receiver):
        peer = peers.get(r)
        info[r] = peer if isinstance(peer, dict) else {}
    node = {r: str(info[r].get("node") or f"rank {r}") for r in (sender, receiver)}
    pick = picks.get(receiver)
    ifname = str((pick.get("ifname") if isinstance(pick, dict) else None) or "?")
    mtus = [_mtu_of(info[r], addrs.get(r, "")) for r in (sender, receiver)]
    mtu_s = (f"both interfaces at MTU {mtus[0]}" if mtus[0] == mtus[1] and mtus[0]
             else f"MTU {mtus[0] or '?'} on {node[sender]}, {mtus[1] or '?'} on {node[receiver]}")
    pairs = {frozenset((s, r)) for s, r, _ in holes}
    more = f" ({len(pairs) - 1} more path(s) too)" if len(pairs) > 1 else ""
    return {"reason": vocabulary.PATH_MTU_BLACK_HOLE, "message": (
        f"{node[sender]} -> {node[receiver]} on {ifname}: packets of {p['lost']} bytes are lost, "
        f"{p['passes']} pass ({mtu_s}){more}: a link between them has a smaller MTU and its "
        f"ICMP 'fragmentation needed' never returns, so NCCL and gloo hang on large messages; "
        f"set {ifname}'s MTU to {p['passes']} on every node, or let ICMP type 3 code 4 "
        f"('fragmentation needed') back through every hop of the path")[:400]}


__all__ = ["black_hole_failure", "black_holes", "probe_path", "search", "transfer"]
