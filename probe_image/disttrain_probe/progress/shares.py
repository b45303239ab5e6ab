"""The ranks' wait shares, pooled in the job's rendezvous store: how a rank learns that the
others wait for it (a straggler), with no new port, right or peer list.

Every :data:`EXCHANGE_EVERY_S` a daemon thread beside the recorder (:class:`ShareExchange`)
does, for window ``k = floor(now / SHARE_WINDOW_S)`` once ``SKEW_S`` into it:

- once per window, ``add(1)`` to the bucket of the rank's own wait share over the last
  window (``contract.stragglers.bucket``), to the window's count ``n`` and, when the share is
  at least ``STRAGGLER_MIN_SHARE``, to ``high``: three store operations;
- once per window, for the previous window, and only when its own share was low enough to be
  a straggler's and at least half of the other ranks waited (``n`` and ``high``, read with
  ``add(0)``, which never blocks): the 20 buckets, and
  :func:`disttrain_probe.contract.stragglers.straggler_view` decides;
- one rank a window, in turn (``rank == (k - 3) % world_size``), deletes the keys of the
  window three back (22 operations), so no rank's loss leaves the store growing.

So a rank costs the store 3 operations a window, 25 when it may be the straggler, and 22
more once every ``world_size`` windows, whatever the world size. The store is torch's own TCPStore client (from ``sys.modules``, never
imported here) on ``MASTER_ADDR:MASTER_PORT``, the address every rank already reached at
``init_process_group``; a second connection of its own, so that the main thread's use of its
store is never interleaved with ours. Without ``MASTER_ADDR``/``MASTER_PORT`` (an
``init_method`` URL) or a ``TCPStore`` class, nothing is exchanged. Every failure is
swallowed (reported once on stderr by the recorder) and the connection is retried after
:data:`RETRY_S`, at most :data:`MAX_CONNECTS` times.
"""
from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, Set

from disttrain_probe.contract import stragglers

EXCHANGE_EVERY_S = 5.0  # the thread's wake (s)
SKEW_S = 8.0  # a window is written this long after it opens, read one window later (s): clocks may differ this much
STORE_TIMEOUT_S = 10.0  # the store client's connect and operation timeout (s)
RETRY_S = 60.0  # after a failed store operation, connect again this much later (s)
# connections one process makes at most: torch 2.8 connects at most 24 TCPStore clients from
# one process (measured; tests/probe/test_progress_shares.py), and the program may need its own
MAX_CONNECTS = 3
PREFIX = "disttrain/progress/shares"


def key(window: int, what: object) -> str:
    """The store key of bucket (or ``n``, ``high``) ``what`` of ``window``."""
    return f"{PREFIX}/{window}/{what}"


def connect() -> Any:
    """A TCPStore client on ``MASTER_ADDR:MASTER_PORT`` (torch as the process imported it).

    Raises:
        LookupError: no torch.distributed, no TCPStore, or no MASTER_ADDR/MASTER_PORT.
        RuntimeError: the store did not answer within :data:`STORE_TIMEOUT_S`.
    """
    dist = sys.modules.get("torch.distributed")
    store_class = getattr(dist, "TCPStore", None)
    host, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if store_class is None or not host or not port.isdigit():
        raise LookupError("no TCPStore or MASTER_ADDR/MASTER_PORT: wait shares are not pooled")
    return store_class(host, int(port), is_master=False,
                       timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S))


# above it no rank can be a straggler (its bucket's top over a quarter of the highest median)
LOW_BUCKET = int((stragglers.SHARE_BUCKETS - 1) / stragglers.STRAGGLER_FACTOR) - 1
HIGH_BUCKET = stragglers.bucket(stragglers.STRAGGLER_MIN_SHARE)  # from it a share counts in ``high``


