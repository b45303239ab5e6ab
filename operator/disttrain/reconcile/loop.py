"""One idempotent reconcile step (pure): observed job + its children -> a :class:`Plan`.

Level-triggered: everything is recomputed from the spec, the observed children and the
status, so running it twice, or after an operator restart in the middle of a probe or of
training, creates no duplicate pods and loses nothing. It reads as a list of named steps
over one :class:`~disttrain.reconcile.step.Step`, each a policy module of its own:

1. repair the status (:mod:`disttrain.reconcile.status_repair`): a hand-edited or older status
   never crashes a step, and attempt numbers lost from it are recalled from the children;
2. admit: a job whose name or spec cannot be acted on fails with ``InvalidSpec`` naming
   the field;
3. terminal jobs: clean up (:mod:`.policies.cleanup`) and delete the job after
   ``runPolicy.ttlSecondsAfterFinished``;
4. API failures of the previous step (:mod:`.policies.apierrors`): terminal ones end the
   job, the others are shown after a few retries;
5. suspend (:mod:`.policies.suspend`): a suspended job's pods are deleted and nothing else
   runs; a resumed one probes again; then admission by Kueue (:mod:`.policies.admission`):
   a queued job runs nothing before its Workload is admitted;
6. probe (:mod:`.policies.probing`), then the verdict (:mod:`.policies.verdict`) from
   reports checked by :mod:`disttrain.diagnosis.trust`; a preflight-only job (the Kueue
   admission check's, :mod:`.policies.preflightonly`) stops there;
7. training (:mod:`.policies.training`, gang restarts by :mod:`.policies.restart`, the
   deadline by :mod:`.policies.deadline`);
8. the headless Service that names the pods, then phase and Events.

Never raises: an exception inside a step (a bug) becomes the condition reason
``OperatorError`` on the condition the job waits on, and the step is retried with backoff.
"""

from __future__ import annotations

import copy
import traceback
from datetime import datetime
from typing import Any, Callable, Optional

from pydantic import ValidationError

from disttrain.api import constants
from disttrain.api.fieldpath import spec_error_message
from disttrain.api.jobname import job_name_problem
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import observe
from disttrain.children.names import JobRef, service_name, uses_dns_hostnames
from disttrain.children.service import build_headless_service
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.jobstatus import JobStatus
from disttrain.reconcile.policies import (
    admission,
    apierrors,
    cleanup,
    preflightonly,
    probing,
    suspend,
    training,
    verdict,
)
from disttrain.reconcile.policies import gang as gangpolicy
from disttrain.reconcile.status_repair import repair
from disttrain.reconcile.step import Observed, Outcome, Plan, ReportParser, Step
from disttrain_probe.contract import vocabulary

__all__ = ["reconcile"]


def reconcile(observed: Observed, parse_report: ReportParser,
              probe_image: str = constants.DEFAULT_PROBE_IMAGE) -> Plan:
    """Compute one step from what was ``observed`` (:class:`~disttrain.reconcile.step.Observed`).

    ``parse_report`` turns a termination message into the typed report
    (:class:`~disttrain.diagnosis.report.ProbeReport`) or raises ValueError; ``probe_image`` is the operator's default probe image. Never raises."""
    try:
        return _reconcile(observed, parse_report, probe_image)
    except Exception as exc:  # a bug: shown on the job, retried with backoff
        return _operator_error(observed.body, observed.now, exc)


def _reconcile(observed: Observed, parse_report: ReportParser, probe_image: str) -> Plan:
    body, now = observed.body, observed.now
    capabilities, kueue = observed.capabilities, observed.kueue
    meta = v if isinstance(v := body.get("metadata"), dict) else {}
    gen = meta.get("generation") if isinstance(meta.get("generation"), int) else None
    ts = cond.now_rfc3339(now)
    raw_status = body.get("status")
    old = repair(raw_status, ts)
    plan = Plan(status=copy.deepcopy(old))
    JobStatus(plan.status).observe(gen)
    conds = JobStatus(plan.status).conditions

    problem = job_name_problem(meta.get("name"))
    try:
        spec = DistTrainingJobSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        spec, problem = None, problem or f"invalid spec: {spec_error_message(exc)}"
    if spec is not None and not problem:
        spec, problem = gangpolicy.effective_spec(spec, capabilities, meta.get("name"))
    if spec is not None and not problem:
        problem = job_name_problem(meta.get("name"), spec)
    if problem or spec is None:
        return _invalid(plan, old, raw_status, gen, ts, problem or "invalid spec")
    if not conds:
        conds.extend(cond.initial(gen, ts, spec.probe.enabled))
    s = Step(job=JobRef.from_body(body), spec=spec, generation=gen, now=now, plan=plan,
             pods=list(observed.pods), services=list(observed.services), parse_report=parse_report,
             probe_image=probe_image, api_failures=observed.api_failures, capabilities=capabilities,
             labels=dict(meta.get("labels") or {}) if isinstance(meta.get("labels"), dict) else {},
             kueue=kueue, network_policies=observed.network_policies, nodes=observed.nodes,
             namespace_labels=observed.namespace_labels, progress=observed.progress)
    s.gangs = gangpolicy.gangs(s)
    _recall_attempts(s)
    _stages(s)
    return _finish(s, old, raw_status)


