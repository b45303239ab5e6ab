"""The operator's work queue: which job runs its reconcile step when (asyncio, one process).

Level-triggered, as client-go's workqueue: events only say "look at this job again".

- A job's step never runs twice at once: a trigger while it runs marks the job dirty, and
  one more run follows (any number of triggers coalesce into that one).
- Each run returns the next time-based decision (``StepResult.delay``, seconds: a probe
  budget, a deadline, a TTL); the queue wakes the job then. A pending wake-up that is
  earlier wins; a later one replaces nothing.
- A step that raises (a bug in the shell) is logged and retried after
  :data:`ERROR_DELAY` seconds, never propagated into the event loop.
- A job whose step says ``gone`` is forgotten: its timer is cancelled and ``on_forget``
  runs (the reconciler's and the metrics' per-job state).
- :meth:`WorkQueue.sweep` re-triggers every active job (not settled, not gone) every so
  many seconds: the safety net, not the clock (precise wake-ups come from the delays).
- A run whose calls failed (``StepResult.backoff``) holds the job until its retry is due:
  until then the sweep and the job's own events that change nothing but its status
  (:meth:`WorkQueue.job_changed` with the generation already seen: the status write the
  failed step made, which kopf reports as an event) wait for the wake-up, so the retries
  come at the interval the job's message says ("retrying every 8s"). A new generation (the
  user changed the spec) and the job's pods' events run it at once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

from disttrain.shell.runner import Key, StepResult

log = logging.getLogger("disttrain.workqueue")

ERROR_DELAY = 10.0  # seconds before a step that raised runs again
MIN_DELAY = 0.2  # seconds: the soonest a requested wake-up fires


class WorkQueue:
    """Runs ``step(namespace, name) -> StepResult`` in a worker thread per trigger (see the
    module docstring). ``on_forget(key)`` runs once per job that is forgotten. Must be used
    from one asyncio event loop."""

    def __init__(self, step: Callable[[str, str], StepResult],
                 on_forget: Callable[[Key], None] = lambda key: None) -> None:
        self._step = step
        self._on_forget = on_forget
        self._running: set[Key] = set()
        self._dirty: set[Key] = set()
        self._active: set[Key] = set()  # known, non-terminal jobs (swept)
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._due: dict[Key, float] = {}  # loop time at which the pending timer fires
        self._held: dict[Key, float] = {}  # backing off after failed calls: until this loop time
        self._generation: dict[Key, Optional[int]] = {}  # the job's generation last seen in an event
        self._nudged: set[Key] = set()  # a status-only event came while the job ran

    # -- what tests and the sweep read ------------------------------------------------
    def active(self) -> list[Key]:
        """Jobs the sweep visits, sorted."""
        return sorted(self._active)

    def due(self, key: Key) -> Optional[float]:
        """Loop time (seconds) of the job's pending wake-up, None if there is none."""
        return self._due.get(key)

    def running(self, key: Key) -> bool:
        return key in self._running

    def backing_off(self, key: Key) -> bool:
        """Whether the job waits for the retry of failed calls (see the module docstring)."""
        until = self._held.get(key)
        return until is not None and asyncio.get_running_loop().time() < until

    # -- the queue --------------------------------------------------------------------
    async def job_changed(self, namespace: str, name: str, generation: Optional[int]) -> None:
        """An event of the job itself at ``generation`` (metadata.generation): a new one
        runs it now, as :meth:`trigger`; the one already seen (a status write) waits while
        the job backs off."""
        key = (namespace, name)
        new = self._generation.get(key) != generation
        self._generation[key] = generation
        await self.trigger(namespace, name, urgent=new)

    async def trigger(self, namespace: str, name: str, urgent: bool = True) -> None:
        """Reconcile a job now, or once more right after the run in progress. Not
        ``urgent`` (the sweep, a status-only event): nothing while the job backs off."""
        key = (namespace, name)
        if not urgent and self.backing_off(key):
            return
        if key in self._running:
            (self._dirty if urgent else self._nudged).add(key)
            return
        self._running.add(key)
        try:
            while True:
                self._dirty.discard(key)
                self._nudged.discard(key)
                delay = await self._run(key)
                if delay is not None:
                    self._schedule(key, delay)
                if key not in self._dirty and (key not in self._nudged or self.backing_off(key)):
                    break
        finally:
            self._running.discard(key)

    async def _run(self, key: Key) -> Optional[float]:
        try:
            result = await asyncio.to_thread(self._step, *key)
        except Exception:  # noqa: BLE001 - a bug in the shell: never kill the event loop
            log.exception("reconcile of %s/%s failed; retrying in %.0fs", *key, ERROR_DELAY)
            return ERROR_DELAY
        if result.gone:
            self.forget(key)
            return None
        if result.backoff and result.delay is not None:
            self._held[key] = asyncio.get_running_loop().time() + max(MIN_DELAY, result.delay)
        else:
            self._held.pop(key, None)
        if result.settled:
            self._active.discard(key)  # still visited by events and its TTL timer
        else:
            self._active.add(key)
        return result.delay

    def forget(self, key: Key) -> None:
        """Drop the job: no sweep, no pending wake-up; ``on_forget(key)``."""
        self._active.discard(key)
        self._dirty.discard(key)
        self._nudged.discard(key)
        self._held.pop(key, None)
        self._generation.pop(key, None)
        handle = self._timers.pop(key, None)
        self._due.pop(key, None)
        if handle is not None:
            handle.cancel()
        self._on_forget(key)

    def _schedule(self, key: Key, delay: float) -> None:
        """Run the job's step again in ``delay`` seconds (an earlier pending wake-up wins)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(MIN_DELAY, delay)
        if key in self._timers and self._due.get(key, float("inf")) <= at:
            return
        if key in self._timers:
            self._timers[key].cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self._due.pop(key, None)
            asyncio.ensure_future(self.trigger(*key))

        self._timers[key] = loop.call_at(at, fire)
        self._due[key] = at

    async def sweep(self, every: float) -> None:
        """Forever: every ``every`` seconds, trigger each active job."""
        while True:
            await asyncio.sleep(every)
            for ns, name in self.active():
                asyncio.create_task(self.trigger(ns, name, urgent=False))


__all__ = ["ERROR_DELAY", "MIN_DELAY", "WorkQueue"]
