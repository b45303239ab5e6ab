"""What is deleted when a job ends, and when the job itself goes (pure).

- probe pods: one still running after the verdict only holds ports: deleted; finished ones
  follow ``probe.keepPods`` (Never, OnFailure: kept only when the preflight failed,
  Always);
- training pods: ``runPolicy.cleanPodPolicy`` (Running: those still pending or running,
  All, None), as Kubeflow's; with None, a pod still running that holds host ports is
  deleted all the same (a sidecar that outlives the trainer would hold them for good);
- the job: ``runPolicy.ttlSecondsAfterFinished`` seconds after it finished it is deleted
  (its children go with it through their ownerReferences), as batch/v1 Job and Kubeflow do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from disttrain.api.common import ProbePlacement
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import observe
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


def workers_to_delete(spec: DistTrainingJobSpec, workers: list[dict[str, Any]],
                      preflight_failed: bool = False) -> list[dict[str, Any]]:
    """The training pods to delete once the job has finished (cleanPodPolicy); with None,
    still those pending or running that hold host ports (:func:`holds_host_ports`: a pod
    whose trainer ended but whose sidecar runs on would keep the next job's pods off the
    node's ports for good). In place (``probe.placement: InPlace``) after a failed
    preflight, every pending or running one whatever the policy: no training may run on
    in a job whose preflight failed."""
    policy = spec.run_policy.clean_pod_policy
    if policy == "All":
        return list(workers)
    running = [p for p in workers if observe.phase(p) in ("Pending", "Running")]
    if preflight_failed and spec.probe.placement == ProbePlacement.InPlace.value:
        return running
    return running if policy == "Running" else [p for p in running if holds_host_ports(p)]


def holds_host_ports(pod: Any) -> bool:
    """Whether a pod declares a port on its node: a hostPort of a container or init
    container, or any containerPort with hostNetwork (the apiserver makes it a hostPort)."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    host_network = spec.get("hostNetwork") is True
    for key in ("containers", "initContainers"):
        items = spec.get(key)
        for c in items if isinstance(items, list) else []:
            ports = c.get("ports") if isinstance(c, dict) else None
            for port in ports if isinstance(ports, list) else []:
                if isinstance(port, dict) and (port.get("hostPort") or (host_network and port.get("containerPort"))):
                    return True
    return False


def ttl_seconds_left(spec: DistTrainingJobSpec, finished_at: Optional[datetime],
                     now: datetime) -> Optional[float]:
    """Seconds until the finished job is deleted (<= 0: now); None without a TTL."""
    ttl = spec.run_policy.ttl_seconds_after_finished
    if ttl is None:
        return None
    return seconds_left(finished_at or now, ttl, now)
