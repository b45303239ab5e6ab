"""What is deleted when a job ends, and when the job itself goes
(:mod:`disttrain.reconcile.policies.cleanup`)."""

from datetime import timedelta

import pytest

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import cleanup
from tests.support.builders import given
from tests.support.builders import spec_of as spec
from tests.support.reconcile import NOW, sidecar_worker, step, validated_body


@pytest.mark.parametrize("keep,failed,want", [
    ("OnFailure", True, ["j-probe-1"]),             # kept for their logs; a running one goes
    ("OnFailure", False, ["j-probe-0", "j-probe-1"]),
    ("Never", True, ["j-probe-0", "j-probe-1"]),
    ("Always", False, ["j-probe-1"]),               # still running: it only blocks ports
])
def test_probes_to_delete(keep, failed, want):
    probes = given().probes("Succeeded", "Running").pods
    out = cleanup.probes_to_delete(spec(probe={"keepPods": keep}), failed, probes)
    assert [p["metadata"]["name"] for p in out] == want


@pytest.mark.parametrize("policy,want", [
    ("Running", ["j-worker-1", "j-worker-2"]),
    ("All", ["j-worker-0", "j-worker-1", "j-worker-2"]),
    ("None", []),
])
def test_workers_to_delete(policy, want):
    ws = given().workers("Succeeded", "Running", "Pending").pods
    out = cleanup.workers_to_delete(spec(runPolicy={"cleanPodPolicy": policy}), ws)
    assert [p["metadata"]["name"] for p in out] == want


@pytest.mark.parametrize("ttl,finished_ago,want", [
    (None, 100, None),
    (0, 0, 0.0),
    (60, 10, 50.0),
    (60, 61, -1.0),
])
def test_ttl_seconds_left(ttl, finished_ago, want):
    s = spec(runPolicy={} if ttl is None else {"ttlSecondsAfterFinished": ttl})
    assert cleanup.ttl_seconds_left(s, NOW - timedelta(seconds=finished_ago), NOW) == want


@pytest.mark.parametrize("policy,want", [
    ("Running", ["j-worker-0", "j-worker-1"]),
    ("All", ["j-worker-0", "j-worker-1"]),
    ("None", ["j-worker-0"]),  # still running and holding its hostPort: deleted all the same
])
def test_a_pod_whose_sidecar_outlives_the_trainer_never_keeps_host_ports(policy, want):
    ws = [sidecar_worker(0, trainer=0, host_port=True), sidecar_worker(1, trainer=0)]
    out = cleanup.workers_to_delete(spec(runPolicy={"cleanPodPolicy": policy}), ws)
    assert [p["metadata"]["name"] for p in out] == want


def test_holds_host_ports():
    assert cleanup.holds_host_ports(sidecar_worker(0, host_port=True))
    assert not cleanup.holds_host_ports(sidecar_worker(0))
    hostnet = sidecar_worker(0)
    hostnet["spec"].update(hostNetwork=True, initContainers=[{"name": "a", "ports": [{"containerPort": 9000}]}])
    assert cleanup.holds_host_ports(hostnet)
    assert not cleanup.holds_host_ports({"spec": {"containers": [{"ports": "x"}, None]}})


def test_a_job_whose_trainers_exited_0_succeeds_and_deletes_its_pods_though_sidecars_run():
    """Found on real kubelets: a log shipper beside the trainer kept the pods Running, the
    job Running for good, and the rank-0 hostPort held against the next job."""
    body = validated_body()
    plan = step(body, [sidecar_worker(0, trainer=0, host_port=True), sidecar_worker(1, trainer=0)])
    assert cond.is_true(plan.status["conditions"], constants.SUCCEEDED)
    assert sorted(plan.deletes) == ["j-worker-0", "j-worker-1"]
