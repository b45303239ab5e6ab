"""spec.suspend: created suspended, suspended while probing or training, resumed."""

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod
from tests.support.reconcile import advance, finished_probes, names, step, validated_body, workers


def suspended(body, value=True):
    body = dict(body)
    body["spec"] = dict(body["spec"], suspend=value)
    return body


def test_created_suspended_runs_nothing():
    plan = step(job(suspend=True), [])
    assert plan.creates == [] and plan.services == []
    s = cond.get(plan.status["conditions"], constants.SUSPENDED)
    assert (s["status"], s["reason"]) == ("True", vocabulary.JOB_SUSPENDED)
    assert plan.status["phase"] == constants.PHASE_SUSPENDED
    resumed = step(advance(job(), plan), [])
    assert names(resumed) == ["j-probe-0"]
    assert cond.get(resumed.status["conditions"], constants.SUSPENDED)["reason"] == vocabulary.JOB_RESUMED


def test_suspended_while_probing_deletes_probes_and_probes_again_as_a_new_attempt():
    body = advance(job(), step(job(), []))
    running = [pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10",
                   created="2026-11-30T12:00:00Z")]
    body = advance(body, step(body, running))
    plan = step(suspended(body), running)
    assert plan.deletes == ["j-probe-0"] and plan.creates == []
    assert plan.status["probe"] == {"attempt": 2}
    body = advance(body, plan)
    plan = step(body, [])  # resumed, the old probe is gone
    assert names(plan) == ["j-probe-0"] and plan.creates[0]["metadata"]["labels"][constants.LABEL_ATTEMPT] == "2"


def test_suspended_while_training_stops_it_without_counting_a_restart():
    body = job(runPolicy={"activeDeadlineSeconds": 600})
    body = advance(body, step(body, []))
    body = advance(body, step(body, finished_probes()))
    body = advance(body, step(body, workers("Running", "Running")))
    assert cond.is_true(body["status"]["conditions"], constants.TRAINING_STARTED) and body["status"].get("startTime")
    plan = step(suspended(body), workers("Running", "Running"))
    assert sorted(plan.deletes) == ["j-worker-0", "j-worker-1"] and plan.creates == []
    assert plan.status["restarts"] == 0 and "startTime" not in plan.status
    conds = plan.status["conditions"]
    assert cond.status_of(conds, constants.VALIDATED) == "Unknown" and cond.status_of(conds, constants.TRAINING_STARTED) == "Unknown"
    assert not cond.is_true(conds, constants.FAILED) and not cond.is_true(conds, constants.SUCCEEDED)
    # while suspended, nothing is created even once the pods are gone
    body = advance(suspended(body), plan)
    assert step(body, []).creates == []
    # resumed: probes again (a new attempt), never straight to training
    plan = step(suspended(body, False), [])
    assert names(plan) == ["j-probe-0"] and not cond.is_true(plan.status["conditions"], constants.VALIDATED)


def test_a_finished_job_is_not_affected():
    body = validated_body()
    body = advance(body, step(body, workers("Succeeded", "Succeeded")))
    plan = step(suspended(body), workers("Succeeded", "Succeeded"))
    assert cond.is_true(plan.status["conditions"], constants.SUCCEEDED)
    assert cond.get(plan.status["conditions"], constants.SUSPENDED) is None
