"""Chained builders of one reconcile :class:`~disttrain.reconcile.step.Step`, for the table
tests of the policies (``tests/unit/operator/reconcile/policies/``): a job as
:func:`.fixtures.job` builds it, changed one call at a time, with its pods, its status and what the step observed::

    given().nodes(3).suspended().training().workers("Running", "Running", "Running").build()

:meth:`StepBuilder.build` gives the Step as :func:`disttrain.reconcile.loop.reconcile` would
hand it to its first policy (status repaired, every condition written); :func:`check`
runs one policy's ``apply`` on it and compares what came out with a :class:`Want` row.
Kueue's objects (a queued job's Workload) are built here too, for the admission tests.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Optional

import pytest

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import kubelet, kueue
from disttrain.children.names import JobRef
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import gang as gangpolicy
from disttrain.reconcile.status_repair import repair
from disttrain.reconcile.step import Observed, Plan, ProbeRun, Step
from disttrain_probe.contract import vocabulary

from .fixtures import JOB_UID, job, json_parser, node_name, pod, report, typed_report
from .reconcile import NOW, workers

QUEUE = "user-queue"
MASTER = "10.100.0.10"


class StepBuilder:
    """One job and what one step observes of it, built by chained calls (each returns the
    builder); :meth:`build` makes the :class:`Step`."""

    def __init__(self, num_nodes: int = 2) -> None:
        self.body = job(num_nodes, status={})
        self.pods: list[dict[str, Any]] = []
        self.now = NOW
        self.observed: dict[str, Any] = {}
        self.conds: list[tuple[str, str, str]] = []
        self.run: Optional[ProbeRun] = None

    # ---- the spec ---------------------------------------------------------------------
    def spec(self, **fields: Any) -> "StepBuilder":
        """Set top-level spec fields (camelCase, as the API takes them)."""
        self.body["spec"].update(fields)
        return self

    def nodes(self, n: int) -> "StepBuilder":
        """``spec.numNodes``."""
        return self.spec(numNodes=n)

    def suspended(self, value: bool = True) -> "StepBuilder":
        """``spec.suspend``."""
        return self.spec(suspend=value)

    def without_probes(self) -> "StepBuilder":
        """``spec.probe.enabled: false``: training starts without a preflight."""
        return self.spec(probe={"enabled": False})

    def sidecar(self, first: bool = True, native: bool = False) -> "StepBuilder":
        """A log-shipping sidecar ``logs`` in the template: a container listed before the
        trainer (or after it), or a native one (an init container, restartPolicy Always)."""
        logs = {"name": "logs", "image": "example/logs:1", "command": ["sh", "-c", "tail -F /logs/x"],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
        tmpl = self.body["spec"]["template"]["spec"]
        if native:
            tmpl["initContainers"] = [{**logs, "restartPolicy": "Always"}]
        else:
            tmpl["containers"] = [logs] + tmpl["containers"] if first else tmpl["containers"] + [logs]
        return self

    def run_policy(self, **fields: Any) -> "StepBuilder":
        """``spec.runPolicy`` (backoffLimit, reprobeOnFailure, activeDeadlineSeconds, ...)."""
        return self.spec(runPolicy=fields)

    def queued(self, queue: str = QUEUE) -> "StepBuilder":
        """Labelled for Kueue's LocalQueue ``queue``."""
        self.body["metadata"]["labels"] = {kueue.QUEUE_LABEL: queue}
        return self

    # ---- the status -------------------------------------------------------------------
    def status(self, **fields: Any) -> "StepBuilder":
        """Set top-level status fields (``restarts``, ``probe``, ``startTime``, ...)."""
        self.body["status"].update(fields)
        return self

    def condition(self, ctype: str, status: str, reason: str = "Given") -> "StepBuilder":
        """A condition as an earlier step left it (set over the first visit's Unknowns)."""
        self.conds.append((ctype, status, reason))
        return self

    def probing(self, attempt: int = 1, started: str = "2026-11-30T11:59:50Z") -> "StepBuilder":
        """A probe attempt under way since ``started``."""
        return self.status(probe={"attempt": attempt, "startTime": started})

    def validated(self, master: Optional[str] = MASTER, ifname: str = "eth1") -> "StepBuilder":
        """The preflight passed: ``Validated`` True, rank r validated on node r (``node-a``,
        ...) on ``ifname``, the rendezvous at ``master`` (None: the status lost it)."""
        n = self.body["spec"]["numNodes"]
        self.status(nodes=[{"rank": r, "name": node_name(r), "interface": ifname} for r in range(n)],
                    rendezvous={"masterAddr": master, "masterPort": 29500, "socketIfname": ifname})
        return self.condition(constants.VALIDATED, constants.TRUE, "Passed")

    def training(self) -> "StepBuilder":
        """Validated, and every rank started (``TrainingStarted`` True)."""
        self.validated().status(startTime="2026-11-30T11:59:00Z")
        return self.condition(constants.TRAINING_STARTED, constants.TRUE, "AllRanksRunning")

    def finished(self, succeeded: bool = True) -> "StepBuilder":
        """The job ended (``Succeeded`` or ``Failed`` True)."""
        win, lose = (constants.SUCCEEDED, constants.FAILED) if succeeded else (constants.FAILED, constants.SUCCEEDED)
        return self.condition(win, constants.TRUE, "Given").condition(lose, constants.FALSE, "Given")

    # ---- the children and what else was observed --------------------------------------
    def with_pods(self, *pods: dict[str, Any]) -> "StepBuilder":
        """Pods as the API returns them (see :func:`.fixtures.pod`)."""
        self.pods.extend(pods)
        return self

    def probes(self, *phases: str, attempt: int = 1) -> "StepBuilder":
        """One probe pod per rank of the attempt, in these phases (rank r on node r)."""
        return self.with_pods(*(pod(f"j-probe-{r}", constants.ROLE_PROBE, r, attempt=attempt, phase=ph,
                                    node=node_name(r)) for r, ph in enumerate(phases)))

    def workers(self, *phases: str, attempt: int = 0, exit_code: int = 1) -> "StepBuilder":
        """One training pod per rank of the attempt, in these phases (see
        :func:`.reconcile.workers`)."""
        return self.with_pods(*workers(*phases, attempt=attempt, exit_code=exit_code))

    def with_probe_reports(self, *reports: dict[str, Any], master: Optional[str] = MASTER) -> "StepBuilder":
        """The probe run reached its verdict with these reports (none given: every rank
        passed); see :meth:`with_outcomes`."""
        n = self.body["spec"]["numNodes"]
        reports = reports or tuple(report(r, node_name(r), world_size=n) for r in range(n))
        return self.with_outcomes(*(ProbeOutcome(rank=x["rank"], pod=f"j-probe-{x['rank']}", node=x["node"], report=typed_report(x))
                                    for x in reports), master=master)

    def with_outcomes(self, *outcomes: ProbeOutcome, master: Optional[str] = MASTER,
                      sidecar: Optional[str] = None) -> "StepBuilder":
        """The probe run reached its verdict with these outcomes (``s.probe_run``, what
        :mod:`disttrain.reconcile.policies.probing` hands :mod:`.verdict`): the probe pods
        finished with their reports (and a ``sidecar`` container a mesh injected), a rank
        with ``OOMKilled`` ended by the kubelet, a rank with ``ProbePodLost`` lost with its
        node; :func:`~disttrain.reconcile.policies.verdict.collect` reads them back."""
        by_rank = {x.rank: pod(x.pod, constants.ROLE_PROBE, x.rank, phase="Succeeded", node=x.node,
                               message=json.dumps(x.report and x.report.model_dump(  # as the probe wrote it
                                   mode="json", by_alias=True, exclude_unset=True)), exit_code=0)
                   for x in outcomes}
        for p in by_rank.values():
            if sidecar:
                p["spec"]["containers"].append({"name": sidecar})
        # a rank the kubelet ended, or lost with its node, as probing hands it over
        killed = {x.rank: kubelet.ContainerFailure(kubelet.OOM, "OOMKilled", container="probe", exit_code=137)
                  for x in outcomes if x.error_reason == vocabulary.OOM_KILLED}
        lost = {x.rank: f"({x.error})" for x in outcomes if x.error_reason == vocabulary.PROBE_POD_LOST}
        self.run = ProbeRun(master, by_rank, killed, lost)
        return self

    def observing(self, **observed: Any) -> "StepBuilder":
        """The rest of :class:`~disttrain.reconcile.step.Observed`: api_failures,
        capabilities, kueue, network_policies, nodes, namespace_labels."""
        self.observed.update(observed)
        return self

    def workload(self, conditions: list[dict], admission: Optional[dict] = None,
                 flavors: tuple[dict, ...] = (), active: Optional[bool] = None) -> "StepBuilder":
        """A queued job whose Workload has these conditions (see :func:`workload`)."""
        return self.queued().observing(kueue=kueue.KueueRead(workload(conditions, admission, active), flavors))

    def after(self, seconds: float) -> "StepBuilder":
        """The step runs ``seconds`` after :data:`.reconcile.NOW`."""
        self.now = NOW + timedelta(seconds=seconds)
        return self

    def build(self) -> Step:
        """The Step as the loop hands it to its first policy."""
        o = Observed.of(self.body, self.pods, self.now, **self.observed)
        spec = DistTrainingJobSpec.model_validate(o.body["spec"])
        spec, problem = gangpolicy.effective_spec(spec, o.capabilities, "j")
        assert problem is None, problem
        ts = cond.now_rfc3339(self.now)
        plan = Plan(status=repair(copy.deepcopy(o.body.get("status")), ts))
        plan.status["conditions"] = cond.initial(1, ts, spec.probe.enabled)
        s = Step(job=JobRef.from_body(o.body), spec=spec, generation=1, now=o.now, plan=plan,
                 pods=list(o.pods), services=list(o.services), parse_report=json_parser,
                 probe_image="probe:1", api_failures=o.api_failures, capabilities=o.capabilities,
                 labels=dict(o.body["metadata"].get("labels") or {}), kueue=o.kueue,
                 network_policies=o.network_policies, nodes=o.nodes,
                 namespace_labels=o.namespace_labels, progress=o.progress)
        for ctype, status, reason in self.conds:
            s.set(ctype, status, reason, "given")
        s.gangs = gangpolicy.gangs(s)
        s.probe_run = self.run
        return s


