"""Kueue's Workload for a queued job (pure builders and readers).

A DistTrainingJob labelled ``kueue.x-k8s.io/queue-name: <LocalQueue>`` is admitted by Kueue
against its ClusterQueue's quota before any of its pods exists. The operator does what
Kueue's job integrations do for their own kinds: it creates a ``Workload``
(``kueue.x-k8s.io/v1beta2``, owned by the job) with one pod set of ``numNodes`` pods shaped
like the job's pod template, waits for Kueue to admit it, places the pods with the admitted
ResourceFlavors' node labels and tolerations, stops the pods and hands the quota back when
Kueue evicts the Workload (preemption, a stopped queue), and marks it ``Finished`` when the
job ends. One Workload covers probes and training: a rank's probe and training pods never
run at the same time.

The Workload is named ``<job>-<first 8 characters of the job's UID>``, so a job deleted and
applied again under its name never meets its predecessor's Workload.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.common import ProbePlacement
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import inplace
from disttrain.children.names import JobRef

KUEUE_API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_SET = "nodes"
# Evictions after which Kueue requeues the Workload by itself (as its job integrations do).
REQUEUE_REASONS = ("Preempted", "NodeFailures")


def queue_name(labels: Any) -> Optional[str]:
    """The LocalQueue a job with these ``metadata.labels`` is queued in, or None."""
    value = labels.get(QUEUE_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) and value else None


def workload_name(job: JobRef) -> str:
    """``<job>-<uid[:8]>``: unique per incarnation of the job."""
    return f"{job.name}-{job.uid[:8]}".rstrip("-")


def _quota_containers(containers: Any) -> list[dict[str, Any]]:
    """Containers as the quota sees them: name, image, resources (and an init container's
    restartPolicy, which makes it a sidecar)."""
    out = []
    for ctr in containers if isinstance(containers, list) else []:
        if isinstance(ctr, dict):
            out.append({"name": ctr.get("name"), "image": ctr.get("image") or "unknown",
                        "resources": copy.deepcopy(ctr.get("resources") or {}),
                        **({"restartPolicy": ctr["restartPolicy"]} if ctr.get("restartPolicy") else {})})
    return out


def workload(job: JobRef, spec: DistTrainingJobSpec, queue: str) -> dict[str, Any]:
    """The Workload Kueue admits: one pod set of numNodes pods with the template's
    containers and init containers (their resource requests are what the quota counts, as
    the scheduler sums them; in place, the relay container too), node selector,
    affinity and tolerations (Kueue matches them against the ResourceFlavors)."""
    tmpl = spec.template.spec
    pod_spec: dict[str, Any] = {"containers": _quota_containers(tmpl.get("containers"))}
    if spec.probe.enabled and spec.probe.placement == ProbePlacement.InPlace.value:
        # in place, every training pod also runs the relay container: the quota counts it
        pod_spec["containers"] += _quota_containers([inplace.relay_container(spec, spec.probe.image or "probe")])
    if tmpl.get("initContainers"):  # sidecars and init containers count as the scheduler counts them
        pod_spec["initContainers"] = _quota_containers(tmpl.get("initContainers"))
    for key in ("nodeSelector", "affinity", "tolerations", "priorityClassName"):
        if tmpl.get(key):
            pod_spec[key] = copy.deepcopy(tmpl[key])
    return {
        "apiVersion": KUEUE_API, "kind": "Workload",
        "metadata": {"name": workload_name(job), "namespace": job.namespace,
                     "labels": {constants.LABEL_JOB: job.name},
                     "ownerReferences": [job.owner_reference()]},
        "spec": {"queueName": queue,
                 "podSets": [{"name": POD_SET, "count": spec.num_nodes,
                              "template": {"spec": pod_spec}}]},
    }


@dataclass(frozen=True)
class KueueRead:
    """What the operator read of a queued job's Kueue objects: its ``workload`` (None: none
    yet), the ResourceFlavors it was admitted with, or why they could not be read
    (``problem``: e.g. the chart was installed without ``kueue.enabled``, or Kueue's API is
    not served)."""

    workload: Optional[dict[str, Any]] = None
    flavors: tuple[dict[str, Any], ...] = ()
    problem: Optional[str] = None


@dataclass(frozen=True)
class Admission:
    """What Kueue says of a Workload: ``state`` pending | admitted | evicted | inactive |
    finished; ``reason``/``message`` Kueue's words; the ClusterQueue and the flavors
    (resource -> ResourceFlavor name) of the pod set when admitted."""

    state: str
    reason: str = ""
    message: str = ""
    cluster_queue: Optional[str] = None
    flavors: dict[str, str] = field(default_factory=dict)


def _conditions(wl: dict) -> dict[Any, dict]:  # keyed by each condition's "type", as given
    conds = (wl.get("status") or {}).get("conditions") or []
    return {x.get("type"): x for x in conds if isinstance(x, dict)}


def read(wl: dict) -> Admission:
    """The admission state of a Workload as the API returns it."""
    conds = _conditions(wl)
    status = wl.get("status") or {}
    admission = status.get("admission") or {}
    if conds.get("Finished", {}).get("status") == constants.TRUE:
        return Admission("finished", conds["Finished"].get("reason", ""), conds["Finished"].get("message", ""))
    evicted = conds.get("Evicted", {})
    if (wl.get("spec") or {}).get("active") is False:
        return Admission("inactive", evicted.get("reason") or "Deactivated",
                         evicted.get("message") or "the Workload was deactivated")
    if evicted.get("status") == constants.TRUE:
        return Admission("evicted", evicted.get("reason", ""), evicted.get("message", ""),
                         admission.get("clusterQueue"))
    if conds.get("Admitted", {}).get("status") == constants.TRUE and admission:
        flavors: dict[str, str] = {}
        for psa in admission.get("podSetAssignments") or []:
            if isinstance(psa, dict) and psa.get("name") == POD_SET:
                flavors = {str(k): str(v) for k, v in (psa.get("flavors") or {}).items()}
        return Admission("admitted", "Admitted", conds["Admitted"].get("message", ""),
                         admission.get("clusterQueue"), flavors)
    q = conds.get("QuotaReserved", {})
    return Admission("pending", q.get("reason") or "Pending",
                     q.get("message") or "waiting for Kueue to look at the Workload")


def placement(flavors: list[dict]) -> tuple[dict[str, str], list[dict]]:
    """The node labels (as a nodeSelector) and tolerations of the admitted ResourceFlavors."""
    selector: dict[str, str] = {}
    tolerations: list[dict] = []
    for rf in flavors:
        spec = rf.get("spec") or {}
        selector.update({str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()})
        for t in spec.get("tolerations") or []:
            if t not in tolerations:
                tolerations.append(t)
    return selector, tolerations


def place(pod: dict[str, Any], selector: dict[str, str], tolerations: list[dict]) -> None:
    """Add the admitted flavors' node selector and tolerations to ``pod`` (in place)."""
    pod_spec = pod["spec"]
    if selector:
        merged = dict(pod_spec.get("nodeSelector") or {})
        merged.update(selector)
        pod_spec["nodeSelector"] = merged
    if tolerations:
        have = list(pod_spec.get("tolerations") or [])
        pod_spec["tolerations"] = have + [t for t in tolerations if t not in have]


