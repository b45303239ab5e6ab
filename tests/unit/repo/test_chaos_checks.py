"""The fault-injection harness's own checks (tests/e2e/chaos.py), without a cluster: each
invariant is fed the pod events that break it, and the plans are reproducible by seed."""

from __future__ import annotations

import pytest
from kubernetes import client

from disttrain.api import constants
from disttrain_probe.contract import vocabulary
from tests.e2e import chaos
from tests.support.fixtures import JOB_UID, pod

UIDS = iter(range(1, 10**6))


def mk(name, role, rank, attempt, phase="Pending", owner=JOB_UID):
    p = pod(name, role, rank, attempt=attempt, phase=phase, node="node-a", owner_uid=owner)
    p["metadata"]["uid"] = f"u{next(UIDS)}"
    return p


def watch_of(*events):
    """A PodWatch fed (type, pod) events in order, at t = 0, 1, 2, ... s."""
    pw = chaos.PodWatch(client.ApiClient(), "ns", 0.0)
    for t, (typ, p) in enumerate(events):
        pw._on(typ, p, float(t))
    return pw


def gang_restart_done_right():
    w0, w1 = mk("j-worker-0", "worker", 0, 0, "Running"), mk("j-worker-1", "worker", 1, 0, "Failed")
    return [("ADDED", w0), ("ADDED", w1), ("DELETED", w0), ("DELETED", w1),
            ("ADDED", mk("j-worker-0", "worker", 0, 1)), ("ADDED", mk("j-worker-1", "worker", 1, 1))]


def test_a_clean_gang_restart_has_no_duplicate():
    p0, p1 = mk("j-probe-0", "probe", 0, 1, "Succeeded"), mk("j-probe-1", "probe", 1, 1, "Succeeded")
    pw = watch_of(("ADDED", p0), ("ADDED", p1), *gang_restart_done_right())
    assert pw.duplicates == []


def test_a_new_attempt_before_the_old_one_is_gone_is_caught():
    w0, w1 = mk("j-worker-0", "worker", 0, 0, "Running"), mk("j-worker-1", "worker", 1, 0, "Failed")
    pw = watch_of(("ADDED", w0), ("ADDED", w1), ("DELETED", w0),
                  ("ADDED", mk("j-worker-0", "worker", 0, 1)))  # rank 1 of attempt 0 still there
    assert len(pw.duplicates) == 1 and "gang restart overlap" in pw.duplicates[0]


def test_a_pod_of_an_attempt_created_twice_is_caught():
    first = mk("j-probe-0", "probe", 0, 1, "Running")
    pw = watch_of(("ADDED", first), ("DELETED", first), ("ADDED", mk("j-probe-0", "probe", 0, 1)))
    assert len(pw.duplicates) == 1 and "second pod of probe rank 0 attempt 1" in pw.duplicates[0]


def test_two_live_pods_for_one_rank_are_caught():
    pw = watch_of(("ADDED", mk("j-probe-0", "probe", 0, 1, "Running")),
                  ("ADDED", mk("other-probe-0", "probe", 0, 2)))
    assert any("two pods for probe rank 0" in d for d in pw.duplicates)


def test_a_training_pod_next_to_a_running_probe_is_caught():
    pw = watch_of(("ADDED", mk("j-probe-1", "probe", 1, 1, "Running")),
                  ("ADDED", mk("j-worker-0", "worker", 0, 0)))
    assert len(pw.duplicates) == 1 and "while probe" in pw.duplicates[0]


def finished_job(restarts=1, attempt=1, outcome=(constants.SUCCEEDED, vocabulary.ALL_RANKS_SUCCEEDED)):
    return {"restarts": restarts, "probe": {"attempt": attempt}, "conditions": [
        {"type": constants.VALIDATED, "status": "True", "reason": vocabulary.ALL_CHECKS_PASSED, "message": "m"},
        {"type": outcome[0], "status": "True", "reason": outcome[1], "message": "m"}]}


def run_of(status, final_pods, seen=(), variant=chaos.FAIL_ONCE):
    r = chaos.JobRun(plan=chaos.JobPlan(0, variant, ()), ns="ns", seed=1, job_uid=JOB_UID,
                     status=status, final_pods=final_pods)
    r.check(list(seen))
    return r


def test_the_expected_end_passes():
    r = run_of(finished_job(), [mk("j-worker-0", "worker", 0, 1, "Succeeded"),
                                mk("j-worker-1", "worker", 1, 1, "Succeeded")])
    assert r.ok, r.describe()


