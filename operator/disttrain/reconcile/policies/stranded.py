"""Ranks stranded outside the rendezvous (pure): when the verdict need not wait for every probe.

A rank >= 1 that failed before joining rank 0's store (its MASTER_ADDR loopback or
unresolvable, the master port refused or silent, its connections to rank 0 intercepted, a
failure in config or inventory, or any failure its report marks ``master.joined: false``,
such as an import of torch that failed) is seen by no peer: the others would wait for it
until their own deadline. :func:`stranded` says when the verdict can go without the probes still running (after
:data:`STRANDED_SETTLE_SECONDS`), and how long it first waits for rank 0's own report when
only rank 0 can name its node's fault (:func:`master_silent`, :func:`store_silent`). Used
by :mod:`.probing`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import observe
from disttrain.diagnosis.report import ProbeReport
from disttrain.reconcile.policies import nodeloss
from disttrain.reconcile.policies.deadline import seconds_left
from disttrain.reconcile.step import ReportParser
from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.timing import SIBLING_SECONDS, default_resolve_seconds

# A rank >= 1 that failed for one of these (or before the rendezvous) never joined rank 0's
# store, so no peer learns of it: they would wait for it until their own deadline.
STRANDING_REASONS = frozenset({
    vocabulary.MASTER_ADDR_LOOPBACK, vocabulary.MASTER_ADDR_UNRESOLVABLE,
    vocabulary.MASTER_PORT_REFUSED, vocabulary.MASTER_PORT_TIMEOUT,
})
# These strand a rank only when it reported them from the rendezvous phase, before it joined
# the store: a proxy (a mesh's sidecar) that accepts and closes every connection to rank 0
# (ConnectionIntercepted) leaves rank 0 waiting for it, as a refusal does. From the
# connectivity phase the same reason comes after the store was joined, and the peers learn
# of it there. Found on real nodes (scenario mesh-sidecar-intercepts): rank 1 ended in 1.6 s,
# and rank 0, waiting for it, was named lost (ProbePodLost) 15 s later.
STRANDING_IN_RENDEZVOUS = frozenset({vocabulary.CONNECTION_INTERCEPTED})
# After the first such rank ended, how long the other dialling ranks get to end on their
# own (they run the same checks at about the same time) before the verdict goes without them.
STRANDED_SETTLE_SECONDS = 3.0
# ... and at least this long after each of them started its probe: a rank's own MASTER_ADDR
# answer (loopback, a stale entry) is known within moments of its start, but ranks start
# seconds apart. Found on the real kubelets (regression gen-1-157, 8 nodes on 2 cores): the
# verdict named the first of six nodes mapping MASTER_ADDR to 127.0.0.1, the other five
# still starting. A rank not started yet is waited for up to STRANDED_MOST_SECONDS after
# the first stranding end.
STARTED_SETTLE_SECONDS = 8.0
STRANDED_MOST_SECONDS = 20.0



def _failed_probe(pod: Optional[dict], parse_report: ReportParser) -> Optional[tuple[dict, Optional[ProbeReport]]]:
    """(the probe container's terminated state, its parsed report or None when none parses)
    when ``pod`` Failed, else None."""
    if pod is None or observe.phase(pod) != "Failed":
        return None
    term = observe.terminated(pod, "probe")
    if not term:
        return None
    try:
        return term, parse_report(observe.termination_message(pod, "probe"))
    except ValueError:
        return term, None


def _stranding_report(pod: Optional[dict], parse_report: ReportParser) -> Optional[tuple[dict, ProbeReport]]:
    """(the probe container's terminated state, its parsed report) when ``pod`` failed
    before joining rank 0's store (STRANDING_REASONS; STRANDING_IN_RENDEZVOUS, or any reason
    with :func:`never_joined`, from the rendezvous phase; a failure in config/inventory),
    else None."""
    found = _failed_probe(pod, parse_report)
    if found is None:
        return None
    term, rep = found
    if rep is None:
        return None
    reason, phase = rep.failure_reason, rep.phase
    if reason in STRANDING_REASONS or phase in ("config", "inventory") \
            or (phase == "rendezvous" and (reason in STRANDING_IN_RENDEZVOUS or never_joined(rep))):
        return term, rep
    return None


def never_joined(report: ProbeReport) -> bool:
    """Whether a rank's report says it failed before joining rank 0's store (``master.joined``
    false: an import of torch that failed or timed out, an error of the probe's own, whatever
    the reason): no peer learns of its failure then. False when the report does not say (a
    probe older than the field). Pure; never raises."""
    return report.master is not None and report.master.joined is False


def _failed_before_store(pod: Optional[dict], parse_report: ReportParser) -> Optional[dict]:
    """The probe container's terminated state when ``pod`` failed before joining rank 0's
    store (as :func:`_stranding_report` decides), else None."""
    found = _stranding_report(pod, parse_report)
    return found[0] if found else None


def master_silent(report: ProbeReport) -> bool:
    """Whether a rank's report says MASTER_ADDR's host answered nothing: MasterPortTimeout
    with a host check that got no answer on another port either. Only rank 0's own report
    can then tell its node's fault (two NICs on one subnet, its own name not resolving)
    from a path or a rule. Pure; never raises."""
    h = report.master.host_check if report.master else None
    return report.failure_reason == vocabulary.MASTER_PORT_TIMEOUT and (h.r if h else None) not in ("refused", "ok")


def store_silent(report: ProbeReport) -> bool:
    """Whether a rank's report says it connected to MASTER_ADDR:MASTER_PORT by TCP but rank
    0's TCPStore never answered (MasterPortTimeout with ``master.connected``): the fault is
    on rank 0's side (its probe stopped, its node died, something else holds the port), so
    only rank 0's report, or its pod's silence, can say which. Pure; never raises."""
    return report.failure_reason == vocabulary.MASTER_PORT_TIMEOUT and bool(report.master and report.master.connected)


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
    refused). Either way a rank still running is first given STARTED_SETTLE_SECONDS from its
    own start (:func:`_settle`), so that ranks that started late report their own
    MASTER_ADDR answer too. When a rank found rank 0's host silent (:func:`master_silent`), rank 0's own
    report is awaited until ``rank0_wait`` seconds after its probe started (its own checks,
    e.g. resolving its name, end by then): it alone can name a fault of rank 0's node. When
    a rank found rank 0's store silent (:func:`store_silent`), rank 0's report is awaited
    until STORE_SILENT_WAIT_SECONDS after that rank ended.
    (False, seconds) while a wait runs; (False, None) otherwise."""
    term0 = _failed_before_store(by_rank.get(0), parse_report)
    if term0 is not None:  # the others can only be refused: wait only for late starters
        end0 = observe.parse_time(term0.get("finishedAt"))
        late = _settle(by_rank, n, end0, now, after_end=0.0) if end0 else []
        return (False, max(late)) if late else (True, None)
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
        waits += _settle(by_rank, n, first, now)
    return (False, max(waits)) if waits else (True, None)


def _settle(by_rank: dict[int, dict], n: int, first: datetime, now: datetime,
            after_end: float = STRANDED_SETTLE_SECONDS) -> list[float]:
    """The waits (s, each > 0) for the ranks >= 1 still running after the first stranding
    rank (rank 0 among them) ended at ``first``: ``after_end`` after that end, and each such rank
    STARTED_SETTLE_SECONDS after its probe started (one not started yet: up to
    STRANDED_MOST_SECONDS after ``first``); never past STRANDED_MOST_SECONDS."""
    most = seconds_left(first, STRANDED_MOST_SECONDS, now)
    if most is None or most <= 0:
        return []
    waits = [seconds_left(first, after_end, now)]
    for r in range(1, n):
        pod = by_rank.get(r)
        if observe.finished(pod):
            continue
        start = observe.parse_time(observe.started_at(pod, "probe")) if pod else None
        waits.append(seconds_left(start, STARTED_SETTLE_SECONDS, now) if start else most)
    return [min(w, most) for w in waits if w is not None and w > 0]


def rank0_excused(by_rank: dict[int, dict], n: int, parse_report: ReportParser) -> bool:
    """Whether rank 0's probe may still run only because it waits for ranks that never
    reached it: some rank >= 1 failed before joining its store, and no such rank found rank
    0's host or store silent (:func:`master_silent`, :func:`store_silent`: those point at
    rank 0's node, which may be lost). A proxy that intercepts rank 1's connections, or a
    refusal, says nothing against rank 0's node, so :mod:`.nodeloss` must not name it for
    outliving rank 1 (its own deadline still applies). Pure; never raises."""
    found = [got[1] for r in range(1, n) if (got := _stranding_report(by_rank.get(r), parse_report))]
    return bool(found) and not any(master_silent(rep) or store_silent(rep) for rep in found)


def ended_unheard(pod: Optional[dict], parse_report: ReportParser) -> bool:
    """Whether ``pod``'s probe failed without its final report: its termination message is
    the pessimistic report written before a phase (``final: false``) or none that parses.
    The process was killed (out of memory, SIGKILL) and told its peers nothing: a final
    failure is published to them through the store, a kill is not, so they wait for it at
    their next gather until their own deadline. Pure; never raises."""
    found = _failed_probe(pod, parse_report)
    return found is not None and (found[1] is None or found[1].final is False)


def excused(by_rank: dict[int, dict], n: int, parse_report: ReportParser) -> frozenset[int]:
    """The ranks :mod:`.nodeloss` must not take for lost for outliving the others (its rule
    1): every rank when one ended unheard (:func:`ended_unheard`: the others may wait for
    it until their own deadline); every rank >= 1 when rank 0 failed before serving its
    store (they dial or wait for a store that will never answer); else rank 0 when
    :func:`rank0_excused`; else none. Their own deadline (rule 2) still applies. Pure;
    never raises."""
    if any(ended_unheard(by_rank.get(r), parse_report) for r in range(n)):
        return frozenset(range(n))
    if _failed_before_store(by_rank.get(0), parse_report) is not None:
        return frozenset(range(1, n))
    return frozenset({0}) if rank0_excused(by_rank, n, parse_report) else frozenset()


def rank0_wait(spec: DistTrainingJobSpec) -> float:
    """Seconds after rank 0's probe started by which its own report has said whatever its
    node's fault is: its MASTER_ADDR resolve window (the probe's default for this budget),
    the one lookup of another name of the job (contract.timing.SIBLING_SECONDS), plus
    STRANDED_SETTLE_SECONDS."""
    return (default_resolve_seconds(float(spec.probe.timeout_seconds)) + SIBLING_SECONDS
            + STRANDED_SETTLE_SECONDS)
