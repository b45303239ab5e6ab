"""The operator's work queue (operator/disttrain/shell/workqueue.py) on a real asyncio loop
with a step that records what it was asked: one run at a time per job, triggers coalesced
into one more run, the earliest wake-up wins, a raising step retried, a gone job forgotten,
the sweep visiting only active jobs. Generated trigger sequences never run one job twice at
once and never lose the last trigger."""
from __future__ import annotations

import asyncio
import threading
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain.shell import workqueue
from disttrain.shell.runner import StepResult
from disttrain.shell.workqueue import WorkQueue


class Recorder:
    """A step: records each call, holds it until released (``gate``), returns ``results``
    in turn (the last one repeats)."""

    def __init__(self, *results: StepResult, hold: float = 0.0):
        self.results = list(results) or [StepResult()]
        self.calls: list[tuple[str, str]] = []
        self.hold = hold
        self.concurrent = 0
        self.max_concurrent: dict[tuple[str, str], int] = {}
        self._now: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, ns: str, name: str) -> StepResult:
        key = (ns, name)
        with self._lock:
            self.calls.append(key)
            self._now[key] = self._now.get(key, 0) + 1
            self.max_concurrent[key] = max(self.max_concurrent.get(key, 0), self._now[key])
        time.sleep(self.hold)
        with self._lock:
            self._now[key] -= 1
        r = self.results[min(len(self.calls) - 1, len(self.results) - 1)]
        if isinstance(r, Exception):
            raise r
        return r


def run(coro):
    return asyncio.run(coro)


def test_triggers_during_a_run_coalesce_into_exactly_one_more():
    step = Recorder(hold=0.2)

    async def main():
        q = WorkQueue(step)
        first = asyncio.create_task(q.trigger("ns", "a"))
        await asyncio.sleep(0.05)
        assert q.running(("ns", "a"))
        await asyncio.gather(*(q.trigger("ns", "a") for _ in range(5)))  # all while it runs
        await first
        return q

    q = run(main())
    assert step.calls == [("ns", "a")] * 2 and step.max_concurrent[("ns", "a")] == 1
    assert not q.running(("ns", "a"))


def test_other_jobs_run_alongside():
    step = Recorder(hold=0.2)

    async def main():
        q = WorkQueue(step)
        t0 = time.monotonic()
        await asyncio.gather(q.trigger("ns", "a"), q.trigger("ns", "b"))
        return time.monotonic() - t0

    took = run(main())
    assert sorted(step.calls) == [("ns", "a"), ("ns", "b")]
    assert took < 0.39  # two 0.2 s steps in parallel threads, not one after the other


def test_the_earliest_wake_up_wins_and_fires():
    step = Recorder(StepResult(delay=30.0), StepResult(delay=0.3), StepResult(delay=None))

    async def main():
        q = WorkQueue(step)
        loop = asyncio.get_running_loop()
        await q.trigger("ns", "a")  # asks for 30 s
        due30 = q.due(("ns", "a"))
        assert due30 is not None and due30 - loop.time() > 29
        await q.trigger("ns", "a")  # asks for 0.3 s: earlier, replaces it
        due = q.due(("ns", "a"))
        assert due is not None and due - loop.time() < 1
        await asyncio.sleep(0.6)  # the 0.3 s timer fired: a third run, which asks nothing
        return q

    q = run(main())
    assert len(step.calls) == 3 and q.due(("ns", "a")) is None


def test_a_later_wake_up_replaces_nothing_and_a_tiny_one_is_floored():
    step = Recorder(StepResult(delay=0.0), StepResult(delay=60.0))

    async def main():
        q = WorkQueue(step)
        loop = asyncio.get_running_loop()
        await q.trigger("ns", "a")
        due = q.due(("ns", "a"))
        assert due is not None and due - loop.time() >= workqueue.MIN_DELAY - 0.05
        await q.trigger("ns", "a")  # 60 s: later than the pending one
        assert q.due(("ns", "a")) == due
        return q

    run(main())


def test_a_step_that_raises_is_retried_after_the_error_delay_and_never_escapes():
    step = Recorder(RuntimeError("a bug"), StepResult(delay=None))

    async def main():
        q = WorkQueue(step)
        loop = asyncio.get_running_loop()
        await q.trigger("ns", "a")  # must not raise
        due = q.due(("ns", "a"))
        assert due is not None and abs(due - loop.time() - workqueue.ERROR_DELAY) < 1
        return q

    run(main())
    assert step.calls == [("ns", "a")]


def test_a_gone_job_is_forgotten_once_with_its_timer():
    forgotten = []
    step = Recorder(StepResult(delay=0.3), StepResult(gone=True))

    async def main():
        q = WorkQueue(step, on_forget=forgotten.append)
        await q.trigger("ns", "a")
        assert q.active() == [("ns", "a")] and q.due(("ns", "a")) is not None
        await asyncio.sleep(0.6)  # the timer's run finds it gone
        return q

    q = run(main())
    assert forgotten == [("ns", "a")] and q.active() == [] and q.due(("ns", "a")) is None
    assert len(step.calls) == 2


def test_forget_cancels_the_pending_wake_up():
    step = Recorder(StepResult(delay=0.3))

    async def main():
        q = WorkQueue(step)
        await q.trigger("ns", "a")
        q.forget(("ns", "a"))
        await asyncio.sleep(0.6)
        return q

    q = run(main())
    assert step.calls == [("ns", "a")] and q.active() == []


