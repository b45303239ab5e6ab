"""A Kueue Workload (untrusted: any field may be missing or of the wrong type) read into a
:class:`Plan`: which job owns it, the pod sets that hold its ranks and in which order, where
Kueue placed them, and the rendezvous the job will use; or a :class:`Problem` naming the
field that could not be read. :func:`parse_workload` never raises. Pure.

What this relies on, read in Kueue v0.17.0 (``localcluster/build/versions.env``; the
module ``sigs.k8s.io/kueue@v0.17.0``), the version the proving ground runs:

- ``kueue.x-k8s.io/v1beta2`` is the storage version of Workload and AdmissionCheck; v1beta1
  is still served and converted by webhook. The fields read here have the same names in
  both, but the topology assignment (:mod:`.topology` reads both shapes).
- An AdmissionCheck is ``spec.controllerName`` (ours: :data:`CONTROLLER_NAME`) and optional
  ``spec.parameters`` (apiGroup, kind, name).
- ``spec.podSets[]``: ``name`` (Kueue lowercases the job's names: PyTorchJob's replica
  types ``master``/``worker``; a JobSet's or TrainJob's replicated jobs by name, Trainer
  v2's training nodes in ``node``; a batch Job's one pod set ``main``), ``count`` (a
  JobSet's: replicas x parallelism), optional ``minCount``, ``template`` (the job's pod
  template as Kueue copied it) and optional ``topologyRequest``.
- ``status.admission.podSetAssignments[]`` once quota is reserved: ``name``, ``flavors``
  (resource -> ResourceFlavor name; the flavor's ``nodeLabels`` and ``tolerations`` are
  in the ResourceFlavor object, which Kueue adds to the pods when it starts them),
  optional ``count`` (partial admission; else the pod set's), optional
  ``topologyAssignment``.
- ``status.admissionChecks[]``: ``name``, ``state`` (Pending, Ready, Retry, Rejected),
  ``lastTransitionTime``, ``message`` (at most 32768 characters), optional
  ``requeueAfterSeconds`` and ``retryCount`` (Kueue counts the Retries), and
  ``podSetUpdates[]`` (at most 8): ``name`` of a pod set, ``labels``, ``annotations``,
  ``nodeSelector``, ``tolerations`` (at most 8); additive only: a key the template
  already has, or that another check sets, fails the admission.
- The job is the Workload's ownerReference with ``controller: true``.

Ranks (one pod per node, node rank = the order below): a PyTorchJob's ``master`` pod (rank
0) then its ``worker`` pods (without a master, worker 0 is rank 0; Kubeflow's port is the
trainer's container port ``pytorchjob-port`` of the master's template, default 23456); a
TrainJob's ``node`` pod set only (initializers hold no rank); every pod set of a JobSet in
order (the first replicated job's first pod is rank 0); a batch Job's one pod set, rank =
completion index. Whether the Job is Indexed is not in the Workload (Kueue copies only the
template): the controller reads it from the Job. The port, elsewhere: the trainer's
``PET_MASTER_PORT``, else ``MASTER_PORT``, else torchrun's 29500; ``NCCL_SOCKET_IFNAME``
from the trainer's env (None: unset, the probe chooses). Both are read from rank 0's pod
set; a value from ``valueFrom`` cannot be read, and is a problem.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from disttrain.admissioncheck.topology import Domain, Unreadable, domains
from disttrain.api.trainer import trainer_name
from disttrain.diagnosis import messages

CONTROLLER_NAME = "disttrain.dev/preflight"
WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"  # the storage version

# the job kinds a checked Workload may belong to: (API group, kind)
PYTORCHJOB = ("kubeflow.org", "PyTorchJob")
TRAINJOB = ("trainer.kubeflow.org", "TrainJob")
JOBSET = ("jobset.x-k8s.io", "JobSet")
JOB = ("batch", "Job")
KINDS = (PYTORCHJOB, TRAINJOB, JOBSET, JOB)

PYTORCHJOB_PORT_NAME = "pytorchjob-port"
PYTORCHJOB_DEFAULT_PORT = 23456
TORCHRUN_DEFAULT_PORT = 29500
MAX_RANKS = 4096  # DistTrainingJob's numNodes limit

# Problem reasons (the check's own, not the probe's vocabulary)
WORKLOAD_UNREADABLE = "WorkloadUnreadable"  # a field not of the shape Kueue writes
OWNER_UNSUPPORTED = "OwnerUnsupported"  # owned by none of KINDS
NO_RANK_POD_SET = "NoRankPodSet"  # no pod set holds the job's ranks, or none has pods
RENDEZVOUS_UNREADABLE = "RendezvousUnreadable"  # the port or interface cannot be read
TRAINER_UNKNOWN = "TrainerUnknown"  # which container trains cannot be told


@dataclass(frozen=True)
class Problem:
    """Why a Workload cannot be checked: ``reason`` (a constant above), ``field`` (its path
    in the Workload) and ``message`` (at most 400 characters, naming the field)."""

    reason: str
    field: str
    message: str


@dataclass(frozen=True)
class PodSetPlan:
    """One pod set that holds ranks: its pods are ranks ``first_rank`` .. ``first_rank +
    count - 1``. ``template`` is a copy of the Workload's; ``flavors`` resource ->
    ResourceFlavor; ``domains`` the topology assignment (empty without one)."""

    name: str
    count: int
    first_rank: int
    template: dict[str, Any]
    trainer: str
    flavors: dict[str, str] = field(default_factory=dict)
    domains: tuple[Domain, ...] = ()
    index: int = 0  # its position in spec.podSets


@dataclass(frozen=True)
class Plan:
    """What the check needs of a Workload. ``kind`` is one of :data:`KINDS`; ``pod_sets``
    those holding ranks, in rank order; ``others`` the names of the rest."""

    namespace: str
    name: str
    uid: str
    kind: tuple[str, str]
    owner: str
    pod_sets: tuple[PodSetPlan, ...]
    others: tuple[str, ...]
    master_port: int
    socket_ifname: Optional[str]

    @property
    def num_nodes(self) -> int:
        return sum(p.count for p in self.pod_sets)

    def rank_of(self, rank: int) -> tuple[PodSetPlan, int]:
        """The pod set holding node rank ``rank`` and the pod's index in it."""
        for p in self.pod_sets:
            if p.first_rank <= rank < p.first_rank + p.count:
                return p, rank - p.first_rank
        raise IndexError(f"rank {rank} outside 0..{self.num_nodes - 1}")


