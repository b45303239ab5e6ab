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
