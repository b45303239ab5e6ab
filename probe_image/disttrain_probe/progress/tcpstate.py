"""The pod's TCP connections that lose packets, from the kernel's own counters
(``/proc/net/tcp`` and ``/proc/net/tcp6`` of the pod's network namespace, which the
progress sidecar shares with the trainer).

While a pod's ranks wait in a collective, a connection in ESTABLISHED whose send queue
holds bytes the peer has not acknowledged after ``retrnsmt`` retransmission timeouts in a
row (the counter resets when an ACK advances) is a link that lost its packets: a firewall
rule between the nodes, a dead link, a peer whose node is gone. A frozen or busy peer
process does not show here (its kernel still acknowledges what fits its receive buffer).
Nothing is sent: the evidence is read, never provoked.
"""
from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Dict, Iterable, List, Optional, Tuple

from disttrain_probe.contract.progress import TcpPeer

PROC_FILES = ("/proc/net/tcp", "/proc/net/tcp6")
ESTABLISHED = "01"  # the ``st`` column (include/net/tcp_states.h: TCP_ESTABLISHED)
MIN_RETRANS = 3  # consecutive retransmission timeouts before a connection counts (~1.4 s and more)
MAX_LINES = 100_000  # lines read of one file (a node with hostNetwork may hold many sockets)


def _address(hex_addr: str) -> Optional[str]:
    """``0100007F:0CEA``'s address part as text (the kernel prints each 32-bit word in host
    order); None when malformed. IPv4-mapped IPv6 addresses come back as IPv4."""
    try:
        raw = bytes.fromhex(hex_addr)
        if len(raw) not in (4, 16):
            return None
        words = struct.unpack(f">{len(raw) // 4}I", raw)
        packed = b"".join(struct.pack("=I", w) for w in words)
        ip = ipaddress.ip_address(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, packed))
    except (ValueError, OSError, struct.error):
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return None if ip.is_loopback or ip.is_unspecified else str(ip)


def losing(lines: Iterable[str], min_retrans: int = MIN_RETRANS) -> List[Tuple[str, int, int]]:
    """Of ``/proc/net/tcp``-format ``lines`` (the header line is skipped), the ESTABLISHED
    connections with unacknowledged bytes after at least ``min_retrans`` retransmission
    timeouts, as (peer address, unacked bytes, retransmits). Malformed lines are skipped."""
    out = []
    for n, line in enumerate(lines):
        if n >= MAX_LINES:
            break
        cols = line.split()
        if len(cols) < 7 or not cols[0].endswith(":") or cols[3] != ESTABLISHED:
            continue
        try:
            tx = int(cols[4].partition(":")[0], 16)
            retrans = int(cols[6], 16)
        except ValueError:
            continue
        peer = _address(cols[2].partition(":")[0])
        if peer is not None and tx > 0 and retrans >= min_retrans:
            out.append((peer, tx, retrans))
    return out


def peers(connections: Iterable[Tuple[str, int, int]]) -> List[TcpPeer]:
    """``connections`` (:func:`losing`) summed per peer address: sockets, unacked bytes,
    the most retransmits; most retransmitted first."""
    by: Dict[str, List[int]] = {}
    for peer, tx, retrans in connections:
        s = by.setdefault(peer, [0, 0, 0])
        s[0], s[1], s[2] = s[0] + 1, s[1] + tx, max(s[2], retrans)
    out = [TcpPeer(peer=p, sockets=s[0], unacked=s[1], retrans=s[2]) for p, s in by.items()]
    return sorted(out, key=lambda t: (-t.retrans, -t.unacked, t.peer))


def read(files: Iterable[str] = PROC_FILES, min_retrans: int = MIN_RETRANS) -> List[TcpPeer]:
    """The losing peers of this network namespace (:func:`losing`, :func:`peers`); files
    that cannot be read count as none. Never raises."""
    found: List[Tuple[str, int, int]] = []
    for path in files:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                found += losing(f, min_retrans)
        except OSError:
            continue
    return peers(found)


__all__ = ["MIN_RETRANS", "PROC_FILES", "losing", "peers", "read"]
