"""What is deleted when a job ends, and when the job itself goes (pure).

- probe pods: one still running after the verdict only holds ports: deleted; finished ones
  follow ``probe.keepPods`` (Never, OnFailure: kept only when the preflight failed,
  Always);
- training pods: ``runPolicy.cleanPodPolicy`` (Running: those still pending or running,
  All, None), as Kubeflow's;
- the job: ``runPolicy.ttlSecondsAfterFinished`` seconds after it finished it is deleted
  (its children go with it through their ownerReferences), as batch/v1 Job and Kubeflow do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from disttrain.children import observe
from disttrain.api.types import DistTrainingJobSpec
from disttrain.reconcile.policies.deadline import seconds_left


def probes_to_delete(spec: DistTrainingJobSpec, preflight_failed: bool,
                     probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probe pods to delete once the job has finished."""
    keep = spec.probe.keep_pods
    out = []
    for p in probes:
        if not observe.finished(p):
            out.append(p)
        elif keep == "Never" or (keep == "OnFailure" and not preflight_failed):
            out.append(p)
    return out


def workers_to_delete(spec: DistTrainingJobSpec, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training pods to delete once the job has finished (cleanPodPolicy)."""
    policy = spec.run_policy.clean_pod_policy
    if policy == "All":
        return list(workers)
    if policy == "Running":
        return [p for p in workers if observe.phase(p) in ("Pending", "Running")]
    return []


def ttl_seconds_left(spec: DistTrainingJobSpec, finished_at: Optional[datetime],
                     now: datetime) -> Optional[float]:
    """Seconds until the finished job is deleted (<= 0: now); None without a TTL."""
    ttl = spec.run_policy.ttl_seconds_after_finished
    if ttl is None:
        return None
    return seconds_left(finished_at or now, ttl, now)