def _recall_attempts(s: Step) -> None:
    """The status is the operator's memory, but each child carries its attempt too: a status
    that lost it (edited by hand, restored from a backup) never makes the job reuse an
    attempt number its existing pods already carry."""
    def top(role: str) -> int:
        return max((observe.int_label(p, constants.LABEL_ATTEMPT) for p in s.ours if observe.role(p) == role), default=-1)

    if top(constants.ROLE_WORKER) > s.st.restarts:
        s.st.restarts = top(constants.ROLE_WORKER)
    if top(constants.ROLE_PROBE) > (s.st.probe.attempt or 0):
        s.st.new_probe_attempt(top(constants.ROLE_PROBE))


# The policies in the order they run, each ``apply(s: Step) -> Outcome`` (see step.Outcome).
POLICIES: tuple[Callable[[Step], Outcome], ...] = (
    apierrors.apply,   # the previous step's API failures: terminal ones end the job
    suspend.apply,     # spec.suspend: STOP while suspended
    admission.apply,   # Kueue: STOP until the Workload is admitted
    probing.apply,     # the probe run, while Validated is Unknown -> s.probe_run
    verdict.apply,     # s.probe_run -> the check conditions, Validated
    preflightonly.apply,  # a preflight-only job (the admission check's): STOP at Validated=True
    training.apply,    # once validated (or without probes): training pods, their outcome
)


def _stages(s: Step) -> None:
    if s.terminal:
        _cleanup(s)
        return
    for policy in POLICIES:
        outcome = policy(s)
        if outcome is Outcome.FINISHED:
            _cleanup(s)
            return
        if outcome is Outcome.STOP:
            return
    if s.terminal:
        _cleanup(s)
    else:
        apierrors.show(s)  # a failure that persists is shown on the stage's condition
    _headless_service(s)


def _cleanup(s: Step) -> None:
    """A finished job: delete what cleanup says; delete the job itself after its TTL."""
    failed = s.status_of(constants.VALIDATED) == constants.FALSE
    for p in cleanup.probes_to_delete(s.spec, failed, s.alive(constants.ROLE_PROBE)):
        s.delete(p)
    for p in cleanup.workers_to_delete(s.spec, s.alive(constants.ROLE_WORKER), failed):
        s.delete(p)
    s.plan.creates.clear()
    s.plan.services.clear()
    admission.finish(s)
    finished = observe.parse_time(s.st.completion_time)
    if finished is None:
        for ctype in (constants.SUCCEEDED, constants.FAILED):
            x = cond.get(s.conds, ctype)
            if x and x["status"] == constants.TRUE:
                finished = observe.parse_time(x.get("lastTransitionTime"))
    left = cleanup.ttl_seconds_left(s.spec, finished, s.now)
    if left is None:
        return
    if left <= 0:
        s.plan.delete_job = True
        s.plan.events.append(("Normal", vocabulary.TTL_EXPIRED, (
            f"deleting the job: finished at {s.st.completion_time or 'an unknown time'}, "
            f"runPolicy.ttlSecondsAfterFinished={s.spec.run_policy.ttl_seconds_after_finished}")))
    else:
        s.plan.requeue(left)


def owned_service_name(body: dict[str, Any], capabilities: frozenset[str]) -> Optional[str]:
    """The name of the headless Service the step for job ``body`` may own and must observe,
    decided on the spec it acts on (a gang turns DNS hostnames on: :mod:`.policies.gang`);
    None when it owns none or the spec is not one the step acts on. Never raises."""
    try:
        spec = DistTrainingJobSpec.model_validate(body.get("spec") or {})
        meta = body.get("metadata") or {}
        spec, problem = gangpolicy.effective_spec(spec, capabilities, meta.get("name"))
        name = str(meta.get("name") or "")
    except Exception:  # noqa: BLE001 - an invalid spec is the step's to report
        return None
    return name if not problem and name and _owns_service(spec) else None


def _owns_service(spec: DistTrainingJobSpec) -> bool:
    """Whether a job of ``spec`` (the one the step acts on) owns a headless Service: with
    DNS hostnames and no user-managed subdomain."""
    return uses_dns_hostnames(spec) and not spec.network.subdomain


