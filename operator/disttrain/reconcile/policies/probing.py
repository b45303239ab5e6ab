"""The probe run (pure): probe pods, rank 0 first, and when to stop waiting for them.

Rank 0's probe hosts the rendezvous store, so its address must be known before the other
ranks start, but which node it lands on is the scheduler's decision: rank 0's pod is created
first (its MASTER_ADDR is its own DNS name or address), the others once rank 0 has its
address and its probe container has started (or :data:`PEER_START_WAIT_SECONDS` after it
reached its node), carrying that start time as the evidence that lets a dialling rank call
a silent master port blocked after a short grace.

Pods of an older attempt are deleted; a rank's pod is created only when no observed pod
holds its name (:meth:`~disttrain.reconcile.step.Step.create`). Unschedulable or unpullable probes
fail ``ProbesScheduled`` at once. The verdict waits for every rank, except when a rank
failed before joining the store (:func:`stranded`) or a rank's node was lost
(:mod:`.nodeloss`), and never longer than the probe budget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

from disttrain.reconcile import conditions as cond
from disttrain.api import constants
from disttrain_probe.contract import vocabulary
from disttrain.children import observe
from disttrain.diagnosis import trust
from disttrain.api.types import DistTrainingJobSpec, nproc_for
from disttrain.children.names import JobRef, master_dns_name, probe_pod_name, uses_dns_hostnames
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.diagnosis.diagnose import ProbeOutcome
from disttrain.reconcile.step import Outcome, ProbeRun, ReportParser, Step
from disttrain_probe.contract.timing import SIBLING_SECONDS, default_resolve_seconds

from disttrain.reconcile.policies import conflicts, nodeloss, scheduling
from disttrain.reconcile.policies.deadline import probe_budget_seconds, seconds_left

# How long after rank 0's pod got to its node the other probes wait for rank 0's probe
# container to start (s). Started, it is the evidence that lets them diagnose a blocked
# master port in seconds; a slow start (a cold image pull) must not hold back their own
# pulls for longer: they then start without it (and dial until their deadline).
PEER_START_WAIT_SECONDS = 5.0

# A rank >= 1 that failed for one of these (or before the rendezvous) never joined rank 0's
# store, so no peer learns of it: they would wait for it until their own deadline.
STRANDING_REASONS = frozenset({
    vocabulary.MASTER_ADDR_LOOPBACK, vocabulary.MASTER_ADDR_UNRESOLVABLE,
    vocabulary.MASTER_PORT_REFUSED, vocabulary.MASTER_PORT_TIMEOUT,
})
# After the first such rank ended, how long the other dialling ranks get to end on their
# own (they run the same checks at about the same time) before the verdict goes without them.
STRANDED_SETTLE_SECONDS = 3.0


def master_addr(job: JobRef, spec: DistTrainingJobSpec, rank0: Optional[dict]) -> Optional[str]:
    """MASTER_ADDR for the other ranks once rank 0's pod has its address (None before):
    rank 0's DNS name with DNS hostnames, else its node IP (hostNetwork) or pod IP."""
    if rank0 is None:
        return None
    addr = observe.host_ip(rank0) if spec.network.host_network else observe.pod_ip(rank0)
    if not addr:
        return None
    return master_dns_name(job, spec) if uses_dns_hostnames(spec) else addr


def peers_wait_left(rank0: dict, now: datetime) -> Optional[float]:
    """Seconds the probes of ranks 1..n-1 must still wait (<= 0: create them now): none once
    rank 0's probe container started, else until PEER_START_WAIT_SECONDS after rank 0's pod
    started on its node; None while it has not reached a node."""
    if observe.started_at(rank0, "probe"):
        return 0.0
    return seconds_left(observe.pod_start_time(rank0), PEER_START_WAIT_SECONDS, now)


def _stranding_report(pod: Optional[dict], parse_report: ReportParser) -> Optional[tuple[dict, dict]]:
    """(the probe container's terminated state, its parsed report) when ``pod`` failed
    before joining rank 0's store (STRANDING_REASONS, or a failure in config/inventory),
    else None."""
    if pod is None or observe.phase(pod) != "Failed":
        return None
    term = observe.terminated(pod, "probe")
    if not term:
        return None
    try:
        rep = parse_report(observe.termination_message(pod, "probe"))
    except ValueError:
        return None
    failure = v if isinstance(v := rep.get("failure"), dict) else {}
    if failure.get("reason") in STRANDING_REASONS or rep.get("phase") in ("config", "inventory"):
        return term, rep
    return None


