"""The preflight-only DistTrainingJob that probes a checked Workload (pure): built from the
Workload's :class:`~disttrain.admissioncheck.workload.Plan` (:func:`shadow_job`) and read
back as the check's input (:func:`verdicts`, :func:`placed`).

The admission check does not drive probe pods itself: it creates one DistTrainingJob per
Workload it probes, labelled ``disttrain.dev/preflight-only: "true"``
(:mod:`disttrain.reconcile.policies.preflightonly`: it stops at its verdict, never
trains), owned by the Workload (deleted with it), named :func:`probe_job` (one per
Workload: a create is idempotent). So the whole reconcile loop probes it: probe pods, the
budget and timeouts, vanished pods and lost nodes, the trust rules, the diagnosis, and
conditions users read with ``kubectl get dtj``. The check only reads the conditions.

One template for every rank: a DistTrainingJob has one. The shadow takes rank 0's pod set's
spec (:func:`disttrain.admissioncheck.probespec.probe_specs`); a pod set whose template
lands or sizes its pods differently (:data:`PLACEMENT`) is a :class:`Problem`
(``PodSetsDiffer``) instead of a probe of the wrong nodes. Kueue's topology assignment pins
the probes when it names one domain for every pod; over several domains the probes land
where the template allows (the pin of each rank to its own domain needs per-rank
templates: docs/admission-check.md, "Not done yet"). The nodes earlier Retries of the
Workload named (:data:`ANN_AVOID`, on the Workload) are kept out by a nodeAffinity.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence, Union

from disttrain.admissioncheck.probespec import probe_job
from disttrain.admissioncheck.topology import selector_of_pod
from disttrain.admissioncheck.workload import WORKLOAD_API_VERSION, Plan, Problem, problem
from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import observe
from disttrain.children.podbase import avoid_nodes
from disttrain.diagnosis.checkconditions import Verdict

PODSETS_DIFFER = "PodSetsDiffer"
# the template's fields that decide where a pod lands and what it holds: equal in every
# pod set that holds ranks, or the one template of the shadow would probe other nodes
PLACEMENT = ("nodeSelector", "affinity", "tolerations", "hostNetwork", "runtimeClassName",
             "schedulerName", "priorityClassName")
ANN_WORKLOAD = f"{constants.GROUP}/workload"  # the checked Workload's name (a label value holds 63)
ANN_ATTEMPT = f"{constants.GROUP}/check-attempt"  # the check's retryCount when the shadow was made
# on the Workload: the nodes its Retries named, for the next rounds' probes to keep off
ANN_AVOID = "preflight.disttrain.dev/avoid"
MOST_AVOIDED = 64  # the latest nodes kept (an annotation is bounded; so is a nodeAffinity)
# on the Workload: the verdict that put the latest nodes in ANN_AVOID (at most 400 characters)
ANN_AVOID_WHY = "preflight.disttrain.dev/avoid-why"


def _annotation(workload: Any, key: str) -> Optional[str]:
    """The string annotation ``key`` of ``workload`` (None: absent or not a string)."""
    meta = workload.get("metadata") if isinstance(workload, dict) else None
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    raw = ann.get(key) if isinstance(ann, dict) else None
    return raw if isinstance(raw, str) else None


def avoided(workload: Any) -> tuple[str, ...]:
    """The nodes ``workload``'s earlier Retries named (:data:`ANN_AVOID`)."""
    raw = _annotation(workload, ANN_AVOID)
    if raw is None:
        return ()
    return tuple(dict.fromkeys(n for n in (x.strip() for x in raw.split(",")) if n and len(n) <= 253))[-MOST_AVOIDED:]


def avoided_why(workload: Any) -> str:
    """The verdict that named the avoided nodes (:data:`ANN_AVOID_WHY`; "" when unknown)."""
    return (_annotation(workload, ANN_AVOID_WHY) or "")[:400]


def avoid_more(workload: Any, nodes: Sequence[str]) -> Optional[str]:
    """The new value of :data:`ANN_AVOID` once ``nodes`` are added (None: no change)."""
    before = avoided(workload)
    after = tuple(dict.fromkeys(before + tuple(n for n in nodes if n)))[-MOST_AVOIDED:]
    return ",".join(after) if after != before else None


def _placement(spec: DistTrainingJobSpec) -> str:
    tmpl = spec.model_dump(by_alias=True, exclude_none=True, mode="json")["template"]
    pod = tmpl.get("spec") or {}
    trainer = [c.get("resources") for c in pod.get("containers") or []
               if isinstance(c, dict) and c.get("name") == spec.trainer_container]
    return json.dumps([{k: pod.get(k) for k in PLACEMENT}, trainer], sort_keys=True, default=str)


def _one_domain(plan: Plan) -> dict[str, str]:
    """The topology domain every pod of the job was assigned, when it is one ({} else)."""
    seen = {json.dumps(selector_of_pod(list(p.domains), i), sort_keys=True)
            for p in plan.pod_sets for i in range(p.count)}
    return json.loads(seen.pop()) if len(seen) == 1 else {}


