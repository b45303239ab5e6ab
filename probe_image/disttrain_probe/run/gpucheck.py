"""``make gpu-check`` / ``python -m disttrain_probe.run.gpucheck``: the probe's NCCL path on every local GPU.

One worker process per visible GPU (rank = local rank = GPU index, MASTER_ADDR
127.0.0.1, a free port; rank 0 hosts the TCPStore as the probe's rank 0 does), each with
``NCCL_DEBUG=INFO`` writing NCCL's own lines to a file. For each message size a worker
runs the probe's collective phase (``collective.run``: init_process_group(nccl),
checked warm-up, timed all-reduces checked against n(n+1)/2, destroy), so init, result
correctness and algbw/busbw (nccl-tests definitions, GB = 1e9 bytes) come from the same
code that validates jobs. The parent then reads NCCL's lines (``nccllog.parse``), the
node's inventory (``hardware.collect``) and prints ONE JSON object on stdout
(:func:`summarize`); exit status 0 when every size was correct on every rank.

Without a GPU it prints ``{"ok": true, "skipped": true, "gpus": 0, "reason": ...}`` and
exits 0. A whole run is bounded by ``--timeout`` (default 240 s); workers still running
then are killed and the summary says so. ``--backend gloo --ranks N`` runs the same
processes on CPU (no NCCL lines then): the check's own self-test on machines without GPUs.

torch is imported lazily: without a usable torch the check still prints its answer.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Dict, List, Mapping, Optional, Sequence

from disttrain_probe.contract import vocabulary
from disttrain_probe.gpu import hardware, nccldiag, nccllog
from disttrain_probe.ground.config import Config
from disttrain_probe.ground.deadline import ProbeFailure, Tracker
from disttrain_probe.ground.shapes import AllReduce
from disttrain_probe.phases import collective, inventory

DEFAULT_SIZES = (1 << 20, 16 << 20, 256 << 20)  # bytes
DEFAULT_ITERATIONS = 20
DEFAULT_TIMEOUT = 240.0  # seconds for the whole check (the target is < 5 minutes)
NCCL_SUBSYS = "INIT,BOOTSTRAP,ENV,NET"  # INIT: channels, Init COMPLETE; NET: GDR per HCA


def parse_sizes(text: str) -> List[int]:
    """``"1M,16M,256M"`` (K/M/G = KiB/MiB/GiB, or plain bytes) -> byte counts, each a
    multiple of 4 (float32 elements). Raises ValueError naming a bad item. Pure."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(item[-1].upper(), 1)
        digits = item[:-1] if mult > 1 else item
        if not digits.isdigit() or int(digits) <= 0:
            raise ValueError(f"{item!r} is not a size (like 1M, 64M, 1G or bytes)")
        n = int(digits) * mult
        out.append(max(4, n - n % 4))
    if not out:
        raise ValueError("no sizes given")
    return out


def _worker(sizes: Sequence[int], iterations: int, timeout: float, backend: str) -> int:
    """One rank: env RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Prints one
    JSON line ``{"rank", "results": [...], "versions", "error"}``; exit 0 when every size
    was correct."""
    import torch.distributed as dist  # in the worker process only: the parent stays light

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out: Dict[str, Any] = {"rank": rank, "results": [], "versions": None, "error": None,
                           "diagLines": []}

    def overrun(phase: str, reason: Optional[str], message: str) -> None:
        out["error"] = {"reason": reason, "message": message}
        print(json.dumps(out), flush=True)
        os._exit(1)

    tracker = Tracker(timeout, on_overrun=overrun)
    node = socket.gethostname()
    diag = None
    try:
        out["versions"] = inventory.versions()
        # NCCL >= 2.31: its own diagnostics, as the probe runs them (every rank sets the
        # variables; each prints its NCCL DIAG lines to its own standard output)
        diag = hardware.start_diag_capture(backend, out["versions"].get("nccl"))
        port = int(os.environ["MASTER_PORT"])
        store = dist.TCPStore("127.0.0.1", port, world, rank == 0,
                              timeout=timedelta(seconds=max(5.0, timeout / 2)))
        d = tracker.begin("collective", vocabulary.PROCESS_GROUP_INIT_FAILED, f"{node}: collective hung")
        for i, size in enumerate(sizes):
            cfg = Config(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                         node_name=node, backend=backend, message_size_bytes=size,
                         iterations=iterations, local_rank=int(os.environ.get("LOCAL_RANK", rank)))
            res: AllReduce = {}
            # A fresh key space per size: each run makes (and destroys) its own process group.
            collective.run(cfg, dist.PrefixStore(f"gpucheck/{i}", store),
                           collective.CollectivePath(None, backend), d, tracker,
                           collective.CollectiveResults(res))
            out["results"].append(res)
        store.add("gpucheck/done", 1)
        if rank == 0:  # rank 0 hosts the store: keep it until every rank is done with it
            while store.add("gpucheck/done", 0) < world and not d.expired():
                time.sleep(0.05)
        out["diagLines"] = hardware.stop_diag_capture(diag, min(2.0, d.remaining()), sys.stderr)
    except ProbeFailure as f:
        out["error"] = {"reason": f.reason, "message": f.message}
    except Exception as e:  # report it: the summary must still come out
        out["error"] = {"reason": vocabulary.PROBE_INTERNAL_ERROR, "message": f"{type(e).__name__}: {e}"[:300]}
    tracker.finish()
    hardware.stop_diag_capture(diag, 0.0, sys.stderr)  # stdout back (a no-op when done above)
    print(json.dumps(out), flush=True)
    return 0 if out["error"] is None else 1


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _last_json(text: str) -> Optional[Dict[str, Any]]:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class CheckRun:
    """What one check run was: this node's name, the number of GPUs (ranks) used, its wall
    time in seconds and the backend."""
    node: str
    gpus: int
    seconds: float
    backend: str = "nccl"


