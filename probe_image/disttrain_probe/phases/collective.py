"""Phase 6, collective: init the process group on the chosen interface and time an all-reduce.

algbw = bytes / seconds-per-iteration, busbw = algbw * 2(n-1)/n (the nccl-tests
definition), in GB/s with GB = 1e9 bytes. Each iteration all-reduces (sum) a float32
tensor of ``message_size_bytes`` filled with rank+1, checked against n(n+1)/2.

torch is imported lazily: the probe must report before torch loads (this phase waits for
the background import, ground/torchload.py).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.deadline import Deadline, ProbeFailure
from disttrain_probe.ground.roles import Layout
from disttrain_probe.ground.shapes import AllReduce


def busbw_factor(n: int) -> float:
    """nccl-tests all-reduce bus factor 2(n-1)/n (0 for a single rank)."""
    return 2.0 * (n - 1) / n if n > 0 else 0.0


def bandwidth(nbytes: int, seconds_per_iter: float, n: int) -> Dict[str, float]:
    """{algbwGBps, busbwGBps} for one all-reduce of ``nbytes`` taking ``seconds_per_iter``."""
    if seconds_per_iter <= 0:
        return {"algbwGBps": 0.0, "busbwGBps": 0.0}
    alg = nbytes / seconds_per_iter / 1e9
    return {"algbwGBps": alg, "busbwGBps": alg * busbw_factor(n)}


def resolve_backend(requested: str) -> str:
    if requested in ("nccl", "gloo"):
        return requested
    import torch  # the slow import: only when the backend is left to the probe
    return "nccl" if torch.cuda.is_available() else "gloo"


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def _new_group(dist: Any, layout: Layout) -> Any:
    """The intra-node process group (this node's local ranks). Only its members take part
    (``use_local_synchronization``); a torch without it (< 2.1) needs every rank to create
    every node's group, in the same order."""
    try:
        return dist.new_group(ranks=layout.node_group(), use_local_synchronization=True)
    except TypeError:
        mine = None
        for n in range(layout.nodes):
            g = dist.new_group(ranks=list(range(n * layout.nproc, (n + 1) * layout.nproc)))
            if n == layout.node_rank:
                mine = g
        return mine


@dataclass(frozen=True)
class CollectivePath:
    """Where the collective runs: ``ifname`` (the chosen interface, exported as
    GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME; None: leave both alone), ``backend`` (nccl or
    gloo), ``layout`` (None: one process per node, global rank = ``cfg.rank``)."""
    ifname: Optional[str]
    backend: str
    layout: Optional[Layout] = None


@dataclass(frozen=True)
class CollectiveResults:
    """The dicts :func:`run` fills as it goes (so a failure leaves what was measured):
    ``world`` (the all-reduce over every rank) and ``intra`` (the node's local ranks among
    themselves; None: not measured). Keys: bytes, iterations, seconds, algbwGBps,
    busbwGBps, correct."""
    world: AllReduce
    intra: Optional[AllReduce] = None


def run(cfg: Any, store: Any, path: CollectivePath, deadline: Deadline, tracker: Any,
        results: CollectiveResults) -> AllReduce:
    """Init, warm up, time ``cfg.iterations`` all-reduces, destroy. Fills ``results.world``
    (the all-reduce over every rank) as it goes, and returns it.

    With several local ranks per node (``path.layout``), the process group has
    ``layout.world`` ranks, and before the world all-reduce the node's local ranks
    all-reduce among themselves (the intra-node path), timed into ``results.intra``.
    Raises :class:`ProbeFailure` whose message names the node, and with several local ranks
    the local rank."""
    import torch  # the slow import, loaded by then (the collective runs last)
    import torch.distributed as dist  # with torch

    lay = path.layout or Layout(cfg.rank, cfg.world_size)
    node = lay.who(cfg.node_name)
    n = lay.world
    _bind_interface(path.ifname)
    device = _device(cfg, lay, node, path.backend)
    _init_process_group(store, path, deadline, tracker, lay, node)
    numel = max(1, cfg.message_size_bytes // 4)
    timer = _AllReduceTimer(dist=dist, tensor=torch.empty(numel, dtype=torch.float32, device=device),
                            sync=_synchronizer(torch, device), node=node, path=path,
                            iterations=cfg.iterations, tracker=tracker)
    if lay.nproc > 1 and results.intra is not None:
        group = _intra_group(dist, lay, node, path.backend, tracker)
        timer.timed(group, lay.nproc, float(lay.local_rank + 1),
                    f"among {cfg.node_name}'s {lay.nproc} local ranks", results.intra,
                    "the intra-node path")
    where = f"over {n} ranks" if lay.nproc == 1 else f"over {n} ranks ({lay.nodes} nodes x {lay.nproc})"
    bw = timer.timed(None, n, float(lay.global_rank + 1), where, results.world, str(path.ifname))
    tracker.step(None, f"{node}: destroy_process_group hung")
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    # One rank has no bus traffic (busbw factor 0): the threshold applies from two ranks.
    if cfg.min_busbw_gbps and n > 1 and bw["busbwGBps"] < cfg.min_busbw_gbps:
        raise ProbeFailure(vocabulary.BANDWIDTH_BELOW_THRESHOLD, (
            f"{node}: all-reduce bus bandwidth {bw['busbwGBps']:.3f} GB/s over {n} ranks on "
            f"{path.ifname} ({timer.nbytes} bytes) is below probe.minBusBandwidthGBps="
            f"{cfg.min_busbw_gbps:g}; check that the fast NIC is the one chosen and its link speed"))
    return results.world


def _bind_interface(ifname: Optional[str]) -> None:
    """Export the chosen interface for gloo and NCCL (nothing when None)."""
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
        # "=" makes NCCL match the name exactly (a bare "eth1" is a prefix and matches eth10).
        os.environ["NCCL_SOCKET_IFNAME"] = "=" + ifname


def _device(cfg: Any, lay: Layout, node: str, backend: str) -> Any:
    """The torch device this rank all-reduces on: cpu for gloo; for nccl this process's GPU
    (made current). Raises :class:`ProbeFailure` (PROCESS_GROUP_INIT_FAILED) without CUDA or
    with fewer visible GPUs than processes per node."""
    import torch  # the slow import, loaded by then (the collective runs last)

    if backend != "nccl":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ProbeFailure(vocabulary.PROCESS_GROUP_INIT_FAILED,
                           f"{node}: backend nccl requested but CUDA is not available "
                           f"(torch {torch.__version__}); use a GPU node or probe.backend=gloo")
    count = torch.cuda.device_count()
    if lay.nproc > count:
        raise ProbeFailure(vocabulary.PROCESS_GROUP_INIT_FAILED, (
            f"{node}: {lay.nproc} processes per node but {count} visible GPU(s): NCCL needs "
            f"one GPU per process (two ranks on one GPU fail with 'Duplicate GPU detected'); "
            f"set numProcPerNode to the GPUs the pod requests (auto), or request "
            f"{lay.nproc} GPUs"))
    dev = (lay.local_rank if lay.nproc > 1 else cfg.local_rank) % max(1, count)
    torch.cuda.set_device(dev)
    return torch.device("cuda", dev)


def _init_process_group(store: Any, path: CollectivePath, deadline: Deadline, tracker: Any,
                        lay: Layout, node: str) -> None:
    """init_process_group over ``store`` (key prefix ``dtp/pg``) for ``lay.world`` ranks,
    timing out with the deadline. Raises :class:`ProbeFailure` (PROCESS_GROUP_INIT_FAILED)
    on any error; a timeout says a peer never joined or cannot reach this node."""
    import torch.distributed as dist  # the slow import, loaded by then (the collective runs last)

    backend, ifname = path.backend, path.ifname
    timeout = timedelta(seconds=max(1.0, deadline.remaining()))
    tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                 f"{node}: init_process_group({backend}) on {ifname} did not complete")
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("dtp/pg", store),
                                rank=lay.global_rank, world_size=lay.world, timeout=timeout)
    except Exception as e:
        text = _first_line(e)
        hint = ""
        if "timeout" in text.lower():
            hint = (f"; a peer never joined, or peers cannot reach this node on {ifname} "
                    f"(see the other ranks' reports)")
        raise ProbeFailure(vocabulary.PROCESS_GROUP_INIT_FAILED, (
            f"{node}: init_process_group({backend}) on {ifname} failed: {text}{hint}"))