@pytest.mark.parametrize("left,why", [
    (mk("j-probe-0", "probe", 0, 1, "Succeeded"), "left after the probe passed"),
    (mk("j-worker-0", "worker", 0, 0, "Failed"), "of attempt 0 left"),
    (mk("j-worker-0", "worker", 0, 1, "Running"), "still Running"),
    (mk("j-worker-0", "worker", 0, 1, "Succeeded", owner="someone-else"), "without the job as controller"),
])
def test_what_cleanup_should_have_removed_is_an_orphan(left, why):
    r = run_of(finished_job(), [left])
    assert not r.ok and any(why in x for x in r.orphans), r.orphans


def test_probe_pods_kept_after_a_failed_preflight_are_not_orphans():
    st = finished_job(restarts=0, outcome=(constants.FAILED, vocabulary.PREFLIGHT_FAILED))
    st["conditions"][0]["status"] = "False"
    r = run_of(st, [mk("j-probe-0", "probe", 0, 1, "Failed")])
    assert r.orphans == [] and r.problems  # the outcome is still not the expected one


def test_a_pod_of_another_owner_seen_during_the_run_is_an_orphan():
    pw = watch_of(("ADDED", mk("j-probe-0", "probe", 0, 1, owner="old-job")))
    r = run_of(finished_job(), [], seen=pw.snapshot())
    assert any("not the job's" in x for x in r.orphans)


@pytest.mark.parametrize("status,variant,problem", [
    (finished_job(restarts=0), chaos.FAIL_ONCE, "status.restarts is 0"),
    (finished_job(attempt=2), chaos.FAIL_ONCE, "status.probe.attempt is 2"),
    (finished_job(), chaos.FAIL_ALWAYS, "expected Failed=True BackoffLimitExceeded"),
    ({"restarts": 1, "probe": {"attempt": 1}, "conditions": []}, chaos.FAIL_ONCE, "unfinished"),
])
def test_a_wrong_end_is_a_problem(status, variant, problem):
    r = run_of(status, [], variant=variant)
    assert any(problem in x for x in r.problems), r.problems


def test_plans_are_reproducible_and_spread_over_every_stage():
    a = chaos.draw_plans(7, jobs=7, kills=21, apiserver_restarts=3, fail_always_every=3)
    assert a == chaos.draw_plans(7, jobs=7, kills=21, apiserver_restarts=3, fail_always_every=3)
    assert a != chaos.draw_plans(8, jobs=7, kills=21, apiserver_restarts=3, fail_always_every=3)
    kills = [f for p in a for f in p.faults if f.kind == "kill"]
    assert len(kills) == 21 and {f.stage for f in kills} == set(chaos.STAGES)
    counts = [sum(f.stage == s for f in kills) for s in chaos.STAGES]
    assert max(counts) - min(counts) <= 1
    assert sum(f.kind == "apiserver" for p in a for f in p.faults) == 3
    assert [p.variant for p in a].count(chaos.FAIL_ALWAYS) == 2
    for p in a:  # in the order the stages happen
        order = [chaos.STAGES.index(f.stage) for f in p.faults]
        assert order == sorted(order)
        assert all(0 <= f.delay <= chaos.STAGE_DELAY[f.stage] for f in p.faults if f.kind == "kill")


def test_stages_reached_follow_the_pods():
    pw = watch_of(("ADDED", mk("j-probe-0", "probe", 0, 1)))
    assert chaos.stages_reached(pw.snapshot(), 2) == {"probe-created"}
    pw = watch_of(("ADDED", mk("j-probe-0", "probe", 0, 1, "Succeeded")),
                  ("ADDED", mk("j-probe-1", "probe", 1, 1, "Succeeded")),
                  ("ADDED", mk("j-worker-1", "worker", 1, 0, "Failed")))
    assert chaos.stages_reached(pw.snapshot(), 2) == {"probe-created", "probing", "verdict",
                                                      "training-start", "rank-failed"}
    pw = watch_of(*gang_restart_done_right())
    assert "restart" in chaos.stages_reached(pw.snapshot(), 2)


def test_an_old_attempts_worker_created_after_its_rank_was_deleted_by_hand_is_caught():
    """The delete-pod fault: rank 1 deleted while training runs; re-creating rank 1 of
    attempt 0 (what the operator once did) is a second pod of that attempt."""
    w0, w1 = mk("j-worker-0", "worker", 0, 0, "Running"), mk("j-worker-1", "worker", 1, 0, "Running")
    pw = watch_of(("ADDED", w0), ("ADDED", w1), ("DELETED", w1), ("ADDED", mk("j-worker-1", "worker", 1, 0)))
    assert any("second pod of worker rank 1 attempt 0" in d for d in pw.duplicates), pw.duplicates
    lives = pw.snapshot()
    assert "rank1-running" in chaos.stages_reached(lives[:2], 2)
