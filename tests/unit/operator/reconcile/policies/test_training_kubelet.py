"""A failed training rank names what the kubelet said (issue 30, item 3): rank, node, container
and the kubelet's reason (OOMKilled with the memory limit, the signal of exit code 128+N, a
missing ConfigMap), read from every container's state whichever is first; a training pod the
kubelet cannot start fails its rank at once."""

import copy

import pytest

from disttrain.api import constants as C
from disttrain.reconcile import conditions as cond
from tests.support.reconcile import step, validated_body, workers

LIMITED = {"limits": {"memory": "64Mi", "cpu": "2"}}


def oom_worker(rank):
    p = workers(*(["Running"] * rank + ["Failed"]))[rank]
    p["spec"]["containers"] = [{"name": "trainer", "resources": copy.deepcopy(LIMITED)}, {"name": "log-shipper"}]
    p["status"]["containerStatuses"] = [
        {"name": "log-shipper", "state": {"terminated": {"exitCode": 2, "reason": "Error"}}},
        {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]
    return p


def train(n, pods):
    assert n == 2
    plan = step(validated_body(), pods)
    return cond.get(plan.status["conditions"], C.FAILED)


def test_a_training_rank_oomkilled_names_rank_node_container_and_limit():
    """Whichever container is first (a sidecar that then exited 2 here), the OOMKilled trainer
    is the cause, with its limit and the fix."""
    pods = workers("Running", "Running")
    pods[1] = oom_worker(1)
    f = train(2, pods)
    assert f["status"] == "True", f
    msg = f["message"]
    for w in ("rank 1", "j-worker-1", "node-b", "container trainer", "OOMKilled", "64Mi",
              "spec.template.spec.containers[0].resources.limits.memory"):
        assert w in msg, (w, msg)


@pytest.mark.parametrize("state,words", [
    ({"waiting": {"reason": "CreateContainerConfigError", "message": 'configmap "cfg" not found'}},
     ["CreateContainerConfigError", 'ConfigMap "cfg"']),
    ({"waiting": {"reason": "InvalidImageName", "message": 'couldn\'t parse image name "x::y"'}},
     ["InvalidImageName"]),
    ({"terminated": {"exitCode": 139, "reason": "Error"}}, ["SIGSEGV", "139"]),
])
def test_a_training_rank_the_kubelet_cannot_run_fails_naming_why(state, words):
    pods = workers("Running", "Running")
    pods[1]["status"]["containerStatuses"] = [{"name": "trainer", "state": state}]
    if "terminated" in state:
        pods[1]["status"]["phase"] = "Failed"
    else:
        pods[1]["status"]["phase"] = "Pending"
    f = train(2, pods)
    assert f["status"] == "True", f
    for w in words:
        assert w in f["message"], (w, f["message"])


def test_an_init_container_oomkilled_names_its_own_field():
    """The fix of an init container's OOM names spec.template.spec.initContainers[i], not a
    container's field nor a bare name."""
    pods = workers("Running", "Failed")
    pods[1]["spec"]["initContainers"] = [{"name": "fetch-data", "resources": copy.deepcopy(LIMITED)}]
    pods[1]["status"]["initContainerStatuses"] = [
        {"name": "fetch-data", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]
    pods[1]["status"]["containerStatuses"] = [
        {"name": "trainer", "state": {"waiting": {"reason": "PodInitializing"}}}]
    body = validated_body()
    body["spec"]["template"]["spec"]["initContainers"] = [{"name": "fetch-data", "image": "busybox"}]
    plan = step(body, pods)
    f = cond.get(plan.status["conditions"], C.FAILED)
    assert f["status"] == "True", f
    for w in ("init container fetch-data", "OOMKilled",
              "raise spec.template.spec.initContainers[0].resources.limits.memory above 64Mi"):
        assert w in f["message"], (w, f["message"])


def test_a_signal_fix_gives_the_pod_to_kubectl_logs():
    pods = workers("Running", "Running")
    pods[1]["status"]["containerStatuses"] = [{"name": "trainer", "state": {
        "terminated": {"exitCode": 139, "reason": "Error"}}}]
    pods[1]["status"]["phase"] = "Failed"
    f = train(2, pods)
    assert "kubectl logs j-worker-1 -c trainer" in f["message"], f["message"]
