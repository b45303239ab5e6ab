"""The per-rank progress recorder: a daemon thread in every training process that rewrites
``<DISTTRAIN_PROGRESS_DIR>/rank-<rank>.json`` (``contract.progress.RankProgress``) about once
a second, without touching the user's code.

Started by :func:`start` from the ``sitecustomize`` that ``disttrain_probe.install`` writes
(only when ``DISTTRAIN_PROGRESS_DIR`` is set). Standard library only: torch is never imported
here, only looked up in ``sys.modules`` once the user's program imported it. Every failure is
swallowed (the first one is written to stderr once): the recorder must never break or slow
the program it watches.

Each wake (:meth:`Recorder.tick`): once ``torch.distributed.is_initialized()``, the default
group's collective sequence number (``ProcessGroup._get_sequence_number_for_group()``, counted
when a collective is issued), when it last changed, the main thread's innermost frames
(``sys._current_frames()``), and, only once ``seq`` has stood still for
:data:`FR_AFTER_S`, the oldest collective torch's Flight Recorder has not seen complete
(``TORCH_FR_BUFFER_SIZE`` > 0; dumped at most once per ``seq`` value and every
:data:`FR_REFRESH_S`, as a dump costs about 10 us per buffered entry with the GIL held).

``where``: not-started before the default group exists; collective when the main thread is
inside ``torch/distributed/`` (gloo, and NCCL's blocking calls such as ``barrier``) or when
the Flight Recorder holds a collective not completed after ``seq`` stood still (NCCL's
asynchronous collectives: the main thread then blocks elsewhere, e.g. in ``.item()``);
python otherwise.

Which process writes: one that initialized the default group writes ``rank-<get_rank()>``;
before that, only a process with ``RANK`` in its environment that is not a
``multiprocessing`` child (a DataLoader worker), and only while the file is absent, its own,
or its writer is gone (a subprocess inheriting ``RANK`` never overwrites its trainer's record;
torchrun's agent has no ``RANK`` and writes nothing). After ``destroy_process_group`` a
process goes on writing its last record as python, its ``seq`` standing.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import json
import os
import random
import sys
import threading
import time
from typing import Any, Deque, List, Optional, Tuple

from disttrain_probe.contract import progress as contract
from disttrain_probe.contract import stragglers
from disttrain_probe.progress import shares

FR_AFTER_S = 3.0  # seq standing still this long (seconds) before the Flight Recorder is read
FR_REFRESH_S = 30.0  # a Flight Recorder reading is reused for this long while seq stands still
_FR_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch 2.7+, and 2.2-2.6 (NCCL)
_FR_DUMPS = ("_dump_fr_trace_json", "_dump_nccl_trace_json", "_dump_nccl_trace")


def _c10d() -> Any:
    """``torch.distributed.distributed_c10d`` once imported and initialized, else None."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    initialized = getattr(c10d, "is_initialized", None)
    try:
        return c10d if callable(initialized) and initialized() else None
    except Exception:  # torch.distributed half imported by the main thread: not yet
        return None