def summarize(workers: List[Dict[str, Any]], nccl_lines: Sequence[str], hw: hardware.Hardware,
              run: CheckRun) -> Dict[str, Any]:
    """The check's one JSON summary from each worker's output (``{"rank", "results",
    "versions", "error"}``; a rank that printed nothing is ``{"rank": r, "error": ...}``),
    NCCL's lines, the inventory ``hw`` (``hardware.collect``) and the ``run``::

        {"ok", "node", "gpus", "backend", "seconds",
         "versions": {"torch", "cuda", "nccl" (loaded), "ncclLog" (NCCL's own line),
                      "driver" (NVML), "cudaDriverVersion"},
         "allreduce": [{"bytes", "iterations", "correct" (every rank), "algbwGBps",
                        "busbwGBps" (the slowest rank's)}],
         "nccl": {"network", "bootstrap", "initComplete", "peers", "ranks", "ib", "socket",
                  "netPlugin", "gdr", "warnLines"},
         "inventory": {"gpus", "rdma", "peermem", "shm", "ibverbs", "netPlugin"},
         "ncclDiagnostics": {"ran", "lines", "sample", "parsed"} (NCCL >= 2.31),
         "warnings": [{"reason", "message"}], "failures": [{"rank", "reason", "message"}]}

    ``ok`` means every rank reported, every size was correct on every rank, (nccl) NCCL
    completed init on every rank and its own diagnostics found no failure. Pure."""
    node, gpus, seconds, backend = run.node, run.gpus, run.seconds, run.backend
    parsed = nccllog.parse(nccl_lines)
    failures = [dict({"rank": w.get("rank")}, **w["error"]) for w in workers if w.get("error")]
    by_size: Dict[int, List[Dict[str, Any]]] = {}
    for w in workers:
        for r in w.get("results") or []:
            if r.get("bytes"):
                by_size.setdefault(int(r["bytes"]), []).append(r)
    allreduce = []
    for size in sorted(by_size):
        rows = by_size[size]
        done = [r for r in rows if r.get("busbwGBps") is not None]
        allreduce.append({
            "bytes": size, "iterations": rows[0].get("iterations"), "ranks": len(rows),
            "correct": len(rows) == gpus and all(r.get("correct") is True for r in rows),
            "algbwGBps": min((r["algbwGBps"] for r in done), default=None),
            "busbwGBps": min((r["busbwGBps"] for r in done), default=None)})
    v0 = next((w.get("versions") for w in workers if w.get("versions")), None) or {}
    inv_gpus: Mapping[str, Any] = hw.get("gpus") or {}
    nccl_ok = backend != "nccl" or parsed["initComplete"] >= gpus
    diag = _diagnostics(workers, node, backend, v0.get("nccl"))
    failures += [dict({"rank": None}, **f) for f in diag.pop("failures")]
    ok = (not failures and len(workers) == gpus and bool(allreduce)
          and all(a["correct"] for a in allreduce) and nccl_ok)
    if not failures and not nccl_ok:
        failures.append({"rank": None, "reason": vocabulary.PROCESS_GROUP_INIT_FAILED, "message": (
            f"{node}: NCCL logged Init COMPLETE {parsed['initComplete']} time(s) for {gpus} "
            f"rank(s); see warnLines")})
    return {
        "ok": ok, "node": node, "gpus": gpus, "backend": backend, "seconds": round(seconds, 1),
        "versions": {"torch": v0.get("torch"), "cuda": v0.get("cuda"), "nccl": v0.get("nccl"),
                     "ncclLog": parsed["version"], "driver": inv_gpus.get("driver") or v0.get("driver"),
                     "cudaDriverVersion": parsed["cudaDriverVersion"]
                     or inv_gpus.get("cudaDriverVersion")},
        "allreduce": allreduce,
        "nccl": {k: parsed[k] for k in ("network", "bootstrap", "initComplete", "peers", "ranks",
                                        "ib", "socket", "netPlugin", "gdr", "warnLines")},
        "inventory": hw,
        "ncclDiagnostics": diag,
        "warnings": hardware.findings(hw, node, parsed) + diag.pop("warnings"),
        "failures": failures,
    }


