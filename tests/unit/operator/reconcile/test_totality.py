"""Inputs that once stalled a job, misnamed its cause or broke an invariant (issue 16):
a pod that vanishes while training runs, a rank 0 probe pod without an address at the
verdict, a name held by a deleted job's pod, and a status that lost its outcome."""

import copy
from datetime import timedelta

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies.conflicts import NAME_CONFLICT_SECONDS
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod
from tests.support.reconcile import NOW, advance, finished_probes, names, step, workers


def _validated(body):
    body = advance(body, step(body, []))
    return advance(body, step(body, finished_probes()))


def _reason(plan, ctype):
    x = cond.get(plan.status["conditions"], ctype)
    return (x["status"], x["reason"]) if x else None


# ---- a pod that vanishes while training runs ----------------------------------------------

def test_a_vanished_rank_restarts_the_gang_and_creates_nothing_of_the_old_attempt():
    body = _validated(job(runPolicy={"backoffLimit": 2}))
    body = advance(body, step(body, workers("Running", "Running")))
    assert cond.is_true(body["status"]["conditions"], constants.TRAINING_STARTED)
    plan = step(body, workers("Running"))  # rank 1's pod is gone (deleted by hand, evicted)
    assert plan.status["restarts"] == 1 and _reason(plan, constants.TRAINING_STARTED) == ("Unknown", vocabulary.RESTARTING)
    assert plan.creates == []  # not j-worker-1 of attempt 0 again
    assert plan.deletes == ["j-worker-0"]


def test_a_vanished_rank_with_reprobe_creates_no_worker_before_the_new_probes_validate():
    body = _validated(job(runPolicy={"backoffLimit": 2, "reprobeOnFailure": True}))
    body = advance(body, step(body, workers("Running", "Running")))
    plan = step(body, workers("Running"))
    assert _reason(plan, constants.VALIDATED) == ("Unknown", vocabulary.PROBING)
    assert [p for p in plan.creates if p["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_WORKER] == []
    # the next step probes again, at the next probe attempt, and still creates no worker
    body = advance(body, plan)
    plan = step(body, [])
    assert names(plan) == ["j-probe-0"]
    assert plan.creates[0]["metadata"]["labels"][constants.LABEL_ATTEMPT] == "2"


# ---- no verdict without a master address ---------------------------------------------------

def _probes_without_rank0_address():
    probes = finished_probes()
    probes[0]["status"]["hostIP"] = probes[0]["status"]["podIP"] = None
    return probes


def test_a_rank0_pod_without_address_falls_back_to_what_the_peers_were_given():
    body = advance(job(), step(job(), []))
    probes = _probes_without_rank0_address()
    probes[1]["spec"]["containers"][0]["env"] = [{"name": "MASTER_ADDR", "value": "10.100.0.10"}]
    plan = step(body, probes)
    assert cond.is_true(plan.status["conditions"], constants.VALIDATED)
    assert plan.status["rendezvous"]["masterAddr"] == "10.100.0.10"
    assert names(plan) == ["j-worker-0", "j-worker-1"]


def test_no_verdict_without_a_master_address_and_the_wait_says_why_then_ends():
    body = advance(job(), step(job(), []))
    probes = _probes_without_rank0_address()
    for p in probes:
        p["metadata"]["creationTimestamp"] = "2026-11-30T12:00:00Z"
    plan = step(body, probes)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("Unknown", vocabulary.MASTER_ADDR_UNKNOWN)
    assert "j-probe-0" in v["message"] and "status.hostIP" in v["message"]
    assert plan.creates == [] and plan.requeue_after is not None
    assert (plan.status.get("rendezvous") or {}).get("masterAddr") is None
    late = step(body, probes, now=NOW + timedelta(seconds=200))
    v = cond.get(late.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.MASTER_ADDR_UNKNOWN)
    assert "MASTER_ADDR" in v["message"] and cond.is_true(late.status["conditions"], constants.FAILED)


def test_a_validated_status_without_master_address_never_waits_in_silence():
    body = _validated(job())
    del body["status"]["rendezvous"]["masterAddr"]  # a hand edit, or an older operator
    plan = step(body, [])
    assert plan.creates == []
    t = cond.get(plan.status["conditions"], constants.TRAINING_STARTED)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("Unknown", vocabulary.PROBING)  # it probes again
    assert "masterAddr" in t["message"]
    assert names(step(advance(body, plan), [])) == ["j-probe-0"]


# ---- a name held by a deleted job's pod ----------------------------------------------------

OLD_UID = "uid-old"


def _old_probe(rank, **kw):
    return pod(f"j-probe-{rank}", "probe", rank, phase="Running", node=f"node-{'ab'[rank]}",
               host_ip=f"10.100.0.{10 + rank}", owner_uid=OLD_UID, deleting=True, **kw)


def test_a_deleted_jobs_terminating_probe_pauses_the_budget_and_never_becomes_probe_timeout():
    body = advance(job(), step(job(), []))
    ours = pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10",
               created="2026-11-30T12:00:00Z", started_at="2026-11-30T12:00:01Z")
    ours["status"]["startTime"] = "2026-11-30T12:00:00Z"
    pods = [ours, _old_probe(1)]
    for dt in (5, 60, 120, 200):  # far past the 90 s budget, the old pod still terminating
        plan = step(body, pods, now=NOW + timedelta(seconds=dt))
        body = advance(body, plan)
        sched = cond.get(plan.status["conditions"], constants.PROBES_SCHEDULED)
        assert sched["reason"] == vocabulary.NAME_CONFLICT, dt
        assert "j-probe-1" in sched["message"] and "deleted job" in sched["message"]
        assert _reason(plan, constants.VALIDATED) == ("Unknown", vocabulary.PROBING)
        assert plan.status["nameConflictSince"] == "2026-11-30T12:00:05Z"
    # the name is free: the conflict is forgotten, the new rank 1 is created
    plan = step(body, [ours], now=NOW + timedelta(seconds=201))
    assert names(plan) == ["j-probe-1"] and "nameConflictSince" not in plan.status


def test_a_name_held_for_too_long_fails_with_name_conflict_naming_the_pod_and_fix():
    body = advance(job(), step(job(), []))
    orphan = pod("j-probe-0", "probe", 0, phase="Running", node="node-a", owner_uid=None)
    body = advance(body, step(body, [orphan]))
    plan = step(body, [orphan], now=NOW + timedelta(seconds=NAME_CONFLICT_SECONDS + 1))
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.NAME_CONFLICT)
    assert "j-probe-0" in v["message"] and "kubectl delete pod j-probe-0" in v["message"]
    assert _reason(plan, constants.FAILED) == ("True", vocabulary.PREFLIGHT_FAILED)
    assert len(v["message"]) <= cond.MAX_MESSAGE


