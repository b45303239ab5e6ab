"""Time limits (pure): the probe budget and ``runPolicy.activeDeadlineSeconds``.

The probe budget is ``spec.probe.timeoutSeconds`` (the probes' own limit, enforced by each
probe's watchdog) plus :data:`PROBE_SLACK_SECONDS` for scheduling and pod start-up; it is
counted from when the first probe pod of the attempt was created, so a job waiting for
quota or for an old pod's name to be freed does not spend it. Past it, the preflight fails
with ``ProbeTimeout`` naming the pods still waiting. ``activeDeadlineSeconds`` is counted
from ``status.startTime`` (the first training pod), as Kubeflow's RunPolicy does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

from disttrain.api.types import DistTrainingJobSpec

PROBE_SLACK_SECONDS = 30


def probe_budget_seconds(spec: DistTrainingJobSpec) -> float:
    """Seconds a probe attempt may take, from its first pod's creation to the verdict."""
    return float(spec.probe.timeout_seconds + PROBE_SLACK_SECONDS)


def seconds_left(start: Optional[datetime], limit: Optional[float], now: datetime) -> Optional[float]:
    """Seconds until ``start + limit`` (negative once past); None when either is unknown."""
    if start is None or limit is None:
        return None
    return float(limit) - (now - start).total_seconds()


def training_seconds_left(spec: DistTrainingJobSpec, start: Optional[datetime],
                          now: datetime) -> Optional[float]:
    """Seconds left of runPolicy.activeDeadlineSeconds (negative once past), None if unset."""
    return seconds_left(start, spec.run_policy.active_deadline_seconds, now)
