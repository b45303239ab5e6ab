"""The admission check controller's decisions (pure): what it saw of one Workload
(:class:`Seen`) -> what to do (:class:`Decision`). The shell
(:mod:`disttrain.shell.admission`) reads, calls :func:`decide` and applies; nothing here
reads or writes the API. :func:`decide` never raises: a bug becomes a Pending answer that
says so, retried with a delay.

The lifecycle of one Workload (``ours``: the AdmissionChecks whose ``controllerName`` is
:data:`~disttrain.admissioncheck.workload.CONTROLLER_NAME`):

1. Not waiting on one of ours (:func:`~disttrain.admissioncheck.status.awaiting`: no quota
   reserved, evicted, deactivated, finished, being deleted, or the check already answered):
   the shadow DistTrainingJob, if any, is deleted (a Workload that loses its quota or is
   deactivated mid-probe frees the nodes at once; a vanished one takes the shadow with it
   through its ownerReference). The validated nodes' label is removed once the Workload
   is finished, deactivated or being deleted (while it runs, its pods' nodeSelector needs it).
2. Waiting, but the Workload cannot be checked (:class:`~.workload.Problem`: an owner the
   check does not read, templates it cannot copy, pod sets that differ): **Rejected**,
   naming the field (reading it again gives the same).
3. A DistTrainingJob of the shadow's name that the Workload does not own is someone
   else's: never deleted nor read; the answer is **Retry**, naming it. Waiting, no current
   shadow: create it (:func:`.shadow.shadow_job`; a deterministic name,
   so a create repeated after a lost answer finds it: idempotent). A shadow of an earlier
   attempt (Kueue counted a Retry since) or of an earlier Workload of the same name is
   deleted first. The answer says Pending, with why.
4. The shadow decided: :func:`~disttrain.admissioncheck.answer.answer`. **Ready** only when
   ``Validated`` is True, no check condition is False, and every rank's probe pod is seen on
   a node (those nodes get the label the Ready answer's nodeSelector names; nodes that had
   it from an earlier round lose it); otherwise Pending until they are seen. **Retry** or
   **Rejected** as the answer says; a Retry's nodes are added to the Workload's
   :data:`~.shadow.ANN_AVOID` (before the answer is written), which the next round's
   shadow keeps its probes off.
5. Undecided after :data:`GIVE_UP_SECONDS` (the shadow's own probe budget ends it long
   before, unless the operator cannot act on it): **Retry**, so Kueue releases the quota;
   Kueue's own retry limits bound the rounds. Nothing waits silently forever.

An Event on the job that owns the Workload says each answer but Pending, once (when the
state changes).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Mapping, Optional, Union

from disttrain.admissioncheck import answer as ans
from disttrain.admissioncheck import shadow, status
from disttrain.admissioncheck.probespec import Flavor, probe_job, probe_job_of, probe_specs
from disttrain.admissioncheck.workload import Plan, Problem, parse_workload
from disttrain.api import constants
from disttrain.api.types import ProbeSpec
from disttrain.children import observe
from disttrain.diagnosis import messages
from disttrain_probe.contract import vocabulary

GIVE_UP_SECONDS = 1800  # undecided this long: Retry (the probe budget ends a shadow far sooner)
WAIT_SECONDS = 15.0  # look again while the shadow probes (its Events also wake the check)
GONE_SECONDS = 2.0  # a stale shadow being deleted: look again soon
ERROR_SECONDS = 30.0
# a round's failure that says only that the probes could not all be placed
TOO_FEW_NODES = (vocabulary.PROBE_UNSCHEDULABLE, vocabulary.NOT_ENOUGH_NODES)
EVENT_REASONS = {ans.READY: "PreflightReady", ans.RETRY: "PreflightRetry", ans.REJECTED: "PreflightRejected"}


@dataclass(frozen=True)
class Seen:
    """What the shell read for one Workload: the Workload (None: gone), our checks' names,
    the time, its shadow DistTrainingJob (None: none), the shadow's probe pods, the nodes
    carrying the Workload's validated label, the ResourceFlavors it was admitted with, and
    the operator's probe settings."""

    workload: Any
    ours: frozenset[str]
    now: datetime
    shadow: Optional[dict[str, Any]] = None
    probe_pods: tuple[dict[str, Any], ...] = ()
    labelled: tuple[str, ...] = ()
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    probe: Optional[ProbeSpec] = None
    key: Optional[str] = None  # the validated label's key, remembered for a Workload gone


