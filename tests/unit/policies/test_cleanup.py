"""What is deleted when a job ends, and when the job itself goes
(:mod:`disttrain.reconcile.policies.cleanup`)."""

from datetime import timedelta

import pytest

from disttrain.reconcile.policies import cleanup

from ...support.builders import given, spec_of as spec
from ...support.reconcile import NOW


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
