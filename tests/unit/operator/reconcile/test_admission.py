"""Admission by Kueue: a queued job runs nothing before its Workload is admitted."""

import copy

from disttrain.api import constants
from disttrain.children import inplace, kueue
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary
from tests.support.builders import ADMISSION, ADMITTED, DEACTIVATED, EVICTED, FLAVOR, PENDING, workload
from tests.support.fixtures import job
from tests.support.reconcile import advance, finished_probes, names, step, workers


def queued(**spec):
    body = job(**spec)
    body["metadata"]["labels"] = {kueue.QUEUE_LABEL: "user-queue"}
    return body


def test_a_queued_job_creates_its_workload_and_no_pod():
    plan = step(queued(), [])
    assert plan.creates == [] and plan.services == []
    [wl] = plan.objects
    assert (wl["kind"], wl["metadata"]["name"], wl["spec"]["queueName"]) == ("Workload", "j-uid-1", "user-queue")
    assert wl["spec"]["podSets"][0]["count"] == 2
    assert wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "2"}}
    assert wl["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    a = cond.get(plan.status["conditions"], constants.ADMITTED)
    assert (a["status"], a["reason"]) == ("False", vocabulary.WAITING_FOR_QUOTA) and "user-queue" in a["message"]


def test_pending_says_kueues_words_and_runs_nothing():
    body = advance(queued(), step(queued(), []))
    plan = step(body, [], kueue=kueue.KueueRead(workload(PENDING)))
    a = cond.get(plan.status["conditions"], constants.ADMITTED)
    assert a["reason"] == vocabulary.WAITING_FOR_QUOTA and "insufficient unused quota for cpu" in a["message"]
    assert plan.creates == [] and plan.objects == []


def test_admitted_jobs_probe_on_the_flavors_nodes():
    body = advance(queued(), step(queued(), []))
    plan = step(body, [], kueue=kueue.KueueRead(workload(ADMITTED, ADMISSION), (FLAVOR,)))
    a = cond.get(plan.status["conditions"], constants.ADMITTED)
    assert (a["status"], a["reason"]) == ("True", vocabulary.WORKLOAD_ADMITTED) and "cluster-queue" in a["message"]
    [p0] = plan.creates
    assert p0["spec"]["nodeSelector"] == {"pool": "a100"}  # the template's pool=gpu replaced
    assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in p0["spec"]["tolerations"]


def test_eviction_stops_the_pods_then_hands_the_quota_back_and_probes_again_when_readmitted():
    body = advance(queued(), step(queued(), []))
    obs = kueue.KueueRead(workload(ADMITTED, ADMISSION), (FLAVOR,))
    body = advance(body, step(body, [], kueue=obs))
    body = advance(body, step(body, finished_probes(), kueue=obs))
    assert cond.is_true(body["status"]["conditions"], constants.VALIDATED)
    evicted = workload(EVICTED, ADMISSION)
    plan = step(body, workers("Running", "Running"), kueue=kueue.KueueRead(evicted))
    assert sorted(plan.deletes) == ["j-worker-0", "j-worker-1"] and plan.status_patches == []
    a = cond.get(plan.status["conditions"], constants.ADMITTED)
    assert (a["status"], a["reason"]) == ("False", vocabulary.WORKLOAD_EVICTED) and "Preempted" in a["message"]
    assert cond.status_of(plan.status["conditions"], constants.VALIDATED) == "Unknown"
    assert not cond.is_true(plan.status["conditions"], constants.FAILED)
    body = advance(body, plan)
    plan = step(body, [], kueue=kueue.KueueRead(evicted))  # the pods are gone: release
    [(api, kind, name, patch)] = plan.status_patches
    assert (api, kind, name) == (kueue.KUEUE_API, "Workload", "j-uid-1")
    assert patch["status"]["admission"] is None and patch["metadata"]["resourceVersion"] == "7"
    types = {x["type"]: (x["status"], x["reason"]) for x in patch["status"]["conditions"]}
    assert types["Requeued"] == ("True", "Preempted") and types["QuotaReserved"] == ("False", "Pending")
    body = advance(body, plan)
    plan = step(body, [], kueue=kueue.KueueRead(workload(ADMITTED, ADMISSION), (FLAVOR,)))
    assert names(plan) == ["j-probe-0"] and plan.creates[0]["metadata"]["labels"][constants.LABEL_ATTEMPT] == "2"


def test_a_finished_job_marks_its_workload_finished_once():
    body = advance(queued(), step(queued(), []))
    wl = workload(ADMITTED, ADMISSION)
    obs = kueue.KueueRead(wl, (FLAVOR,))
    body = advance(body, step(body, [], kueue=obs))
    body = advance(body, step(body, finished_probes(), kueue=obs))
    plan = step(body, workers("Succeeded", "Succeeded"), kueue=obs)
    assert cond.is_true(plan.status["conditions"], constants.SUCCEEDED)
    [(_, _, _, patch)] = plan.status_patches
    fin = [x for x in patch["status"]["conditions"] if x["type"] == "Finished"]
    assert fin and fin[0]["status"] == "True" and fin[0]["reason"] == "Succeeded"
    done = copy.deepcopy(wl)
    done["status"]["conditions"] = patch["status"]["conditions"]
    assert step(advance(body, plan), [], kueue=kueue.KueueRead(done)).status_patches == []


def test_deactivated_workload_fails_the_job_and_unreadable_kueue_is_said():
    body = advance(queued(), step(queued(), []))
    gone = workload(DEACTIVATED, active=False)
    plan = step(body, [], kueue=kueue.KueueRead(gone))
    f = cond.get(plan.status["conditions"], constants.FAILED)
    assert (f["status"], f["reason"]) == ("True", vocabulary.WORKLOAD_DEACTIVATED)
    plan = step(body, [], kueue=kueue.KueueRead(problem="the operator may not read Kueue's objects (HTTP 403)"))
    a = cond.get(plan.status["conditions"], constants.ADMITTED)
    assert a["reason"] == vocabulary.KUEUE_UNAVAILABLE and "kueue.enabled=true" in a["message"]
    assert plan.creates == [] and not cond.is_true(plan.status["conditions"], constants.FAILED)


def test_unqueued_jobs_are_untouched():
    plan = step(job(), [])
    assert cond.get(plan.status["conditions"], constants.ADMITTED) is None and names(plan) == ["j-probe-0"]


def test_the_workload_counts_sidecars_and_init_containers_as_the_scheduler_does():
    body = queued()
    tmpl = body["spec"]["template"]["spec"]
    tmpl["containers"].insert(0, {"name": "logs", "image": "l:1", "resources": {"requests": {"cpu": "1"}}})
    tmpl["initContainers"] = [{"name": "ship", "image": "s:1", "restartPolicy": "Always",
                               "resources": {"requests": {"cpu": "1"}}, "command": ["x"]}]
    pod = step(body, []).objects[0]["spec"]["podSets"][0]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["logs", "trainer"]
    assert pod["initContainers"] == [{"name": "ship", "image": "s:1", "resources": {"requests": {"cpu": "1"}},
                                      "restartPolicy": "Always"}]


def test_in_place_the_workload_counts_the_relay_container_each_training_pod_runs():
    body = queued(probe={"placement": "InPlace"})
    body["spec"]["template"]["spec"]["containers"][0]["command"] = ["python", "train.py"]
    pod = step(body, []).objects[0]["spec"]["podSets"][0]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["trainer", inplace.RELAY]
    assert pod["containers"][1]["resources"] == inplace.RELAY_RESOURCES
    body = queued()  # probe pods run before training, not beside it: not counted
    pod = step(body, []).objects[0]["spec"]["podSets"][0]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["trainer"]
