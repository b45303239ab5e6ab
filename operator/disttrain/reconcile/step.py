"""The state one reconcile step works on (pure): what was observed, and the plan being built.

A :class:`Step` is passed to every policy (:mod:`disttrain.reconcile.policies`), as JobSet's
controller passes one struct of observed state to its named steps: the job, its parsed
spec, its children split by owner and role, the conditions being written, the time, and
the :class:`Plan` that the I/O shell (:mod:`disttrain.shell.kube`) carries out afterwards.

Conditions are only changed through :meth:`Step.set` and, for the outcome pair, through
:meth:`Step.finish`, which sets ``Succeeded`` and ``Failed`` together so that no path can
set one and forget the other. Children are only created through :meth:`Step.create`,
which refuses a name that any observed pod still holds (an older attempt's pod that is
terminating, or a pod that is not the job's): this is what guarantees that there are
never two pods for one rank and that no pod of an old attempt is created again.

Every policy that :func:`disttrain.reconcile.loop._stages` runs has one entry shape,
``apply(s: Step) -> Outcome`` (:class:`Outcome`); what a policy works out for a later one
is left on the Step (:attr:`Step.gangs`, :attr:`Step.placement`, :attr:`Step.probe_run`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Optional

from disttrain.api import constants
from disttrain.api.common import ProbePlacement
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import gang as gang_objects
from disttrain.children import kueue as kueue_objects
from disttrain.children import observe, progresswatch
from disttrain.children.kubelet import ContainerFailure
from disttrain.children.names import JobRef
from disttrain.children.podbase import avoid_nodes
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.report import ProbeReport
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.jobstatus import JobStatus
from disttrain_probe.contract import vocabulary

# termination message -> the typed report (disttrain.diagnosis.report.parse_report), raising
# ValueError (ReportInvalid) when there is none; policies read the model's attributes
ReportParser = Callable[[str], ProbeReport]


class Outcome(enum.Enum):
    """What a policy's ``apply(s: Step)`` tells the loop.

    - ``CONTINUE``: go on with the next policy;
    - ``STOP``: nothing after this policy runs in this step (suspended, waiting for Kueue);
    - ``FINISHED``: this policy ended the job (it is terminal now): clean up
      (:mod:`.policies.cleanup`), and nothing after it runs.
    """

    CONTINUE = "continue"
    STOP = "stop"
    FINISHED = "finished"


@dataclass(frozen=True)
class ProbeRun:
    """What :mod:`.policies.probing` hands the verdict once it can be reached: MASTER_ADDR,
    the attempt's probe pods by rank, the ranks whose probe the kubelet ended (rank -> how,
    :func:`.policies.kubeletended.ended`) and the ranks lost with their node (rank -> the
    evidence, :func:`.policies.nodeloss.lost_ranks`). The reports themselves are read by
    :func:`.policies.verdict.collect`, where the verdict starts."""

    master: Optional[str]
    by_rank: dict[int, dict[str, Any]]
    killed: dict[int, ContainerFailure] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ApiFailure:
    """An API call of an earlier step that did not succeed, fed back into the next step.

    ``verb`` is create, delete or patch; ``kind`` Pod, Service, status (the job's status
    subresource) or DistTrainingJob; ``code`` the HTTP status (0: no answer, e.g. the
    apiserver was unreachable); ``attempts`` how many consecutive steps failed; ``client``:
    the kubernetes client refused the request before sending it (its models refused the
    body: ``message`` names the fields)."""

    verb: str
    kind: str
    name: str
    code: int
    message: str
    attempts: int = 1
    client: bool = False


@dataclass(frozen=True)
class NodeOffers:
    """What the shell read of the cluster's nodes for a job whose pods the scheduler finds
    ``Insufficient`` resources for (:mod:`.policies.offers`).

    ``allocatable``: one ``(node name, status.allocatable)`` per node read (resource name ->
    quantity text, as the API writes it); ``complete``: False when the read stopped at its
    page bound, so "no node offers" cannot be said; ``autoscaler``: per pod name, the
    latest word of a node autoscaler on it, ``(event reason, message)``
    (``TriggeredScaleUp``, ``NotTriggerScaleUp``, Karpenter's ``Nominated``); empty when
    the pods' Events were not read; ``placement``: per node name, its ``(metadata.labels,
    spec.taints)`` as read (:mod:`disttrain.children.nodematch` rules a node out for a pod);
    a node missing here is one any pod may use."""

    allocatable: tuple[tuple[str, dict[str, Any]], ...] = ()
    complete: bool = True
    autoscaler: dict[str, tuple[str, str]] = field(default_factory=dict)
    placement: dict[str, tuple[dict[str, Any], list[Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    """What one reconcile step sees of one job, as the shell read it at ``now`` (UTC).

    ``body``: the job as the API returns it (camelCase); ``pods``: every pod labelled with
    the job's name (its own and others': ownership is decided in the step); ``services``:
    the Service(s) named after the job; ``api_failures``: the calls of the previous step
    that failed; ``capabilities``: what the cluster serves (``workload-api``:
    :mod:`.policies.gang`); ``kueue``: what was read of a queued job's Kueue objects
    (:mod:`.policies.admission`); ``network_policies``: the NetworkPolicies of the job's
    namespace, read while the job is probing (:mod:`disttrain.diagnosis.networkpolicy`);
    ``namespace_labels``: the labels of the job's namespace, read with them when there are
    policies (None: not read, or the operator may not get namespaces); ``nodes``: the nodes' allocatable resources, read only while a pod of the job waits for
    an ``Insufficient`` resource (None: not read, or the operator may not list nodes);
    ``progress``: the latest readiness word of each training pod whose progress sidecar is
    not Ready (:mod:`disttrain.children.progresswatch`; read only then)."""

    body: dict[str, Any]
    pods: tuple[dict[str, Any], ...]
    now: datetime
    services: tuple[dict[str, Any], ...] = ()
    api_failures: tuple[ApiFailure, ...] = ()
    capabilities: frozenset[str] = frozenset()
    kueue: kueue_objects.KueueRead = field(default_factory=kueue_objects.KueueRead)
    network_policies: tuple[dict[str, Any], ...] = ()
    nodes: Optional[NodeOffers] = None
    namespace_labels: Optional[dict[str, str]] = None
    progress: tuple[progresswatch.ProgressEvent, ...] = ()

    # one parameter per field of Observed (a constructor that only turns iterables into tuples)
    @classmethod
    def of(cls, body: dict[str, Any], pods: Iterable[dict[str, Any]], now: datetime,  # noqa: PLR0913
           services: Iterable[dict[str, Any]] = (), api_failures: Iterable[ApiFailure] = (),
           capabilities: Iterable[str] = (), kueue: Optional[kueue_objects.KueueRead] = None,
           network_policies: Iterable[dict[str, Any]] = (),
           nodes: Optional[NodeOffers] = None,
           namespace_labels: Optional[dict[str, str]] = None,
           progress: Iterable[progresswatch.ProgressEvent] = ()) -> "Observed":
        """From any iterables (copied into tuples; ``kueue`` None: nothing read)."""
        return cls(body, tuple(pods), now, tuple(services), tuple(api_failures),
                   frozenset(capabilities), kueue or kueue_objects.KueueRead(),
                   tuple(network_policies), nodes, namespace_labels, tuple(progress))


@dataclass
class Plan:
    """What one reconcile step wants done. ``status`` is the complete new status.

    The shell applies it in this order: status (when changed), pod deletes, dry runs,
    Service creates, pod creates, then events, so that a decision is recorded before the children
    that follow from it are touched (a failed status write leaves nothing to undo; a
    failed create is repeated by the next step from the recorded decision)."""

    status: dict[str, Any]
    creates: list[dict[str, Any]] = field(default_factory=list)
    # pods sent with server-side dry run (dryRun=All) before anything is created: the
    # training pods, checked by the Pod API before the probes start; one refused and the
    # plan's creates are skipped (the failure ends the job as InvalidPodTemplate)
    dry_runs: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)  # pod names, the job's own only
    services: list[dict[str, Any]] = field(default_factory=list)  # to create
    objects: list[dict[str, Any]] = field(default_factory=list)  # other kinds to create (PodGroups)
    # (apiVersion, kind, name, merge patch) for other objects' status (Kueue's Workload)
    status_patches: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    status_changed: bool = False
    delete_job: bool = False  # runPolicy.ttlSecondsAfterFinished has passed
    requeue_after: Optional[float] = None  # seconds until a time-based decision is due

    def requeue(self, seconds: float) -> None:
        """Ask to be run again within ``seconds`` (the earliest request wins; >= 0.2 s)."""
        seconds = max(0.2, float(seconds))
        if self.requeue_after is None or seconds < self.requeue_after:
            self.requeue_after = seconds


@dataclass
class Step:
    """One reconcile step of one job. Build it with :func:`disttrain.reconcile.loop.reconcile`."""

    job: JobRef
    spec: DistTrainingJobSpec
    generation: Optional[int]
    now: datetime
    plan: Plan
    pods: list[dict[str, Any]]  # every observed pod labelled with the job's name
    services: list[dict[str, Any]]  # observed Services the job may own (by name)
    parse_report: ReportParser
    probe_image: str = constants.DEFAULT_PROBE_IMAGE
    api_failures: tuple[ApiFailure, ...] = ()
    capabilities: frozenset[str] = frozenset()  # what the cluster serves (policies.gang)
    gangs: dict[str, gang_objects.Gang] = field(default_factory=dict)  # role -> the gang its new pods join
    labels: dict[str, str] = field(default_factory=dict)  # the job's metadata.labels
    kueue: kueue_objects.KueueRead = field(default_factory=kueue_objects.KueueRead)  # the queued job's Kueue objects
    placement: Optional[tuple[dict[str, str], list[dict]]] = None  # flavors' nodeSelector, tolerations
    network_policies: tuple[dict[str, Any], ...] = ()  # of the job's namespace (Observed's)
    namespace_labels: Optional[dict[str, str]] = None  # of the job's namespace (Observed's)
    nodes: Optional[NodeOffers] = None  # the nodes' allocatable (Observed's; policies.offers)
    progress: tuple[progresswatch.ProgressEvent, ...] = ()  # (Observed's; policies.stallwatch)
    probe_run: Optional[ProbeRun] = None  # set by policies.probing once the verdict can be reached

    @property
    def ts(self) -> str:
        return cond.now_rfc3339(self.now)

    @property
    def status(self) -> dict[str, Any]:
        return self.plan.status

    @property
    def st(self) -> JobStatus:
        """The status being written, typed (:class:`disttrain.reconcile.jobstatus.JobStatus`)."""
        return JobStatus(self.plan.status)

    @property
    def conds(self) -> list[dict[str, Any]]:
        return self.st.conditions

    # ---- children ---------------------------------------------------------------------
    @property
    def ours(self) -> list[dict[str, Any]]:
        """The job's own pods (controller ownerReference with the job's UID), any state."""
        return [p for p in self.pods if observe.owned_by(p, self.job.uid)]

    @property
    def foreign(self) -> list[dict[str, Any]]:
        """Pods labelled with the job's name that are not the job's (another owner, none)."""
        return [p for p in self.pods if not observe.owned_by(p, self.job.uid)]

    def alive(self, role: str) -> list[dict[str, Any]]:
        """The job's own pods of ``role`` that are not being deleted."""
        return [p for p in self.ours if observe.role(p) == role and not observe.deleting(p)]

    def held(self, name: str) -> Optional[dict[str, Any]]:
        """The observed pod that holds ``name``, or None when the name is free."""
        for p in self.pods:
            if observe.name(p) == name:
                return p
        return None

    def create(self, pod: dict[str, Any]) -> bool:
        """Plan to create ``pod`` unless its name is held by an observed pod (then False).
        A pod of a gang is pointed at its PodGroup, which is created with it."""
        name = observe.name(pod)
        if self.held(name) is not None or any(observe.name(p) == name for p in self.plan.creates):
            return False
        if self.placement is not None:
            kueue_objects.place(pod, *self.placement)
        # nodes a stall verdict named and a restart left (status.excludedNodes)
        avoid_nodes(pod.setdefault("spec", {}), self.st.excluded_nodes)
        gang = self.gangs.get(observe.role(pod))
        if gang is not None:
            gang_objects.decorate(pod, self.spec, gang)
            for obj in gang_objects.objects(self.job, self.spec, gang):
                key = (obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
                if all((x["apiVersion"], x["kind"], x["metadata"]["name"]) != key
                       for x in self.plan.objects):
                    self.plan.objects.append(obj)
        self.plan.creates.append(pod)
        return True

    def delete(self, pod: dict[str, Any]) -> None:
        """Plan to delete one of the job's own pods (never a foreign one)."""
        name = observe.name(pod)
        if observe.owned_by(pod, self.job.uid) and name and name not in self.plan.deletes:
            self.plan.deletes.append(name)

    def blockers(self, names: list[str]) -> list[dict[str, Any]]:
        """Foreign pods that hold any of ``names`` (the job cannot create those)."""
        want = set(names)
        return [p for p in self.foreign if observe.name(p) in want]

    # ---- conditions -------------------------------------------------------------------
    def set(self, ctype: str, status: str, reason: str, message: str) -> None:
        """Set one condition (see :func:`disttrain.reconcile.conditions.set_condition`)."""
        cond.set_condition(self.conds, ctype, Verdict(status, reason, cond.clip(message)),
                           self.generation, self.ts)

    def status_of(self, ctype: str) -> str:
        return cond.status_of(self.conds, ctype)

    def is_true(self, ctype: str) -> bool:
        return cond.is_true(self.conds, ctype)

    @property
    def terminal(self) -> bool:
        return self.is_true(constants.SUCCEEDED) or self.is_true(constants.FAILED)

    def finish(self, succeeded: bool, reason: str, message: str, short: str) -> None:
        """End the job: ``Succeeded`` and ``Failed`` set together (one True, the other False,
        both with ``reason``; ``short`` is the other one's message) and completionTime."""
        win, lose = (constants.SUCCEEDED, constants.FAILED) if succeeded else (constants.FAILED, constants.SUCCEEDED)
        self.set(win, constants.TRUE, reason, message)
        self.set(lose, constants.FALSE, reason, short)
        self.st.complete(self.ts)

    def fail_preflight(self, reason: str, message: str) -> None:
        """The preflight (or the spec) failed: Validated=False with the cause, the checks not
        reached say so, and the job is Failed (no training pods will be created): reason
        PreflightFailed, or the spec reason itself (InvalidSpec, InvalidPodTemplate)."""
        self.set(constants.VALIDATED, constants.FALSE, reason, message)
        for ctype in constants.CHECK_CONDITIONS:
            if self.status_of(ctype) == constants.UNKNOWN:
                self.set(ctype, constants.UNKNOWN, vocabulary.NOT_REACHED, f"not checked: {reason}")
        if reason in constants.SPEC_REASONS:
            self.finish(False, reason, message, "invalid spec")
        else:
            none = ("training did not start" if self.spec.probe.placement == ProbePlacement.InPlace.value
                    else "no training pods were created")
            self.finish(False, vocabulary.PREFLIGHT_FAILED,
                        cond.clip(f"preflight failed ({reason}), {none}: {message}"), "preflight failed")
        if self.st.has_probe_record() and self.st.probe.start_time:
            self.st.probe.complete(self.ts)