FIELD_ROOM = 200  # of a problem's field path: names in it come from the Workload


def problem(reason: str, path: str, what: str) -> Problem:
    """A :class:`Problem` at ``path`` (cut to :data:`FIELD_ROOM` characters) because ``what``."""
    path = path if len(path) <= FIELD_ROOM else path[: FIELD_ROOM - 1] + "…"
    return Problem(reason, path, messages.bound(f"{path}: {what}"))


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise Unreadable(path, "not a non-empty string")
    return value


def _owner(meta: dict[str, Any]) -> tuple[tuple[str, str], str, int]:
    """(group, kind), name and index of the controller ownerReference among KINDS."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        raise Unreadable("metadata.ownerReferences", "not a list")
    for i, ref in enumerate(refs):
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        api = _str(ref.get("apiVersion"), f"metadata.ownerReferences[{i}].apiVersion")
        group = api.split("/")[0] if "/" in api else ""
        kind = (group or "core", ref.get("kind"))
        found = next((k for k in KINDS if k == kind), None)
        if found is not None:
            return found, _str(ref.get("name"), f"metadata.ownerReferences[{i}].name"), i
    raise _Unsupported("metadata.ownerReferences", "no controller owner is a PyTorchJob, TrainJob, JobSet or Job")


class _Unsupported(Unreadable):
    pass


class _NoRanks(Unreadable):
    pass


def _assignments(status: Any) -> dict[str, tuple[int, dict[str, Any]]]:
    """Pod set name -> (index, its podSetAssignment) once quota is reserved; {} before."""
    adm = status.get("admission") if isinstance(status, dict) else None
    if adm is None:
        return {}
    path = "status.admission.podSetAssignments"
    items = adm.get("podSetAssignments") if isinstance(adm, dict) else None
    if not isinstance(items, list):
        raise Unreadable(path, "not a list")
    out = {}
    for i, a in enumerate(items):
        if not isinstance(a, dict):
            raise Unreadable(f"{path}[{i}]", "not an object")
        out[_str(a.get("name", "main"), f"{path}[{i}].name")] = (i, a)
    return out


def _count(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RANKS:
        raise Unreadable(path, f"not an integer from 0 to {MAX_RANKS}")
    return value


def _rank_names(kind: tuple[str, str], names: list[str]) -> list[str]:
    """The pod sets that hold ranks, in rank order (the module docstring)."""
    if kind == PYTORCHJOB:
        return [n for n in ("master", "worker") if n in names]
    if kind == TRAINJOB:
        return [n for n in names if n == "node"]
    return names


def _pod_set(ps: Any, i: int, first: int, assigned: dict[str, tuple[int, dict[str, Any]]]) -> PodSetPlan:
    path = f"spec.podSets[{i}]"
    if not isinstance(ps, dict):
        raise Unreadable(path, "not an object")
    name = _str(ps.get("name", "main"), f"{path}.name")
    count = _count(ps.get("count"), f"{path}.count")
    template = ps.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise Unreadable(f"{path}.template.spec", "not an object")
    trainer = trainer_name(template["spec"].get("containers"))
    if trainer is None:
        raise _NoTrainer(f"{path}.template.spec.containers", "no one container is the trainer: "
                         "one container, or one named trainer, pytorch or node")
    flavors: dict[str, str] = {}
    doms: list[Domain] = []
    if name in assigned:
        j, a = assigned[name]
        apath = f"status.admission.podSetAssignments[{j}]"
        if a.get("count") is not None:
            count = _count(a["count"], f"{apath}.count")
        raw = a.get("flavors") or {}
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise Unreadable(f"{apath}.flavors", "not a map of resource to flavor name")
        flavors = {str(k): v for k, v in raw.items()}
        if a.get("topologyAssignment") is not None:
            doms = domains(a["topologyAssignment"], f"{apath}.topologyAssignment")
    return PodSetPlan(name, count, first, copy.deepcopy(template), trainer, flavors, tuple(doms), i)


class _NoTrainer(Unreadable):
    pass


def _env(template: dict[str, Any], trainer: str, name: str, path: str) -> Optional[str]:
    """The literal value of the trainer's env ``name`` (None: unset); valueFrom is a problem."""
    containers = template["spec"].get("containers")
    for c in containers if isinstance(containers, list) else []:
        if isinstance(c, dict) and c.get("name") == trainer:
            env = c.get("env")
            for e in env if isinstance(env, list) else []:
                if isinstance(e, dict) and e.get("name") == name:
                    if isinstance(e.get("value"), str):
                        return e["value"]
                    raise _Rendezvous(f"{path}.containers[{trainer}].env[{name}]", "not a literal value (valueFrom): "
                                      "the check cannot know what the job will use")
    return None


