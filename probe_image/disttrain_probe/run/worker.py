"""``python -m disttrain_probe.run.worker``: local rank k > 0 of a probe pod (see roles.py).

Started by local rank 0 (:mod:`disttrain_probe.localranks.spawn`) with its arguments and environment
plus LOCAL_RANK. It imports torch in the background, waits for local rank 0's go (one
JSON line on stdin: ``{"go": true, "addr", "ifname", "backend", "env"}``, ``env`` the NCCL
diagnostics variables local rank 0 set, or ``{"stop": why}``),
joins the store at ``addr``:MASTER_PORT, then runs the collective phase as global rank
node rank x P + k: the all-reduce among the node's local ranks, then the one over every
rank (:func:`disttrain_probe.phases.collective.run`). It reports on stdout in
:data:`~disttrain_probe.ground.roles.MARK` lines (:func:`~disttrain_probe.ground.roles.entry`),
one before each phase (so a killed process still names its phase) and a final one; exit
0 on a pass, :data:`~disttrain_probe.ground.roles.STOPPED` when told to stop, 1 otherwise.
The same deadlines and watchdog as local rank 0 (deadline.py) bound every phase.

torch is imported lazily: the worker must report before torch loads (the background
import, ground/torchload.py).
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional

from disttrain_probe.contract import probe_env, vocabulary
from disttrain_probe.gpu import nccldiag
from disttrain_probe.ground import config as C
from disttrain_probe.ground import roles as LR
from disttrain_probe.ground.deadline import Deadline, ProbeFailure, Tracker
from disttrain_probe.ground.shapes import AllReduce, Failure, LocalEntry
from disttrain_probe.ground.torchload import TorchLoader
from disttrain_probe.phases import collective, torchfacts


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:240]


def read_message(stream: Any, deadline: Deadline) -> Optional[Dict[str, Any]]:
    """The next JSON object line from ``stream`` (a pipe) before ``deadline``; None at EOF,
    on a malformed line or when the deadline passes."""
    fd = stream.fileno()
    buf = b""
    while not deadline.expired():
        ready, _, _ = select.select([fd], [], [], min(0.2, max(0.0, deadline.remaining())))
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf += chunk
        if b"\n" in buf:
            try:
                v = json.loads(buf.split(b"\n", 1)[0].decode("utf-8"))
            except ValueError:
                return None
            return v if isinstance(v, dict) else None
    return None


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when local rank 0 dies (prctl PR_SET_PDEATHSIG), and
    exit at once if it already has. Best effort; the stdin EOF and the watchdog also end it."""
    parent = os.environ.get(LR.PARENT_VAR)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except Exception:
        pass
    if parent and parent.isdigit() and os.getppid() != int(parent):
        os._exit(LR.STOPPED)