def test_the_sweep_visits_active_jobs_only():
    step = Recorder()

    def settles_done(ns: str, name: str) -> StepResult:
        step(ns, name)
        return StepResult(settled=(name == "done"))  # "live" stays active

    async def main():
        q = WorkQueue(settles_done)
        await q.trigger("ns", "live")
        await q.trigger("ns", "done")
        assert q.active() == [("ns", "live")]
        sweeper = asyncio.create_task(q.sweep(0.2))
        await asyncio.sleep(0.5)
        sweeper.cancel()
        return q

    run(main())
    assert step.calls.count(("ns", "done")) == 1 and step.calls.count(("ns", "live")) >= 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.floats(0, 0.03)),
                     min_size=1, max_size=12))
def test_generated_triggers_never_overlap_and_the_last_is_never_lost(plan):
    """Any interleaving of triggers: a job's step never runs twice at once, and every job
    triggered runs at least once after its last trigger began (nothing is lost)."""
    step = Recorder(hold=0.01)
    last_trigger: dict[str, float] = {}
    starts: dict[str, list[float]] = {}

    def timed(ns, name):
        starts.setdefault(name, []).append(time.monotonic())
        return step(ns, name)

    async def main():
        q = WorkQueue(timed)
        tasks = []
        for name, pause in plan:
            last_trigger[name] = time.monotonic()
            tasks.append(asyncio.create_task(q.trigger("ns", name)))
            await asyncio.sleep(pause)
        await asyncio.gather(*tasks)

    run(main())
    assert all(n == 1 for n in step.max_concurrent.values()), step.max_concurrent
    for name, t in last_trigger.items():
        # a run began after the job's last trigger: that trigger either found the job idle
        # and started it, or marked it dirty and the run in progress was followed by one
        assert max(starts[name]) >= t, (name, t, starts[name])


class FailingStep:
    """A step whose API calls fail: it writes the job's status (kopf then reports the job's
    own event, at the same generation, while the step still runs) and asks for a retry in
    ``backoff`` seconds, as :meth:`Reconciler.step` does after failed calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop, q: list, backoff: float = 1.0):
        self.loop, self.q, self.backoff = loop, q, backoff
        self.calls: list[float] = []

    def __call__(self, ns: str, name: str) -> StepResult:
        self.calls.append(time.monotonic())
        fut = asyncio.run_coroutine_threadsafe(self.q[0].job_changed(ns, name, 1), self.loop)
        fut.result(timeout=5)  # the status write's event arrives before the step returns
        time.sleep(0.01)
        return StepResult(delay=self.backoff, backoff=True)


def test_a_job_whose_calls_fail_is_retried_at_its_backoff_not_at_each_status_write():
    """Found on a cluster: "failed 361 times ... retrying every 60s" within a minute; each
    failed step wrote the status, kopf's event of that write ran the step again at once."""
    async def main():
        holder: list = []
        step = FailingStep(asyncio.get_running_loop(), holder, backoff=0.6)
        q = WorkQueue(step)
        holder.append(q)
        await q.job_changed("ns", "a", 1)
        await asyncio.sleep(0.3)
        assert len(step.calls) == 1 and q.backing_off(("ns", "a"))
        sweeper = asyncio.create_task(q.sweep(0.05))  # the sweep waits too
        await asyncio.sleep(0.2)
        sweeper.cancel()
        assert len(step.calls) == 1
        await asyncio.sleep(0.5)  # the wake-up is the retry
        assert len(step.calls) == 2
        return step

    step = run(main())
    assert step.calls[1] - step.calls[0] >= 0.55


def test_a_new_generation_or_a_pod_event_runs_a_job_backing_off_at_once():
    async def main():
        step = Recorder(StepResult(delay=5, backoff=True))
        q = WorkQueue(step)
        await q.job_changed("ns", "a", 1)
        await q.job_changed("ns", "a", 1)  # its own status write: waits
        assert len(step.calls) == 1
        await q.job_changed("ns", "a", 2)  # the user changed the spec
        assert len(step.calls) == 2
        await q.trigger("ns", "a")  # a pod's event
        assert len(step.calls) == 3
        q.forget(("ns", "a"))
        return q

    run(main())


def test_a_run_without_failures_lifts_the_hold():
    async def main():
        step = Recorder(StepResult(delay=5, backoff=True), StepResult(delay=None))
        q = WorkQueue(step)
        await q.job_changed("ns", "a", 1)
        await q.trigger("ns", "a")
        assert not q.backing_off(("ns", "a"))
        await q.job_changed("ns", "a", 1)
        assert len(step.calls) == 3
        q.forget(("ns", "a"))

    run(main())


def test_the_reconciler_asks_for_its_backoff_after_failed_calls():
    """The delay the queue holds a job for is the one the job's message says."""
    from disttrain.reconcile.policies.apierrors import backoff_seconds
    from disttrain.shell.runner import Reconciler
    from tests.fuzz.simapi import NS, SimApi, kube_for
    from tests.support.fixtures import TEMPLATE

    sim = SimApi()
    sim.add_job({"numNodes": 2, "template": TEMPLATE})
    sim.faults["create_pod"] = 500
    op = Reconciler(kube_for(sim), probe_image="probe:1")
    results = [op.step(NS, "j", now=sim.now) for _ in range(4)]
    assert [r.backoff for r in results] == [True] * 4
    assert [r.delay for r in results] == [backoff_seconds(n) for n in (1, 2, 3, 4)]
    sim.faults.clear()
    assert not op.step(NS, "j", now=sim.now).backoff