def _with_condition(wl: dict, ctype: str, status: str, reason: str, message: str,
                    now: str) -> list[dict]:
    conds = [dict(x) for x in (wl.get("status") or {}).get("conditions") or [] if isinstance(x, dict)]
    for x in conds:
        if x.get("type") == ctype:
            if x.get("status") != status:
                x["lastTransitionTime"] = now
            x.update(status=status, reason=reason, message=message[:32768])
            return conds
    conds.append({"type": ctype, "status": status, "reason": reason, "message": message[:32768],
                  "lastTransitionTime": now})
    return conds


def finished_patch(wl: dict, succeeded: bool, message: str, now: str) -> dict[str, Any]:
    """The status patch that marks the Workload Finished (Kueue then releases the quota)."""
    reason = "Succeeded" if succeeded else "Failed"
    return {"metadata": {"resourceVersion": (wl.get("metadata") or {}).get("resourceVersion")},
            "status": {"conditions": _with_condition(wl, "Finished", constants.TRUE, reason, message, now)}}


def release_patch(wl: dict, adm: Admission, now: str) -> dict[str, Any]:
    """After an eviction, once the job's pods are gone: clear the admission and say whether
    Kueue requeues it, as Kueue's job integrations do."""
    conds = {"status": {"conditions": (wl.get("status") or {}).get("conditions") or []}}
    requeue = constants.TRUE if adm.reason in REQUEUE_REASONS else constants.FALSE
    conds["status"]["conditions"] = _with_condition(conds, "Requeued", requeue, adm.reason or "Evicted",
                                                    adm.message, now)
    conds["status"]["conditions"] = _with_condition(conds, "QuotaReserved", constants.FALSE, "Pending",
                                                    adm.message, now)
    conds["status"]["conditions"] = _with_condition(conds, "Admitted", constants.FALSE, "NoReservation",
                                                    "the job's pods were stopped after the eviction", now)
    return {"metadata": {"resourceVersion": (wl.get("metadata") or {}).get("resourceVersion")},
            "status": {"admission": None, "conditions": conds["status"]["conditions"]}}
