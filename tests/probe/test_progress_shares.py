"""The wait-share exchange (:mod:`disttrain_probe.progress.shares`) against torch's real
TCPStore on loopback: ranks add their shares window by window, only the rank the others wait
for learns it is the straggler, rank 0 removes old windows, and a store that is gone costs
the caller an exception it swallows, never a hang."""
from __future__ import annotations

import datetime
import time

import pytest
from probe_helpers import free_port

from disttrain_probe.contract import stragglers
from disttrain_probe.progress import shares

torch_dist = pytest.importorskip("torch.distributed")
W = stragglers.SHARE_WINDOW_S


@pytest.fixture(scope="module")
def server():
    """One store and 8 clients for the module, each test in windows of its own: torch 2.8
    connects at most 24 TCPStore clients from one process (the 25th times out, measured
    here; separate processes, as ranks are, connect any number), and each rank's exchange
    makes one."""
    store = torch_dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                timeout=datetime.timedelta(seconds=5))
    clients = [torch_dist.TCPStore("127.0.0.1", store.port, is_master=False,
                                   timeout=datetime.timedelta(seconds=5)) for _ in range(8)]
    return store, clients


_base = iter(range(1000, 10**6, 100))


@pytest.fixture
def store(server):
    return server[0], server[1], next(_base)


def _clients(pool: list, n: int) -> list[shares.ShareExchange]:
    return [shares.ShareExchange(lambda c=c: c) for c in pool[:n]]


def _windows(xs: list[shares.ShareExchange], share_of, k0: int, windows: int) -> None:
    for k in range(k0, k0 + windows):
        for r, x in enumerate(xs):
            x.step(k * W + shares.SKEW_S + 1 + 0.1 * r, r, len(xs), share_of(r))


@pytest.mark.parametrize("n,slow", [(2, 1), (3, 0), (5, 3), (8, 7)])
def test_only_the_rank_the_others_wait_for_learns_it(store, n, slow):
    _, pool, k = store
    xs = _clients(pool, n)
    _windows(xs, lambda r: 0.03 if r == slow else 0.85, k, 3)
    now = (k + 2) * W + shares.SKEW_S + 2
    views = [x.current(now) for x in xs]
    assert [r for r, v in enumerate(views) if v is not None] == [slow]
    v = views[slow]
    assert v is not None and v.counted == n and v.below == 1 and v.median == pytest.approx(0.875)


def test_ranks_that_wait_alike_learn_nothing_and_read_no_histogram(store):
    server, pool, k = store
    xs = _clients(pool, 4)
    _windows(xs, lambda r: 0.05, k, 3)
    assert all(x.current((k + 2) * W + 20) is None for x in xs)
    assert server.add(shares.key(k + 1, "n"), 0) == 4 and server.add(shares.key(k + 1, "high"), 0) == 0


def test_rank_0_removes_the_windows_three_back(store):
    server, pool, k = store
    xs = _clients(pool, 2)
    _windows(xs, lambda r: 0.5, k, 4)
    assert server.add(shares.key(k, "n"), 0) == 0  # removed (add(0) recreates it as 0)
    assert server.add(shares.key(k + 3, "n"), 0) == 2


def test_a_view_older_than_two_windows_is_dropped(store):
    _, pool, k = store
    xs = _clients(pool, 2)
    _windows(xs, lambda r: 0.03 if r == 0 else 0.9, k, 2)
    assert xs[0].current((k + 1) * W + 20) is not None
    assert xs[0].current((k + 4) * W + 20) is None


def test_a_store_that_is_gone_raises_within_the_timeout_and_is_retried_later():
    port = free_port()  # nothing listens
    x = shares.ShareExchange(lambda: torch_dist.TCPStore("127.0.0.1", port, is_master=False,
                                                         timeout=datetime.timedelta(seconds=2)))
    start = time.monotonic()
    with pytest.raises(Exception):
        x.step(1000 * W + shares.SKEW_S + 1, 1, 2, 0.5)
    assert time.monotonic() - start < 10
    x.step(1000 * W + shares.SKEW_S + 2, 1, 2, 0.5)  # within RETRY_S: not tried again, no raise
    assert x.store is None and x.connects == 1
    for i in range(1, 5):  # retried every RETRY_S, at most MAX_CONNECTS times in all
        try:
            x.step(1000 * W + shares.SKEW_S + 2 + i * shares.RETRY_S, 1, 2, 0.5)
        except Exception:
            pass
    assert x.connects == shares.MAX_CONNECTS


def test_a_single_rank_or_an_early_wake_does_nothing():
    calls = []
    x = shares.ShareExchange(lambda: calls.append(1))
    x.step(1000 * W + 1, 0, 4, 0.5)  # before SKEW_S into the window
    x.step(1000 * W + 20, 0, 1, 0.5)  # world size 1
    assert calls == []