def _failed_before_store(pod: Optional[dict], parse_report: ReportParser) -> Optional[dict]:
    """The probe container's terminated state when ``pod`` failed before joining rank 0's
    store (STRANDING_REASONS, or a failure in config/inventory), else None."""
    found = _stranding_report(pod, parse_report)
    return found[0] if found else None


def master_silent(report: dict) -> bool:
    """Whether a rank's report says MASTER_ADDR's host answered nothing: MasterPortTimeout
    with a host check that got no answer on another port either. Only rank 0's own report
    can then tell its node's fault (two NICs on one subnet, its own name not resolving)
    from a path or a rule. Pure; never raises."""
    f = v if isinstance(v := report.get("failure"), dict) else {}
    m = v if isinstance(v := report.get("master"), dict) else {}
    h = v if isinstance(v := m.get("hostCheck"), dict) else {}
    return f.get("reason") == vocabulary.MASTER_PORT_TIMEOUT and h.get("r") not in ("refused", "ok")


def store_silent(report: dict) -> bool:
    """Whether a rank's report says it connected to MASTER_ADDR:MASTER_PORT by TCP but rank
    0's TCPStore never answered (MasterPortTimeout with ``master.connected``): the fault is
    on rank 0's side (its probe stopped, its node died, something else holds the port), so
    only rank 0's report, or its pod's silence, can say which. Pure; never raises."""
    f = v if isinstance(v := report.get("failure"), dict) else {}
    m = v if isinstance(v := report.get("master"), dict) else {}
    return f.get("reason") == vocabulary.MASTER_PORT_TIMEOUT and bool(m.get("connected"))


# How long after a rank found rank 0's store silent (store_silent) the verdict waits for
# rank 0's report (s): longer than nodeloss.NODE_LOST_SETTLE_SECONDS, so that a rank 0 whose
# node died is named (ProbePodLost) instead of the rank that waited for it. Found on real
# nodes: a kubelet and containerd killed during the rendezvous gave "MasterPortTimeout on
# node-a", the live node that dialled the dead one.
STORE_SILENT_WAIT_SECONDS = nodeloss.NODE_LOST_SETTLE_SECONDS + 2.0


def stranded(by_rank: dict[int, dict], n: int, parse_report: ReportParser,
             now: datetime, rank0_wait: float = 0.0) -> tuple[bool, Optional[float]]:
    """(True, None) when the verdict need not wait for the probes still running: some rank
    >= 1 failed before joining the store and every other rank >= 1 has ended or
    STRANDED_SETTLE_SECONDS have passed since it ended (rank 0 could only time out waiting
    for it); or rank 0 itself failed before serving the store (the others could only be
    refused). When a rank found rank 0's host silent (:func:`master_silent`), rank 0's own
    report is awaited until ``rank0_wait`` seconds after its probe started (its own checks,
    e.g. resolving its name, end by then): it alone can name a fault of rank 0's node. When
    a rank found rank 0's store silent (:func:`store_silent`), rank 0's report is awaited
    until STORE_SILENT_WAIT_SECONDS after that rank ended.
    (False, seconds) while a wait runs; (False, None) otherwise."""
    if _failed_before_store(by_rank.get(0), parse_report) is not None:
        return True, None
    first: Optional[datetime] = None
    found = False
    silent = False
    store_quiet: Optional[datetime] = None  # the last report that found rank 0's store silent
    for r in range(1, n):
        got = _stranding_report(by_rank.get(r), parse_report)
        if got is not None:
            found = True
            silent = silent or master_silent(got[1])
            ended = observe.parse_time(got[0].get("finishedAt"))
            if ended and (first is None or ended < first):
                first = ended
            if ended and store_silent(got[1]) and (store_quiet is None or ended > store_quiet):
                store_quiet = ended
    if not found:
        return False, None
    waits = []
    if store_quiet is not None and not observe.finished(by_rank.get(0)):
        left = seconds_left(store_quiet, STORE_SILENT_WAIT_SECONDS, now)
        if left is not None and left > 0:
            waits.append(left)
    if silent and rank0_wait > 0 and not observe.finished(by_rank.get(0)):
        start0 = observe.parse_time(observe.started_at(by_rank.get(0), "probe"))
        left0 = seconds_left(start0, rank0_wait, now) if start0 else None
        if left0 is not None and left0 > 0:
            waits.append(left0)
    if not (all(observe.finished(by_rank.get(r)) for r in range(1, n)) or first is None):
        left = seconds_left(first, STRANDED_SETTLE_SECONDS, now)
        if left is not None and left > 0:
            waits.append(left)
    return (False, max(waits)) if waits else (True, None)


