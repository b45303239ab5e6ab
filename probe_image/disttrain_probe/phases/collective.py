"""Phase 6, collective: init the process group on the chosen interface and time an all-reduce.

algbw = bytes / seconds-per-iteration, busbw = algbw * 2(n-1)/n (the nccl-tests
definition), in GB/s with GB = 1e9 bytes. Each iteration all-reduces (sum) a float32
tensor of ``message_size_bytes`` filled with rank+1, checked against n(n+1)/2.
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any, Dict, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.runtime.deadline import Deadline, ProbeFailure
from disttrain_probe.localranks.roles import Layout


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
    import torch
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


def run(cfg: Any, store: Any, chosen_ifname: Optional[str], backend: str, deadline: Deadline,
        tracker: Any, result: Dict[str, Any], layout: Optional[Layout] = None,
        intra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Init, warm up, time ``cfg.iterations`` all-reduces, destroy. Fills ``result`` (the
    all-reduce over every rank) as it goes.

    ``layout`` (default: one process per node, global rank = ``cfg.rank``): with several
    local ranks per node, the process group has ``layout.world`` ranks, and before the
    world all-reduce the node's local ranks all-reduce among themselves (the intra-node
    path), timed into ``intra`` (same keys as ``result``). Raises :class:`ProbeFailure`
    whose message names the node, and with several local ranks the local rank."""
    import torch
    import torch.distributed as dist

    lay = layout or Layout(cfg.rank, cfg.world_size)
    node = lay.who(cfg.node_name)
    n = lay.world
    if chosen_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = chosen_ifname
        # "=" makes NCCL match the name exactly (a bare "eth1" is a prefix and matches eth10).
        os.environ["NCCL_SOCKET_IFNAME"] = "=" + chosen_ifname
    device = torch.device("cpu")
    if backend == "nccl":
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
        device = torch.device("cuda", dev)
    timeout = timedelta(seconds=max(1.0, deadline.remaining()))
    tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                 f"{node}: init_process_group({backend}) on {chosen_ifname} did not complete")
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("dtp/pg", store),
                                rank=lay.global_rank, world_size=n, timeout=timeout)
    except Exception as e:
        text = _first_line(e)
        hint = ""
        if "timeout" in text.lower():
            hint = (f"; a peer never joined, or peers cannot reach this node on {chosen_ifname} "
                    f"(see the other ranks' reports)")
        raise ProbeFailure(vocabulary.PROCESS_GROUP_INIT_FAILED, (
            f"{node}: init_process_group({backend}) on {chosen_ifname} failed: {text}{hint}"))
    numel = max(1, cfg.message_size_bytes // 4)
    nbytes = numel * 4
    t = torch.empty(numel, dtype=torch.float32, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(group: Any, size: int, fill: float, what: str, into: Dict[str, Any],
              path: str) -> Dict[str, float]:
        """Warm-up (checked), then ``cfg.iterations`` timed all-reduces (sum) over ``group``
        of ``size`` ranks, each checked against size(size+1)/2; fills ``into``."""
        expected = size * (size + 1) / 2.0
        into.update({"bytes": nbytes, "iterations": cfg.iterations, "seconds": None,
                     "algbwGBps": None, "busbwGBps": None, "correct": None})

        def once(check: bool) -> float:
            t.fill_(fill)
            sync()
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
            sync()
            dt = time.perf_counter() - t0
            if check:
                lo, hi = float(t.min().item()), float(t.max().item())
                if lo != expected or hi != expected:
                    into["correct"] = False
                    raise ProbeFailure(vocabulary.ALL_REDUCE_WRONG_RESULT, (
                        f"{node}: all-reduce(sum) of {nbytes} bytes {what} on {path} "
                        f"returned values in [{lo:g}, {hi:g}], expected {expected:g} everywhere; "
                        f"suspect a faulty {'GPU/NVLink' if path == 'the intra-node path' else 'NIC'}"
                        f"/driver or mismatched builds"))
            return dt

        # NCCL creates its communicator lazily, inside the first collective: a hang or error
        # there is an init failure, not a slow all-reduce.
        first = vocabulary.PROCESS_GROUP_INIT_FAILED if backend == "nccl" else vocabulary.ALL_REDUCE_TIMEOUT
        tracker.step(first, f"{node}: first all-reduce ({backend} connection setup) {what} "
                            f"on {path} hung")
        try:
            once(check=True)  # warm-up (connections, buffers), checked too
        except ProbeFailure:
            raise
        except Exception as e:
            raise ProbeFailure(first, (
                f"{node}: first all-reduce ({backend} connection setup) {what} on "
                f"{path} failed: {_first_line(e)}"))
        tracker.step(vocabulary.ALL_REDUCE_TIMEOUT, f"{node}: all-reduce of {nbytes} bytes {what} on "
                                           f"{path} hung")
        try:
            total = 0.0
            for _ in range(cfg.iterations):
                total += once(check=True)
        except ProbeFailure:
            raise
        except Exception as e:
            raise ProbeFailure(vocabulary.ALL_REDUCE_TIMEOUT, (
                f"{node}: all-reduce {what} on {path} failed: {_first_line(e)}; a peer died or "
                f"the {'interface' if path == chosen_ifname else 'path'} drops traffic"))
        bw = bandwidth(nbytes, total / cfg.iterations, size)
        into.update({"seconds": round(total, 6), "correct": True,
                     "algbwGBps": round(bw["algbwGBps"], 4), "busbwGBps": round(bw["busbwGBps"], 4)})
        return bw

    if lay.nproc > 1 and intra is not None:
        tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                     f"{node}: creating the intra-node group of {lay.nproc} local ranks hung")
        try:
            group = _new_group(dist, lay)
        except Exception as e:
            raise ProbeFailure(vocabulary.PROCESS_GROUP_INIT_FAILED, (
                f"{node}: the intra-node process group ({lay.nproc} local ranks, {backend}) "
                f"failed: {_first_line(e)}"))
        timed(group, lay.nproc, float(lay.local_rank + 1),
              f"among {cfg.node_name}'s {lay.nproc} local ranks", intra, "the intra-node path")
    where = f"over {n} ranks" if lay.nproc == 1 else f"over {n} ranks ({lay.nodes} nodes x {lay.nproc})"
    bw = timed(None, n, float(lay.global_rank + 1), where, result, str(chosen_ifname))
    tracker.step(None, f"{node}: destroy_process_group hung")
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    # One rank has no bus traffic (busbw factor 0): the threshold applies from two ranks.
    if cfg.min_busbw_gbps and n > 1 and bw["busbwGBps"] < cfg.min_busbw_gbps:
        raise ProbeFailure(vocabulary.BANDWIDTH_BELOW_THRESHOLD, (
            f"{node}: all-reduce bus bandwidth {bw['busbwGBps']:.3f} GB/s over {n} ranks on "
            f"{chosen_ifname} ({nbytes} bytes) is below probe.minBusBandwidthGBps="
            f"{cfg.min_busbw_gbps:g}; check that the fast NIC is the one chosen and its link speed"))
    return result
