"""Detached processes tracked by pid files under ``<state>/run/``."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

OUR_BINARIES = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "coredns",
                "training-operator.v1", "kueue"}


def _pidfile(state: Path, name: str) -> Path:
    return state / "run" / f"{name}.pid"


def cmdline(pid: int, settle: float = 0.2) -> list[str]:
    """argv of a live process, [] if it is gone. A process in the middle of execve reads
    as an empty command line for a moment (measured: 3% of reads in the first 100 ms of
    ``unshare ... sh -c 'exec ...'``); an empty read of a live process is retried for up
    to ``settle`` seconds, so a process we just started is never taken for gone."""
    deadline = time.monotonic() + settle
    while True:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return []
        if raw or time.monotonic() > deadline or not alive(pid):
            return [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        time.sleep(0.005)


def exit_status(pid: int) -> str | None:
    """How a child of this process that has ended ended (``exit status 2``, ``killed by
    SIGKILL``), reaping it; None if it runs or is not our child."""
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if got == 0:
        return None
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def tracked_pid(state: Path, name: str) -> int | None:
    """PID of the tracked process ``name`` if it is still running (its command line must
    still mention the state dir, so a recycled PID is never taken for ours)."""
    pf = _pidfile(state, name)
    try:
        pid = int(pf.read_text().strip())
    except (OSError, ValueError):
        return None
    if alive(pid) and mentions(cmdline(pid), state):
        return pid
    return None


def mentions(argv: list[str], state: Path) -> bool:
    """True if some argument is the state dir or a path inside it (``.localcluster`` does
    not match ``.localcluster-1``: another instance's state dir)."""
    s = str(state)
    return any(a == s or a.endswith("=" + s) or s + "/" in a for a in argv)


def start_detached(state: Path, name: str, argv: list[str], env: dict | None = None) -> int:
    """Start ``argv`` in its own session (setsid), stdout+stderr appended to
    ``<state>/logs/<name>.log``, and record its PID. Returns the PID.

    Raises OSError if the program cannot be started.
    """
    (state / "run").mkdir(parents=True, exist_ok=True)
    (state / "logs").mkdir(parents=True, exist_ok=True)
    log = open(state / "logs" / f"{name}.log", "ab")
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True, env=env)
    finally:
        log.close()
    _pidfile(state, name).write_text(str(p.pid))
    return p.pid


def stop_pid(pid: int, grace: float = 5.0) -> None:
    """SIGTERM ``pid``, wait up to ``grace`` seconds, then SIGKILL. No error if gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_many(pids: list[int], grace: float = 3.0) -> None:
    """SIGTERM all ``pids`` at once, wait up to ``grace`` seconds for all, SIGKILL the rest."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def stop_tracked(state: Path, name: str, grace: float = 5.0) -> bool:
    """Stop the tracked process ``name`` and remove its pid file. True if one was running."""
    pid = tracked_pid(state, name)
    if pid is not None:
        stop_pid(pid, grace)
    _pidfile(state, name).unlink(missing_ok=True)
    return pid is not None


def stray_pids(state: Path) -> list[int]:
    """PIDs of our control-plane binaries, CoreDNS, its relay, the training operator, Kueue
    and node agents whose command
    line mentions the state dir (e.g. after a lost pid file), excluding this process and
    its parent."""
    me = {os.getpid(), os.getppid()}
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        if pid in me:
            continue
        argv = cmdline(pid, settle=0.0)  # a sweep: no wait on each empty read
        if not argv or not mentions(argv, state):
            continue
        ours = (os.path.basename(argv[0]) in OUR_BINARIES or "localcluster.nodes.nodeagent" in argv
                or "localcluster.network.dns" in argv)
        if ours and alive(pid):
            out.append(pid)
    return out
