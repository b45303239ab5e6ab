"""A preflight-only DistTrainingJob (the Kueue admission check's shadow): it probes and
reaches its verdict like any job, then never creates a training pod."""

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from tests.support.fixtures import job, report
from tests.support.reconcile import advance, finished_probes, names, step


def only(body):
    body = dict(body)
    meta = dict(body["metadata"])
    meta["labels"] = {**(meta.get("labels") or {}), constants.LABEL_PREFLIGHT_ONLY: "true"}
    body["metadata"] = meta
    return body


def test_it_probes_like_any_job():
    assert names(step(only(job()), [])) == ["j-probe-0"]


def test_validated_it_stops_without_training_pods_and_keeps_its_probes():
    body = only(job())
    body = advance(body, step(body, []))
    plan = step(body, finished_probes())
    assert cond.is_true(plan.status["conditions"], constants.VALIDATED)
    assert plan.creates == [] and plan.deletes == []
    body = advance(body, plan)
    again = step(body, finished_probes())
    assert again.creates == [] and again.deletes == []
    assert not cond.is_true(again.status["conditions"], constants.TRAINING_STARTED)


def test_the_same_job_without_the_label_starts_training():
    body = advance(job(), step(job(), []))
    body = advance(body, step(body, finished_probes()))
    plan = step(body, finished_probes())
    assert any(c["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_WORKER for c in plan.creates)


def test_a_failed_preflight_ends_it_failed_as_any_job():
    body = only(job())
    body = advance(body, step(body, []))
    bad = report(1, "node-b", ok=False, failure={"reason": "MasterUnreachable", "phase": "connectivity",
                                                  "message": "node-b cannot reach the master"})
    plan = step(body, finished_probes(r1=bad))
    body = advance(body, plan)
    plan = step(body, finished_probes(r1=bad))
    conds = plan.status["conditions"]
    assert cond.get(conds, constants.VALIDATED)["status"] == constants.FALSE
    assert not any(c["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_WORKER for c in plan.creates)