def _frames(limit: int = contract.MAX_FRAMES) -> Tuple[contract.Frame, ...]:
    """The main thread's innermost frames, innermost first."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    out: List[contract.Frame] = []
    while frame is not None and len(out) < limit:
        code = frame.f_code
        out.append(contract.Frame(file=code.co_filename[-contract.MAX_TEXT:], line=frame.f_lineno or 0,
                                  func=code.co_name[:contract.MAX_TEXT]))
        frame = frame.f_back
    del frame
    return tuple(out)


def _torch_collective(stack: Tuple[contract.Frame, ...]) -> Optional[str]:
    """The collective API function (``torch/distributed/distributed_c10d.py``) the main thread
    is in, innermost, or None (FSDP's or DDP's own Python is not a wait)."""
    for f in stack:
        if f.file.replace("\\", "/").endswith("torch/distributed/distributed_c10d.py"):
            return f.func
    return None


def _pending(entries: List[dict]) -> Optional[contract.Collective]:
    """The oldest Flight Recorder entry not completed (gloo's stay ``scheduled`` and are marked
    ``retired`` when done; NCCL's reach ``completed``)."""
    for e in entries:
        if e.get("retired") or e.get("state") not in ("scheduled", "started"):
            continue
        op = str(e.get("profiling_name") or "").split(":", 1)[-1]
        group = e.get("process_group") or ("0", "default_pg")
        if str(group[0]) != "0":
            op = f"{op} on group {group[-1]}"
        started = e.get("time_discovered_started_ns") or 0
        since = (started or e.get("time_created_ns") or 0) / 1e9
        return contract.Collective(op=op[:contract.MAX_TEXT], seq=int(e.get("collective_seq_id") or 0),
                                   state=str(e["state"]), since=float(since))
    return None


def _flight_recorder() -> Optional[contract.Collective]:
    """The oldest collective not completed per torch's Flight Recorder (None when none, when
    its buffer is off, or when the installed torch has no dump)."""
    if not any(os.environ.get(k, "0").strip() not in ("", "0") for k in _FR_ENV):
        return None
    c = sys.modules.get("torch._C._distributed_c10d")
    for name in _FR_DUMPS:
        dump = getattr(c, name, None)
        if dump is None:
            continue
        if name.endswith("_json"):
            data = json.loads(dump(includeCollectives=True, onlyActive=True))
        else:  # torch 2.2-2.3: pickle only; the bytes come from torch in this process
            import pickle  # noqa: S403 (only on torch without the json dump)
            try:
                raw = dump(includeCollectives=True, includeStackTraces=False, onlyActive=True)
            except TypeError:  # torch 2.2: no arguments
                raw = dump()
            data = pickle.loads(raw)
        entries = data.get("entries") if isinstance(data, dict) else None
        return _pending(sorted(entries or [], key=lambda e: e.get("time_created_ns") or 0))
    return None


class Recorder:
    """One process's recorder: :meth:`tick` records once, :meth:`run` loops until stopped."""

    def __init__(self, directory: str, interval: float = contract.PROGRESS_INTERVAL_S) -> None:
        self.directory = directory
        self.interval = interval
        self.stop = threading.Event()
        self.started_at = time.time()
        self.seq: Optional[int] = None
        self.seq_advanced_at = self.started_at
        self.fr: Tuple[Optional[int], float, Optional[contract.Collective]] = (None, 0.0, None)
        self.env_rank = _env_int("RANK")
        self.last: Optional[contract.RankProgress] = None  # the last record while initialized
        self.warned = False
        self.samples: Deque[Tuple[float, bool]] = collections.deque(maxlen=int(4 * stragglers.SHARE_WINDOW_S))
        self.exchange = shares.ShareExchange()
        self.exchanging = False
        self.jitter = random.Random()  # its own: the program's random stream is left alone

    def share(self, now: float) -> Optional[float]:
        """The share (0-1) of the wakes of the last :data:`stragglers.SHARE_WINDOW_S` in which
        the main thread waited in a collective; None with fewer than
        :data:`stragglers.SHARE_MIN_SAMPLES` of them."""
        xs = [waited for at, waited in list(self.samples) if now - at <= stragglers.SHARE_WINDOW_S]
        return sum(xs) / len(xs) if len(xs) >= stragglers.SHARE_MIN_SAMPLES else None

    def _exchange_sample(self, now: float) -> Optional[tuple]:
        last = self.last
        if last is None or _c10d() is None:
            return None
        return last.rank, last.world_size, self.share(now)

    def _start_exchange(self) -> None:
        """The share exchange's thread, started once the default group exists."""
        if self.exchanging:
            return
        self.exchanging = True
        threading.Thread(target=shares.run, args=(self.exchange, self._exchange_sample, self.stop, self.warn),
                         name="disttrain-shares", daemon=True).start()

    def run(self) -> None:
        # jittered wakes: a wait share sampled at a fixed 1 s would alias with a 1 s step
        while not self.stop.wait(self.interval * self.jitter.uniform(0.75, 1.25)):
            try:
                self.tick()
            except Exception as e:  # never into the user's program
                self.warn(e)

    def warn(self, e: BaseException) -> None:
        if not self.warned:
            self.warned = True
            try:
                print(f"disttrain progress recorder: {type(e).__name__}: {e}"[:300], file=sys.stderr, flush=True)
            except Exception:  # stderr closed
                pass

    def tick(self, now: Optional[float] = None) -> Optional[contract.RankProgress]:
        """Record once; returns what was written (None when this process writes nothing)."""
        now = time.time() if now is None else now
        c10d = _c10d()
        if c10d is not None:
            record: Optional[contract.RankProgress] = self._started(c10d, now)
            self.last = record
            self._start_exchange()
        elif self.last is not None:  # after destroy_process_group: its code runs on, seq stands
            record = dataclasses.replace(self.last, written_at=now, where=contract.IN_PYTHON, waiting=None,
                                         stack=_frames())
        else:
            record = self._not_started(now)
        if record is not None:
            self._write(record)
        return record

    def _not_started(self, now: float) -> Optional[contract.RankProgress]:
        if self.env_rank is None or _multiprocessing_child():
            return None
        path = os.path.join(self.directory, contract.file_name(self.env_rank))
        if not _may_write(path):
            return None
        return contract.RankProgress(
            rank=self.env_rank, local_rank=_env_int("LOCAL_RANK") or 0,
            world_size=_env_int("WORLD_SIZE") or 0, pid=os.getpid(), written_at=now,
            where=contract.NOT_STARTED, seq_advanced_at=self.seq_advanced_at, stack=_frames())

    def _started(self, c10d: Any, now: float) -> contract.RankProgress:
        seq = _sequence_number(c10d)
        if seq != self.seq:
            self.seq, self.seq_advanced_at = seq, now
        stack = _frames()
        op = _torch_collective(stack)
        waiting = None
        if op is not None:
            waiting = contract.Collective(op=op, seq=seq or 0, state="scheduled", since=self.seq_advanced_at)
        elif now - self.seq_advanced_at >= FR_AFTER_S:
            waiting = self._fr(now)
        self.samples.append((now, waiting is not None))
        rank = c10d.get_rank()
        return contract.RankProgress(
            rank=rank, local_rank=_env_int("LOCAL_RANK") or 0, world_size=c10d.get_world_size(),
            pid=os.getpid(), written_at=now,
            where=contract.IN_COLLECTIVE if waiting is not None else contract.IN_PYTHON,
            seq=seq, seq_advanced_at=self.seq_advanced_at, waiting=waiting, stack=stack,
            share=self.share(now), straggler=self.exchange.current(now))

    def _fr(self, now: float) -> Optional[contract.Collective]:
        seq, at, coll = self.fr
        if seq != self.seq or now - at >= FR_REFRESH_S:
            try:
                coll = _flight_recorder()
            except Exception as e:  # a torch without it, or a dump that failed: less detail
                self.warn(e)
                coll = None
            self.fr = (self.seq, now, coll)
        return coll

    def _write(self, record: contract.RankProgress) -> None:
        path = os.path.join(self.directory, contract.file_name(record.rank))
        tmp = f"{path}.{os.getpid()}.tmp"
        os.makedirs(self.directory, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(record.dump())
        os.replace(tmp, path)


def _sequence_number(c10d: Any) -> Optional[int]:
    """The default group's sequence number; None where the backend or torch has none."""
    try:
        group = c10d._get_default_group()
        return int(group._get_sequence_number_for_group())
    except Exception:  # torch without it, or a backend that does not count (less detail)
        return None


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _multiprocessing_child() -> bool:
    mp = sys.modules.get("multiprocessing.process")
    parent = getattr(mp, "parent_process", None)
    return callable(parent) and parent() is not None


def _may_write(path: str) -> bool:
    """A process before init_process_group writes ``path`` only if absent, its own, its
    writer gone, or not a record."""
    try:
        with open(path) as f:
            pid = contract.parse(f.read()).pid
    except (OSError, ValueError):
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's live process
        return False
    return False


_started_recorder: Optional[Recorder] = None


def start(environ: Optional[dict] = None) -> Optional[Recorder]:
    """Start the recorder thread when ``DISTTRAIN_PROGRESS_DIR`` is set (once per process);
    returns it, or None. Never raises."""
    global _started_recorder
    try:
        env = os.environ if environ is None else environ
        directory = env.get(contract.PROGRESS_DIR_ENV)
        if not directory or _started_recorder is not None:
            return _started_recorder
        rec = Recorder(directory)
        thread = threading.Thread(target=rec.run, name="disttrain-progress", daemon=True)
        thread.start()
        atexit.register(rec.stop.set)  # no wake while the interpreter tears torch down
        _started_recorder = rec
        return rec
    except Exception as e:  # never into the user's program
        try:
            print(f"disttrain progress recorder not started: {type(e).__name__}: {e}"[:300], file=sys.stderr)
        except Exception:  # stderr closed
            pass
        return None