def spec_of(**fields: Any) -> DistTrainingJobSpec:
    """The parsed spec of :func:`.fixtures.job` with these top-level fields (camelCase)."""
    return DistTrainingJobSpec.model_validate(job(**fields)["spec"])


def given(num_nodes: int = 2) -> StepBuilder:
    """A new :class:`StepBuilder` for a job of ``num_nodes`` nodes."""
    return StepBuilder(num_nodes)


@dataclass(frozen=True)
class Want:
    """One row's expected result of a policy: its :class:`Outcome` (or what another function
    of a policy returns; a callable: a check of it), the conditions as
    ``{type: (status, reason)}`` (None: not written), the pods planned for creation and deletion (None: not
    checked), ``status`` fields and a substring of a condition's message."""

    outcome: Any
    conds: dict[str, Optional[tuple[str, str]]] = field(default_factory=dict)
    creates: Optional[list[str]] = None
    deletes: Optional[list[str]] = None
    status: dict[str, Any] = field(default_factory=dict)
    says: dict[str, str] = field(default_factory=dict)
    requeue: Optional[float] = None  # the step asks to run again within this many seconds
    more: Optional[Callable[[Step], bool]] = None  # any other check of the step after the policy


def check(policy: Callable[[Step], Any], given: StepBuilder, want: Want) -> Step:
    """Run ``policy`` on the built step and assert each part of ``want``; the step after."""
    s = given.build()
    got = policy(s)
    if callable(want.outcome):
        assert want.outcome(got), got
    else:
        assert got == want.outcome
    got = {t: (x["status"], x["reason"]) if (x := cond.get(s.conds, t)) else None for t in want.conds}
    assert got == want.conds
    for ctype, text in want.says.items():
        assert text in (cond.get(s.conds, ctype) or {}).get("message", ""), (ctype, text)
    if want.creates is not None:
        assert sorted(p["metadata"]["name"] for p in s.plan.creates) == sorted(want.creates)
    if want.deletes is not None:
        assert sorted(s.plan.deletes) == sorted(want.deletes)
    for key, value in want.status.items():
        assert s.status.get(key) == value, (key, s.status.get(key))
    if want.requeue is not None:
        assert s.plan.requeue_after == want.requeue
    if want.more is not None:
        assert want.more(s)
    for c in s.conds:  # every message any policy table produces: one line, at most 400 characters
        m = c.get("message") or ""
        assert "\n" not in m and "\r" not in m and len(m) <= cond.MAX_MESSAGE, (c.get("type"), m)
    return s


