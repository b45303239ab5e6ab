"""A checked Workload's :class:`~disttrain.admissioncheck.workload.Plan` as the probe's own
input: one :class:`~disttrain.api.types.DistTrainingJobSpec` per pod set that holds ranks
(:func:`probe_specs`) and the probe pod of each rank (:func:`probe_pod`), built by
DistTrainingJob's :func:`~disttrain.children.probepod.build_probe_pod`. So the probe pods,
their reports, the trust checks and the diagnosis are the ones a DistTrainingJob gets;
only the way ranks and templates are read differs (issue 35, point 2). Pure.

The spec of a pod set: ``numNodes`` the job's ranks, ``template`` the pod set's with the
ResourceFlavor's ``nodeLabels`` merged into its nodeSelector and its ``tolerations``
added (Kueue adds both to the job's pods when it starts them, so the probe must land where
they will), the trainer's rank and rendezvous variables (``RANK``, ``MASTER_*``,
``PET_*``: the job's operator sets them, the probe sets its own) and its command left
out (the probe pod runs the probe, never the job's command), ``rendezvous.port`` the
job's master port, ``network.socketIfname`` the job's ``NCCL_SOCKET_IFNAME`` (``auto``
when unset: the probe chooses), ``network.hostNetwork`` the template's (taken out of the template, where a
DistTrainingJob refuses it), the probe settings
the operator is configured with, placement Pods. The probe pod of rank r is pinned, on
top of that, to the topology domain Kueue assigned the pod of the same index
(:func:`disttrain.admissioncheck.topology.selector_of_pod`), and owned by the Workload
(deleted with it) instead of a DistTrainingJob, and kept off the nodes an earlier Retry
named (Kueue queues the Workload again; the probes then try other nodes, and Ready pins
the job to the nodes they validated).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

from pydantic import ValidationError

from disttrain.admissioncheck.topology import selector_of_pod
from disttrain.admissioncheck.workload import WORKLOAD_API_VERSION, Plan, PodSetPlan, Problem, problem
from disttrain.api import constants
from disttrain.api.fieldpath import spec_error_message
from disttrain.api.types import DistTrainingJobSpec, ProbeSpec
from disttrain.children.names import JobRef
from disttrain.children.podbase import avoid_nodes
from disttrain.children.probepod import ProbeMaster, build_probe_pod

TEMPLATE_REFUSED = "TemplateRefused"  # the pod set's template is not one a probe pod can copy
NAME_ROOM = 40  # of the probe job's name: <name>-probe-<rank> and <name>-<rank> stay DNS labels


@dataclass(frozen=True)
class Flavor:
    """What a ResourceFlavor adds to the pods it admits (``spec.nodeLabels``,
    ``spec.tolerations``), read by the controller from the flavor object."""

    node_labels: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


def probe_job(plan: Plan) -> JobRef:
    """The identity the probe pods are named and labelled by: ``<owner>-pf-<uid[:8]>``
    (a DNS label; the Workload's uid, so a new Workload of the same job probes afresh)."""
    return probe_job_of(plan.owner, plan.namespace, plan.uid)


def probe_job_of(owner: str, namespace: str, uid: str) -> JobRef:
    """:func:`probe_job` from the job's name and the Workload's namespace and uid alone."""
    stem = re.sub(r"[^a-z0-9-]", "-", owner.lower())[: NAME_ROOM - 12].strip("-") or "job"
    suffix = re.sub(r"[^a-z0-9]", "", uid.lower())[:8] or "0"
    return JobRef(name=f"{stem}-pf-{suffix}", namespace=namespace, uid=uid)


def _template(p: PodSetPlan, flavors: Mapping[str, Flavor]) -> dict[str, Any]:
    """The pod set's template as the probe pod's: see the module docstring."""
    tmpl = copy.deepcopy(p.template)
    spec = tmpl["spec"]
    spec.pop("hostNetwork", None)  # a DistTrainingJob says it in network.hostNetwork
    for c in spec.get("containers") or []:
        if isinstance(c, dict) and c.get("name") == p.trainer:
            c.pop("command", None)
            c.pop("args", None)
            if isinstance(c.get("env"), list):
                c["env"] = [e for e in c["env"] if not (isinstance(e, dict) and isinstance(e.get("name"), str) and (
                    e["name"] in constants.RESERVED_ENV or e["name"].startswith(constants.RESERVED_ENV_PREFIX)))]
    for name in sorted(set(p.flavors.values())):
        flavor = flavors.get(name)
        if flavor is None:
            continue
        if flavor.node_labels:
            sel = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
            spec["nodeSelector"] = {**sel, **flavor.node_labels}
        if flavor.tolerations:
            tol = spec.get("tolerations") if isinstance(spec.get("tolerations"), list) else []
            spec["tolerations"] = tol + [t for t in flavor.tolerations if t not in tol]
    return tmpl


def probe_specs(plan: Plan, flavors: Optional[Mapping[str, Flavor]] = None,
                probe: Optional[ProbeSpec] = None) -> Union[dict[str, DistTrainingJobSpec], Problem]:
    """Pod set name -> the spec its ranks' probe pods are built from (the module
    docstring), or the :class:`Problem` of the first pod set whose spec is refused (its
    template breaks a rule a probe pod keeps), naming the field. Never raises."""
    settings = (probe or ProbeSpec()).model_dump(by_alias=True, exclude_none=True)
    settings["placement"] = "Pods"
    out: dict[str, DistTrainingJobSpec] = {}
    for i, p in enumerate(plan.pod_sets):
        tmpl = _template(p, flavors or {})
        host_network = (p.template.get("spec") or {}).get("hostNetwork") is True
        raw = {
            "numNodes": plan.num_nodes,
            "template": tmpl,
            "trainerContainer": p.trainer,
            "rendezvous": {"port": plan.master_port},
            "network": {"hostNetwork": host_network,
                        "socketIfname": plan.socket_ifname or "auto"},
            "probe": settings,
        }
        try:
            out[p.name] = DistTrainingJobSpec.model_validate(raw)
        except (ValidationError, ValueError, TypeError) as e:
            where = f"spec.podSets[{p.index}].template"
            why = spec_error_message(e).replace("spec.template", where)
            return problem(TEMPLATE_REFUSED, where, f"a probe pod cannot copy it: {why}")
    return out


def probe_pod(plan: Plan, specs: Mapping[str, DistTrainingJobSpec], rank: int, master: ProbeMaster,
              attempt: int, avoid: Sequence[str] = ()) -> dict[str, Any]:
    """The probe pod of node rank ``rank``: DistTrainingJob's, from the spec of the pod set
    holding the rank (its ``probe.image``, else the default probe image), pinned to its
    topology domain, kept off the nodes in ``avoid`` (those an earlier verdict of this
    Workload named, :attr:`disttrain.admissioncheck.answer.Answer.avoid`), owned by the
    Workload."""
    p, index = plan.rank_of(rank)
    pod = build_probe_pod(probe_job(plan), specs[p.name], rank, master, attempt)
    domain = selector_of_pod(list(p.domains), index)
    if domain:
        pod["spec"]["nodeSelector"] = {**(pod["spec"].get("nodeSelector") or {}), **domain}
    if avoid:
        avoid_nodes(pod["spec"], avoid)
    pod["metadata"]["ownerReferences"] = [{
        "apiVersion": WORKLOAD_API_VERSION, "kind": "Workload", "name": plan.name, "uid": plan.uid,
        "controller": True, "blockOwnerDeletion": True}]
    return pod