def rank0_wait(spec: DistTrainingJobSpec) -> float:
    """Seconds after rank 0's probe started by which its own report has said whatever its
    node's fault is: its MASTER_ADDR resolve window (the probe's default for this budget),
    the one lookup of another name of the job (contract.timing.SIBLING_SECONDS), plus
    STRANDED_SETTLE_SECONDS."""
    return (default_resolve_seconds(float(spec.probe.timeout_seconds)) + SIBLING_SECONDS
            + STRANDED_SETTLE_SECONDS)


def attempt_of(s: Step) -> int:
    """The current probe attempt (1-based), recorded in status.probe.attempt."""
    pst = s.status.setdefault("probe", {})
    attempt = pst.get("attempt")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        attempt = 1
        pst["attempt"] = attempt
    return attempt


def current_probes(s: Step, attempt: int) -> dict[int, dict]:
    """The attempt's probe pods by node rank; every other probe pod of the job is deleted."""
    by_rank: dict[int, dict] = {}
    n = s.spec.num_nodes
    for p in s.alive(constants.ROLE_PROBE):
        rank = observe.int_label(p, constants.LABEL_RANK)
        if observe.int_label(p, constants.LABEL_ATTEMPT) != attempt or not 0 <= rank < n or rank in by_rank:
            s.delete(p)
        else:
            by_rank[rank] = p
    return by_rank


def _record_start(s: Step, by_rank: dict[int, dict]) -> None:
    """status.probe.startTime: when the attempt's first probe pod was created (its budget
    starts then, not while the job waits for a name or for quota)."""
    pst = s.status["probe"]
    if pst.get("startTime") or not by_rank:
        return
    created = [observe.parse_time(observe.meta(p).get("creationTimestamp")) for p in by_rank.values()]
    first = min((t for t in created if t), default=None)
    pst["startTime"] = (first.strftime("%Y-%m-%dT%H:%M:%SZ") if first else s.ts)


def launch(s: Step, attempt: int, by_rank: dict[int, dict]) -> Optional[str]:
    """Create the missing probe pods (rank 0 first); returns MASTER_ADDR once known."""
    job, spec = s.job, s.spec
    rank0 = by_rank.get(0)
    master = master_addr(job, spec, rank0)
    if constants.ROLE_PROBE in s.gangs:  # a gang is placed only once all its pods exist: all at once
        master = master_dns_name(job, spec)
        s.status.setdefault("rendezvous", {}).update(masterAddr=master, masterPort=spec.rendezvous.port)
        for rank in range(spec.num_nodes):
            if rank not in by_rank:
                s.create(build_probe_pod(job, spec, rank, ProbeMaster(master if rank else None), attempt, s.probe_image))
        return master
    if rank0 is None:
        s.create(build_probe_pod(job, spec, 0, ProbeMaster(), attempt, s.probe_image))
        return master
    if not master:
        return None
    left = peers_wait_left(rank0, s.now)
    if left is None or left > 0:
        if left is not None:
            s.plan.requeue(left)
        return master
    s.status.setdefault("rendezvous", {}).update(masterAddr=master, masterPort=spec.rendezvous.port)
    started = observe.started_at(rank0, "probe")
    for rank in range(1, spec.num_nodes):
        if rank not in by_rank:
            s.create(build_probe_pod(job, spec, rank, ProbeMaster(master, started), attempt, s.probe_image))
    return master


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
        if kinds <= {"wait"}:  # only busy nodes (or a gang waiting for them): it schedules later
            s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.WAITING_FOR_RESOURCES, cond.clip(
                f"waiting for capacity: {msg}; the probes start when the scheduler can place them "
                "(without gang scheduling, pods already placed keep their nodes meanwhile)"))
            return False
        scheduled = sorted({node for p in by_rank.values() if (node := observe.node(p))})
        if "not-enough-nodes" in kinds:
            reason = vocabulary.NOT_ENOUGH_NODES
            fit = max(len(scheduled), scheduling.gang_held(words, n))
            where = f" ({', '.join(scheduled)})" if scheduled else ""
            msg = (f"numNodes={n} needs {n} nodes, one probe per node, but only {fit} could "
                   f"take one{where}; scheduler: {msg}; add nodes or lower spec.numNodes")
        else:
            reason = vocabulary.PROBE_UNSCHEDULABLE
            msg += "; relax the template's nodeSelector/tolerations/resources or add capacity"
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