class ShareExchange:
    """One rank's part: :meth:`step` at ``now`` (Unix s) with its ``rank``, the world size and
    its share over the last window (None: not measured); :attr:`view` is the latest straggler
    view (None while the histogram singles this rank out of nothing) and :attr:`view_window`
    the window it was read for."""

    def __init__(self, connector: Callable[[], Any] = connect, window_s: float = stragglers.SHARE_WINDOW_S) -> None:
        self.connector = connector
        self.window_s = window_s
        self.store: Any = None
        self.retry_at = 0.0
        self.mine: Dict[int, int] = {}  # window -> the bucket this rank adds
        self.added: Set[str] = set()  # the keys of this window added to
        self.read_for: Optional[int] = None
        self.view: Optional[stragglers.StragglerView] = None
        self.view_window: Optional[int] = None
        self.connects = 0

    def _store(self, now: float) -> Any:
        if self.store is None:
            if now < self.retry_at or self.connects >= MAX_CONNECTS:
                return None
            self.retry_at, self.connects = now + RETRY_S, self.connects + 1
            self.store = self.connector()
        return self.store

    def step(self, now: float, rank: int, world_size: int, share: Optional[float]) -> None:
        """Add this window's share, read the previous window's histogram. Raises what the
        store raises (the caller swallows it; the connection is dropped and retried)."""
        k = int(now // self.window_s)
        if world_size < 2 or now - k * self.window_s < SKEW_S:
            return
        try:
            self._step(now, k, rank, world_size, share)
        except Exception:
            self.store = None
            raise

    def _step(self, now: float, k: int, rank: int, world_size: int, share: Optional[float]) -> None:
        if k not in self.mine and share is not None:
            self.mine = {w: x for w, x in self.mine.items() if w >= k - 2}
            self.mine[k] = stragglers.bucket(share)  # this window's bucket, whatever comes later
            self.added = set()
        b = self.mine.get(k)
        todo = [] if b is None else [x for x in (key(k, b), key(k, "n"), key(k, "high") if b >= HIGH_BUCKET else "")
                                     if x and x not in self.added]
        if todo:
            store = self._store(now)
            if store is None:
                return
            for x in todo:  # each once: a failure leaves the rest for the next wake
                store.add(x, 1)
                self.added.add(x)
        if self.read_for == k - 1:
            return
        self.read_for = k - 1
        if rank == (k - 3) % world_size and self._store(now) is not None:  # one rank a window, in turn
            for what in ("n", "high", *range(stragglers.SHARE_BUCKETS)):
                self.store.delete_key(key(k - 3, what))
        self.view, self.view_window = self._read(now, k - 1), k - 1

    def _read(self, now: float, w: int) -> Optional[stragglers.StragglerView]:
        mine = self.mine.get(w)
        if mine is None or mine > LOW_BUCKET:
            return None
        store = self._store(now)
        if store is None:
            return None
        n, high = store.add(key(w, "n"), 0), store.add(key(w, "high"), 0)
        if n < 2 or 2 * high < n - 1:
            return None
        hist = [int(store.add(key(w, b), 0)) for b in range(stragglers.SHARE_BUCKETS)]
        return stragglers.straggler_view(hist, mine)

    def current(self, now: float) -> Optional[stragglers.StragglerView]:
        """The view, while it is of the last two windows."""
        if self.view is None or self.view_window is None:
            return None
        return self.view if int(now // self.window_s) - self.view_window <= 2 else None


def run(exchange: ShareExchange, sample: Callable[[float], Optional[tuple]], stop: threading.Event,
        warn: Callable[[BaseException], None]) -> None:
    """The thread's loop: every :data:`EXCHANGE_EVERY_S`, ``sample(now)`` gives (rank, world
    size, share) or None (not in a process group yet); never raises."""
    while not stop.wait(EXCHANGE_EVERY_S):
        try:
            now = time.time()
            got = sample(now)
            if got is not None:
                exchange.step(now, *got)
        except Exception as e:  # never into the user's program
            warn(e)
