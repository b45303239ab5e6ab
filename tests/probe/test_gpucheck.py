"""``make gpu-check``: its summary on recorded worker output, the no-GPU answer, and its
worker processes on CPU (gloo)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from probe_helpers import ROOT
from test_nccldiag import NVL_ADVICE, SUMMARY_FMT, TAG_OK, WRITE_MISMATCH_FMT, edge, ras, raw
from test_nccllog import (
    BOOTSTRAP_FMT,
    NET_IB_NONE,
    NET_SOCKET_DEV_FMT,
    NET_SOCKET_FMT,
    P2P_CUMEM_FMT,
    SHM_FMT,
    SOCKADDR_FMT,
    USING_NETWORK_FMT,
    VERSION_FMT,
    info,
    init_complete,
)

from disttrain_probe.gpu import nccllog
from disttrain_probe.run import gpucheck


def worker(rank: int, busbw=(1.5, 20.1), correct=True, error=None) -> dict:
    """A worker's JSON line as ``gpucheck --worker`` prints it (1 MiB and 16 MiB)."""
    return {"rank": rank, "error": error,
            "versions": {"torch": "2.8.0+cu128", "cuda": "12.8", "nccl": "2.27.3", "driver": None},
            "results": [{"bytes": b, "iterations": 20, "seconds": 0.01, "correct": correct,
                         "algbwGBps": bw, "busbwGBps": bw} for b, bw in zip((1 << 20, 16 << 20), busbw)]}


def nccl_lines(via_shm: bool = False) -> list[str]:
    """What NCCL logs for 2 GPUs of one node (formats: see test_nccllog.py)."""
    ch = (SHM_FMT % (0, 0, 0, 1, 1, "direct", "direct") if via_shm
          else P2P_CUMEM_FMT % (0, 0, 0, 0, 1, 1, "CUMEM", "/read", ""))
    return [info("gpu-1", 0, VERSION_FMT % (2, 27, 3, "", 12, 9)),
            info("gpu-1", 0, BOOTSTRAP_FMT % (" eth0:" + SOCKADDR_FMT % ("10.0.0.5", "0"))),
            info("gpu-1", 0, NET_IB_NONE),
            info("gpu-1", 0, NET_SOCKET_FMT % (NET_SOCKET_DEV_FMT % (0, "eth0", SOCKADDR_FMT % (
                "10.0.0.5", "0")))),
            info("gpu-1", 0, USING_NETWORK_FMT % "Socket"), info("gpu-1", 0, ch),
            init_complete("gpu-1", 0, 2, 0, 0x1B000), init_complete("gpu-1", 1, 2, 1, 0x43000)]


HW = {"gpus": {"present": True, "count": 2, "driver": "550.54.15", "cudaDriverVersion": 12040,
               "countMatches": True, "devices": [], "p2p": {"1b000,43000": True}},
      "rdma": [], "peermem": None, "shm": {"path": "/dev/shm", "totalBytes": 8 << 30},
      "ibverbs": [], "netPlugin": {"requested": None, "found": []}}


def test_summary_of_a_healthy_two_gpu_run():
    s = gpucheck.summarize([worker(0), worker(1, busbw=(1.4, 19.0))], nccl_lines(), HW,
                           gpucheck.CheckRun("gpu-1", 2, 12.34))
    assert s["ok"] is True and s["failures"] == [] and s["warnings"] == []
    assert s["gpus"] == 2 and s["seconds"] == 12.3 and s["backend"] == "nccl"
    assert s["versions"] == {"torch": "2.8.0+cu128", "cuda": "12.8", "nccl": "2.27.3",
                             "ncclLog": "2.27.3", "driver": "550.54.15", "cudaDriverVersion": 12040}
    # the slowest rank's bandwidth per size, correct only when every rank was
    assert s["allreduce"] == [
        {"bytes": 1 << 20, "iterations": 20, "ranks": 2, "correct": True, "algbwGBps": 1.4,
         "busbwGBps": 1.4},
        {"bytes": 16 << 20, "iterations": 20, "ranks": 2, "correct": True, "algbwGBps": 19.0,
         "busbwGBps": 19.0}]
    assert s["nccl"]["network"] == "Socket" and s["nccl"]["initComplete"] == 2
    assert s["nccl"]["peers"]["0->1"]["kinds"] == ["P2P"]
    json.dumps(s)  # one JSON object