@dataclass(frozen=True)
class Decision:
    """What to do: ``create`` a shadow job (its body), ``delete`` the shadow named so,
    ``answers`` (server-side apply bodies of the Workload's status, one per check of
    ours), ``state`` the answer's state (None: no answer), node labels to add (``label``)
    and remove (``unlabel``) of key ``label_key``, an ``event`` (type, reason, message)
    on the job ``event_on`` (apiVersion, kind, name, uid), ``requeue`` (seconds), and
    ``avoid``: the Workload's new :data:`~.shadow.ANN_AVOID` (a Retry's nodes added; ""
    clears it) and ``avoid_why`` its :data:`~.shadow.ANN_AVOID_WHY`."""

    create: Optional[dict[str, Any]] = None
    delete: Optional[str] = None
    answers: tuple[dict[str, Any], ...] = ()
    state: Optional[str] = None
    label: tuple[str, ...] = ()
    unlabel: tuple[str, ...] = ()
    label_key: Optional[str] = None
    event: Optional[tuple[str, str, str]] = None
    event_on: Optional[dict[str, str]] = None
    requeue: Optional[float] = None
    avoid: Optional[str] = None  # the Workload's new avoid annotation (shadow.ANN_AVOID), before the answer
    avoid_why: Optional[str] = None  # with it, the verdict that named them (shadow.ANN_AVOID_WHY)


def _meta(obj: Any) -> dict[str, Any]:
    m = obj.get("metadata") if isinstance(obj, dict) else None
    return m if isinstance(m, dict) else {}


def owner_ref(workload: Any) -> Optional[dict[str, str]]:
    """The controller ownerReference of ``workload`` (the job Events go to), or None."""
    refs = _meta(workload).get("ownerReferences")
    for r in refs if isinstance(refs, list) else []:
        if isinstance(r, dict) and r.get("controller") is True and all(
                isinstance(r.get(k), str) and r.get(k) for k in ("apiVersion", "kind", "name", "uid")):
            return {k: str(r[k]) for k in ("apiVersion", "kind", "name", "uid")}
    return None


def shadow_name(workload: Any) -> Optional[str]:
    """The name of ``workload``'s shadow job (and of its validated label); None when the
    Workload has no controller owner, uid or namespace."""
    plan = parse_workload(workload)
    if isinstance(plan, Plan):
        return probe_job(plan).name
    meta, ref = _meta(workload), owner_ref(workload)
    ns, uid = meta.get("namespace"), meta.get("uid")
    if ref is None or not isinstance(ns, str) or not isinstance(uid, str) or not uid:
        return None
    return probe_job_of(ref["name"], ns, uid).name


def label_key(workload: Any) -> Optional[str]:
    """The node label key the Ready answer of ``workload`` selects on (None: no name)."""
    name = shadow_name(workload)
    return f"{ans.LABEL_PREFIX}/{name}" if name else None


def orphan_labels(node_labels: Mapping[str, Mapping[str, str]], live: frozenset[str]) -> dict[str, list[str]]:
    """Node -> our label keys (``preflight.disttrain.dev/...``) on it that no Workload in
    ``live`` (their :func:`label_key`) selects: left behind when a Workload went while the
    operator was down. Pure. The caller lists the nodes before the Workloads, so a label
    put on for a Workload created in between is never taken for an orphan."""
    prefix = ans.LABEL_PREFIX + "/"
    out: dict[str, list[str]] = {}
    for node, labels in node_labels.items():
        keys = sorted(k for k in labels if k.startswith(prefix) and k not in live)
        if keys:
            out[node] = keys
    return out


def concerned(workload: Any, ours: frozenset[str]) -> bool:
    """Whether ``workload`` lists one of our checks (else the shell reads nothing more)."""
    st = workload.get("status") if isinstance(workload, dict) else None
    checks = st.get("admissionChecks") if isinstance(st, dict) else None
    return any(isinstance(c, dict) and c.get("name") in ours for c in (checks if isinstance(checks, list) else []))