def test_probe_anti_affinity_selects_the_jobs_uid():
    plan = step(job(network={"hostNetwork": False}), [])
    p0 = plan.creates[0]
    assert p0["metadata"]["labels"][constants.LABEL_JOB_UID] == "uid-1"
    term = p0["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][-1]
    assert term["labelSelector"]["matchLabels"][constants.LABEL_JOB_UID] == "uid-1"


# ---- a status that lost its outcome --------------------------------------------------------

def _failed_preflight_body():
    body = advance(job(), step(job(), []))
    probes = finished_probes()
    probes[1]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "{not json"
    return advance(body, step(body, probes)), probes


def test_a_failed_job_whose_failed_condition_was_removed_is_failed_again():
    body, probes = _failed_preflight_body()
    assert cond.is_true(body["status"]["conditions"], constants.FAILED)
    edited = copy.deepcopy(body)
    edited["status"]["conditions"] = [x for x in edited["status"]["conditions"]
                                      if x["type"] not in (constants.FAILED, constants.SUCCEEDED)]
    plan = step(edited, probes)
    assert _reason(plan, constants.FAILED) == ("True", vocabulary.PREFLIGHT_FAILED)
    assert _reason(plan, constants.SUCCEEDED) == ("False", vocabulary.PREFLIGHT_FAILED)
    assert plan.status["phase"] == constants.PHASE_FAILED and plan.creates == []


def test_a_flipped_outcome_is_made_exclusive_and_a_success_is_not_invented():
    body, probes = _failed_preflight_body()
    edited = copy.deepcopy(body)
    for x in edited["status"]["conditions"]:
        if x["type"] == constants.SUCCEEDED:
            x["status"] = "True"  # both True now
    plan = step(edited, probes)
    assert _reason(plan, constants.FAILED)[0] == "True" and _reason(plan, constants.SUCCEEDED)[0] == "False"
    only_failed_false = copy.deepcopy(body)
    only_failed_false["status"]["conditions"] = [
        {**x, "status": "False"} if x["type"] == constants.FAILED else x
        for x in only_failed_false["status"]["conditions"] if x["type"] != constants.SUCCEEDED]
    plan = step(only_failed_false, probes)
    assert not cond.is_true(plan.status["conditions"], constants.SUCCEEDED)  # Validated=False: it failed
    assert _reason(plan, constants.FAILED) == ("True", vocabulary.PREFLIGHT_FAILED)


def test_a_succeeded_job_whose_succeeded_was_removed_stays_succeeded():
    body = _validated(job())
    body = advance(body, step(body, workers("Running", "Running")))
    body = advance(body, step(body, workers("Succeeded", "Succeeded")))
    body["status"]["conditions"] = [x for x in body["status"]["conditions"] if x["type"] != constants.SUCCEEDED]
    plan = step(body, [])  # the pods are gone too (cleanPodPolicy, or collected)
    assert _reason(plan, constants.SUCCEEDED) == ("True", vocabulary.ALL_RANKS_SUCCEEDED)
    assert plan.creates == [] and plan.status["phase"] == constants.PHASE_SUCCEEDED

