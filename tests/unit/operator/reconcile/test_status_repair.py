"""A status written by hand or by an older operator is repaired, never a crash."""

from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.api import constants as C
from disttrain.reconcile.status_repair import repair
from disttrain.shell.kube import merge_patch
from disttrain_probe.contract import vocabulary as V
from tests.fuzz.simapi import apply_merge_patch

NOW = "2026-11-30T12:00:00Z"


def test_malformed_conditions_are_dropped_or_filled():
    raw = {"conditions": [
        {"type": "Validated"},                                   # no status: dropped
        {"type": "Succeeded", "status": "Maybe"},                # unknown status: dropped
        {"status": "True"},                                      # no type: dropped
        "garbage",
        {"type": "Failed", "status": "False"},                   # filled in
        {"type": "Failed", "status": "True", "reason": "Dup"},   # duplicate type: first wins
    ]}
    out = repair(raw, NOW)
    assert out["conditions"] == [{"type": "Failed", "status": "False", "reason": "Unknown", "message": "",
                                  "lastTransitionTime": NOW, "observedGeneration": None},
                                 {"type": "Succeeded", "status": "Unknown", "reason": "Unknown", "message": "",
                                  "lastTransitionTime": NOW, "observedGeneration": None}]  # set together


def test_integers_given_as_strings_are_read():
    out = repair({"restarts": "1", "probe": {"attempt": "2"}, "rendezvous": {"masterPort": "29500"},
                  "nodes": [{"rank": "0", "name": "node-a"}, {"name": "no-rank"}, {"rank": "x"}]}, NOW)
    assert out["restarts"] == 1 and out["probe"]["attempt"] == 2
    assert out["rendezvous"]["masterPort"] == 29500
    assert out["nodes"] == [{"rank": 0, "name": "node-a"}]


def test_garbage_is_dropped():
    out = repair({"restarts": -3, "probe": "x", "rendezvous": [1], "startTime": 5,
                  "extra": {"bad": float("nan")}, "kept": {"ok": [1, "a"]}}, NOW)
    assert out["restarts"] == 0 and out["probe"] == {} and out["rendezvous"] == {}
    assert "startTime" not in out and "extra" not in out and out["kept"] == {"ok": [1, "a"]}
    for raw in (None, [], "status", 3):
        assert repair(raw, NOW)["conditions"] == []


def test_merge_patch_removes_what_the_new_status_dropped():
    old = {"probe": {"attempt": 1, "warnings": ["w"], "busBandwidthGBps": 1.2}, "phase": "Running"}
    new = {"probe": {"attempt": 2}, "phase": "Probing"}
    assert merge_patch(old, new) == {"probe": {"attempt": 2, "warnings": None, "busBandwidthGBps": None},
                                     "phase": "Probing"}
    assert merge_patch(new, new) == {}
    assert merge_patch({"a": [1, 2]}, {"a": [1]}) == {"a": [1]}  # lists are replaced whole


def test_merge_patch_round_trips():
    cases = [({}, {"a": 1}), ({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}), ({"x": 1}, {}),
             ({"a": {"b": {"c": 1}}}, {"a": {"b": {"d": 2}}})]
    for old, new in cases:
        assert apply_merge_patch(old, merge_patch(old, new)) == new


COND = st.fixed_dictionaries({
    "type": st.sampled_from([C.VALIDATED, C.SUCCEEDED, C.FAILED, C.TRAINING_STARTED, C.NETWORK_VALIDATED]),
    "status": st.sampled_from([C.TRUE, C.FALSE, C.UNKNOWN, "Maybe", None]),
    "reason": st.sampled_from([V.ALL_RANKS_SUCCEEDED, V.RANK_FAILED, V.PREFLIGHT_FAILED, V.INVALID_SPEC,
                               V.TRAINING_RUNNING, V.MASTER_PORT_TIMEOUT, None]),
    "message": st.sampled_from(["m", "", None])})


@settings(max_examples=300, deadline=None)
@given(st.lists(COND, max_size=6))
def test_succeeded_and_failed_are_always_set_together(conds):
    """Whatever a hand edit left: no conditions at all (the step writes them afresh), or
    Succeeded and Failed both, never both True, and one True only beside the other False."""
    out = {c["type"]: c for c in repair({"conditions": conds}, NOW)["conditions"]}
    if not out:
        return
    assert C.SUCCEEDED in out and C.FAILED in out, sorted(out)
    s, f = out[C.SUCCEEDED]["status"], out[C.FAILED]["status"]
    assert (s, f) != (C.TRUE, C.TRUE)
    assert C.TRUE not in (s, f) or {s, f} == {C.TRUE, C.FALSE}


def test_a_running_jobs_dropped_succeeded_is_written_again_beside_failed():
    running = [{"type": C.VALIDATED, "status": C.TRUE, "reason": V.ALL_CHECKS_PASSED},
               {"type": C.FAILED, "status": C.UNKNOWN, "reason": V.TRAINING_RUNNING, "message": "training is running"}]
    out = {c["type"]: c for c in repair({"conditions": running}, NOW)["conditions"]}
    assert (out[C.SUCCEEDED]["status"], out[C.SUCCEEDED]["reason"]) == (C.UNKNOWN, V.TRAINING_RUNNING)