def _diagnostics(workers: List[Dict[str, Any]], node: str, backend: str,
                 nccl_version: Optional[str]) -> Dict[str, Any]:
    """NCCL's own diagnostics as the check saw them: ``{"ran" (NCCL >= 2.31 with nccl),
    "lines" (NCCL DIAG lines, every rank), "sample" (the first 60 of them, as printed),
    "parsed" (``nccldiag.parse``), "failures", "warnings"}`` (``nccldiag.findings``; the
    caller moves the last two into the summary's lists). Pure."""
    lines = [ln for w in workers for ln in (w.get("diagLines") or []) if isinstance(ln, str)]
    diag_only = [ln for ln in lines if "NCCL DIAG" in ln]
    parsed = nccldiag.parse(lines)
    fails, warns = nccldiag.findings(parsed, node)
    return {"ran": nccldiag.wanted(backend, nccl_version), "lines": len(diag_only),
            "sample": [ln[:300] for ln in diag_only[:60]], "parsed": parsed,
            "failures": fails, "warnings": warns}


def run(sizes: Sequence[int], iterations: int, timeout: float, backend: str = "nccl",
        ranks: Optional[int] = None) -> Dict[str, Any]:
    """Run the check on every visible GPU (``ranks`` processes with ``backend`` gloo: on
    CPU) and return :func:`summarize`'s dict (or the no-GPU answer). ``timeout`` in
    seconds. Never raises for a failing GPU: that is in the summary."""
    t0 = time.monotonic()
    node = socket.gethostname()
    try:
        import torch  # here, so that a broken torch is an answer, not a crash
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as e:  # a broken torch is an answer too
        return {"ok": False, "skipped": True, "gpus": 0, "node": node,
                "reason": f"torch unusable: {type(e).__name__}: {e}"[:300]}
    hw = hardware.collect(requested_gpus=gpus or None)
    if backend == "gloo":
        gpus = max(1, ranks or 2)
    elif gpus == 0:
        return {"ok": True, "skipped": True, "gpus": 0, "node": node,
                "reason": ("no GPU: torch.cuda.device_count() is 0"
                           + (f" ({hw['gpus']['error']})" if hw["gpus"].get("error") else "")),
                "inventory": hw}
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="gpucheck-") as tmp:
        procs = []
        for r in range(gpus):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(gpus), LOCAL_RANK=str(r),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_DEBUG="INFO",
                       NCCL_DEBUG_SUBSYS=NCCL_SUBSYS,
                       NCCL_DEBUG_FILE=os.path.join(tmp, "nccl.%h.%p.log"))
            cmd = [sys.executable, "-m", "disttrain_probe.run.gpucheck", "--worker", "--backend", backend,
                   "--sizes", ",".join(str(s) for s in sizes), "--iterations", str(iterations),
                   "--timeout", str(max(10.0, timeout - 10))]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        workers = []
        for r, p in enumerate(procs):
            try:
                so, se = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                p.kill()
                so, se = p.communicate()
            w = _last_json(so)
            if w is None:
                tail = " | ".join(se.strip().splitlines()[-3:])[:300]
                w = {"rank": r, "results": [], "versions": None, "error": {
                    "reason": vocabulary.PROBE_INTERNAL_ERROR,
                    "message": f"rank {r} exited {p.returncode} without a result: {tail}"}}
            workers.append(w)
        lines: List[str] = []
        for f in sorted(glob.glob(os.path.join(tmp, "nccl.*.log"))):
            with open(f, errors="replace") as fh:
                lines += fh.read().splitlines()
    return summarize(workers, lines, hw, CheckRun(node, gpus, time.monotonic() - t0, backend))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI: prints the summary JSON; exit 0 when ok (or skipped without GPUs), else 1."""
    ap = argparse.ArgumentParser(prog="python -m disttrain_probe.run.gpucheck", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                    help="all-reduce sizes, e.g. 1M,16M,256M (default %(default)s bytes)")
    ap.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS)
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds, whole check")
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                    help="gloo: run the same processes on CPU (a self-test without GPUs)")
    ap.add_argument("--ranks", type=int, default=None, help="processes with --backend gloo (2)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        sizes = parse_sizes(a.sizes)
    except ValueError as e:
        ap.error(str(e))
    if a.worker:
        return _worker(sizes, max(1, a.iterations), a.timeout, a.backend)
    summary = run(sizes, max(1, a.iterations), a.timeout, a.backend, a.ranks)
    print(json.dumps(summary, indent=1))
    return 0 if summary.get("ok") else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
