"""Children by owner, one attempt at a time, failures that are shown, status that is repaired."""

import json
from datetime import timedelta

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.step import ApiFailure
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod, report
from tests.support.reconcile import NOW, advance, finished_probes, names, step, validated_body, workers


def old_job_probes():
    """Finished, passing probe pods of a deleted job that had the same name."""
    pods = finished_probes(report(0, "node-a", job_uid="uid-0"), report(1, "node-b", job_uid="uid-0"))
    for p in pods:
        p["metadata"]["ownerReferences"][0]["uid"] = "uid-0"
    return pods


def test_reapplied_job_is_never_judged_on_the_old_jobs_pods():
    body = advance(job(), step(job(), []))
    plan = step(body, old_job_probes())
    conds = plan.status["conditions"]
    assert cond.status_of(conds, constants.VALIDATED) == "Unknown"
    assert plan.creates == [] and plan.deletes == []  # the names are held; never ours to delete
    pc = cond.get(conds, constants.PROBES_SCHEDULED)
    assert pc["reason"] == vocabulary.NAME_CONFLICT and "garbage collector" in pc["message"]
    # once the garbage collector removed them, the job's own probes start
    assert names(step(body, [])) == ["j-probe-0"]


def test_an_orphan_holding_a_name_is_reported_as_such():
    body = advance(job(), step(job(), []))
    orphan = pod("j-probe-0", "probe", 0, phase="Running", owner_uid=None)
    pc = cond.get(step(body, [orphan]).status["conditions"], constants.PROBES_SCHEDULED)
    assert pc["reason"] == vocabulary.NAME_CONFLICT and "delete it, or rename the job" in pc["message"]


def test_a_report_of_another_job_never_validates():
    """The pod is ours, but the report it carries says another job's UID (e.g. a probe
    image that replays a cached report): ProbeReportInvalid naming the rank."""
    body = advance(job(), step(job(), []))
    plan = step(body, finished_probes(r1=report(1, "node-b", job_uid="uid-0")))
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_REPORT_INVALID)
    assert "rank 1" in v["message"] and "jobUid" in v["message"] and not plan.creates


def test_bandwidth_threshold_is_checked_by_the_operator():
    body = job(probe={"minBusBandwidthGBps": 10})
    body = advance(body, step(body, []))
    plan = step(body, finished_probes(report(0, "node-a", busbw=0.001), report(1, "node-b", busbw=0.001)))
    v = cond.get(plan.status["conditions"], constants.COLLECTIVE_VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.BANDWIDTH_BELOW_THRESHOLD)
    assert not plan.creates and cond.is_true(plan.status["conditions"], constants.FAILED)


