"""The probe run (pure): one attempt from its pods to the verdict's inputs, and when to stop waiting.

Each step of a probe run (``Validated`` Unknown): the attempt's pods are created, rank 0
first (:mod:`.probelaunch`); ``ProbesScheduled`` says where they run, and unschedulable or
unpullable probes fail it at once; names held by another job's pods wait
(:mod:`.conflicts`). The verdict waits for every rank, except when a rank failed before
joining the store (:mod:`.stranded`) or a rank's node was lost (:mod:`.nodeloss`), and
never longer than the probe budget (:mod:`.deadline`); then every rank's report is
handed to :mod:`.verdict` in ``s.probe_run`` (the pods, MASTER_ADDR, the ranks the kubelet
ended or lost), where the reports are read.
"""

from __future__ import annotations

from typing import Optional

from disttrain.api import constants
from disttrain.children import observe
from disttrain.diagnosis import messages
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import conflicts, kubeletended, nodeloss, offers, scheduling, verdict
from disttrain.reconcile.policies.deadline import probe_budget_seconds, seconds_left
from disttrain.reconcile.policies.probelaunch import (
    attempt_of,
    current_probes,
    in_place,
    launch,
    probe_pod_names,
    record_start,
)
from disttrain.reconcile.policies.stranded import excused, rank0_wait, stranded
from disttrain.reconcile.step import Outcome, ProbeRun, Step
from disttrain_probe.contract import vocabulary


def _pull_summary(pull: list[tuple[int, dict, str]]) -> str:
    """``rank 1 on node-b, rank 2 on node-c: <image>: ErrImagePull: <cause>``: one clause
    per distinct error, each naming the ranks and the nodes whose kubelet failed the pull."""
    causes: dict[str, list[str]] = {}
    for rank, pod, message in pull:
        causes.setdefault(message, []).append(f"rank {rank} on {observe.node(pod) or 'no node yet'}")
    return "; ".join(f"{', '.join(who)}: {m}" for m, who in causes.items())


def scheduling_verdict(s: Step, by_rank: dict[int, dict]) -> bool:
    """ProbesScheduled from the pods' scheduling and image state; True when the preflight
    failed here (unschedulable, image pull)."""
    n = s.spec.num_nodes
    unsched = [(r, p, m) for r, p in sorted(by_rank.items()) if (m := observe.unschedulable(p))]
    pull = [(r, p, m) for r, p in sorted(by_rank.items()) if (m := observe.image_pull_error(p))]
    if pull:
        msg = _pull_summary(pull)
        msg += "; fix the image name or pull secret (spec.probe.image / the training image)"
        s.set(constants.PROBES_SCHEDULED, constants.FALSE, vocabulary.PROBE_IMAGE_PULL_FAILED, msg)
        s.fail_preflight(vocabulary.PROBE_IMAGE_PULL_FAILED, msg)
        return True
    if unsched:
        kinds = {scheduling.classify(m, n) for _, _, m in unsched} - {"gang"}
        words = [(r, m) for r, _, m in unsched]
        msg = scheduling.summarize(words, n)
        if kinds <= {"wait"} or (kinds <= {"wait", "unschedulable"}
                                 and any("Insufficient " in m for _, _, m in unsched)):
            decided = _not_offered(s, unsched)  # a resource no node the pods may use offers
            if decided is not None:  # names the nodes that offer it and what rules them out
                return decided
        if kinds <= {"wait"}:  # only busy nodes (or a gang waiting for them): it schedules later
            return _wait(s, msg)
        scheduled = sorted({node for p in by_rank.values() if (node := observe.node(p))})
        if "not-enough-nodes" in kinds:
            reason = vocabulary.NOT_ENOUGH_NODES
            fit = max(len(scheduled), scheduling.gang_held(words, n))
            where = f" ({', '.join(scheduled)})" if scheduled else ""
            msg = (f"numNodes={n} needs {n} nodes, one probe per node, but only {fit} could "
                   f"take one{where}; scheduler: {msg}; add nodes or lower spec.numNodes")
        else:
            reason = vocabulary.PROBE_UNSCHEDULABLE
            fix = scheduling.selector_fix([m for _, m in words], s.spec.template.spec)
            if fix:  # the fix names the template's selector; the scheduler's words yield room
                msg = messages.join([messages.bound(msg, messages.SUMMARY_LIMIT - len(fix) - len(messages.SEP)), fix],
                                    messages.SUMMARY_LIMIT)
            else:
                msg += "; relax the template's nodeSelector/tolerations/resources or add capacity"
        msg = _with_excluded(s, msg)
        s.set(constants.PROBES_SCHEDULED, constants.FALSE, reason, msg)
        s.fail_preflight(reason, msg)
        return True
    placed = {r: node for r, p in by_rank.items() if (node := observe.node(p))}
    shared = sorted({x for x in placed.values() if list(placed.values()).count(x) > 1})
    if shared:  # the required one-per-node anti-affinity was not honoured
        ranks = ", ".join(f"{r}:{x}" for r, x in sorted(placed.items()) if x in shared)
        msg = (f"probe pods of several ranks were placed on one node (rank:node {ranks}) although "
               "they require one per node: is spec.template.spec.schedulerName a scheduler that "
               "ignores pod anti-affinity? Use one that honours it")
        s.set(constants.PROBES_SCHEDULED, constants.FALSE, vocabulary.PROBE_UNSCHEDULABLE, msg)
        s.fail_preflight(vocabulary.PROBE_UNSCHEDULABLE, msg)
        return True
    if len(placed) == n:
        nodes = ", ".join(f"{r}:{placed[r]}" for r in sorted(placed))
        s.set(constants.PROBES_SCHEDULED, constants.TRUE, vocabulary.PROBES_SCHEDULED_OK,
              f"{n} probe pods scheduled, one per node (rank:node {nodes})")
    else:
        s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.PROBES_PENDING,
              f"{len(placed)}/{n} probe pods scheduled")
    return False