def shadow_job(plan: Plan, specs: Mapping[str, DistTrainingJobSpec], attempt: int,
               avoid: Sequence[str] = ()) -> Union[dict[str, Any], Problem]:
    """The preflight-only DistTrainingJob of ``plan`` (the module docstring); ``attempt``:
    the check's ``retryCount``, kept in an annotation (a shadow of an earlier attempt is
    stale); ``avoid``: the nodes earlier Retries of this Workload named (its probes keep
    off them). A :class:`Problem` when the pod sets' templates differ where it matters."""
    rank0 = next(p for p in plan.pod_sets if p.count > 0)
    spec = specs[rank0.name]
    for p in plan.pod_sets:
        if p.count > 0 and _placement(specs[p.name]) != _placement(spec):
            return problem(PODSETS_DIFFER, f"spec.podSets[{p.index}].template.spec",
                           f"pod set {p.name} lands or sizes its pods unlike pod set {rank0.name} "
                           f"(one of {', '.join(PLACEMENT)} or the trainer's resources): the check "
                           "probes every rank with one template")
    body = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    domain = _one_domain(plan)
    pod = body["template"].setdefault("spec", {})
    if domain:
        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **domain}
    avoid_nodes(pod, list(avoid))
    ref = probe_job(plan)
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.KIND,
        "metadata": {
            "name": ref.name, "namespace": plan.namespace,
            "labels": {constants.LABEL_PREFLIGHT_ONLY: "true"},
            "annotations": {ANN_WORKLOAD: plan.name, ANN_ATTEMPT: str(attempt)},
            "ownerReferences": [{"apiVersion": WORKLOAD_API_VERSION, "kind": "Workload", "name": plan.name,
                                 "uid": plan.uid, "controller": True}],
        },
        "spec": body,
    }


def workload_of(job: Any) -> Optional[str]:
    """The Workload a preflight-only job probes for (None: not one of the check's). ``job``
    is any mapping: a dict, or the read-only body kopf hands a watch handler (not a dict;
    read as one, a shadow's verdict reached its Workload only at the next sweep)."""
    meta = job.get("metadata") if isinstance(job, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(meta.get("labels"), Mapping):
        return None
    if meta["labels"].get(constants.LABEL_PREFLIGHT_ONLY) != "true":
        return None
    ann = meta.get("annotations")
    name = ann.get(ANN_WORKLOAD) if isinstance(ann, Mapping) else None
    return name if isinstance(name, str) and name else None


def owned(job: Any, uid: Any) -> bool:
    """Whether ``job`` is owned by the Workload of ``uid`` (a job of that name that is not
    is someone else's: never deleted, never read as a verdict)."""
    meta = job.get("metadata") if isinstance(job, dict) else None
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    return isinstance(uid, str) and bool(uid) and any(
        isinstance(r, dict) and r.get("uid") == uid for r in (refs if isinstance(refs, list) else []))


def current(job: Any, uid: str, attempt: int) -> bool:
    """Whether ``job`` is the shadow of Workload ``uid`` at the check's ``attempt``, and not
    being deleted (else it is stale: deleted, and made again)."""
    meta = job.get("metadata") if isinstance(job, dict) else None
    if not isinstance(meta, dict) or meta.get("deletionTimestamp"):
        return False
    refs = meta.get("ownerReferences")
    owned = any(isinstance(r, dict) and r.get("uid") == uid for r in (refs if isinstance(refs, list) else []))
    ann = meta.get("annotations")
    return owned and isinstance(ann, dict) and ann.get(ANN_ATTEMPT) == str(attempt)


def verdicts(job: Any) -> dict[str, Verdict]:
    """The shadow's check conditions and Validated, as the answer reads them."""
    status = job.get("status") if isinstance(job, dict) else None
    conds = status.get("conditions") if isinstance(status, dict) else None
    out = {}
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, dict) and c.get("type") in constants.CHECK_CONDITIONS + (constants.VALIDATED,):
            out[str(c["type"])] = Verdict(str(c.get("status") or constants.UNKNOWN), str(c.get("reason") or ""),
                                          str(c.get("message") or ""))
    return out


def placed(pods: Any, job_name: str, num_nodes: int) -> dict[int, str]:
    """Rank -> the node its probe ran on, from the shadow's probe pods of its latest attempt
    (ranks outside ``0..num_nodes-1`` and pods without a node are left out)."""
    mine = [p for p in (pods if isinstance(pods, (list, tuple)) else []) if isinstance(p, dict)
            and observe.role(p) == constants.ROLE_PROBE
            and ((p.get("metadata") or {}).get("labels") or {}).get(constants.LABEL_JOB) == job_name]
    latest = max((observe.int_label(p, constants.LABEL_ATTEMPT) for p in mine), default=-1)
    out: dict[int, str] = {}
    for p in mine:
        rank, node = observe.int_label(p, constants.LABEL_RANK), observe.node(p)
        if observe.int_label(p, constants.LABEL_ATTEMPT) == latest and 0 <= rank < num_nodes and node:
            out[rank] = node
    return out


def ifnames(job: Any) -> dict[int, Optional[str]]:
    """Rank -> the interface its probe chose (the shadow's ``status.nodes[]``), for the
    Ready answer's ``disttrain.dev/socket-ifname`` annotation."""
    status = job.get("status") if isinstance(job, dict) else None
    nodes = status.get("nodes") if isinstance(status, dict) else None
    out: dict[int, Optional[str]] = {}
    for n in nodes if isinstance(nodes, list) else []:
        if isinstance(n, dict) and isinstance(n.get("rank"), int) and not isinstance(n.get("rank"), bool):
            out[n["rank"]] = n["interface"] if isinstance(n.get("interface"), str) and n["interface"] else None
    return out
