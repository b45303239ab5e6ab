"""Phase 3, connectivity: the listening side of the mesh.

:class:`Listeners` listens on every IPv4 address of every up interface (at most
:data:`MAX_ADDRS_PER_IFACE` each, never on ``kube-ipvs0``) on a port the kernel picks,
plus, per address, on the ports spread over the ephemeral range that the range check
samples (:func:`disttrain_probe.phases.connectivity.range_ports`). Every connection gets
the identity line ``{"rank", "nonce"}``; a dialler that then asks ``BULK <bytes>`` gets
that many zero bytes (capped at :data:`BULK_MAX_BYTES`), a timed transfer.
"""
from __future__ import annotations

import json
import selectors
import socket
import threading
from typing import Any, Dict, List, Sequence

from disttrain_probe.ground.shapes import Iface
from disttrain_probe.phases.inventory import ipv4_addrs

MAX_ADDRS_PER_IFACE = 4
SKIP_IFACES = ("kube-ipvs0",)
BULK_MAX_BYTES = 64 * 1024 * 1024  # the most a listener sends on request
_RANGE_TRIES = 8                 # ports tried next to a sample that is in use
_ZEROS = bytes(256 * 1024)


class Listeners:
    """Listening sockets on each local IPv4 address; answer ``{"rank","nonce"}\\n``."""

    def __init__(self, rank: int, nonce: str, interfaces: List[Iface],
                 samples: Sequence[int] = ()):
        self.rank, self.nonce = rank, nonce
        self.entries: List[List[Any]] = []   # [iface, addr, prefix, port]
        self.samples: List[List[Any]] = []   # [addr, port]: listeners at ``samples`` (range_ports)
        self.errors: List[Dict[str, str]] = []
        self._socks: List[socket.socket] = []
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        reply = (json.dumps({"rank": rank, "nonce": nonce}) + "\n").encode()
        self._reply = reply
        for iface in interfaces:
            if iface.get("name") in SKIP_IFACES or not iface.get("up"):
                continue
            for addr, prefix in ipv4_addrs(iface)[:MAX_ADDRS_PER_IFACE]:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    s.bind((addr, 0))
                    s.listen(128)
                    s.setblocking(False)
                except OSError as e:
                    s.close()
                    self.errors.append({"iface": iface["name"], "addr": addr, "error": str(e)})
                    continue
                self._socks.append(s)
                self._sel.register(s, selectors.EVENT_READ)
                self.entries.append([iface["name"], addr, prefix, s.getsockname()[1]])
                for want in samples:
                    self._sample(addr, want, samples)
        self._thread = threading.Thread(target=self._serve, name="probe-listeners", daemon=True)
        self._thread.start()

    def _sample(self, addr: str, want: int, samples: Sequence[int]) -> None:
        """Listen on ``addr`` at port ``want``, or the nearest free one inward (a port in
        use is skipped; nothing is recorded when none of :data:`_RANGE_TRIES` is free)."""
        step = -1 if want == max(samples) else 1
        for port in range(want, want + step * _RANGE_TRIES, step):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((addr, port))
                s.listen(16)
                s.setblocking(False)
            except OSError:
                s.close()
                continue
            self._socks.append(s)
            self._sel.register(s, selectors.EVENT_READ)
            self.samples.append([addr, port])
            return

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(timeout=0.05):
                try:
                    c, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                threading.Thread(target=self._answer, args=(c,), name="probe-answer",
                                 daemon=True).start()

    def _answer(self, c: socket.socket) -> None:
        """Identity line; then, if the dialler asks ``BULK <n>``, n zero bytes (a timed
        transfer); a plain dial just closes its end."""
        try:
            c.settimeout(1.0)
            c.sendall(self._reply)
            c.settimeout(2.0)
            req = b""
            while b"\n" not in req and len(req) < 64:
                chunk = c.recv(64)
                if not chunk:
                    return
                req += chunk
            word, _, num = req.partition(b"\n")[0].partition(b" ")
            if word != b"BULK":
                return
            left = max(0, min(int(num), BULK_MAX_BYTES))
            c.settimeout(5.0)
            view = memoryview(_ZEROS)
            while left > 0:
                left -= c.send(view[:min(len(view), left)])
        except (OSError, ValueError):
            pass
        finally:
            c.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        for s in self._socks:
            try:
                self._sel.unregister(s)
            except Exception:
                pass
            s.close()


__all__ = ["BULK_MAX_BYTES", "Listeners", "MAX_ADDRS_PER_IFACE", "SKIP_IFACES"]