def _with_excluded(s: Step, msg: str) -> str:
    """``msg`` (a probe pod could not be placed) with the nodes status.excludedNodes keeps
    the job off first: a stall verdict's restart left them, and the scheduler's words only
    say "didn't match Pod's node affinity"."""
    avoided = s.st.excluded_nodes
    if not avoided:
        return msg
    said = (f"the job avoids {messages.node_list(avoided, 8)} since a stall verdict named "
            f"{'it' if len(avoided) == 1 else 'them'} (status.excludedNodes; remove an entry to "
            f"allow a node again)")
    return messages.join([said, messages.bound(msg, messages.SUMMARY_LIMIT - len(said) - len(messages.SEP))],
                         messages.SUMMARY_LIMIT)


def _wait(s: Step, msg: str) -> bool:
    """WaitingForResources: the nodes are only busy; False (the preflight goes on)."""
    s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.WAITING_FOR_RESOURCES, cond.clip(
        f"waiting for capacity: {msg}; the probes start when the scheduler can place them "
        "(without gang scheduling, pods already placed keep their nodes meanwhile)"))
    return False


def _not_offered(s: Step, unsched: list[tuple[int, dict, str]]) -> Optional[bool]:
    """ResourceNotOffered when the probes request a resource no node offers enough of
    (:mod:`.offers`): Unknown until the schedule timeout, then the preflight fails (True);
    WaitingForResources while a node autoscaler adds a node. None: the nodes are only busy
    (or not known)."""
    found = offers.find(unsched, s.nodes, s.spec, s.now)
    if found is None:
        return None
    if found.scaling:
        s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.WAITING_FOR_RESOURCES, found.message)
        return False
    if found.expired:
        s.set(constants.PROBES_SCHEDULED, constants.FALSE, vocabulary.RESOURCE_NOT_OFFERED, found.message)
        s.fail_preflight(vocabulary.RESOURCE_NOT_OFFERED, found.message)
        return True
    s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.RESOURCE_NOT_OFFERED, found.message)
    if found.left is not None:
        s.plan.requeue(found.left)
    return False


def _name_conflicts(s: Step) -> bool:
    """Say which foreign pods hold names this attempt needs; True while any does (no probe
    of the attempt is created meanwhile), the preflight failed with NameConflict once the
    conflict outlasted its bound."""
    waited = s.st.waiting_for_name
    found = conflicts.check(s, probe_pod_names(s))
    if found is None:
        if waited:  # the name is free now: the budget starts again
            s.st.probe.start_time = s.ts
        return False
    msg, expired = found
    if not expired:
        s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.NAME_CONFLICT, msg)
        return True
    s.set(constants.PROBES_SCHEDULED, constants.FALSE, vocabulary.NAME_CONFLICT, msg)
    s.fail_preflight(vocabulary.NAME_CONFLICT, msg)
    return True


def apply(s: Step) -> Outcome:
    """Advance the probe run while the preflight is undecided (``Validated`` Unknown);
    ``s.probe_run`` holds what the verdict needs once it can be reached. FINISHED when the
    preflight failed here."""
    if s.spec.probe.enabled and s.status_of(constants.VALIDATED) == constants.UNKNOWN:
        s.probe_run = run(s)
    return Outcome.FINISHED if s.terminal else Outcome.CONTINUE


