"""A real node's cgroups: ``/<node>`` in every hierarchy (the v1 ones and the unified one),
which ``run`` joins so that containerd, the kubelet and every shim and container inherit
it; ``kill_node`` ends them all, which is what a lost node looks like."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_controllers() -> list[Path]:
    """The v1 hierarchies (one directory per mount, e.g. cpu,cpuacct once) and the unified one."""
    out, seen = [], set()
    for p in sorted(CGROUP_ROOT.iterdir()):
        real = p.resolve()
        if real in seen or not real.is_dir() or not (real / "cgroup.procs").exists():
            continue
        seen.add(real)
        out.append(real)
    return out


def ensure_cgroups(name: str) -> None:
    """Create ``/<name>`` and ``/<name>/system`` in every hierarchy (cpuset's cpus and mems
    copied from the parent, which a new cpuset lacks). Raises OSError."""
    for ctl in _cgroup_controllers():
        for sub in (ctl / name, ctl / name / "system"):
            sub.mkdir(exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (sub / f).exists() and not (sub / f).read_text().strip():
                    (sub / f).write_text((sub.parent / f).read_text())


def join_cgroups(name: str, pid: int) -> None:
    """Move ``pid`` into ``/<name>/system`` of every hierarchy. Raises OSError."""
    for ctl in _cgroup_controllers():
        (ctl / name / "system" / "cgroup.procs").write_text(str(pid))


def cgroup_pids(name: str) -> list[int]:
    """Every process in ``/<name>`` and below (the pids hierarchy, else the first one)."""
    ctls = [c for c in _cgroup_controllers() if c.name == "pids"] or _cgroup_controllers()[:1]
    out: set[int] = set()
    for ctl in ctls:
        top = ctl / name
        if not top.is_dir():
            continue
        for procs_file in top.rglob("cgroup.procs"):
            try:
                out.update(int(x) for x in procs_file.read_text().split())
            except (OSError, ValueError):
                continue
    return sorted(out)


def kill_node(name: str, timeout: float = 10.0) -> int:
    """SIGKILL every process in the node's cgroups until none is left, then remove the
    cgroups. Returns how many processes were signalled."""
    n, deadline = 0, time.monotonic() + timeout
    me = os.getpid()
    while time.monotonic() < deadline:
        pids = [p for p in cgroup_pids(name) if p != me]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for ctl in _cgroup_controllers():
        top = ctl / name
        if not top.is_dir():
            continue
        for d in sorted([top, *(p for p in top.rglob("*") if p.is_dir())], key=lambda p: -len(p.parts)):
            try:
                d.rmdir()
            except OSError:
                pass
    return n
