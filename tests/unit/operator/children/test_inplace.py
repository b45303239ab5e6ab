"""The preflight in place (:mod:`disttrain.children.inplace`): the training pod that runs
the probe first, and that pod as the probe run reads a probe pod; and the reconcile loop
with ``probe.placement: InPlace`` from apply to training."""

import copy
import json
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.api import constants as C
from disttrain.children import inplace, observe
from disttrain.children.names import JobRef
from disttrain.children.probepod import ProbeMaster
from disttrain_probe.contract import probe_env
from disttrain_probe.contract import vocabulary as V
from disttrain_probe.contract.install import install_bootstrap
from tests.support.builders import spec_of
from tests.support.fixtures import job, report
from tests.support.reconcile import NOW, advance, names, step

REF = JobRef("j", "ns", "uid-1")
IN_PLACE = {"enabled": True, "placement": "InPlace"}


def env(ctr):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr["env"]}


def built(rank=1, master=ProbeMaster("10.100.0.10"), **spec):
    s = spec_of(probe=IN_PLACE, **spec)
    return inplace.build_pod(REF, s, rank, master, inplace.Attempts(probe=2, training=0), "probe:1")


def test_the_trainer_runs_the_probe_then_its_own_command():
    pod = built()
    trainer, relay = pod["spec"]["containers"]
    assert pod["metadata"]["name"] == "j-worker-1" and pod["metadata"]["labels"][C.LABEL_ROLE] == C.ROLE_WORKER
    assert trainer["command"] == ["python", "-c", install_bootstrap(C.PROBE_INSTALL_DIR), "--",
                                  "python", "/workspace/train.py", "--epochs", "3"]
    assert trainer["args"] == []
    e = env(trainer)
    assert (e["RANK"], e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) == ("1", "2", "10.100.0.10", "29500")
    assert e[probe_env.REPORT_PATH] == inplace.REPORT_PATH and e[probe_env.ATTEMPT] == "2"
    assert e["FOO"] == "bar" and "NCCL_SOCKET_IFNAME" not in e  # the probe sets the one it chose
    assert pod["metadata"]["labels"][C.LABEL_ATTEMPT] == "0"  # the training attempt
    # the relay hands the report over as its termination message
    assert relay["name"] == inplace.RELAY and relay["terminationMessagePath"] == C.TERMINATION_MESSAGE_PATH
    assert relay["command"][:6] == ["python", "-m", "disttrain_probe.install", C.PROBE_INSTALL_DIR, "--then-relay",
                                    inplace.REPORT_PATH]
    assert relay["command"][-2:] == ["--to", C.TERMINATION_MESSAGE_PATH]
    assert relay["terminationMessagePolicy"] == "File" and relay["image"] == "probe:1"
    mounts = {m["mountPath"] for m in trainer["volumeMounts"]}
    assert {C.PROBE_INSTALL_DIR, inplace.REPORT_DIR} <= mounts
    assert not pod["spec"].get("initContainers")  # the relay installs the probe as both start
    assert {m["mountPath"] for m in relay["volumeMounts"]} == {C.PROBE_INSTALL_DIR, inplace.REPORT_DIR}
    assert pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "trainer"
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][-1]
    assert anti["labelSelector"]["matchLabels"][C.LABEL_ROLE] == C.ROLE_WORKER
    assert "activeDeadlineSeconds" not in pod["spec"]  # training is not bounded by the probe's budget


