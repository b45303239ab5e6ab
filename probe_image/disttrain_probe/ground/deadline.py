"""Phase deadlines and the watchdog that guarantees the probe never hangs.

The total budget (DISTTRAIN_PROBE_TIMEOUT_SECONDS) is split across phases. torch is
imported in the background right after the inventory (torchload.py), so the inventory phase is
standard library only and gets 15 % of the total (at least min(5 s, 30 %)). The
rendezvous phase, which waits for torch (and for the peers still importing theirs),
may use everything but :data:`LATER_RESERVE` of the total, which is kept for the phases
after it; every later phase gets a share of what is left when it starts, so time a fast
phase did not use carries forward. Phase code polls its *soft* deadline and classifies the failure
itself; the watchdog thread enforces a *hard* deadline (soft + a short grace) for
code that cannot be interrupted (torch's C++: TCPStore, init_process_group,
all-reduce): it writes the report with the failure registered for the current step
and calls ``os._exit(1)``. A C-level backstop (faulthandler) exits the process even
if the interpreter itself is wedged.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
from typing import Callable, Dict, Optional

from disttrain_probe.contract import probe_env

INVENTORY_SHARE = 0.15
# Share of the total kept for the phases after the rendezvous (connectivity .. report),
# however long the rendezvous waits for torch and for its peers.
LATER_RESERVE = 0.35
# Share of the time left when the phase starts (normalised over the phases left).
WEIGHTS = {
    "rendezvous": 0.45,
    "connectivity": 0.15,
    "choice": 0.02,
    "versions": 0.05,
    "collective": 0.28,
    "report": 0.05,
}


class ProbeFailure(Exception):
    """A classified failure: the probe reports it and exits 1."""

    def __init__(self, reason: str, message: str, phase: Optional[str] = None,
                 relayed: bool = False):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.phase = phase
        self.relayed = relayed  # a peer's failure passed on: not re-broadcast


class Deadline:
    """A soft deadline on the monotonic clock."""

    def __init__(self, at: float, clock: Callable[[], float] = time.monotonic):
        self.at = at
        self._clock = clock

    def remaining(self) -> float:
        return max(0.0, self.at - self._clock())

    def expired(self) -> bool:
        return self._clock() >= self.at

    def sub(self, seconds: float) -> "Deadline":
        """A deadline no later than this one and no later than ``seconds`` from now."""
        return Deadline(min(self.at, self._clock() + seconds), self._clock)


OverrunHandler = Callable[[str, Optional[str], str], None]


class Tracker:
    """Tracks the current phase, its timings and deadlines; runs the watchdog."""

    def __init__(self, total_seconds: float, on_overrun: Optional[OverrunHandler] = None,
                 clock: Callable[[], float] = time.monotonic, watchdog: bool = True):
        self.total = float(total_seconds)
        self.clock = clock
        self.start = clock()
        self.end = self.start + self.total
        self.grace = max(0.3, min(2.0, 0.05 * self.total))
        self.on_overrun = on_overrun
        self.timings: Dict[str, float] = {}
        self.phase: Optional[str] = None
        self.phase_start = self.start
        self.soft: Optional[float] = None
        self.hard: Optional[float] = None
        self.step_reason: Optional[str] = None
        self.step_message = ""
        self._lock = threading.Lock()
        self._fired = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if watchdog:
            self._thread = threading.Thread(target=self._watch, name="probe-watchdog", daemon=True)
            self._thread.start()
            try:  # last resort, needs no GIL: dump stacks and _exit(1)
                faulthandler.dump_traceback_later(self.total + 5.0, exit=True, file=sys.stderr)
            except Exception:  # pragma: no cover
                pass

    # -- phases -----------------------------------------------------------------
    def begin(self, phase: str, timeout_reason: Optional[str] = None, message: str = "",
              budget: Optional[float] = None) -> Deadline:
        """Start ``phase``: its soft deadline from the phase's share of what is left, or
        ``budget`` seconds when given (never past the total)."""
        now = self.clock()
        with self._lock:
            self._close_locked(now)
            avail = max(0.0, self.end - self.grace - now)
            if budget is not None:
                budget = min(avail, max(0.0, budget))
            elif phase == "inventory":
                budget = min(avail, max(INVENTORY_SHARE * self.total, min(5.0, 0.3 * self.total)))
            elif phase in WEIGHTS:
                names = list(WEIGHTS)
                left = sum(WEIGHTS[n] for n in names[names.index(phase):])
                budget = avail * WEIGHTS[phase] / left
                if phase == "rendezvous":
                    budget = max(budget, avail - LATER_RESERVE * self.total)
            else:
                budget = avail
            self.phase = phase
            self.phase_start = now
            self.soft = now + budget
            self.hard = min(self.soft + self.grace, self.end)
            self.step_reason = timeout_reason
            self.step_message = message
        return Deadline(self.soft, self.clock)

    def step(self, timeout_reason: Optional[str], message: str = "") -> None:
        """Register what to report if the hard deadline passes during this step.

        ``timeout_reason`` None means "nothing is wrong if this step hangs" (teardown):
        the watchdog then writes the report as it stands.
        """
        with self._lock:
            self.step_reason = timeout_reason
            self.step_message = message

    def wind_down(self, seconds: float, message: str = "") -> None:
        """After a failure: allow ``seconds`` (within the total) to tell peers and report;
        if even that hangs, the watchdog writes the report as it stands."""
        with self._lock:
            now = self.clock()
            self.step_reason = None
            self.step_message = message or "winding down after a failure"
            self.hard = min(self.end, now + seconds + self.grace)

    def finish(self) -> None:
        with self._lock:
            self._close_locked(self.clock())
            self.phase = None
            self.hard = None
        self._stop.set()
        try:
            faulthandler.cancel_dump_traceback_later()
        except Exception:  # pragma: no cover
            pass

    def disarm(self, timeout: float = 1.0) -> None:
        """In place, before the training runs in this process (run/inplace.py): finish, never
        fire again, and wait up to ``timeout`` seconds for the watchdog thread to end, so
        that no deadline of the probe's can end the training (the C-level backstop is
        cancelled by :meth:`finish`)."""
        self.finish()
        with self._lock:
            self._fired = True
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(max(0.0, timeout))

    def _close_locked(self, now: float) -> None:
        if self.phase is not None:
            self.timings[self.phase] = round(self.timings.get(self.phase, 0.0)
                                             + (now - self.phase_start), 3)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def budget(self) -> float:
        return (self.soft or self.clock()) - self.phase_start

    # -- watchdog -----------------------------------------------------------------
    def check(self) -> bool:
        """Fire if the current phase is past its hard deadline. Returns True if fired."""
        with self._lock:
            if self._fired or self.phase is None or self.hard is None:
                return False
            now = self.clock()
            if now < self.hard:
                return False
            self._fired = True
            self._close_locked(now)
            self.phase_start = now
            phase, reason = self.phase, self.step_reason
            msg = (f"{phase} phase overran its deadline ({self.timings.get(phase, 0.0):.1f}s spent; "
                   f"total budget {probe_env.TIMEOUT_SECONDS}={self.total:g})")
            if self.step_message:
                msg = f"{self.step_message}; {msg}"
        if self.on_overrun is not None:
            self.on_overrun(phase, reason, msg)
        return True

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            try:
                fired = self.check()
            except Exception as e:  # pragma: no cover - the watchdog must not die silently
                print(f"disttrain-probe: watchdog error: {e!r}", file=sys.stderr)
                os._exit(1)
            if fired:
                return