def _name_conflicts(s: Step) -> bool:
    """Say which foreign pods hold names this attempt needs (they block its creation); True
    when the conflict outlasted its bound and the preflight failed with NameConflict."""
    waited = "nameConflictSince" in s.status
    found = conflicts.check(s, [probe_pod_name(s.job.name, r) for r in range(s.spec.num_nodes)])
    if found is None:
        if waited:  # the name is free now: the budget starts again
            s.status["probe"]["startTime"] = s.ts
        return False
    msg, expired = found
    if not expired:
        s.set(constants.PROBES_SCHEDULED, constants.UNKNOWN, vocabulary.NAME_CONFLICT, msg)
        return False
    s.set(constants.PROBES_SCHEDULED, constants.FALSE, vocabulary.NAME_CONFLICT, msg)
    s.fail_preflight(vocabulary.NAME_CONFLICT, msg)
    return True


def apply(s: Step) -> Outcome:
    """Advance the probe run while the preflight is undecided (``Validated`` Unknown);
    ``s.probe_run`` holds what the verdict needs once it can be reached. FINISHED when the
    preflight failed here."""
    if s.spec.probe.enabled and s.status_of(constants.VALIDATED) == cond.UNKNOWN:
        s.probe_run = run(s)
    return Outcome.FINISHED if s.terminal else Outcome.CONTINUE


def run(s: Step) -> Optional[ProbeRun]:
    """Advance the probe run. Returns the outcomes, MASTER_ADDR and the pods by rank once the
    verdict can be reached, else None (still running, or the preflight already failed here)."""
    attempt = attempt_of(s)
    by_rank = current_probes(s, attempt)
    s.set(constants.VALIDATED, constants.UNKNOWN, vocabulary.PROBING, "preflight probe running")
    _record_start(s, by_rank)
    master = launch(s, attempt, by_rank)
    if scheduling_verdict(s, by_rank) or _name_conflicts(s):
        return None
    n = s.spec.num_nodes
    complete = len(by_rank) == n
    finished = complete and all(observe.finished(p) for p in by_rank.values())
    lost: dict[int, str] = {}
    if not finished:
        done, settle = stranded(by_rank, n, s.parse_report, s.now, rank0_wait(s.spec))\
            if complete else (False, None)
        # a rank silent past the rules is lost even when the others' reports would decide
        lost, silent_wait = nodeloss.lost_ranks(by_rank, n, s.now, s.spec.probe.timeout_seconds)
        if not done and not lost:
            for wait in (settle, silent_wait):
                if wait is not None:
                    s.plan.requeue(wait)
            _budget(s, by_rank)
            return None
    master = master or _master_given(s, by_rank)
    if not master:  # no verdict without the address training will be given as MASTER_ADDR
        rank0 = by_rank.get(0)
        what = (f"rank 0's probe pod {observe.name(rank0)} shows no "
                f"{'status.hostIP' if s.spec.network.host_network else 'status.podIP'}")
        s.set(constants.VALIDATED, constants.UNKNOWN, vocabulary.MASTER_ADDR_UNKNOWN, (
            f"the probes ended, but {what}: the verdict waits for it (it becomes the training "
            "pods' MASTER_ADDR) until the probe budget ends"))
        s.plan.requeue(2.0)
        _budget(s, by_rank, waiting=what)
        return None
    outcomes = collect(s, by_rank)
    nodeloss.mark(outcomes, lost)
    return ProbeRun(outcomes, master, by_rank)