def test_rank_0_knows_itself_by_its_own_address_defined_before_use():
    trainer = built(rank=0, master=ProbeMaster(), network={"hostNetwork": False, "enableDNSHostnames": False})[
        "spec"]["containers"][0]
    order = [x["name"] for x in trainer["env"]]
    assert env(trainer)["MASTER_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env(trainer)["PET_MASTER_ADDR"] == "$(HOST_IP)"
    assert order.index("HOST_IP") < order.index("PET_MASTER_ADDR")  # the kubelet expands only earlier names


def test_a_spec_without_the_trainers_command_is_refused_naming_the_field():
    body = job(probe=IN_PLACE)
    del body["spec"]["template"]["spec"]["containers"][0]["command"]
    plan = step(body, [])
    failed = {c["type"]: c for c in plan.status["conditions"]}[C.FAILED]
    assert failed["status"] == "True" and failed["reason"] == V.INVALID_SPEC
    assert "containers[0] (trainer) has no command" in failed["message"] and not plan.creates


def _pod(statuses, phase="Running"):
    pod = built()
    pod["status"] = {"phase": phase, "hostIP": "10.100.0.11", "containerStatuses": statuses}
    return pod


def running(name):
    return {"name": name, "state": {"running": {"startedAt": "2026-11-30T12:00:01Z"}}}


def ended(name, code, message="", reason="Completed"):
    return {"name": name, "state": {"terminated": {"exitCode": code, "message": message, "reason": reason,
                                                   "finishedAt": "2026-11-30T12:00:05Z"}}}


REPORT = json.dumps(report(1, "node-b"))


def probe_of(view):
    [probe] = [c for c in view["status"]["containerStatuses"] if c["name"] == "probe"]
    return probe["state"]


def test_the_view_while_the_probe_runs_passes_and_fails():
    view = inplace.probe_view(_pod([running("trainer"), running(inplace.RELAY)]), "trainer")
    assert view["status"]["phase"] == "Running" and "running" in probe_of(view)
    assert [c["name"] for c in view["spec"]["containers"]] == ["probe"]
    passed = inplace.probe_view(_pod([running("trainer"), ended(inplace.RELAY, 0, REPORT)]), "trainer")
    assert passed["status"]["phase"] == "Succeeded"
    assert probe_of(passed)["terminated"]["message"] == REPORT and probe_of(passed)["terminated"]["exitCode"] == 0
    failed = inplace.probe_view(_pod([ended("trainer", 1, "log tail", "Error"), ended(inplace.RELAY, 0, REPORT)],
                                     phase="Failed"), "trainer")
    assert failed["status"]["phase"] == "Failed" and probe_of(failed)["terminated"]["exitCode"] == 1
    assert probe_of(failed)["terminated"]["message"] == REPORT  # the report, not the log's tail


def test_a_probe_the_kubelet_ended_shows_as_the_trainers_end():
    oom = ended("trainer", 137, "", "OOMKilled")
    view = inplace.probe_view(_pod([oom, running(inplace.RELAY)]), "trainer")
    assert view["status"]["phase"] == "Failed"
    assert probe_of(view)["terminated"]["reason"] == "OOMKilled"
    # the trainer's resources stand for the probe's (the kubelet's memory limit message)
    assert view["spec"]["containers"][0]["resources"] == built()["spec"]["containers"][0]["resources"]


def test_sidecars_stay_in_the_view():
    pod = _pod([running("trainer"), running("istio-proxy"), running(inplace.RELAY)])
    pod["spec"]["containers"].insert(0, {"name": "istio-proxy"})
    view = inplace.probe_view(pod, "trainer")
    assert [c["name"] for c in view["spec"]["containers"]] == ["probe", "istio-proxy"]
    assert {c["name"] for c in view["status"]["containerStatuses"]} == {"probe", "istio-proxy"}


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                       lambda xs: st.lists(xs, max_size=4) | st.dictionaries(
                           st.sampled_from(["name", "state", "terminated", "running", "exitCode", "message",
                                            "containerStatuses", "containers", "phase", "spec", "status"]),
                           xs, max_size=5), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(JSONISH, st.sampled_from(["trainer", "", "preflight"]))
def test_the_view_of_any_pod_never_raises_and_leaves_the_pod_as_it_was(pod, trainer):
    before = copy.deepcopy(pod)
    view = inplace.probe_view(pod, trainer)
    assert pod == before
    assert isinstance(view["spec"]["containers"], list) and view["spec"]["containers"][0]["name"] == "probe"


def _finished(pods, reports):
    """The in-place pods after each probe wrote its report (the relay ended), on node-a/-b."""
    out = []
    for p, r in zip(pods, reports):
        p = copy.deepcopy(p)
        rank = int(p["metadata"]["labels"][C.LABEL_RANK])
        p["metadata"]["ownerReferences"][0]["controller"] = True
        p["spec"]["nodeName"] = f"node-{'ab'[rank]}"
        p["status"] = {"phase": "Running", "hostIP": f"10.100.0.1{rank}", "podIP": f"10.100.0.1{rank}",
                       "containerStatuses": [running("trainer"), ended(inplace.RELAY, 0, json.dumps(r))]}
        out.append(p)
    return out


def test_the_loop_in_place_creates_the_training_pods_once_and_validates_them():
    body = job(probe=IN_PLACE)
    plan = step(body, [])
    assert names(plan) == ["j-worker-0"]  # rank 0 first, as probe pods
    rank0 = plan.creates[0]
    body = advance(body, plan)
    placed = _finished([rank0], [report(0, "node-a")])[0]
    placed["status"]["containerStatuses"] = [running("trainer"), running(inplace.RELAY)]
    plan = step(body, [placed])
    assert names(plan) == ["j-worker-1"]
    assert env(plan.creates[0]["spec"]["containers"][0])["MASTER_ADDR"] == "10.100.0.10"
    body = advance(body, plan)
    pods = _finished([rank0, plan.creates[0]], [report(0, "node-a"), report(1, "node-b")])
    plan = step(body, pods)
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds[C.VALIDATED]["status"] == "True", conds[C.VALIDATED]
    assert plan.creates == [] and plan.deletes == []  # the pods that probed are the ones that train
    assert plan.status["rendezvous"]["masterAddr"] == "10.100.0.10"


def _both_created():
    """An in-place job whose two training pods were created (rank 0 first, then rank 1 once
    rank 0 had its address): (the job, rank 0's pod, rank 1's pod) as created."""
    body = job(probe=IN_PLACE)
    plan = step(body, [])
    rank0 = plan.creates[0]
    body = advance(body, plan)
    placed = _finished([rank0], [report(0, "node-a")])[0]
    placed["status"]["containerStatuses"] = [running("trainer"), running(inplace.RELAY)]
    plan = step(body, [placed])
    return advance(body, plan), rank0, plan.creates[0]


def test_out_of_memory_after_the_final_report_is_trainings_not_the_probes():
    # the probe reported, handed over, and training ran out of memory before the kubelet
    # showed the relay's end: the view is the probe's report, the kill is left to training
    oom = ended("trainer", 137, "", "OOMKilled")
    view = inplace.probe_view(_pod([oom, ended(inplace.RELAY, 0, REPORT)], phase="Running"), "trainer")
    assert probe_of(view)["terminated"]["reason"] == "Completed"
    assert probe_of(view)["terminated"]["exitCode"] == 0 and probe_of(view)["terminated"]["message"] == REPORT
    # before the report (the relay still waits), the same kill is the probe's
    view = inplace.probe_view(_pod([oom, running(inplace.RELAY)]), "trainer")
    assert probe_of(view)["terminated"]["reason"] == "OOMKilled"


@pytest.mark.parametrize("culprit", [0, 1])
def test_in_place_training_out_of_memory_before_the_verdict_is_not_a_probe_oom(culprit):
    body, rank0, rank1 = _both_created()
    pods = _finished([rank0, rank1], [report(0, "node-a"), report(1, "node-b")])
    pods[culprit]["status"]["containerStatuses"][0] = ended("trainer", 137, "", "OOMKilled")
    plan = step(body, pods)
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds[C.VALIDATED]["status"] == "True", conds[C.VALIDATED]
    assert "ProbeOOMKilled" not in json.dumps(plan.status["conditions"])


def test_the_loop_in_place_fails_the_preflight_from_the_reports():
    body, rank0, rank1 = _both_created()
    bad = report(1, "node-b", ok=False, failure={"reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
                                                 "message": "node-b: 10.100.0.10:29500 timed out"})
    pods = _finished([rank0, rank1], [report(0, "node-a"), bad])
    pods[1]["status"]["containerStatuses"][0] = ended("trainer", 1, "", "Error")
    plan = step(body, pods)
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds[C.VALIDATED]["status"] == "False" and conds[C.VALIDATED]["reason"] == V.MASTER_PORT_TIMEOUT
    assert conds[C.FAILED]["status"] == "True" and "training did not start" in conds[C.FAILED]["message"]
    assert plan.creates == []


def test_in_place_the_other_ranks_wait_only_for_rank_0s_address():
    """As without a probe: a probe pod's peers also wait for rank 0's probe to start (its
    start is their evidence), which in place would be paid at every launch."""
    for placement, want in (("InPlace", ["j-worker-1"]), ("Pods", [])):
        body = job(probe={"enabled": True, "placement": placement})
        plan = step(body, [])
        rank0 = copy.deepcopy(plan.creates[0])
        rank0["metadata"]["ownerReferences"][0]["controller"] = True
        rank0["spec"]["nodeName"] = "node-a"
        rank0["status"] = {"phase": "Pending", "hostIP": "10.100.0.10"}  # scheduled, nothing started
        plan = step(advance(body, plan), [rank0])
        assert names(plan) == want, placement


def test_a_relay_that_cannot_start_fails_the_preflight_at_once():
    """Its image is the probe's: unpullable, the trainer would wait for a probe that never
    comes; the view keeps the relay's waiting state for the scheduling verdict."""
    pulling = {"name": inplace.RELAY, "state": {"waiting": {"reason": "ErrImagePull", "message": "probe:bad: not found"}}}
    view = inplace.probe_view(_pod([running("trainer"), pulling]), "trainer")
    assert observe.image_pull_error(view) and "ErrImagePull" in observe.image_pull_error(view)
    body = job(probe=IN_PLACE)
    plan = step(body, [])
    rank0 = copy.deepcopy(plan.creates[0])
    rank0["metadata"]["ownerReferences"][0]["controller"] = True
    rank0["spec"]["nodeName"] = "node-a"
    rank0["status"] = {"phase": "Pending", "hostIP": "10.100.0.10", "containerStatuses": [running("trainer"), pulling]}
    plan = step(advance(body, plan), [rank0])
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds[C.VALIDATED]["reason"] == V.PROBE_IMAGE_PULL_FAILED


def _two_in_place(**spec):
    """The in-place job with both ranks created, neither trainer started yet; (body, pods)."""
    body = job(probe=IN_PLACE, **spec)
    plan = step(body, [])
    rank0 = copy.deepcopy(plan.creates[0])
    body = advance(body, plan)
    placed = _finished([rank0], [report(0, "node-a")])[0]
    placed["status"]["containerStatuses"] = [running("trainer"), running(inplace.RELAY)]
    plan = step(body, [placed])
    return advance(body, plan), [rank0, plan.creates[0]]


def test_in_place_the_probe_budget_waits_for_the_trainers_to_start():
    """The training image and the template's init containers come before the probe in
    place (a probe pod has neither): no ProbeTimeout while a trainer has not started, the
    budget counts from the last trainer's start once all did."""
    body, pods = _two_in_place()
    pods = _finished(pods, [report(0, "node-a"), report(1, "node-b")])
    for p in pods:
        p["status"]["phase"] = "Pending"
        p["status"]["containerStatuses"] = [{"name": "trainer", "state": {"waiting": {"reason": "ContainerCreating"}}}]
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T12:00:00Z"}]
    plan = step(body, pods, now=NOW + timedelta(seconds=300))  # far past the 60 s probe budget
    assert {c["type"]: c for c in plan.status["conditions"]}[C.VALIDATED]["status"] == "Unknown"
    for p in pods:
        p["status"]["phase"] = "Running"
        p["status"]["containerStatuses"] = [{"name": "trainer", "state": {"running": {"startedAt": "2026-11-30T12:04:50Z"}}},
                                            running(inplace.RELAY)]
    plan = step(body, pods, now=NOW + timedelta(seconds=310))
    assert {c["type"]: c for c in plan.status["conditions"]}[C.VALIDATED]["status"] == "Unknown"
    plan = step(body, pods, now=NOW + timedelta(seconds=290 + 200))  # silent past its own budget since it started
    assert {c["type"]: c for c in plan.status["conditions"]}[C.VALIDATED]["status"] == "False"


def test_a_failed_in_place_preflight_leaves_no_training_running_whatever_the_clean_pod_policy():
    body, pods = _two_in_place(runPolicy={"cleanPodPolicy": "None"}, network={"hostNetwork": False})
    bad = report(1, "node-b", ok=False, failure={"reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
                                                 "message": "node-b: 10.100.0.10:29500 timed out"})
    pods = _finished(pods, [report(0, "node-a"), bad])
    plan = step(body, pods)
    assert {c["type"]: c for c in plan.status["conditions"]}[C.FAILED]["status"] == "True"
    assert sorted(plan.deletes) == ["j-worker-0", "j-worker-1"]  # both trainers still ran


def test_the_dry_run_checks_the_in_place_pod_with_its_relay():
    plan = step(job(probe=IN_PLACE), [])
    assert plan.dry_runs and all(inplace.RELAY in [c["name"] for c in p["spec"]["containers"]] for p in plan.dry_runs)


def test_validated_in_place_with_the_master_lost_from_the_status_keeps_training():
    """Nothing to create, nothing to re-probe for: the pods that probed are training."""
    body, pods = _two_in_place()
    pods = _finished(pods, [report(0, "node-a"), report(1, "node-b")])
    body = advance(body, step(body, pods))
    body["status"]["rendezvous"].pop("masterAddr")
    plan = step(body, pods)
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds[C.VALIDATED]["status"] == "True" and plan.creates == [] and plan.deletes == []


@pytest.mark.parametrize("culprit", [0, 1])
def test_in_place_training_out_of_memory_right_after_the_hand_over_ends_training_as_out_of_memory(culprit):
    body, rank0, rank1 = _both_created()
    pods = _finished([rank0, rank1], [report(0, "node-a"), report(1, "node-b")])
    pods[culprit]["status"]["containerStatuses"][0] = ended("trainer", 137, "", "OOMKilled")
    pods[culprit]["status"]["phase"] = "Failed"
    body = advance(body, step(body, pods))
    plan = step(body, pods)
    conds = {c["type"]: c for c in plan.status["conditions"]}
    assert conds[C.VALIDATED]["status"] == "True"
    assert conds[C.FAILED]["status"] == "True", conds[C.FAILED]
    assert f"rank {culprit}" in conds[C.FAILED]["message"] and "OOMKilled" in conds[C.FAILED]["message"]
    assert "probe" not in conds[C.FAILED]["message"]


def test_the_report_fits_the_relays_share_of_the_pods_termination_messages():
    # the kubelet keeps 12 KiB of messages per pod, shared by every container: trainer,
    # relay and two sidecars leave the relay 3072 bytes, and the probe is told so
    pod = built()
    assert env(pod["spec"]["containers"][0])[probe_env.REPORT_BYTES] == "4096"
    tmpl = job(probe=IN_PLACE)["spec"]["template"]
    tmpl["spec"]["containers"] += [{"name": "logs", "image": "l:1"}, {"name": "metrics", "image": "m:1"}]
    pod = built(template=tmpl)
    n = len(pod["spec"]["containers"]) + len(pod["spec"].get("initContainers") or [])
    assert n == 4
    trainer = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
    assert env(trainer)[probe_env.REPORT_BYTES] == "3072"


def test_the_stall_watchs_containers_shrink_the_reports_share():
    # the stall watch adds an install container and its sidecar after the pod is built:
    # trainer, relay and those two share the 12 KiB, 3072 bytes each
    body = job(probe=IN_PLACE, runPolicy={"stallTimeoutSeconds": 30})
    plan = step(body, [])
    pod = plan.creates[0]
    n = len(pod["spec"]["containers"]) + len(pod["spec"].get("initContainers") or [])
    trainer = next(c for c in pod["spec"]["containers"] if c["name"] == "trainer")
    assert n == 4 and env(trainer)[probe_env.REPORT_BYTES] == "3072"