class LocalWorker:
    """One local rank k > 0 (see the module docstring)."""

    def __init__(self, cfg: C.Config):
        self.cfg = cfg
        self.layout = LR.Layout(cfg.rank, cfg.world_size, cfg.local_rank, cfg.nproc_per_node)
        self.who = self.layout.who(cfg.node_name)
        self.lock = threading.Lock()
        self.done = False
        self.phase = "start"
        self.failure: Optional[Failure] = None
        self.device: Optional[str] = None
        self.intra: AllReduce = {}
        self.world: AllReduce = {}
        self.tracker = Tracker(cfg.timeout_seconds, on_overrun=self._overrun)
        self.torch = TorchLoader(torchfacts.load)

    def entry(self, ok: bool) -> LocalEntry:
        return LR.entry(self.cfg.local_rank, ok, self.phase, self.failure, self.device,
                        LR.AllReduces(self.intra, self.world))

    def say(self, ok: bool = False) -> None:
        try:
            sys.stdout.write(LR.MARK + json.dumps(self.entry(ok), separators=(",", ":")) + "\n")
            sys.stdout.flush()
        except Exception:
            pass

    def begin(self, phase: str, reason: Optional[str], message: str,
              budget: Optional[float] = None) -> Deadline:
        self.phase = phase
        d = self.tracker.begin(phase, reason, message, budget)
        self.say()
        stall = os.environ.get(probe_env.TEST_STALL_LOCAL)  # fault injection (tests)
        if stall == f"{self.cfg.rank}:{self.cfg.local_rank}:{phase}":
            while True:
                time.sleep(1)
        return d

    def _overrun(self, phase: str, reason: Optional[str], message: str) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
            # teardown (destroy_process_group) hung after a correct all-reduce: still a pass
            ok = reason is None and self.failure is None and self.world.get("correct") is True
            if reason is not None:
                self.failure = {"reason": reason, "phase": phase, "message": message}
            self.say(ok)
        os._exit(0 if ok else 1)

    def run(self) -> int:
        cfg = self.cfg
        who = self.who
        _die_with_parent()
        self.torch.start()
        try:
            d = self.begin("waiting", vocabulary.PROBE_INTERNAL_ERROR,
                           f"{who}: waiting for local rank 0 to start the collective phase")
            msg = read_message(sys.stdin, d)
            if msg is None or not msg.get("go"):
                with self.lock:
                    self.done = True
                why = (msg or {}).get("stop") or "local rank 0 ended or went silent"
                self.phase = "waiting"
                sys.stdout.write(LR.MARK + json.dumps(dict(self.entry(False), stopped=True,
                                                           note=str(why)[:200])) + "\n")
                sys.stdout.flush()
                return LR.STOPPED
            seconds = msg.get("seconds")
            d = self.begin("collective", vocabulary.PROCESS_GROUP_INIT_FAILED,
                           f"{who}: joining the collective hung",
                           float(seconds) if isinstance(seconds, (int, float)) else None)
            crash = os.environ.get(probe_env.TEST_CRASH_LOCAL)  # fault injection (tests)
            if crash == f"{cfg.rank}:{cfg.local_rank}":
                os._exit(9)  # as a crash in torch/NCCL would, without a last word
            store = self._join(msg, d)
            backend = str(msg.get("backend") or "gloo")
            os.environ.update(nccldiag.run_vars(msg.get("env")))  # as local rank 0 set them
            if backend == "nccl":
                self.device = f"cuda:{cfg.local_rank}"
            collective.run(cfg, store, collective.CollectivePath(msg.get("ifname"), backend, self.layout),
                           d, self.tracker, collective.CollectiveResults(self.world, self.intra))
            with self.lock:
                self.phase = "report"
                self.done = True
                self.tracker.finish()
                self.say(ok=True)
            return 0
        except ProbeFailure as f:
            self.failure = {"reason": f.reason, "phase": f.phase or self.phase, "message": f.message}
        except Exception as e:
            self.failure = {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": self.phase,
                            "message": f"{who}: {type(e).__name__} in {self.phase}: {_first_line(e)}"}
        with self.lock:
            if not self.done:
                self.done = True
                self.tracker.finish()
                for k in ("intra", "world"):
                    if getattr(self, k).get("busbwGBps") is None:
                        setattr(self, k, {})
                self.say(False)
        return 1

    def _join(self, msg: Dict[str, Any], d: Deadline) -> Any:
        """torch (imported meanwhile), then the store at ``msg['addr']``:MASTER_PORT."""
        cfg, who = self.cfg, self.who
        if not self.torch.wait(d.remaining()):
            raise ProbeFailure(vocabulary.TORCH_IMPORT_TIMEOUT, (
                f"{who}: importing torch took more than {self.torch.elapsed():.0f}s; give the "
                f"pod more CPU or raise probe.timeoutSeconds"))
        if self.torch.error:
            raise ProbeFailure(vocabulary.PROBE_INTERNAL_ERROR, f"{who}: import torch failed: {self.torch.error}")
        import torch.distributed as dist  # the slow import, checked loaded just above
        addr = str(msg.get("addr") or cfg.master_addr)
        self.tracker.step(vocabulary.MASTER_PORT_TIMEOUT, f"{who}: joining the store at {addr}:{cfg.master_port}")
        try:
            store: dist.Store = dist.TCPStore(host_name=addr, port=cfg.master_port, is_master=False,
                                              timeout=timedelta(seconds=max(1.0, d.remaining())),
                                              wait_for_workers=False)
        except Exception as e:
            raise ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
                f"{who}: local rank 0 reached {addr}:{cfg.master_port} but this process could not "
                f"join the store there: {_first_line(e)}"))
        if cfg.store_prefix:
            store = dist.PrefixStore(cfg.store_prefix, store)
        store.set_timeout(timedelta(seconds=max(5.0, cfg.timeout_seconds)))
        return store


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = C.load(argv)
    except (C.ConfigError, SystemExit) as e:
        lr = os.environ.get("LOCAL_RANK", "?")
        sys.stdout.write(LR.MARK + json.dumps(LR.entry(
            int(lr) if lr.isdigit() else -1, False, "config",
            {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "config",
             "message": f"local rank {lr}: bad probe input: {e}"})) + "\n")
        return 1
    return LocalWorker(cfg).run()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait on torch's destructors or stray threads