def flavor_names(workload: Any) -> list[str]:
    """The ResourceFlavors the Workload's quota was reserved in (for the shell to read)."""
    st = workload.get("status") if isinstance(workload, dict) else None
    adm = st.get("admission") if isinstance(st, dict) else None
    items = adm.get("podSetAssignments") if isinstance(adm, dict) else None
    out: set[str] = set()
    for a in items if isinstance(items, list) else []:
        fl = a.get("flavors") if isinstance(a, dict) else None
        out.update(v for v in (fl.values() if isinstance(fl, dict) else []) if isinstance(v, str) and v)
    return sorted(out)


def _ended(workload: Any) -> bool:
    """Finished, deactivated or being deleted: its nodes need the label no longer."""
    conds = status._conditions(workload)  # noqa: SLF001 - the module's own reader
    spec = workload.get("spec") if isinstance(workload, dict) else None
    inactive = isinstance(spec, dict) and spec.get("active") is False
    return bool(_meta(workload).get("deletionTimestamp")) or conds.get(status.FINISHED) == constants.TRUE or inactive


def decide(seen: Seen) -> Decision:
    """The module docstring. Never raises."""
    try:
        return _decide(seen)
    except Exception as exc:  # noqa: BLE001 - a bug: shown as Pending on the check, retried
        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        at = f" at {where[0].filename.rsplit('/', 1)[-1]}:{where[0].lineno}" if where else ""
        msg = f"the operator failed on this Workload ({type(exc).__name__}{at}); it retries"
        return Decision(answers=_bodies(seen, ans.Answer(ans.PENDING, messages.bound(msg))),
                        state=ans.PENDING, requeue=ERROR_SECONDS)


def _bodies(seen: Seen, a: ans.Answer) -> tuple[dict[str, Any], ...]:
    """The apply bodies that write ``a`` to each of our checks the Workload waits on,
    leaving out those whose entry already says the same."""
    wl, out = seen.workload, []
    ts = seen.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for check in status.awaiting(wl, set(seen.ours)) if not _ended(wl) else []:
        old = status.entry(wl, check) or {}
        body = status.apply_body(wl, check, a, ts)
        new = body["status"]["admissionChecks"][0]
        if any(old.get(k) != new.get(k) for k in ("state", "message", "podSetUpdates", "requeueAfterSeconds")):
            out.append(body)
    return tuple(out)


def _gone_or_done(seen: Seen, key: Optional[str]) -> Decision:
    """Step 1 of the module docstring."""
    sh = seen.shadow
    delete = observe.name(sh) if sh is not None and not _meta(sh).get("deletionTimestamp") else None
    ended = seen.workload is None or _ended(seen.workload)
    unlabel = tuple(sorted(seen.labelled)) if ended else ()
    return Decision(delete=delete or None, unlabel=unlabel, label_key=key)


def _answer(seen: Seen, a: ans.Answer, key: Optional[str], **kw: Any) -> Decision:
    """A Decision that writes ``a`` (and says it in an Event when its state changes)."""
    bodies = _bodies(seen, a)
    event = None
    changed = any(b["status"]["admissionChecks"][0]["state"] != (status.entry(seen.workload, b["status"][
        "admissionChecks"][0]["name"]) or {}).get("state") for b in bodies)
    if a.state in EVENT_REASONS and changed:
        etype = "Normal" if a.state == ans.READY else "Warning"
        event = (etype, EVENT_REASONS[a.state], f"admission check {a.state}: {a.message}")
    return Decision(answers=bodies, state=a.state, label_key=key, event=event,
                    event_on=owner_ref(seen.workload) if event else None, **kw)