class _Rendezvous(Unreadable):
    pass


def _pytorchjob_port(template: dict[str, Any], trainer: str) -> Any:
    for c in template["spec"].get("containers") or []:
        if isinstance(c, dict) and c.get("name") == trainer and isinstance(c.get("ports"), list):
            for p in c["ports"]:
                if isinstance(p, dict) and p.get("name") == PYTORCHJOB_PORT_NAME:
                    return p.get("containerPort")  # checked by the caller
    return None


def _port(plan_kind: tuple[str, str], rank0: PodSetPlan, path: str) -> int:
    """The master port the job will use (the module docstring)."""
    raw: Any = None
    if plan_kind == PYTORCHJOB:
        raw = _pytorchjob_port(rank0.template, rank0.trainer)
        raw = PYTORCHJOB_DEFAULT_PORT if raw is None else raw
    else:
        for var in ("PET_MASTER_PORT", "MASTER_PORT"):
            raw = _env(rank0.template, rank0.trainer, var, path)
            if raw is not None:
                break
        raw = TORCHRUN_DEFAULT_PORT if raw is None else raw
        raw = int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 5 else raw
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 65535:
        raise _Rendezvous(f"{path}.containers[{rank0.trainer}]", "the master port is not a port from 1 to 65535")
    return raw


def _read(workload: Any) -> Plan:
    if not isinstance(workload, dict):
        raise Unreadable("(the Workload)", "not an object")
    meta = workload.get("metadata")
    if not isinstance(meta, dict):
        raise Unreadable("metadata", "not an object")
    kind, owner, _ = _owner(meta)
    spec = workload.get("spec")
    pod_sets = spec.get("podSets") if isinstance(spec, dict) else None
    if not isinstance(pod_sets, list) or not pod_sets:
        raise Unreadable("spec.podSets", "not a non-empty list")
    names = [ps.get("name", "main") if isinstance(ps, dict) else None for ps in pod_sets]
    ranked = list(dict.fromkeys(_rank_names(kind, [n for n in names if isinstance(n, str)])))
    assigned = _assignments(workload.get("status"))
    plans: list[PodSetPlan] = []
    first = 0
    for name in ranked:
        i = names.index(name)
        p = _pod_set(pod_sets[i], i, first, assigned)
        plans.append(p)
        first += p.count
    if not plans or first == 0:
        raise _NoRanks("spec.podSets", f"no pod set of this {kind[1]} holds ranks with pods "
                       f"(pod sets: {', '.join(str(n) for n in names)[:200]})")
    if first > MAX_RANKS:
        raise Unreadable("spec.podSets", f"{first} ranks, more than {MAX_RANKS}")
    rank0 = next(p for p in plans if p.count > 0)
    path = f"spec.podSets[{names.index(rank0.name)}].template.spec"
    ifname = _env(rank0.template, rank0.trainer, "NCCL_SOCKET_IFNAME", path)
    return Plan(
        namespace=_str(meta.get("namespace"), "metadata.namespace"), name=_str(meta.get("name"), "metadata.name"),
        uid=_str(meta.get("uid"), "metadata.uid"), kind=kind, owner=owner, pod_sets=tuple(plans),
        others=tuple(str(n) for n in names if n not in ranked), master_port=_port(kind, rank0, path),
        socket_ifname=ifname)


_REASON = {_Unsupported: OWNER_UNSUPPORTED, _NoRanks: NO_RANK_POD_SET, _Rendezvous: RENDEZVOUS_UNREADABLE,
           _NoTrainer: TRAINER_UNKNOWN}


def parse_workload(workload: Any) -> Union[Plan, Problem]:
    """``workload`` (a Workload as the API returns it) as a :class:`Plan`, or the
    :class:`Problem` that stops it. Never raises."""
    try:
        return _read(workload)
    except Unreadable as e:
        return problem(_REASON.get(type(e), WORKLOAD_UNREADABLE), e.field, e.what)
    except (TypeError, AttributeError, ValueError, KeyError, IndexError) as e:  # a shape not foreseen
        return problem(WORKLOAD_UNREADABLE, "(the Workload)", f"unreadable ({type(e).__name__})")
