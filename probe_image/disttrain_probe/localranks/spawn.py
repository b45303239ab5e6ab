"""Local rank 0 starts and follows the node's other local ranks (I/O; the roles are in ground/roles.py).

Why the probe starts them itself rather than run under ``torchrun`` in the pod: torchrun's
agents meet at MASTER_ADDR:MASTER_PORT before any probe code runs, so a blocked or
loopback master would hang in torchrun instead of being classified, and rank 0 could not
listen on the port before importing torch (the early-listen evidence). Here local rank 0
is the one-process probe unchanged; local ranks 1..P-1 are ``python -m
disttrain_probe.run.worker`` children that import torch meanwhile, wait for local rank 0
to say go (one JSON line on their stdin, sent when the collective phase starts, with the
store's address, the chosen interface and the backend), and report on their stdout
(:data:`~disttrain_probe.ground.roles.MARK` lines, the last one counts). Everything else a
child prints is kept (the last lines) for the pod's log. Standard library only.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

from disttrain_probe.ground import roles as LR
from disttrain_probe.ground.shapes import LocalEntry

TAIL_LINES = 20
LATER = 1.5  # s: the local ranks' collective deadline after local rank 0's


class Child:
    """One local rank's process: its last outcome line (``last``), its output's last lines
    (``tail``) and its exit code (``code``, None while it runs)."""

    def __init__(self, local_rank: int, proc: subprocess.Popen):
        self.local_rank = local_rank
        self.proc = proc
        self.last: Optional[LocalEntry] = None
        self.tail: Deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.eof = threading.Event()
        self.told_stop = False
        self._reader = threading.Thread(target=self._read, name=f"probe-local-{local_rank}",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:  # type: ignore[union-attr]
                line = line.rstrip("\n")
                if line.startswith(LR.MARK):
                    try:
                        v = json.loads(line[len(LR.MARK):])
                        if isinstance(v, dict):
                            self.last = LocalEntry(**v)
                    except ValueError:
                        self.tail.append(line[:400])
                else:
                    self.tail.append(line[:400])
        except (OSError, ValueError):
            pass
        finally:
            self.eof.set()

    @property
    def code(self) -> Optional[int]:
        return self.proc.poll()

    def send(self, msg: Dict[str, Any]) -> bool:
        """One JSON line to the child's stdin; False when it is gone."""
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            return True
        except (OSError, ValueError):
            return False

    def outcome(self, node: str, nproc: int, wait: float = 0.5,
                final: bool = False) -> LocalEntry:
        """Its outcome as the report gives it (:func:`localranks.exited`; ``final``: one
        still running hung); once it exited, its last line is waited for up to ``wait``
        seconds."""
        if self.code is not None and wait > 0:
            self.eof.wait(wait)  # the last line may still be in the pipe
        out = LR.exited(self.local_rank, LR.Ending(self.code, list(self.tail), final), self.last,
                        node, nproc)
        if self.told_stop and not out.get("ok"):
            out["stopped"] = True
        return out


def package_root() -> Path:
    """The directory that holds the ``disttrain_probe`` package (this file is
    ``<root>/disttrain_probe/localranks/spawn.py``): what a local rank's PYTHONPATH must
    start with to import the same copy of the probe (an installed one has no other)."""
    return Path(__file__).resolve().parents[2]


class LocalRanks:
    """Local ranks 1..P-1 of this node, started by :meth:`start`."""

    def __init__(self, children: List[Child], node: str, nproc: int):
        self.children = children
        self.node = node
        self.nproc = nproc
        self._watch: Optional[threading.Thread] = None
        self._stop_watch = threading.Event()

    @classmethod
    def start(cls, argv: Sequence[str], node: str, nproc: int,
              env: Optional[Dict[str, str]] = None) -> "LocalRanks":
        """Start ``python -m disttrain_probe.run.worker <argv>`` for local ranks 1..nproc-1
        with this environment plus LOCAL_RANK, and the probe package on PYTHONPATH. Raises
        OSError when a process cannot be started (the caller kills those that were)."""
        base = dict(os.environ if env is None else env)
        pkg_root = str(package_root())
        base["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in (base.get("PYTHONPATH") or "")
                                                           .split(os.pathsep) if p])
        base["PYTHONUNBUFFERED"] = "1"
        base[LR.WORKER_VAR] = "1"
        base[LR.PARENT_VAR] = str(os.getpid())
        children: List[Child] = []
        try:
            for lr in range(1, nproc):
                e = dict(base, LOCAL_RANK=str(lr))
                p = subprocess.Popen([sys.executable, "-m", "disttrain_probe.run.worker", *argv],
                                     env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
                children.append(Child(lr, p))
        except OSError:
            for c in children:
                c.proc.kill()
            raise
        return cls(children, node, nproc)

    def go(self, addr: str, ifname: Optional[str], backend: str, seconds: float,
           env: Optional[Dict[str, str]] = None) -> None:
        """Tell every local rank to join the collective: the store's ``addr`` (the master
        port is the config's), the chosen interface, the backend, and ``seconds``, what is
        left of local rank 0's collective phase (theirs ends :data:`LATER` s after it, so
        local rank 0 is the first to give up and reports for the node); ``env``: the NCCL
        diagnostics variables local rank 0 set (``gpu/nccldiag.py``), which every rank of
        the communicator must share."""
        for c in self.children:
            c.send({"go": True, "addr": addr, "ifname": ifname, "backend": backend,
                    "seconds": round(seconds + LATER, 3), "env": dict(env or {})})

    def stop(self, why: str) -> None:
        """Local rank 0 failed before the collective: the others stop (exit
        :data:`localranks.STOPPED`), their outcome marked ``stopped``."""
        for c in self.children:
            if c.code is None:
                c.told_stop = True
                c.send({"stop": why[:300]})

    def watch(self, on_failure: Callable[[LocalEntry], None], poll: float = 0.1) -> None:
        """In a thread: call ``on_failure(outcome)`` once for the first local rank that
        ends with a failure of its own (not after :meth:`stop`)."""
        def loop() -> None:
            while not self._stop_watch.wait(poll):
                for c in self.children:
                    if c.code is not None and c.code != 0 and not c.told_stop:
                        self._stop_watch.set()
                        on_failure(c.outcome(self.node, self.nproc, final=True))
                        return
        self._watch = threading.Thread(target=loop, name="probe-local-watch", daemon=True)
        self._watch.start()

    def unwatch(self) -> None:
        self._stop_watch.set()

    def wait(self, seconds: float) -> None:
        """Wait up to ``seconds`` for every local rank to exit."""
        end = time.monotonic() + max(0.0, seconds)
        for c in self.children:
            try:
                c.proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                return

    def outcomes(self, wait: float = 0.5, final: bool = False) -> List[LocalEntry]:
        """Every local rank's outcome now (``localranks.exited``), in local rank order."""
        return [c.outcome(self.node, self.nproc, wait, final) for c in self.children]

    def kill(self) -> None:
        """Kill the local ranks still running (SIGKILL)."""
        self._stop_watch.set()
        for c in self.children:
            if c.code is None:
                try:
                    c.proc.kill()
                except OSError:
                    pass

    def tails(self) -> List[str]:
        """The last output lines of every local rank that failed, prefixed by its local rank."""
        out = []
        for c in self.children:
            if c.code not in (None, 0, LR.STOPPED):
                out += [f"[local rank {c.local_rank}] {t}" for t in c.tail]
        return out
