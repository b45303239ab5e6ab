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

from . import reasons as R
from .deadline import Deadline, ProbeFailure


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


def run(cfg: Any, store: Any, chosen_ifname: Optional[str], backend: str, deadline: Deadline,
        tracker: Any, result: Dict[str, Any]) -> Dict[str, Any]:
    """Init, warm up, time ``cfg.iterations`` all-reduces, destroy. Fills ``result`` as it goes."""
    import torch
    import torch.distributed as dist

    node = cfg.node_name
    n = cfg.world_size
    if chosen_ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = chosen_ifname
        # "=" makes NCCL match the name exactly (a bare "eth1" is a prefix and matches eth10).
        os.environ["NCCL_SOCKET_IFNAME"] = "=" + chosen_ifname
    device = torch.device("cpu")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ProbeFailure(R.PROCESS_GROUP_INIT_FAILED,
                               f"{node}: backend nccl requested but CUDA is not available "
                               f"(torch {torch.__version__}); use a GPU node or probe.backend=gloo")
        dev = cfg.local_rank % max(1, torch.cuda.device_count())
        torch.cuda.set_device(dev)
        device = torch.device("cuda", dev)
    timeout = timedelta(seconds=max(1.0, deadline.remaining()))
    tracker.step(R.PROCESS_GROUP_INIT_FAILED,
                 f"{node}: init_process_group({backend}) on {chosen_ifname} did not complete")
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("dtp/pg", store), rank=cfg.rank,
                                world_size=n, timeout=timeout)
    except Exception as e:
        text = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        hint = ""
        if "timeout" in text.lower():
            hint = (f"; a peer never joined, or peers cannot reach this node on {chosen_ifname} "
                    f"(see the other ranks' reports)")
        raise ProbeFailure(R.PROCESS_GROUP_INIT_FAILED, (
            f"{node}: init_process_group({backend}) on {chosen_ifname} failed: {text}{hint}"))
    numel = max(1, cfg.message_size_bytes // 4)
    nbytes = numel * 4
    expected = n * (n + 1) / 2.0
    result.update({"bytes": nbytes, "iterations": cfg.iterations, "seconds": None,
                   "algbwGBps": None, "busbwGBps": None, "correct": None})
    t = torch.empty(numel, dtype=torch.float32, device=device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def once(check: bool) -> float:
        t.fill_(float(cfg.rank + 1))
        sync()
        t0 = time.perf_counter()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        sync()
        dt = time.perf_counter() - t0
        if check:
            lo, hi = float(t.min().item()), float(t.max().item())
            if lo != expected or hi != expected:
                result["correct"] = False
                raise ProbeFailure(R.ALL_REDUCE_WRONG_RESULT, (
                    f"{node}: all-reduce(sum) of {nbytes} bytes over {n} ranks on {chosen_ifname} "
                    f"returned values in [{lo:g}, {hi:g}], expected {expected:g} everywhere; "
                    f"suspect a faulty NIC/driver or mismatched builds"))
        return dt

    # NCCL creates its communicator lazily, inside the first collective: a hang or error
    # there is an init failure, not a slow all-reduce.
    first = R.PROCESS_GROUP_INIT_FAILED if backend == "nccl" else R.ALL_REDUCE_TIMEOUT
    tracker.step(first, f"{node}: first all-reduce ({backend} connection setup) over {n} ranks "
                        f"on {chosen_ifname} hung")
    try:
        once(check=True)  # warm-up (connections, buffers), checked too
    except ProbeFailure:
        raise
    except Exception as e:
        raise ProbeFailure(first, (
            f"{node}: first all-reduce ({backend} connection setup) over {n} ranks on "
            f"{chosen_ifname} failed: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"))
    tracker.step(R.ALL_REDUCE_TIMEOUT,
                 f"{node}: all-reduce of {nbytes} bytes over {n} ranks on {chosen_ifname} hung")
    try:
        total = 0.0
        for _ in range(cfg.iterations):
            total += once(check=True)
    except ProbeFailure:
        raise
    except Exception as e:
        raise ProbeFailure(R.ALL_REDUCE_TIMEOUT, (
            f"{node}: all-reduce over {n} ranks on {chosen_ifname} failed: "
            f"{str(e).splitlines()[0][:200] if str(e) else type(e).__name__}; a peer died or the "
            f"interface drops traffic"))
    per = total / cfg.iterations
    bw = bandwidth(nbytes, per, n)
    result.update({"seconds": round(total, 6), "correct": True,
                   "algbwGBps": round(bw["algbwGBps"], 4), "busbwGBps": round(bw["busbwGBps"], 4)})
    tracker.step(None, f"{node}: destroy_process_group hung")
    try:
        dist.destroy_process_group()
    except Exception:
        pass
    # One rank has no bus traffic (busbw factor 0): the threshold applies from two ranks.
    if cfg.min_busbw_gbps and n > 1 and bw["busbwGBps"] < cfg.min_busbw_gbps:
        raise ProbeFailure(R.BANDWIDTH_BELOW_THRESHOLD, (
            f"{node}: all-reduce bus bandwidth {bw['busbwGBps']:.3f} GB/s over {n} ranks on "
            f"{chosen_ifname} ({nbytes} bytes) is below probe.minBusBandwidthGBps="
            f"{cfg.min_busbw_gbps:g}; check that the fast NIC is the one chosen and its link speed"))
    return result
