"""Prometheus metrics (prometheus-client), served by the operator on ``--metrics-port``.

- ``disttrain_jobs{phase}``: jobs the operator knows, by ``status.phase`` (gauge);
- ``disttrain_probe_outcomes_total{reason}``: finished preflights by ``Validated`` reason
  (counter; ``AllChecksPassed`` and ``PassedWithWarnings`` are passes);
- ``disttrain_probe_duration_seconds``: preflight duration, first probe pod created to
  verdict (histogram, seconds);
- ``disttrain_job_bus_bandwidth_gbps{namespace,job}``: the last probe's all-reduce busbw
  per job (gauge, GB/s with GB = 1e9 bytes);
- ``disttrain_api_errors_total{verb,kind,code}``: API calls that failed and are retried
  (counter; code 0 when the apiserver did not answer).

:func:`observe` derives every update from the status before and after one reconcile step,
so a metric moves exactly once per transition however often the step runs.
"""

from __future__ import annotations

from typing import Any, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from disttrain.reconcile import conditions as cond
from disttrain.api import constants

REGISTRY = CollectorRegistry()
JOBS = Gauge("disttrain_jobs", "DistTrainingJobs by phase.", ["phase"], registry=REGISTRY)
PROBE_OUTCOMES = Counter(
    "disttrain_probe_outcomes", "Finished preflight probes by Validated reason.", ["reason"],
    registry=REGISTRY,
)
PROBE_DURATION = Histogram(
    "disttrain_probe_duration_seconds", "Preflight duration, first probe pod to verdict (s).",
    buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=REGISTRY,
)
BUS_BANDWIDTH = Gauge(
    "disttrain_job_bus_bandwidth_gbps", "Last probe all-reduce busbw per job (GB/s).",
    ["namespace", "job"], registry=REGISTRY,
)

API_ERRORS = Counter(
    "disttrain_api_errors", "API calls of reconcile steps that failed, by verb, kind and HTTP code "
    "(0: no answer).", ["verb", "kind", "code"], registry=REGISTRY,
)

_phases: dict[tuple[str, str], str] = {}


def serve(port: int) -> None:
    """Serve /metrics on 0.0.0.0:``port`` in a background thread."""
    start_http_server(port, registry=REGISTRY)


def _verdict(status: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    v = cond.get((status or {}).get("conditions") or [], constants.VALIDATED)
    return v if v and v["status"] in (constants.TRUE, constants.FALSE) else None


def observe(namespace: str, name: str, old: Optional[dict], new: dict) -> None:
    """Record what changed between the status before (``old``) and after (``new``) a step."""
    key = (namespace, name)
    phase = new.get("phase") or constants.PHASE_PENDING
    if _phases.get(key) != phase:
        if key in _phases:
            JOBS.labels(_phases[key]).dec()
        JOBS.labels(phase).inc()
        _phases[key] = phase
    before, after = _verdict(old), _verdict(new)
    if after and (before is None or (before["status"], before["reason"]) != (after["status"], after["reason"])):
        PROBE_OUTCOMES.labels(after["reason"]).inc()
        duration = (new.get("probe") or {}).get("durationSeconds")
        if duration is not None:
            PROBE_DURATION.observe(float(duration))
    busbw = (new.get("probe") or {}).get("busBandwidthGBps")
    if busbw is not None:
        BUS_BANDWIDTH.labels(namespace, name).set(float(busbw))


def api_error(verb: str, kind: str, code: int) -> None:
    """Count one failed API call (retried by the next step)."""
    API_ERRORS.labels(verb, kind, str(code)).inc()


def forget(namespace: str, name: str) -> None:
    """Drop a deleted job from the gauges."""
    phase = _phases.pop((namespace, name), None)
    if phase is not None:
        JOBS.labels(phase).dec()
    try:
        BUS_BANDWIDTH.remove(namespace, name)
    except KeyError:
        pass
