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
- ``disttrain_progress_idle_seconds{namespace,job}``: while training is watched, the
  largest seconds any rank's collectives have not advanced, as the last stall verdict saw it
  (gauge, from ``status.progress.rankDetails``; absent while the status has none);
- ``disttrain_stalls_total{reason}``: stall verdicts (``Progressing`` turned False) by reason
  (counter; only the Progressing failure reasons of the vocabulary, e.g. RankStuckInPython).

:func:`observe` derives every update from the status before and after one reconcile step,
so a metric moves exactly once per transition however often the step runs.
"""

from __future__ import annotations

from typing import Any, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary

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

PROGRESS_IDLE = Gauge(
    "disttrain_progress_idle_seconds", "Largest seconds a rank's collectives have not advanced, "
    "per watched job, at the last stall verdict.", ["namespace", "job"], registry=REGISTRY,
)
STALLS = Counter(
    "disttrain_stalls", "Stall verdicts (Progressing turned False) by reason.", ["reason"],
    registry=REGISTRY,
)
CHECK_ANSWERS = Counter(
    "disttrain_admission_check_answers", "Answers the Kueue admission check wrote (Ready, Retry, Rejected), "
    "counted when the state changes.", ["state"], registry=REGISTRY,
)
# The reasons a stall verdict may count under: Progressing's failure reasons (bounded labels).
STALL_REASONS = frozenset(r.name for r in vocabulary.REASONS.values()
                          if r.condition == constants.PROGRESSING and r.kind == vocabulary.FAILURE)

_phases: dict[tuple[str, str], str] = {}


def serve(port: int) -> None:
    """Serve /metrics on 0.0.0.0:``port`` in a background thread."""
    start_http_server(port, registry=REGISTRY)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _verdict(status: Any) -> Optional[tuple[str, str]]:
    """(status, reason) of a decided ``Validated`` condition, else None. ``status`` is
    untrusted (a hand edit may leave any shape): anything malformed reads as undecided."""
    conds = _dict(status).get("conditions")
    v = cond.get([c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else [], constants.VALIDATED)
    if v is None or v.get("status") not in (constants.TRUE, constants.FALSE):
        return None
    reason = v.get("reason")
    return v["status"], reason if isinstance(reason, str) and reason else constants.UNKNOWN


def _number(value: Any) -> Optional[float]:
    """A finite number of the status, else None (a hand edit may put anything there)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def _stall(status: Any) -> Optional[str]:
    """The reason of a ``Progressing=False`` condition when it is one of
    :data:`STALL_REASONS`, else None (a hand edit's anything reads as no stall)."""
    conds = _dict(status).get("conditions")
    p = cond.get([c for c in conds if isinstance(c, dict)] if isinstance(conds, list) else [], constants.PROGRESSING)
    if p is None or p.get("status") != constants.FALSE:
        return None
    reason = p.get("reason")
    return reason if isinstance(reason, str) and reason in STALL_REASONS else None


def _idle(status: Any) -> Optional[float]:
    """The largest ``idleSeconds`` (finite, >= 0) of ``status.progress.rankDetails``; None
    when there is none."""
    rows = _dict(_dict(status).get("progress")).get("rankDetails")
    ages = [a for d in (rows if isinstance(rows, list) else [])
            if (a := _number(_dict(d).get("idleSeconds"))) is not None and a >= 0]
    return max(ages, default=None)


def _observe_progress(namespace: str, name: str, old: Any, new: Any) -> None:
    stalled = _stall(new)
    if stalled is not None and _stall(old) != stalled:
        STALLS.labels(stalled).inc()
    idle = _idle(new)
    if idle is not None:
        PROGRESS_IDLE.labels(namespace, name).set(idle)
    else:
        try:
            PROGRESS_IDLE.remove(namespace, name)
        except KeyError:
            pass


def observe(namespace: str, name: str, old: Any, new: Any) -> None:
    """Record what changed between the status before (``old``) and after (``new``) a step.
    Both are untrusted (``old`` is what the apiserver holds, hand edits included): never
    raises for their shape."""
    key = (namespace, name)
    new = _dict(new)
    phase = new.get("phase")
    phase = phase if isinstance(phase, str) and phase else constants.PHASE_PENDING
    if _phases.get(key) != phase:
        if key in _phases:
            JOBS.labels(_phases[key]).dec()
        JOBS.labels(phase).inc()
        _phases[key] = phase
    before, after = _verdict(old), _verdict(new)
    probe = _dict(new.get("probe"))
    if after and before != after:
        PROBE_OUTCOMES.labels(after[1]).inc()
        duration = _number(probe.get("durationSeconds"))
        if duration is not None:
            PROBE_DURATION.observe(duration)
    busbw = _number(probe.get("busBandwidthGBps"))
    if busbw is not None:
        BUS_BANDWIDTH.labels(namespace, name).set(busbw)
    _observe_progress(namespace, name, old, new)


def api_error(verb: str, kind: str, code: int) -> None:
    """Count one failed API call (retried by the next step)."""
    API_ERRORS.labels(verb, kind, str(code)).inc()


def check_answer(state: str) -> None:
    """Count one answer of the admission check (its states only: bounded labels)."""
    if state in ("Ready", "Retry", "Rejected"):
        CHECK_ANSWERS.labels(state).inc()


def forget(namespace: str, name: str) -> None:
    """Drop a deleted job from the gauges."""
    phase = _phases.pop((namespace, name), None)
    if phase is not None:
        JOBS.labels(phase).dec()
    for gauge in (BUS_BANDWIDTH, PROGRESS_IDLE):
        try:
            gauge.remove(namespace, name)
        except KeyError:
            pass
