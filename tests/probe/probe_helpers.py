"""Helpers to run the real probe as subprocesses (loopback or inside network namespaces)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@dataclass
class RankRun:
    rank: int
    rc: Optional[int]
    seconds: float
    stdout: str
    stderr: str
    report_text: str

    @property
    def report(self) -> dict:
        return json.loads(self.report_text)

    @property
    def full(self) -> dict:
        """The full report: the last stdout line."""
        return json.loads(self.stdout.strip().splitlines()[-1])


@dataclass
class Started:
    """One probe process started by :func:`start_ranks`: its index, process, start time
    (monotonic seconds) and report path."""
    index: int
    proc: subprocess.Popen
    t0: float
    path: Path


def start_ranks(envs: Sequence[Dict[str, str]], tmp: Path,
                prefix: Optional[Sequence[Sequence[str]]] = None) -> List[Started]:
    """Start one probe per env (with optional argv prefixes, e.g. ``ip netns exec``)."""
    procs = []
    for i, extra in enumerate(envs):
        path = tmp / f"report-{i}.json"
        env = dict(os.environ)
        env.pop("NCCL_SOCKET_IFNAME", None)
        env.pop("GLOO_SOCKET_IFNAME", None)
        env.update({"DISTTRAIN_PROBE_REPORT_PATH": str(path), "PYTHONUNBUFFERED": "1"})
        env.update(extra)
        cmd = list(prefix[i]) if prefix else []
        cmd += [PY, "-m", "disttrain_probe"]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        procs.append(Started(i, p, t0, path))
    return procs


def wait_ranks(envs: Sequence[Dict[str, str]], procs: Sequence[Started], timeout: float = 90.0) -> List[RankRun]:
    """Wait for every process of :func:`start_ranks` (killed past ``timeout`` seconds from
    its start); their runs, in order."""
    out = []
    for st in procs:
        p = st.proc
        try:
            so, se = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - st.t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        dt = time.monotonic() - st.t0
        text = st.path.read_text() if st.path.exists() else ""
        out.append(RankRun(int(envs[st.index].get("RANK", st.index)), p.returncode, dt, so, se, text))
    return out


def run_ranks(envs: Sequence[Dict[str, str]], tmp: Path, timeout: float = 90.0,
              prefix: Optional[Sequence[Sequence[str]]] = None) -> List[RankRun]:
    """Start one probe per env (with optional argv prefixes, e.g. ``ip netns exec``), wait all."""
    return wait_ranks(envs, start_ranks(envs, tmp, prefix), timeout)


def probe_env(rank: int, world: int, port: int, **kw: str) -> Dict[str, str]:
    env = {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "DISTTRAIN_PROBE_TIMEOUT_SECONDS": "40",
           "DISTTRAIN_PROBE_ITERATIONS": "5"}
    env.update({k: str(v) for k, v in kw.items()})
    return env