def run(s: Step) -> Optional[ProbeRun]:
    """Advance the probe run. Returns the outcomes, MASTER_ADDR and the pods by rank once the
    verdict can be reached, else None (still running, or the preflight already failed here)."""
    attempt = attempt_of(s)
    by_rank = current_probes(s, attempt)
    s.set(constants.VALIDATED, constants.UNKNOWN, vocabulary.PROBING, "preflight probe running")
    record_start(s, by_rank)
    # names first: a rank created while another's name is held would wait alone for a peer
    # that cannot start, and end before it does
    if _name_conflicts(s):
        return None
    master = launch(s, attempt, by_rank)
    if scheduling_verdict(s, by_rank):
        return None
    n = s.spec.num_nodes
    complete = len(by_rank) == n
    finished = complete and all(observe.finished(p) for p in by_rank.values())
    # the kubelet's word before any report: a probe it ended told its peers nothing
    killed, settle_killed = kubeletended.ended(by_rank, n, s.parse_report, s.now)
    if settle_killed is not None:
        s.plan.requeue(settle_killed)
        _budget(s, by_rank)
        return None
    if killed and not complete:
        kubeletended.fail_now(s, killed, by_rank)
        return None
    lost: dict[int, str] = {}
    if not finished and not killed:
        done, settle = stranded(by_rank, n, s.parse_report, s.now, rank0_wait(s.spec))\
            if complete else (False, None)
        # a rank silent past the rules is lost even when the others' reports would decide
        waiting = excused(by_rank, n, s.parse_report) if complete else frozenset()
        lost, silent_wait = nodeloss.lost_ranks(by_rank, n, s.now, s.spec.probe.timeout_seconds, waiting)
        if not done and not lost:
            for wait in (settle, silent_wait):
                if wait is not None:
                    s.plan.requeue(wait)
            _budget(s, by_rank)
            return None
    master = master or _master_given(s, by_rank)
    if not master and not killed:  # no verdict without the address training will be given as MASTER_ADDR
        rank0 = by_rank.get(0)
        what = (f"rank 0's probe pod {observe.name(rank0)} shows no "
                f"{'status.hostIP' if s.spec.network.host_network else 'status.podIP'}")
        s.set(constants.VALIDATED, constants.UNKNOWN, vocabulary.MASTER_ADDR_UNKNOWN, (
            f"the probes ended, but {what}: the verdict waits for it (it becomes the training "
            "pods' MASTER_ADDR) until the probe budget ends"))
        s.plan.requeue(2.0)
        _budget(s, by_rank, waiting=what)
        return None
    return ProbeRun(master, by_rank, killed, lost)


def _master_given(s: Step, by_rank: dict[int, dict]) -> Optional[str]:
    """MASTER_ADDR when rank 0's pod no longer shows its address: the one the other ranks'
    probes were given (and validated), else the one recorded in status.rendezvous."""
    for r in sorted(by_rank):
        given = verdict.given_master(by_rank[r]) if r else None
        if given:
            return given
    return s.st.recorded_master


# In place the probe runs in the training container: until every rank's trainer started,
# the budget also covers pulling the training image and the template's init containers
# (a probe pod has neither), this many seconds more (an image that cannot be pulled fails
# at once: scheduling_verdict).
IN_PLACE_START_SECONDS = 600.0


def _budget(s: Step, by_rank: dict[int, dict], waiting: str = "") -> None:
    """ProbeTimeout once the attempt overran its budget (``waiting``: what the verdict waits
    for, when not a running pod). The budget counts from the attempt's first pod or, if
    later, from when its last pod was scheduled; it does not run while the job waits for
    capacity (WaitingForResources, or ResourceNotOffered with its own timeout, says so
    instead) or for a name another pod holds
    (:func:`_name_conflicts`)."""
    sched = cond.get(s.conds, constants.PROBES_SCHEDULED) or {}
    if sched.get("reason") in (vocabulary.WAITING_FOR_RESOURCES, vocabulary.RESOURCE_NOT_OFFERED,
                                 vocabulary.NAME_CONFLICT):
        return
    budget = probe_budget_seconds(s.spec)
    start = observe.parse_time(s.st.probe.start_time)
    scheduled = [observe.scheduled_at(p) for p in by_rank.values()]
    known = [t for t in scheduled if t is not None]
    if start is not None and scheduled and len(known) == len(scheduled):  # every pod scheduled
        start = max([start] + known)
    if in_place(s.spec):  # the probe starts with the trainer: after its image and the template's init containers
        started = [observe.parse_time(observe.started_at(p, "probe")) for p in by_rank.values()]
        if start is not None and started and all(t is not None for t in started):
            start = max([start] + [t for t in started if t is not None])
        else:
            budget += IN_PLACE_START_SECONDS
    left = seconds_left(start, budget, s.now)
    if left is None:
        return
    if left > 0:
        s.plan.requeue(left)
        return
    if waiting:
        s.fail_preflight(vocabulary.MASTER_ADDR_UNKNOWN, (
            f"{waiting} {budget:g}s after the probes started, so training would have no "
            "MASTER_ADDR: check that pod's node (kubectl describe pod, the kubelet's log) and "
            "run the job again"))
        return
    if verdict.blocked_timeout(s, list(by_rank.values())):  # the timeout's cause, by name
        return
    waiting = ", ".join(f"{observe.name(p)} ({observe.phase(p)} on {observe.node(p) or 'no node'})"
                        for p in by_rank.values() if not observe.finished(p)) or "no probe pods"
    s.fail_preflight(vocabulary.PROBE_TIMEOUT, (
        f"probe did not finish within {budget:g}s: {waiting}; check the pods' events "
        "(kubectl describe pod) or raise spec.probe.timeoutSeconds"))
