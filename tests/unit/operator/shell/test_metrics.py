"""Metrics move once per transition, however often a step runs."""

from disttrain.shell import metrics


def value(name, **labels):
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def status(phase, validated=None, reason="AllChecksPassed", busbw=None, duration=None):
    conds = []
    if validated:
        conds.append({"type": "Validated", "status": validated, "reason": reason})
    return {"phase": phase, "conditions": conds, "probe": {"busBandwidthGBps": busbw, "durationSeconds": duration}}


def test_outcome_counted_once_and_gauges_follow_phase():
    before = value("disttrain_probe_outcomes_total", reason="AllChecksPassed")
    probing = status("Probing")
    metrics.observe("ns", "m1", None, probing)
    assert value("disttrain_jobs", phase="Probing") >= 1
    done = status("Validated", "True", busbw=0.5, duration=3.2)
    metrics.observe("ns", "m1", probing, done)
    metrics.observe("ns", "m1", done, done)  # the same status again: no new count
    assert value("disttrain_probe_outcomes_total", reason="AllChecksPassed") == before + 1
    assert value("disttrain_job_bus_bandwidth_gbps", namespace="ns", job="m1") == 0.5
    assert value("disttrain_probe_duration_seconds_count") >= 1
    metrics.forget("ns", "m1")
    assert value("disttrain_job_bus_bandwidth_gbps", namespace="ns", job="m1") == 0.0


import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
CONDITION = st.fixed_dictionaries({"type": st.just("Validated")}, optional={
    "status": st.sampled_from(["True", "False", "Unknown", None, 1]), "reason": JSON})
STATUS = st.one_of(JSON, st.fixed_dictionaries({}, optional={
    "phase": JSON, "conditions": st.one_of(JSON, st.lists(st.one_of(CONDITION, JSON), max_size=3)),
    "probe": st.one_of(JSON, st.fixed_dictionaries({}, optional={"durationSeconds": JSON, "busBandwidthGBps": JSON}))}))


@pytest.mark.parametrize("old", [
    {"conditions": [{"type": "Validated", "reason": "Passed"}]},  # no status
    {"conditions": [{"type": "Validated", "status": "True"}]},  # no reason
    {"conditions": "garbage"}, {"conditions": ["garbage"]}, "garbage", [],
    {"probe": {"durationSeconds": "3s", "busBandwidthGBps": "fast"}},
])
def test_a_hand_edited_status_is_read_as_undecided_never_raised_on(old):
    metrics.observe("ns", "tampered", old, status("Validated", "True", duration="x", busbw=float("nan")))
    metrics.observe("ns", "tampered", status("Validated", "True"), old)
    metrics.forget("ns", "tampered")


@settings(max_examples=200, deadline=None)
@given(old=STATUS, new=STATUS)
def test_observe_never_raises(old, new):
    metrics.observe("ns", "gen", old, new)
    metrics.forget("ns", "gen")


def test_a_step_over_a_tampered_validated_condition_does_not_raise():
    """The job's stored Validated lost its status and reason (a hand edit): the step
    applies its plan and returns; the metrics read the old condition as undecided."""
    from disttrain.shell.runner import Reconciler
    from tests.fuzz.simapi import NS, SimApi, kube_for
    from tests.support.fixtures import job

    sim = SimApi()
    sim.add_job(job()["spec"])
    op = Reconciler(kube_for(sim), probe_image="probe:1")
    op.step(NS, "j", now=sim.now)
    for c in sim.job()["status"]["conditions"]:
        if c["type"] == "Validated":
            c.pop("status")
            c["reason"] = {"not": "a string"}
    op.step(NS, "j", now=sim.now)  # must not raise
