"""The reconcile step: idempotent, level-triggered, one stage at a time."""

from datetime import timedelta

from disttrain.api import constants
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod
from tests.support.reconcile import NOW, advance, finished_probes, names, step, validated_body, workers


def test_first_visit_writes_unknown_conditions_and_rank0_probe_only():
    plan = step(job(), [])
    assert names(plan) == ["j-probe-0"]
    types = {x["type"]: x["status"] for x in plan.status["conditions"]}
    assert set(types) == set(constants.ALL_CONDITIONS) and set(types.values()) == {"Unknown"}
    assert plan.status["phase"] == constants.PHASE_PROBING and plan.status_changed


def test_other_ranks_wait_for_rank0_host_ip_then_get_it_as_master():
    body = advance(job(num_nodes=3), step(job(num_nodes=3), []))
    p0 = pod("j-probe-0", "probe", 0, phase="Pending", node="node-a")
    assert names(step(body, [p0])) == []
    # a host IP but the probe container not started yet (init container): still wait
    p0 = pod("j-probe-0", "probe", 0, phase="Pending", node="node-a", host_ip="10.100.0.10")
    assert names(step(body, [p0])) == []
    p0 = pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10",
             started_at="2026-11-30T11:59:58Z")
    plan = step(body, [p0])
    assert names(plan) == ["j-probe-1", "j-probe-2"]
    masters = {e["value"] for p in plan.creates for e in p["spec"]["containers"][0]["env"] if e["name"] == "MASTER_ADDR"}
    assert masters == {"10.100.0.10"}
    # the evidence a dialling rank needs to call a silent master port blocked early
    started = {e["value"] for p in plan.creates for e in p["spec"]["containers"][0]["env"]
               if e["name"] == "DISTTRAIN_PROBE_MASTER_STARTED_AT"}
    assert started == {"2026-11-30T11:59:58Z"}


def test_idempotent_same_input_same_plan_no_duplicates():
    body = advance(job(), step(job(), []))
    pods = [pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10"),
            pod("j-probe-1", "probe", 1, phase="Running", node="node-b", host_ip="10.100.0.11")]
    a, b = step(body, pods), step(body, pods)
    assert a.creates == b.creates == [] and a.status == b.status
    assert cond.status_of(a.status["conditions"], constants.PROBES_SCHEDULED) == "True"


def test_validated_then_workers_pinned_after_probes_deleted():
    body = advance(job(), step(job(), []))
    probes = finished_probes()
    plan = step(body, probes)
    conds = plan.status["conditions"]
    assert cond.is_true(conds, constants.VALIDATED)
    assert sorted(plan.deletes) == ["j-probe-0", "j-probe-1"]  # keepPods OnFailure, passed
    assert plan.status["rendezvous"] == {"masterAddr": "10.100.0.10", "masterPort": 29500, "socketIfname": "eth1"}
    assert any(e[1] == vocabulary.ALL_CHECKS_PASSED for e in plan.events)
    # Probe pods are finished, so the workers are created in the same step.
    assert names(plan) == ["j-worker-0", "j-worker-1"]
    w1 = plan.creates[1]
    aff = w1["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert aff["nodeSelectorTerms"][0]["matchExpressions"][-1]["values"] == ["node-b"]
    assert "--master-addr=10.100.0.10" in w1["spec"]["containers"][0]["command"]


def test_unschedulable_probe_fails_fast_with_not_enough_nodes():
    body = advance(job(num_nodes=3), step(job(num_nodes=3), []))
    msg = "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    pods = [pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10"),
            pod("j-probe-1", "probe", 1, phase="Running", node="node-b", host_ip="10.100.0.11"),
            pod("j-probe-2", "probe", 2, unschedulable=msg)]
    plan = step(body, pods)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.NOT_ENOUGH_NODES)
    assert "numNodes=3" in v["message"] and "anti-affinity" in v["message"]
    assert cond.get(plan.status["conditions"], constants.PROBES_SCHEDULED)["reason"] == vocabulary.NOT_ENOUGH_NODES
    assert cond.is_true(plan.status["conditions"], constants.FAILED)
    # Running probes would wait for a peer that never comes: all are deleted.
    assert sorted(plan.deletes) == ["j-probe-0", "j-probe-1", "j-probe-2"]
    assert plan.status["phase"] == constants.PHASE_FAILED and not plan.creates


def test_garbage_report_gives_false_condition():
    body = advance(job(), step(job(), []))
    probes = finished_probes()
    probes[1]["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "{not json at all"
    plan = step(body, probes)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_REPORT_INVALID)
    assert "node-b" in v["message"] and not plan.creates
    assert plan.deletes == []  # keepPods OnFailure: kept for their logs


def test_probe_timeout():
    body = advance(job(), step(job(), []))
    pods = [pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10",
                created="2026-11-30T12:00:00Z")]
    # the budget (timeoutSeconds 60 + 30) counts from the first probe pod's creation
    plan = step(body, pods, now=NOW + timedelta(seconds=89))
    assert cond.get(plan.status["conditions"], constants.VALIDATED)["reason"] == vocabulary.PROBING
    assert 0 < plan.requeue_after <= 1.0  # woken when the budget ends, not by a sweep
    plan = step(body, pods, now=NOW + timedelta(seconds=91))
    assert cond.get(plan.status["conditions"], constants.VALIDATED)["reason"] == vocabulary.PROBE_TIMEOUT