def test_old_attempt_pods_are_deleted_and_never_created_again():
    body = job(runPolicy={"backoffLimit": 2})
    body = advance(body, step(body, []))
    body = advance(body, step(body, finished_probes()))
    body["status"]["restarts"] = 1
    # attempt 0's rank 1 is still terminating: nothing of attempt 1 yet, not even rank 0
    term = workers("Running", "Failed", attempt=0)
    term[1]["metadata"]["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    plan = step(body, term)
    assert plan.creates == [] and plan.deletes == ["j-worker-0"]
    plan = step(body, [])
    assert names(plan) == ["j-worker-0", "j-worker-1"]
    assert {p["metadata"]["labels"][constants.LABEL_ATTEMPT] for p in plan.creates} == {"1"}


def test_reprobe_starts_no_training_pod_before_the_new_probes_validated():
    body = job(runPolicy={"backoffLimit": 1, "reprobeOnFailure": True})
    body = advance(body, step(body, []))
    body = advance(body, step(body, finished_probes()))
    plan = step(body, workers("Running", "Failed"))
    assert plan.status["probe"] == {"attempt": 2}  # replaced whole: nothing of attempt 1 left
    body = advance(body, plan)
    plan = step(body, [])  # the failed attempt is gone
    assert names(plan) == ["j-probe-0"] and plan.creates[0]["metadata"]["labels"][constants.LABEL_ATTEMPT] == "2"
    # the old attempt's passing probes (kept pods) do not validate attempt 2
    plan = step(body, finished_probes())
    assert cond.status_of(plan.status["conditions"], constants.VALIDATED) == "Unknown"
    assert not any(p["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_WORKER for p in plan.creates)


def test_a_worker_deleted_while_training_counts_as_a_failed_rank():
    body = validated_body()
    body = advance(body, step(body, workers("Running", "Running")))
    plan = step(body, workers("Running"))  # rank 1's pod vanished
    f = cond.get(plan.status["conditions"], constants.FAILED)
    assert (f["status"], f["reason"]) == ("True", vocabulary.RANK_FAILED)
    assert "rank 1" in f["message"] and "deleted" in f["message"]
    assert cond.get(plan.status["conditions"], constants.SUCCEEDED)["status"] == "False"


def test_evicted_probe_is_named():
    body = advance(job(), step(job(), []))
    probes = finished_probes()
    p1 = pod("j-probe-1", "probe", 1, phase="Failed", node="node-b", host_ip="10.100.0.11")
    p1["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    plan = step(body, [probes[0], p1])
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_POD_LOST)
    assert "node-b" in v["message"] and "Evicted" in v["message"]


def test_invalid_pod_template_from_the_apiserver_is_terminal():
    body = advance(job(), step(job(), []))
    f = ApiFailure("create", "Pod", "j-probe-0", 422,
                   'Pod "j-probe-0" is invalid: spec.containers[0].resources.limits[cpu]: Invalid value: "lots"')
    plan = step(body, [], api_failures=[f])
    conds = plan.status["conditions"]
    v = cond.get(conds, constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.INVALID_POD_TEMPLATE)
    assert "spec.template.spec.containers[0].resources.limits[cpu]" in v["message"]
    assert cond.get(conds, constants.FAILED)["reason"] == vocabulary.INVALID_POD_TEMPLATE
    assert cond.get(conds, constants.SUCCEEDED)["status"] == "False" and not plan.creates


def test_transient_api_failures_are_shown_after_a_few_steps():
    body = advance(job(), step(job(), []))
    f = ApiFailure("create", "Pod", "j-probe-0", 500, "etcdserver: request timed out", attempts=1)
    plan = step(body, [], api_failures=[f])
    assert cond.get(plan.status["conditions"], constants.VALIDATED)["reason"] == vocabulary.PROBING
    assert names(plan) == ["j-probe-0"]  # retried
    plan = step(body, [], api_failures=[ApiFailure(**{**f.__dict__, "attempts": 3})])
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("Unknown", vocabulary.API_ERROR)
    assert "etcdserver" in v["message"] and "HTTP 500" in v["message"]
    assert any(e[0] == "Warning" and e[1] == vocabulary.API_ERROR for e in plan.events)


def test_ttl_deletes_the_finished_job():
    body = job(runPolicy={"ttlSecondsAfterFinished": 30})
    body = advance(body, step(body, []))
    body = advance(body, step(body, finished_probes()))
    body = advance(body, step(body, workers("Succeeded", "Succeeded")))
    assert cond.is_true(body["status"]["conditions"], constants.SUCCEEDED)
    plan = step(body, [], now=NOW + timedelta(seconds=10))
    assert not plan.delete_job and 19 <= plan.requeue_after <= 20
    plan = step(body, [], now=NOW + timedelta(seconds=31))
    assert plan.delete_job and any(e[1] == vocabulary.TTL_EXPIRED for e in plan.events)
    assert not step(validated_body(), []).delete_job


def test_hand_edited_status_is_repaired_not_a_crash():
    body = validated_body()
    body["status"]["restarts"] = "1"
    body["status"]["conditions"].append({"type": "Bogus"})
    body["status"]["conditions"][0].pop("status")  # ProbesScheduled loses its status
    body["status"]["nodes"].append({"name": "no-rank"})
    body["status"]["startTime"] = "2026-11-30T11:59:59.123456Z"
    plan = step(body, workers("Running", "Running", attempt=1))
    assert plan.status["restarts"] == 1
    assert cond.is_true(plan.status["conditions"], constants.TRAINING_STARTED)
    assert all(x.get("status") in ("True", "False", "Unknown") for x in plan.status["conditions"])


def test_a_bug_in_a_step_becomes_a_condition_not_an_exception():
    def broken_parser(raw):
        raise RuntimeError("parser bug")

    body = advance(job(), step(job(), []))
    from disttrain.reconcile.loop import reconcile
    from disttrain.reconcile.step import Observed
    plan = reconcile(Observed.of(body, finished_probes(), NOW), broken_parser)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("Unknown", vocabulary.OPERATOR_ERROR)
    assert "RuntimeError" in v["message"] and plan.requeue_after and not plan.creates


def test_invalid_name_is_terminal_invalid_spec():
    body = job()
    body["metadata"]["name"] = "my.job"
    plan = step(body, [])
    f = cond.get(plan.status["conditions"], constants.FAILED)
    assert (f["status"], f["reason"]) == ("True", vocabulary.INVALID_SPEC)
    assert "metadata.name" in f["message"] and not plan.creates and not plan.services
    assert cond.get(plan.status["conditions"], constants.SUCCEEDED)["status"] == "False"


def test_nan_bandwidth_report_never_reaches_the_status():
    body = advance(job(), step(job(), []))
    r1 = report(1, "node-b")
    r1["allreduce"]["busbwGBps"] = float("nan")
    probes = finished_probes()
    probes[1]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = json.dumps(r1)
    plan = step(body, probes)
    assert cond.get(plan.status["conditions"], constants.VALIDATED)["reason"] == vocabulary.PROBE_REPORT_INVALID
    json.dumps(plan.status, allow_nan=False)  # the status write cannot fail on it


def test_two_ranks_on_one_node_never_validate():
    body = advance(job(), step(job(), []))
    probes = finished_probes()
    probes[1]["spec"]["nodeName"] = "node-a"
    plan = step(body, probes)
    v = cond.get(plan.status["conditions"], constants.PROBES_SCHEDULED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_UNSCHEDULABLE)
    assert "0:node-a, 1:node-a" in v["message"] and not plan.creates


def test_the_verdict_sends_each_finding_in_full_as_an_event():
    body = advance(job(), step(job(), []))
    r1 = report(1, "node-b", ok=False, failure={"reason": vocabulary.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
                                                "message": "node-b (rank 1): connection timed out " + "x" * 500})
    plan = step(body, finished_probes(r1=r1))
    details = [e for e in plan.events if e[1] == vocabulary.PROBE_DETAIL]
    assert details and details[0][0] == "Warning" and "x" * 500 in details[0][2]