def table(*rows: tuple[str, StepBuilder, Want]) -> pytest.MarkDecorator:
    """``pytest.mark.parametrize`` over (name, given, want) rows, each shown by its name."""
    return pytest.mark.parametrize("name,given,want", rows, ids=[r[0] for r in rows])


# ---- Kueue's objects ----------------------------------------------------------------------
FLAVOR = {"apiVersion": kueue.KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": "gpu-a"},
          "spec": {"nodeLabels": {"pool": "a100"},
                   "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
PENDING = [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
            "message": "couldn't assign flavors to pod set nodes: insufficient unused quota for cpu in "
                       "flavor default-flavor, 2 more needed"}]
ADMITTED = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]
ADMISSION = {"clusterQueue": "cluster-queue",
             "podSetAssignments": [{"name": "nodes", "flavors": {"cpu": "gpu-a", "nvidia.com/gpu": "gpu-a"}}]}
EVICTED = ADMITTED + [{"type": "Evicted", "status": "True", "reason": "Preempted",
                       "message": "Preempted to accommodate a workload in cluster-queue"}]
DEACTIVATED = [{"type": "Evicted", "status": "True", "reason": "InactiveWorkload",
                "message": "The workload is deactivated"}]


def workload(conditions: list[dict], admission: Optional[dict] = None, active: Optional[bool] = None,
             queue: str = QUEUE) -> dict[str, Any]:
    """The Workload the operator creates for the default job queued in ``queue``, as Kueue
    left it: these status conditions, its admission, ``spec.active``."""
    wl = kueue.workload(JobRef("j", "ns", JOB_UID), spec_of(), queue)
    wl["metadata"]["resourceVersion"] = "7"
    wl["status"] = {"conditions": conditions}
    if admission:
        wl["status"]["admission"] = admission
    if active is not None:
        wl["spec"]["active"] = active
    return wl

