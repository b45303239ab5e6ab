"""Gang scheduling objects (pure builders): the PodGroup a gang of pods points at.

A job schedules two gangs, one after the other, each of ``numNodes`` pods: its probe pods,
then its training pods. Each gang instance gets its own PodGroup (a pod's group cannot be
changed, and a new attempt or a resume is a new instance), named
``<job>-probe-<probe attempt>`` and ``<job>-training-<restarts>-<suspensions>``.

Three providers:

- ``workload``: Kubernetes' workload scheduling API (KEP-4671, ``scheduling.k8s.io/v1beta1``,
  feature gate GenericWorkload, beta in v1.37): a ``Workload`` named after the job with the
  pod group templates ``probe`` and ``training``, a ``PodGroup`` per gang instance with
  ``schedulingPolicy.gang.minCount``, and each pod's ``spec.schedulingGroup.podGroupName``.
  The default scheduler's GangScheduling plugin binds none of a group's pods unless all fit.
- ``coscheduling``: scheduler-plugins' ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``,
  ``minMember``), the pods labelled ``scheduling.x-k8s.io/pod-group`` and scheduled by
  ``scheduler-plugins-scheduler``.
- ``volcano``: Volcano's ``PodGroup`` (``scheduling.volcano.sh/v1beta1``, ``minMember``), the
  pods annotated ``scheduling.k8s.io/group-name`` and scheduled by ``volcano``.

Every object carries the job as its controller owner, so it goes with the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children.names import JobRef

WORKLOAD_API = "scheduling.k8s.io/v1beta1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
DEFAULT_SCHEDULERS = {"coscheduling": "scheduler-plugins-scheduler", "volcano": "volcano"}
TEMPLATES = ("probe", "training")


@dataclass(frozen=True)
class Gang:
    """One gang instance: ``provider`` (workload, coscheduling, volcano), the PodGroup's
    ``name``, the Workload template it instantiates (probe or training) and its ``size``
    (pods that must be placed together)."""

    provider: str
    name: str
    template: str
    size: int


def provider(spec: DistTrainingJobSpec, workload_api_served: bool) -> Optional[str]:
    """The gang provider for ``spec`` on a cluster that does (not) serve the workload API;
    None: no gang (``none``, or ``auto`` without the API)."""
    wanted = gang_setting(spec)
    if wanted == "auto":
        return "workload" if workload_api_served else None
    return None if wanted == "none" else wanted


def gang_setting(spec: DistTrainingJobSpec) -> str:
    """``runPolicy.schedulingPolicy.gang`` as a plain string (auto, workload, ...)."""
    v = spec.run_policy.scheduling_policy.gang
    return str(getattr(v, "value", v))


def group_name(job: str, template: str, *parts: int) -> str:
    """``<job>-<template>-<parts joined by '-'>`` (a DNS subdomain: the job's name is a
    DNS-1035 label of at most 63 characters)."""
    return "-".join([job, template] + [str(p) for p in parts])


def _meta(job: JobRef, name: str) -> dict[str, Any]:
    return {"name": name, "namespace": job.namespace, "labels": {constants.LABEL_JOB: job.name},
            "ownerReferences": [job.owner_reference()]}


def workload(job: JobRef, spec: DistTrainingJobSpec) -> dict[str, Any]:
    """The ``scheduling.k8s.io`` Workload that ties the job's gangs together."""
    policy = {"gang": {"minCount": spec.num_nodes}}
    return {
        "apiVersion": WORKLOAD_API, "kind": "Workload", "metadata": _meta(job, job.name),
        "spec": {
            "controllerRef": {"apiGroup": constants.GROUP, "kind": constants.KIND, "name": job.name},
            "podGroupTemplates": [{"name": t, "schedulingPolicy": policy} for t in TEMPLATES],
        },
    }


def pod_group(job: JobRef, spec: DistTrainingJobSpec, gang: Gang) -> dict[str, Any]:
    """The PodGroup of one gang instance, for its provider."""
    if gang.provider == "workload":
        return {"apiVersion": WORKLOAD_API, "kind": "PodGroup", "metadata": _meta(job, gang.name),
                "spec": {"workloadRef": {"workloadName": job.name, "templateName": gang.template},
                         "schedulingPolicy": {"gang": {"minCount": gang.size}}}}
    body: dict[str, Any] = {"minMember": gang.size}
    timeout = spec.run_policy.scheduling_policy.schedule_timeout_seconds
    if gang.provider == "coscheduling":
        if timeout:
            body["scheduleTimeoutSeconds"] = timeout
        return {"apiVersion": COSCHEDULING_API, "kind": "PodGroup", "metadata": _meta(job, gang.name),
                "spec": body}
    if gang.provider == "volcano":
        return {"apiVersion": VOLCANO_API, "kind": "PodGroup", "metadata": _meta(job, gang.name),
                "spec": body}
    raise ValueError(f"unknown gang provider {gang.provider!r}")


def objects(job: JobRef, spec: DistTrainingJobSpec, gang: Gang) -> list[dict[str, Any]]:
    """What must exist for ``gang``'s pods: the PodGroup (and, for the workload API, the
    job's Workload)."""
    out = [pod_group(job, spec, gang)]
    if gang.provider == "workload":
        out.insert(0, workload(job, spec))
    return out


def decorate(pod: dict[str, Any], spec: DistTrainingJobSpec, gang: Gang) -> None:
    """Point ``pod`` (a Pod manifest, changed in place) at its gang's PodGroup."""
    pod_spec = pod["spec"]
    meta = pod["metadata"]
    if gang.provider == "workload":
        pod_spec["schedulingGroup"] = {"podGroupName": gang.name}
    elif gang.provider == "coscheduling":
        meta.setdefault("labels", {})["scheduling.x-k8s.io/pod-group"] = gang.name
    elif gang.provider == "volcano":
        meta.setdefault("annotations", {})["scheduling.k8s.io/group-name"] = gang.name
    name = spec.run_policy.scheduling_policy.scheduler_name or DEFAULT_SCHEDULERS.get(gang.provider)
    if name:
        pod_spec["schedulerName"] = name