def test_summary_names_wrong_results_missing_ranks_and_fallbacks():
    s = gpucheck.summarize([worker(0), worker(1, correct=False)], nccl_lines(), HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ok"] is False and [a["correct"] for a in s["allreduce"]] == [False, False]
    err = {"reason": "ProbeInternalError", "message": "rank 1 exited -9 without a result: killed"}
    s = gpucheck.summarize([worker(0), {"rank": 1, "results": [], "error": err}],
                           nccl_lines()[:-1], HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ok"] is False and s["failures"] == [dict({"rank": 1}, **err)]
    assert s["allreduce"][0]["ranks"] == 1 and s["allreduce"][0]["correct"] is False
    # NCCL went through SHM although NVML says the two GPUs can do P2P
    s = gpucheck.summarize([worker(0), worker(1)], nccl_lines(via_shm=True), HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ok"] is True
    assert [w["reason"] for w in s["warnings"]] == [nccllog.NCCL_SHM_INSTEAD_OF_P2P]
    # init never completed on rank 1: not ok, and said so
    lines = [ln for ln in nccl_lines() if "rank 1 nranks" not in ln]
    s = gpucheck.summarize([worker(0), worker(1)], lines, HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ok"] is False and s["failures"][0]["reason"] == "ProcessGroupInitFailed"


def test_nccl_diagnostics_from_2_31_join_the_summary():
    """Each rank's captured NCCL DIAG lines: wrong P2P data fails the check, a clean report
    is no evidence, and below 2.31 the check says it did not run them."""
    clean = [ras("=== RAS Diagnostics ==="), raw(SUMMARY_FMT % (TAG_OK, "all 2"))]
    w0, w1 = worker(0), worker(1)
    for w in (w0, w1):
        w["versions"]["nccl"] = "2.31.2"
    w0["diagLines"], w1["diagLines"] = clean, ["not a DIAG line"]
    s = gpucheck.summarize([w0, w1], nccl_lines(), HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ok"] is True and s["failures"] == []
    d = s["ncclDiagnostics"]
    assert d["ran"] is True and d["lines"] == 2 and d["sample"] == clean
    assert d["parsed"]["p2p"] == {"passed": 2, "tested": 2, "skipped": 0}
    w1["diagLines"] = [raw(WRITE_MISMATCH_FMT % (edge(1, 0), 7, 0, 0, NVL_ADVICE))]
    s = gpucheck.summarize([w0, w1], nccl_lines(), HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ok"] is False and [f["reason"] for f in s["failures"]] == ["P2PCheckFailed"]
    s = gpucheck.summarize([worker(0), worker(1)], nccl_lines(), HW, gpucheck.CheckRun("gpu-1", 2, 1))
    assert s["ncclDiagnostics"]["ran"] is False and s["ncclDiagnostics"]["lines"] == 0


@pytest.mark.parametrize("text,sizes", [("1M,16M", [1 << 20, 16 << 20]), ("1022", [1020]),
                                        ("1G", [1 << 30]), ("4k", [4096])])
def test_parse_sizes(text, sizes):
    assert gpucheck.parse_sizes(text) == sizes


@pytest.mark.parametrize("bad", ["", "0", "x", "1T", "-1M"])
def test_parse_sizes_refuses(bad):
    with pytest.raises(ValueError):
        gpucheck.parse_sizes(bad)


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no GPU, even on a GPU machine
    return subprocess.run([sys.executable, "-m", "disttrain_probe.run.gpucheck", *args], cwd=str(ROOT),
                          env=env, capture_output=True, text=True, timeout=180)


def test_without_a_gpu_it_says_so_and_exits_0():
    p = _run()
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)
    assert s["ok"] is True and s["skipped"] is True and s["gpus"] == 0
    assert "no GPU" in s["reason"] and "shm" in s["inventory"]


def test_the_worker_processes_on_cpu():
    """The same processes, store and collective phase with gloo (no NCCL lines here)."""
    p = _run("--backend", "gloo", "--ranks", "2", "--sizes", "64K,1M", "--iterations", "2",
             "--timeout", "120")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    s = json.loads(p.stdout)
    assert s["ok"] and s["backend"] == "gloo" and s["gpus"] == 2 and s["failures"] == []
    assert [a["bytes"] for a in s["allreduce"]] == [64 << 10, 1 << 20]
    assert all(a["correct"] and a["ranks"] == 2 and a["busbwGBps"] > 0 for a in s["allreduce"])
    assert s["versions"]["torch"].startswith("2.")