def _synchronizer(torch: Any, device: Any) -> Callable[[], None]:
    """Waits for the device's queued work (a no-op on cpu)."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return sync


def _intra_group(dist: Any, lay: Layout, node: str, backend: str, tracker: Any) -> Any:
    """The intra-node process group (:func:`_new_group`). Raises :class:`ProbeFailure`
    (PROCESS_GROUP_INIT_FAILED) when it cannot be made."""
    tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                 f"{node}: creating the intra-node group of {lay.nproc} local ranks hung")
    try:
        return _new_group(dist, lay)
    except Exception as e:
        raise ProbeFailure(vocabulary.PROCESS_GROUP_INIT_FAILED, (
            f"{node}: the intra-node process group ({lay.nproc} local ranks, {backend}) "
            f"failed: {_first_line(e)}"))


@dataclass(frozen=True)
class _AllReduceTimer:
    """Times all-reduces (sum) of ``tensor`` (float32) in an initialised process group."""
    dist: Any
    tensor: Any
    sync: Callable[[], None]
    node: str
    path: CollectivePath
    iterations: int
    tracker: Any

    @property
    def nbytes(self) -> int:
        return int(self.tensor.numel()) * 4

    def timed(self, group: Any, size: int, fill: float, what: str, into: AllReduce,
              path: str) -> Dict[str, float]:
        """Warm-up (checked), then ``iterations`` timed all-reduces (sum) over ``group`` of
        ``size`` ranks, each checked against size(size+1)/2; fills ``into``; returns
        {algbwGBps, busbwGBps}. Raises :class:`ProbeFailure`."""
        node, backend, tracker = self.node, self.path.backend, self.tracker
        into.update({"bytes": self.nbytes, "iterations": self.iterations, "seconds": None,
                     "algbwGBps": None, "busbwGBps": None, "correct": None})
        # NCCL creates its communicator lazily, inside the first collective: a hang or error
        # there is an init failure, not a slow all-reduce.
        first = vocabulary.PROCESS_GROUP_INIT_FAILED if backend == "nccl" else vocabulary.ALL_REDUCE_TIMEOUT
        tracker.step(first, f"{node}: first all-reduce ({backend} connection setup) {what} "
                            f"on {path} hung")
        try:
            self._once(group, size, fill, what, into, path)  # warm-up (connections, buffers), checked too
        except ProbeFailure:
            raise
        except Exception as e:
            raise ProbeFailure(first, (
                f"{node}: first all-reduce ({backend} connection setup) {what} on "
                f"{path} failed: {_first_line(e)}"))
        tracker.step(vocabulary.ALL_REDUCE_TIMEOUT, f"{node}: all-reduce of {self.nbytes} bytes {what} on "
                                           f"{path} hung")
        try:
            total = 0.0
            for _ in range(self.iterations):
                total += self._once(group, size, fill, what, into, path)
        except ProbeFailure:
            raise
        except Exception as e:
            raise ProbeFailure(vocabulary.ALL_REDUCE_TIMEOUT, (
                f"{node}: all-reduce {what} on {path} failed: {_first_line(e)}; a peer died or "
                f"the {'interface' if path == self.path.ifname else 'path'} drops traffic"))
        bw = bandwidth(self.nbytes, total / self.iterations, size)
        into.update({"seconds": round(total, 6), "correct": True,
                     "algbwGBps": round(bw["algbwGBps"], 4), "busbwGBps": round(bw["busbwGBps"], 4)})
        return bw

    def _once(self, group: Any, size: int, fill: float, what: str, into: AllReduce,
              path: str) -> float:
        """One all-reduce, checked; seconds it took."""
        t, dist = self.tensor, self.dist
        expected = size * (size + 1) / 2.0
        t.fill_(fill)
        self.sync()
        t0 = time.perf_counter()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        self.sync()
        dt = time.perf_counter() - t0
        lo, hi = float(t.min().item()), float(t.max().item())
        if lo != expected or hi != expected:
            into["correct"] = False
            raise ProbeFailure(vocabulary.ALL_REDUCE_WRONG_RESULT, (
                f"{self.node}: all-reduce(sum) of {self.nbytes} bytes {what} on {path} "
                f"returned values in [{lo:g}, {hi:g}], expected {expected:g} everywhere; "
                f"suspect a faulty {'GPU/NVLink' if path == 'the intra-node path' else 'NIC'}"
                f"/driver or mismatched builds"))
        return dt