def _decide(seen: Seen) -> Decision:
    wl = seen.workload
    foreign = seen.shadow is not None and not shadow.owned(seen.shadow, _meta(wl).get("uid"))
    if foreign:  # a DistTrainingJob of the shadow's name that is not this Workload's: left alone
        seen = replace(seen, shadow=None, probe_pods=())
    key = label_key(wl) if wl is not None else seen.key
    checks = status.awaiting(wl, set(seen.ours)) if wl is not None and not _ended(wl) else []
    if not checks:
        return _gone_or_done(seen, key)
    stale = seen.shadow is not None and bool(_meta(seen.shadow).get("deletionTimestamp"))
    plan = parse_workload(wl)
    attempt = status.retry_count(wl, checks[0])
    body: Union[dict[str, Any], Problem] = plan if isinstance(plan, Problem) else Problem("", "", "")
    if isinstance(plan, Plan):
        specs = probe_specs(plan, seen.flavors, seen.probe)
        body = specs if isinstance(specs, Problem) else shadow.shadow_job(plan, specs, attempt, shadow.avoided(wl))
    if isinstance(body, Problem):
        delete = observe.name(seen.shadow) if seen.shadow is not None and not stale else None
        return _answer(seen, ans.problem_answer(body), key, delete=delete or None)
    assert isinstance(plan, Plan) and isinstance(body, dict)  # body is a dict only for a Plan
    if stale:
        return Decision(label_key=key, requeue=GONE_SECONDS)
    if foreign:
        return _answer(seen, ans.Answer(ans.RETRY, messages.bound(
            f"DistTrainingJob {body['metadata']['name']} exists and is not this check's: the preflight "
            "runs under that name; delete or rename it"), requeue_after_seconds=ans.RETRY_AFTER_SECONDS), key)
    if seen.shadow is None:
        return _answer(seen, ans.Answer(ans.PENDING, "creating the preflight probes (DistTrainingJob "
                                        f"{body['metadata']['name']})"), key, create=body, requeue=WAIT_SECONDS)
    if not shadow.current(seen.shadow, plan.uid, attempt):
        return Decision(delete=observe.name(seen.shadow), label_key=key, requeue=GONE_SECONDS)
    return _verdict(seen, plan, key)


def _verdict(seen: Seen, plan: Plan, key: Optional[str]) -> Decision:
    """Steps 4 and 5 of the module docstring: the current shadow's conditions as the answer."""
    assert seen.shadow is not None
    verdicts = shadow.verdicts(seen.shadow)
    placed = shadow.placed(seen.probe_pods, observe.name(seen.shadow), plan.num_nodes)
    a = ans.answer(verdicts, plan, placed, ans.named_nodes(verdicts, placed), shadow.ifnames(seen.shadow),
                   retry_count=status.retry_count(seen.workload, status.awaiting(seen.workload, set(seen.ours))[0]))
    if a.state == ans.READY:
        every = len(placed) == plan.num_nodes
        clean = all(v.status != constants.FALSE for v in verdicts.values())
        if not (every and clean):
            a = ans.Answer(ans.PENDING, "the preflight passed; waiting to see every rank's probe pod on its node")
            return _answer(seen, a, key, requeue=GONE_SECONDS)
        nodes = tuple(sorted(set(placed.values())))
        return _answer(seen, a, key, label=tuple(n for n in nodes if n not in seen.labelled),
                       unlabel=tuple(sorted(n for n in seen.labelled if n not in nodes)))
    if a.state == ans.PENDING:
        born = observe.parse_time(_meta(seen.shadow).get("creationTimestamp"))
        if born is not None and (seen.now - born).total_seconds() > GIVE_UP_SECONDS:
            a = ans.Answer(ans.RETRY, messages.bound(
                f"the preflight did not decide within {GIVE_UP_SECONDS} s ({a.message})"),
                requeue_after_seconds=ans.RETRY_AFTER_SECONDS)
            return _answer(seen, a, key)
        return _answer(seen, a, key, requeue=WAIT_SECONDS)
    if a.state == ans.RETRY:
        return _retry(seen, a, key, ans.failed(verdicts).reason)
    return _answer(seen, a, key)


def _retry(seen: Seen, a: ans.Answer, key: Optional[str], reason: str) -> Decision:
    """A Retry: the next round's probes keep off the nodes it named. When the probes could
    not be placed while earlier rounds' nodes were kept out, the cause is still the verdict
    that named those nodes, not the scheduler's word: it is said again, and the next round
    probes every node (the fault may be fixed; else it is measured and named again)."""
    earlier = shadow.avoided(seen.workload)
    if earlier and reason in TOO_FEW_NODES:
        nodes = messages.node_list(earlier, messages.MOST_NAMED)
        why = shadow.avoided_why(seen.workload) or "an earlier preflight failed on them"
        a = replace(a, avoid=(), message=messages.bound(
            f"{nodes} kept out after this verdict left too few nodes (the next try probes every node): {why}"))
        return _answer(seen, a, key, avoid="", avoid_why="")
    more = shadow.avoid_more(seen.workload, a.avoid)
    return _answer(seen, a, key, avoid=more, avoid_why=a.message if more is not None else None)
