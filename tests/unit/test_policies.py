"""Table tests of the pure policies: restart, deadline, cleanup/TTL, API failures."""

from datetime import datetime, timedelta, timezone

import pytest

from disttrain.api import constants
from disttrain_probe.contract import vocabulary
from disttrain.api.types import DistTrainingJobSpec
from disttrain.reconcile.policies import apierrors, cleanup, deadline, restart
from disttrain.reconcile.step import ApiFailure

from ..support.fixtures import TEMPLATE, pod

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)


def spec(**kw):
    return DistTrainingJobSpec.model_validate({"numNodes": 2, "template": TEMPLATE, **kw})


@pytest.mark.parametrize("restarts,limit,reprobe,probe,want", [
    (0, 0, False, True, restart.Decision(False, False, vocabulary.RANK_FAILED)),
    (0, 2, False, True, restart.Decision(True, False, vocabulary.RESTARTING)),
    (1, 2, True, True, restart.Decision(True, True, vocabulary.RESTARTING)),
    (1, 2, True, False, restart.Decision(True, False, vocabulary.RESTARTING)),  # nothing to re-probe
    (2, 2, True, True, restart.Decision(False, False, vocabulary.BACKOFF_LIMIT_EXCEEDED)),
    (5, 2, False, True, restart.Decision(False, False, vocabulary.BACKOFF_LIMIT_EXCEEDED)),
])
def test_restart_decision(restarts, limit, reprobe, probe, want):
    assert restart.on_rank_failure(restarts, limit, reprobe, probe) == want


@pytest.mark.parametrize("start,limit,now_offset,want", [
    (None, 90, 0, None),
    (NOW, None, 0, None),
    (NOW, 90, 0, 90.0),
    (NOW, 90, 89.5, 0.5),
    (NOW, 90, 120, -30.0),
])
def test_seconds_left(start, limit, now_offset, want):
    assert deadline.seconds_left(start, limit, NOW + timedelta(seconds=now_offset)) == want


def test_probe_budget_is_timeout_plus_slack():
    assert deadline.probe_budget_seconds(spec(probe={"timeoutSeconds": 20})) == 20 + deadline.PROBE_SLACK_SECONDS


def test_training_deadline_only_when_set():
    assert deadline.training_seconds_left(spec(), NOW, NOW) is None
    s = spec(runPolicy={"activeDeadlineSeconds": 10})
    assert deadline.training_seconds_left(s, NOW, NOW + timedelta(seconds=4)) == 6
    assert deadline.training_seconds_left(s, None, NOW) is None


def probes():
    return [pod("j-probe-0", "probe", 0, phase="Succeeded"), pod("j-probe-1", "probe", 1, phase="Running")]


@pytest.mark.parametrize("keep,failed,want", [
    ("OnFailure", True, ["j-probe-1"]),             # kept for their logs; a running one goes
    ("OnFailure", False, ["j-probe-0", "j-probe-1"]),
    ("Never", True, ["j-probe-0", "j-probe-1"]),
    ("Always", False, ["j-probe-1"]),               # still running: it only blocks ports
])
def test_probes_to_delete(keep, failed, want):
    out = cleanup.probes_to_delete(spec(probe={"keepPods": keep}), failed, probes())
    assert [p["metadata"]["name"] for p in out] == want


@pytest.mark.parametrize("policy,want", [
    ("Running", ["j-worker-1", "j-worker-2"]),
    ("All", ["j-worker-0", "j-worker-1", "j-worker-2"]),
    ("None", []),
])
def test_workers_to_delete(policy, want):
    ws = [pod(f"j-worker-{r}", "worker", r, phase=ph) for r, ph in enumerate(("Succeeded", "Running", "Pending"))]
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


@pytest.mark.parametrize("failure,terminal", [
    (ApiFailure("create", "Pod", "j-probe-0", 422, 'Pod "j-probe-0" is invalid: spec.containers[0].image: Required value'), True),
    (ApiFailure("create", "Pod", "j-probe-0", 400, "bad request"), True),
    (ApiFailure("create", "Pod", "j-probe-0", 403, 'pods "j-probe-0" is forbidden: violates PodSecurity "restricted:latest"'), True),
    (ApiFailure("create", "Pod", "j-probe-0", 403, 'pods "j-probe-0" is forbidden: exceeded quota: q'), False),
    (ApiFailure("create", "Service", "j", 422, "invalid"), True),
    (ApiFailure("create", "Pod", "j-probe-0", 500, "etcd timeout"), False),
    (ApiFailure("create", "Pod", "j-probe-0", 0, "ConnectionRefused"), False),
    (ApiFailure("patch", "status", "j", 422, "invalid status"), False),
    (ApiFailure("delete", "Pod", "j-probe-0", 422, "x"), False),
])
def test_which_api_failures_are_terminal(failure, terminal):
    assert apierrors.is_terminal(failure) is terminal


def test_backoff_doubles_to_a_cap():
    assert [apierrors.backoff_seconds(n) for n in (1, 2, 3, 4, 7, 30)] == [1, 2, 4, 8, 60, 60]


def test_pod_field_paths_become_the_jobs():
    msg = 'Pod "j-probe-0" is invalid: spec.containers[0].resources.limits[cpu]: Invalid value: "abc"; metadata.labels: bad'
    out = apierrors.template_field_message(msg)
    assert "spec.template.spec.containers[0].resources.limits[cpu]" in out
    assert "spec.template.metadata.labels" in out and out.startswith('Pod "j-probe-0" is invalid: ')


# containerd 1.6's message for an image no registry serves, as the kubelet of a real node
# put it in the probe's init container status (make demo with spec.probe.image changed)
REAL_PULL_ERROR = (
    'failed to pull and unpack image "disttrain.dev/test/missing:0": failed to resolve reference '
    '"disttrain.dev/test/missing:0": failed to do request: Head '
    '"https://disttrain.dev/v2/test/missing/manifests/0": dial tcp: lookup disttrain.dev on '
    '10.96.0.10:53: no such host')


def test_image_pull_failure_names_rank_node_and_the_cause_at_the_end():
    from disttrain.children import observe
    from disttrain.reconcile.policies import probing

    def pulling(name, node):
        p = pod(name, constants.ROLE_PROBE, int(name[-1]), node=node)
        p["status"] = {"initContainerStatuses": [{
            "name": "install-probe", "image": "disttrain.dev/test/missing:0",
            "state": {"waiting": {"reason": "ErrImagePull", "message": REAL_PULL_ERROR}}}]}
        return p

    pods = [pulling("j-probe-0", "node-a"), pulling("j-probe-1", "node-b")]
    pull = [(r, p, observe.image_pull_error(p)) for r, p in enumerate(pods)]
    msg = probing._pull_summary(pull)
    assert msg.startswith("rank 0 on node-a, rank 1 on node-b: disttrain.dev/test/missing:0: ErrImagePull: ")
    assert msg.endswith("lookup disttrain.dev on 10.96.0.10:53: no such host")
    assert "failed to pull and unpack" not in msg and msg.count("disttrain.dev/test/missing:0") == 1
    assert len(msg) < 300
    assert observe.pull_cause("x" * 500).startswith("...") and len(observe.pull_cause("x" * 500)) == 160
