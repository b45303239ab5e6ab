"""The stall watch's metrics: ``disttrain_progress_idle_seconds{namespace,job}`` and
``disttrain_stalls_total{reason}`` move once per transition, are forgotten with the job,
and a hand-edited status never raises nor adds a label."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.shell import metrics
from disttrain_probe.contract import vocabulary as V

IDLE, STALLS = "disttrain_progress_idle_seconds", "disttrain_stalls_total"


def value(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels)


def stall_labels() -> set[str]:
    return {s.labels["reason"] for m in metrics.REGISTRY.collect() if m.name == "disttrain_stalls"
            for s in m.samples if s.name == STALLS}


def status(progressing=None, reason=V.COLLECTIVES_ADVANCING, idle=()):
    conds = [{"type": "Progressing", "status": progressing, "reason": reason}] if progressing else []
    return {"phase": "Running", "conditions": conds,
            "progress": {"seq": 9, "rankDetails": [{"rank": r, "node": "n", "where": "python", "idleSeconds": a}
                                                   for r, a in enumerate(idle)]}}


def test_a_stall_is_counted_once_by_reason_and_the_idle_gauge_follows():
    before = value(STALLS, reason=V.RANK_STUCK_IN_PYTHON) or 0.0
    ok = status("True", idle=(0, 0))
    metrics.observe("ns", "p1", None, ok)
    assert value(IDLE, namespace="ns", job="p1") == 0.0
    waiting = status("Unknown", V.RANKS_WAITING, idle=(12, 40))
    metrics.observe("ns", "p1", ok, waiting)
    assert value(IDLE, namespace="ns", job="p1") == 40.0
    stalled = status("False", V.RANK_STUCK_IN_PYTHON, idle=(70, 65))
    metrics.observe("ns", "p1", waiting, stalled)
    metrics.observe("ns", "p1", stalled, status("False", V.RANK_STUCK_IN_PYTHON, idle=(75, 70)))
    assert value(STALLS, reason=V.RANK_STUCK_IN_PYTHON) == before + 1
    assert value(IDLE, namespace="ns", job="p1") == 75.0
    metrics.observe("ns", "p1", stalled, {"phase": "Running"})  # progress gone: the gauge too
    assert value(IDLE, namespace="ns", job="p1") is None
    metrics.observe("ns", "p1", None, stalled)
    metrics.forget("ns", "p1")
    assert value(IDLE, namespace="ns", job="p1") is None


def test_a_different_stall_reason_counts_again():
    before = value(STALLS, reason=V.RANK_UNRESPONSIVE) or 0.0
    metrics.observe("ns", "p2", status("False", V.RANK_STUCK_IN_PYTHON), status("False", V.RANK_UNRESPONSIVE))
    assert value(STALLS, reason=V.RANK_UNRESPONSIVE) == before + 1
    metrics.forget("ns", "p2")


def test_stall_reasons_are_progressings_failures():
    assert metrics.STALL_REASONS == {V.RANK_STUCK_IN_PYTHON, V.RANK_UNRESPONSIVE, V.COLLECTIVE_STALLED,
                                     V.COLLECTIVES_MISMATCHED, V.STALL_NOT_ATTRIBUTED}


@pytest.mark.parametrize("new", [
    status("False", "MadeUp"), status("False", 7), status("False", None), status("False", V.RANKS_WAITING),
    {"conditions": [{"type": "Progressing", "status": "False", "reason": V.ALL_CHECKS_PASSED}]},
    {"progress": "garbage"}, {"progress": {"rankDetails": "x"}}, {"progress": {"rankDetails": [None, {"idleSeconds": "9"}]}},
    {"progress": {"rankDetails": [{"idleSeconds": float("nan")}, {"idleSeconds": -3}, {"idleSeconds": True}]}},
])
def test_a_garbled_status_adds_no_label(new):
    labels = stall_labels()
    metrics.observe("ns", "garbled", None, new)
    assert stall_labels() == labels
    assert value(IDLE, namespace="ns", job="garbled") is None
    metrics.forget("ns", "garbled")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                    max_leaves=16)
REASON = st.one_of(JSON, st.sampled_from(sorted(V.REASONS)))
STATUS = st.one_of(JSON, st.fixed_dictionaries({}, optional={
    "conditions": st.one_of(JSON, st.lists(st.fixed_dictionaries({"type": st.just("Progressing")}, optional={
        "status": st.sampled_from(["True", "False", "Unknown", None, 0]), "reason": REASON}), max_size=2)),
    "progress": st.one_of(JSON, st.fixed_dictionaries({}, optional={"rankDetails": st.one_of(
        JSON, st.lists(st.one_of(JSON, st.fixed_dictionaries({}, optional={"idleSeconds": JSON})), max_size=5))}))}))


@settings(max_examples=200, deadline=None)
@given(old=STATUS, new=STATUS)
def test_observe_never_raises_and_counts_only_vocabulary_reasons(old, new):
    metrics.observe("ns", "fuzzed", old, new)
    idle = value(IDLE, namespace="ns", job="fuzzed")
    assert idle is None or idle >= 0
    assert stall_labels() <= metrics.STALL_REASONS
    metrics.forget("ns", "fuzzed")
