"""DNS lookups for the local cluster's tools and checks: RFC 1035 messages, enough for
A/AAAA/PTR/SRV/CNAME lookups, built and parsed, and a query sent over UDP (TCP when
truncated), from inside a network namespace when asked."""
from __future__ import annotations

import random
import socket
import struct
import time
from typing import Optional

from localcluster.common.config import (
    DNS_SERVICE_IP,
)
from localcluster.network.setns import run_in

# -- DNS messages (RFC 1035), enough for A/AAAA/PTR/SRV/CNAME lookups ---------------------
QTYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "TXT": 16, "AAAA": 28, "SRV": 33,
          "ANY": 255}


RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


def build_query(name: str, qtype: str = "A", qid: int = 0) -> bytes:
    """A DNS query message (recursion desired) for ``name``. Raises ValueError for an
    unknown type, an empty label or a label over 63 bytes."""
    if qtype.upper() not in QTYPES:
        raise ValueError(f"unknown query type {qtype!r}")
    out = bytearray(struct.pack("!HHHHHH", qid & 0xFFFF, 0x0100, 1, 0, 0, 0))
    for label in name.rstrip(".").split("."):
        b = label.encode("idna") if label else b""
        if not 0 < len(b) <= 63:
            raise ValueError(f"bad label {label!r} in {name!r}")
        out += bytes([len(b)]) + b
    out += b"\0" + struct.pack("!HH", QTYPES[qtype.upper()], 1)
    return bytes(out)


def _read_name(msg: bytes, off: int) -> tuple[str, int]:
    labels, end, jumps = [], None, 0
    while True:
        if off >= len(msg):
            raise ValueError("truncated name")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if jumps > 64:
                raise ValueError("compression loop")
            jumps += 1
            if end is None:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
            continue
        if n == 0:
            off += 1
            break
        labels.append(msg[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n
    return ".".join(labels) + ".", end if end is not None else off


def parse_response(msg: bytes) -> dict:
    """Decode a DNS response: ``{"id", "rcode" (name), "truncated", "answers": [{"name",
    "type", "ttl" (seconds), "data"}]}``; data is the address for A/AAAA, the target for
    CNAME/PTR/NS, ``"prio weight port target"`` for SRV, else hex.
    Raises ValueError for a malformed message."""
    try:
        qid, flags, qd, an, _ns, _ar = struct.unpack_from("!HHHHHH", msg, 0)
        off = 12
        for _ in range(qd):
            _, off = _read_name(msg, off)
            off += 4
        names = {v: k for k, v in QTYPES.items()}
        answers = []
        for _ in range(an):
            name, off = _read_name(msg, off)
            rtype, _cls, ttl, rdlen = struct.unpack_from("!HHIH", msg, off)
            off += 10
            rdata = msg[off:off + rdlen]
            if len(rdata) != rdlen:
                raise ValueError("truncated record")
            if rtype == 1:
                data = socket.inet_ntop(socket.AF_INET, rdata)
            elif rtype == 28:
                data = socket.inet_ntop(socket.AF_INET6, rdata)
            elif rtype in (2, 5, 12):
                data = _read_name(msg, off)[0]
            elif rtype == 33:
                prio, weight, port = struct.unpack_from("!HHH", rdata)
                data = f"{prio} {weight} {port} {_read_name(msg, off + 6)[0]}"
            else:
                data = rdata.hex()
            off += rdlen
            answers.append({"name": name, "type": names.get(rtype, str(rtype)), "ttl": ttl,
                            "data": data})
    except (struct.error, IndexError) as e:
        raise ValueError(f"malformed DNS message: {e}") from e
    return {"id": qid, "rcode": RCODES.get(flags & 0xF, str(flags & 0xF)),
            "truncated": bool(flags & 0x0200), "answers": answers}


def query(name: str, qtype: str = "A", server: str = DNS_SERVICE_IP, port: int = 53,
          timeout: float = 2.0, netns: Optional[str] = None) -> dict:
    """Ask ``server`` for ``name`` over UDP (TCP when the answer is truncated); ``netns``:
    send from that network namespace (default: this process's). ``timeout`` in seconds.
    Returns :func:`parse_response`'s dict. Raises TimeoutError, OSError (e.g. no route),
    ValueError (bad name or malformed answer)."""
    qid = random.randrange(1 << 16)
    msg = build_query(name, qtype, qid)
    fam = socket.AF_INET6 if ":" in server else socket.AF_INET

    def mk(kind: int) -> socket.socket:
        return socket.socket(fam, kind)

    def sock(kind: int) -> socket.socket:
        return run_in(netns, lambda: mk(kind)) if netns else mk(kind)

    deadline = time.monotonic() + timeout
    with sock(socket.SOCK_DGRAM) as s:
        s.connect((server, port))
        s.send(msg)
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            data = s.recv(65535)  # socket.timeout is TimeoutError
            if len(data) >= 2 and struct.unpack_from("!H", data)[0] == qid:
                break
    out = parse_response(data)
    if not out["truncated"]:
        return out
    with sock(socket.SOCK_STREAM) as s:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        s.connect((server, port))
        s.sendall(struct.pack("!H", len(msg)) + msg)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + struct.unpack_from("!H", buf)[0]:
            chunk = s.recv(65535)
            if not chunk:
                raise ValueError("DNS over TCP: connection closed early")
            buf += chunk
    return parse_response(buf[2:2 + struct.unpack_from("!H", buf)[0]])