def _headless_service(s: Step) -> None:
    """With DNS hostnames and no user-managed subdomain, the job owns a headless Service
    named after it: created with the first pod, and again if it went missing."""
    spec = s.spec
    if s.terminal or not _owns_service(spec):
        return
    if not (s.plan.creates or s.alive(constants.ROLE_PROBE) or s.alive(constants.ROLE_WORKER)):
        return
    name = service_name(s.job, spec)
    if any(observe.name(x) == name for x in s.services):
        if not any(observe.name(x) == name and observe.owned_by(x, s.job.uid) for x in s.services):
            s.plan.requeue(2.0)  # an older job's Service, on its way out (same selector)
        return
    s.plan.services.append(build_headless_service(s.job, spec))


def _invalid(plan: Plan, old: dict, raw_status: Any, gen: Optional[int], ts: str, msg: str) -> Plan:
    """A job the operator cannot act on: Failed (terminal) with InvalidSpec naming the field."""
    conds = JobStatus(plan.status).conditions
    if not conds:
        conds.extend(cond.initial(gen, ts, True))
    msg = cond.clip(msg)
    cond.set_condition(conds, constants.VALIDATED, Verdict(constants.FALSE, vocabulary.INVALID_SPEC, msg), gen, ts)
    if not (cond.is_true(conds, constants.SUCCEEDED) or cond.is_true(conds, constants.FAILED)):
        cond.set_condition(conds, constants.FAILED, Verdict(constants.TRUE, vocabulary.INVALID_SPEC, msg), gen, ts)
        cond.set_condition(conds, constants.SUCCEEDED,
                           Verdict(constants.FALSE, vocabulary.INVALID_SPEC, "invalid spec"), gen, ts)
        JobStatus(plan.status).complete(ts)
    return _events(plan, old, raw_status, probing=False)


def _operator_error(body: dict[str, Any], now: datetime, exc: Exception) -> Plan:
    """A bug inside the step: keep the status, say so on the condition the job waits on."""
    ts = cond.now_rfc3339(now)
    raw_status = body.get("status") if isinstance(body, dict) else None
    old = repair(raw_status, ts)
    plan = Plan(status=copy.deepcopy(old))
    conds = JobStatus(plan.status).conditions
    if not (cond.is_true(conds, constants.SUCCEEDED) or cond.is_true(conds, constants.FAILED)):
        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
        ctype = constants.VALIDATED if not cond.is_true(conds, constants.VALIDATED) else constants.TRAINING_STARTED
        cond.set_condition(conds, ctype, Verdict(constants.UNKNOWN, vocabulary.OPERATOR_ERROR, cond.clip(
            f"the operator failed on this job ({type(exc).__name__}{at}: {exc}); it retries with "
            "backoff; please report this with the job's YAML")), None, ts)
    plan.requeue(10.0)
    return _events(plan, old, raw_status, probing=False)


def _finish(s: Step, old: dict, raw_status: Any) -> Plan:
    probing = (s.spec.probe.enabled and s.status_of(constants.VALIDATED) == constants.UNKNOWN
               and not s.terminal and not s.spec.suspend)
    return _events(s.plan, old, raw_status, probing)


def _events(plan: Plan, old: dict, raw_status: Any, probing: bool) -> Plan:
    """Phase, one Event per condition change, and whether the status must be written."""
    conds = JobStatus(plan.status).conditions
    JobStatus(plan.status).set_phase(cond.phase(conds, probing))
    old_conds = {x["type"]: x for x in old.get("conditions") or []}
    for new in conds:
        prev = old_conds.get(new["type"])
        if prev and (prev["status"], prev.get("reason")) == (new["status"], new.get("reason")):
            continue
        if new["status"] == constants.UNKNOWN and (prev is None or prev["status"] == constants.UNKNOWN)\
                and new.get("reason") not in (vocabulary.API_ERROR, vocabulary.OPERATOR_ERROR,
                                              vocabulary.NAME_CONFLICT, vocabulary.RESOURCE_NOT_OFFERED):
            continue
        if new["type"] in (constants.SUCCEEDED, constants.FAILED) and new["status"] == constants.FALSE:
            continue  # the other outcome condition carries the event
        bad = (new["status"] == constants.FALSE and new["type"] not in (constants.SUCCEEDED, constants.FAILED)) or (
            new["type"] == constants.FAILED and new["status"] == constants.TRUE)
        warn_reason = new["status"] != constants.FALSE and new.get("reason") not in constants.QUIET_REASONS
        etype = "Warning" if bad or warn_reason else "Normal"
        plan.events.append((etype, new["reason"], f"{new['type']}={new['status']}: {new['message']}"))
    plan.status_changed = plan.status != raw_status
    return plan
