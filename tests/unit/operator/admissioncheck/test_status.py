"""Reading and writing our check's entry in a Workload's status
(:mod:`disttrain.admissioncheck.status`)."""
import pytest

from disttrain.admissioncheck import status as S
from disttrain.admissioncheck.answer import PENDING, READY, RETRY, Answer

from .workloads import pytorchjob

CHECK = "preflight"


def _wl(state=PENDING, quota="True", finished=None, deleting=False, **extra):
    wl = pytorchjob(workers=1)
    conds = [{"type": "QuotaReserved", "status": quota}]
    if finished:
        conds.append({"type": "Finished", "status": finished})
    wl["status"] = {"conditions": conds, "admissionChecks": [
        {"name": "other", "state": PENDING, "message": "", "lastTransitionTime": "t0"},
        {"name": CHECK, "state": state, "message": "", "lastTransitionTime": "t0", **extra}]}
    if deleting:
        wl["metadata"]["deletionTimestamp"] = "t9"
    return wl


@pytest.mark.parametrize("wl, want", [
    (_wl(), [CHECK]),
    (_wl(quota="False"), []),  # no quota yet: nothing to probe for
    (_wl(state=READY), []),
    (_wl(finished="True"), []),
    (_wl(deleting=True), []),
    ({"status": "x"}, []),
    (None, []),
])
def test_awaiting_is_our_pending_check_once_quota_is_reserved(wl, want):
    assert S.awaiting(wl, {CHECK, "absent"}) == want


@pytest.mark.parametrize("extra, want", [({"retryCount": 2}, 2), ({}, 0), ({"retryCount": "2"}, 0), ({"retryCount": True}, 0)])
def test_retry_count_is_kueue_s_count_or_0(extra, want):
    assert S.retry_count(_wl(**extra), CHECK) == want


def test_the_apply_body_sets_only_our_entry_and_moves_the_time_on_a_state_change():
    ans = Answer(RETRY, "EphemeralPortsBlocked: node-b ...", requeue_after_seconds=30, avoid=("node-b",))
    body = S.apply_body(_wl(), CHECK, ans, now="t1")
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    assert body["metadata"] == {"name": "pytorchjob-train-abc12", "namespace": "team"}
    assert body["status"] == {"admissionChecks": [{"name": CHECK, "state": RETRY, "message": ans.message,
                                                   "lastTransitionTime": "t1", "requeueAfterSeconds": 30}]}


def test_the_same_state_keeps_its_transition_time_and_ready_carries_the_updates():
    ups = [{"name": "worker", "nodeSelector": {"k": "true"}}]
    body = S.apply_body(_wl(state=READY), CHECK, Answer(READY, "ok", ups), now="t1")
    [e] = body["status"]["admissionChecks"]
    assert e["lastTransitionTime"] == "t0" and e["podSetUpdates"] == ups and "requeueAfterSeconds" not in e


def test_an_admission_check_is_marked_active_at_its_generation_once():
    from disttrain.admissioncheck.status import active_body
    ac = {"metadata": {"name": "preflight", "generation": 2}, "spec": {"controllerName": "disttrain.dev/preflight"}}
    body = active_body(ac, "2026-12-01T12:00:00Z")
    assert body is not None and body["kind"] == "AdmissionCheck" and body["metadata"] == {"name": "preflight"}
    (cond,) = body["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["observedGeneration"]) == ("Active", "True", 2)
    assert active_body(dict(ac, status=body["status"]), "later") is None
    assert active_body(dict(ac, metadata={"name": "preflight", "generation": 3}, status=body["status"]), "t")
    assert active_body("garbage", "t") is None