def _master_given(s: Step, by_rank: dict[int, dict]) -> Optional[str]:
    """MASTER_ADDR when rank 0's pod no longer shows its address: the one the other ranks'
    probes were given (and validated), else the one recorded in status.rendezvous."""
    for r in sorted(by_rank):
        given = _given_master(by_rank[r]) if r else None
        if given:
            return given
    recorded = (s.status.get("rendezvous") or {}).get("masterAddr")
    return recorded if isinstance(recorded, str) and recorded else None


def _budget(s: Step, by_rank: dict[int, dict], waiting: str = "") -> None:
    """ProbeTimeout once the attempt overran its budget (``waiting``: what the verdict waits
    for, when not a running pod). The budget counts from the attempt's first pod or, if
    later, from when its last pod was scheduled; it does not run while the job waits for
    capacity (WaitingForResources says so instead) or for a name another pod holds
    (:func:`_name_conflicts`)."""
    sched = cond.get(s.conds, constants.PROBES_SCHEDULED) or {}
    if sched.get("reason") in (vocabulary.WAITING_FOR_RESOURCES, vocabulary.NAME_CONFLICT):
        return
    budget = probe_budget_seconds(s.spec)
    start = observe.parse_time(s.status["probe"].get("startTime"))
    scheduled = [observe.scheduled_at(p) for p in by_rank.values()]
    known = [t for t in scheduled if t is not None]
    if start is not None and scheduled and len(known) == len(scheduled):  # every pod scheduled
        start = max([start] + known)
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
    waiting = ", ".join(f"{observe.name(p)} ({observe.phase(p)} on {observe.node(p) or 'no node'})"
                        for p in by_rank.values() if not observe.finished(p)) or "no probe pods"
    s.fail_preflight(vocabulary.PROBE_TIMEOUT, (
        f"probe did not finish within {budget:g}s: {waiting}; check the pods' events "
        "(kubectl describe pod) or raise spec.probe.timeoutSeconds"))


def _given_master(pod: dict) -> Optional[str]:
    """The MASTER_ADDR value the operator put in the probe pod (None for a downward-API field)."""
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(ctr, dict) and ctr.get("name") == "probe":
            for e in ctr.get("env") or []:
                if isinstance(e, dict) and e.get("name") == "MASTER_ADDR":
                    v = e.get("value")
                    return v if isinstance(v, str) else None
    return None


def collect(s: Step, by_rank: dict[int, dict]) -> list[ProbeOutcome]:
    """One outcome per rank: its report (parsed and checked by :mod:`disttrain.diagnosis.trust`) or
    why there is none; ranks still running (not waited for, see :func:`stranded`) are marked."""
    attempt = attempt_of(s)
    outcomes = []
    for r in range(s.spec.num_nodes):
        pod = by_rank[r]
        name, node = observe.name(pod), observe.node(pod)
        out = ProbeOutcome(rank=r, pod=name, node=node)
        outcomes.append(out)
        if not observe.finished(pod):
            out.running = True
            continue
        raw = observe.termination_message(pod, "probe")
        code = observe.exit_code(pod, "probe")
        lost = observe.evicted(pod)
        try:
            report = s.parse_report(raw)
        except ValueError as exc:
            if lost and not raw:
                out.error = (f"{name} on {node} ended before it reported ({lost}); run the job "
                             "again once the node is healthy")
                out.error_reason = vocabulary.PROBE_POD_LOST
            elif raw.lstrip().startswith("{") or code == 0 or not raw:
                out.error = f"{name} on {node}: report invalid: {exc}"
                out.error_reason = vocabulary.PROBE_REPORT_INVALID
            else:
                tail = raw.strip().splitlines()[-3:]
                out.error = f"{name} on {node}: probe exited {code} without a report: " + " | ".join(tail)
                out.error_reason = vocabulary.PROBE_FAILED
            continue
        expected = trust.Expected(
            rank=r, world_size=s.spec.num_nodes, job_uid=s.job.uid, attempt=attempt, pod=name,
            node=node, master_addr=_given_master(pod), master_port=s.spec.rendezvous.port,
            min_busbw_gbps=s.spec.probe.min_bus_bandwidth_gbps, local_world_size=nproc_for(s.spec))
        checked = trust.check(report, expected)
        if checked.error:
            out.error = checked.error
            out.error_reason = vocabulary.PROBE_REPORT_INVALID
        else:
            out.report = checked.report
    return outcomes