def test_training_succeeds():
    body = validated_body()
    plan = step(body, workers("Running", "Running"))
    assert cond.is_true(plan.status["conditions"], constants.TRAINING_STARTED) and plan.status["phase"] == constants.PHASE_RUNNING
    plan = step(advance(body, plan), workers("Succeeded", "Succeeded"))
    assert cond.is_true(plan.status["conditions"], constants.SUCCEEDED) and plan.status["phase"] == constants.PHASE_SUCCEEDED


def test_rank_failure_without_backoff_fails_job_naming_rank():
    plan = step(validated_body(), workers("Running", "Failed"))
    f = cond.get(plan.status["conditions"], constants.FAILED)
    assert (f["status"], f["reason"]) == ("True", vocabulary.RANK_FAILED)
    assert "rank 1" in f["message"] and "node-b" in f["message"] and "boom" in f["message"]
    assert plan.deletes == ["j-worker-0"]  # cleanPodPolicy Running


def test_gang_restart_then_waits_for_old_pods_to_go():
    body = job(runPolicy={"backoffLimit": 2})
    body = advance(body, step(body, []))
    body = advance(body, step(body, finished_probes()))
    plan = step(body, workers("Running", "Failed"))
    assert plan.status["restarts"] == 1 and sorted(plan.deletes) == ["j-worker-0", "j-worker-1"]
    body = advance(body, plan)
    # Old pods still terminating: nothing is created under the same names yet.
    assert names(step(body, workers("Running", "Failed"))) == []
    plan = step(body, [])
    assert names(plan) == ["j-worker-0", "j-worker-1"]
    assert plan.creates[0]["metadata"]["labels"][constants.LABEL_ATTEMPT] == "1"


def test_invalid_spec_becomes_condition():
    body = job()
    body["spec"]["numNodes"] = 0
    plan = step(body, [])
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert v["reason"] == "InvalidSpec" and "spec.numNodes" in v["message"] and not plan.creates


def test_probe_disabled_rank0_first_then_others():
    body = job(probe={"enabled": False})
    plan = step(body, [])
    assert names(plan) == ["j-worker-0"]
    body = advance(body, plan)
    w0 = pod("j-worker-0", "worker", 0, attempt=0, phase="Running", node="node-a", host_ip="10.100.0.10", container="trainer")
    plan = step(body, [w0])
    assert names(plan) == ["j-worker-1"]
    assert "--master-addr=10.100.0.10" in plan.creates[0]["spec"]["containers"][0]["command"]


def test_last_transition_time_moves_only_on_status_change():
    conds = []
    cond.set_condition(conds, "X", Verdict("Unknown", "A", "m"), 1, "t1")
    cond.set_condition(conds, "X", Verdict("Unknown", "B", "m2"), 1, "t2")
    assert conds[0]["lastTransitionTime"] == "t1" and conds[0]["reason"] == "B"
    cond.set_condition(conds, "X", Verdict("True", "C", "m3"), 2, "t3")
    assert conds[0]["lastTransitionTime"] == "t3" and conds[0]["observedGeneration"] == 2


def test_pod_network_rank0_brings_the_headless_service_and_others_get_its_dns_name():
    body = job(network={"hostNetwork": False})
    plan = step(body, [])
    assert names(plan) == ["j-probe-0"]
    assert [s["metadata"]["name"] for s in plan.services] == ["j"]
    svc = plan.services[0]
    body = advance(body, plan)
    p0 = pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10")
    p0["status"]["podIP"] = None
    assert names(step(body, [p0], services=[svc])) == []  # no pod IP yet: wait
    p0["status"]["podIP"] = "10.244.0.2"
    p0["status"]["containerStatuses"] = [{"name": "probe", "state": {"running": {"startedAt": "t"}}}]
    plan = step(body, [p0], services=[svc])
    assert names(plan) == ["j-probe-1"] and plan.services == []  # observed: not created again
    e = {x["name"]: x.get("value") for x in plan.creates[0]["spec"]["containers"][0]["env"]}
    assert e["MASTER_ADDR"] == "j-0.j" and plan.status["rendezvous"]["masterAddr"] == "j-0.j"
    # the Service went missing (deleted by hand) while pods exist: created again
    assert [x["metadata"]["name"] for x in step(body, [p0]).services] == ["j"]


def test_user_subdomain_is_not_created_by_the_operator():
    plan = step(job(network={"hostNetwork": False, "subdomain": "mine"}), [])
    assert names(plan) == ["j-probe-0"] and plan.services == []
