"""A node lost during the probe (pure): named as the cause within seconds of the evidence,
instead of a ``ProbeTimeout`` at the end of the probe budget.

What a lost node looks like. A machine that dies (power, kernel panic, a network
partition that cuts it off) takes its kubelet with it, so its probe pod stays ``Running``
in the API with nothing more from its node, until the node lifecycle controller marks the
Node NotReady (``node-monitor-grace-period``, 40-50 s) and, minutes later, evicts the pod.
Its peers run on live nodes and end: they lose its store connection or wait for it at a
gather until their phase deadline, and report that (a ``RendezvousTimeout``, an
all-reduce or process-group failure). A probe on a live node never outlives its peers by
more than a few seconds: when a peer fails it reads the abort from the store, or the
connection to the peer closes, and it reports within its wind-down (about 5 s); when its
peers pass, it passes the same final barrier at the same moment; and its kubelet reports
its end within a second.

The rule (:func:`lost_ranks`): a probe whose container had started and that has not ended
is on a lost node when

1. every other rank of the attempt has ended, the last of them at least
   :data:`NODE_LOST_SETTLE_SECONDS` ago: the peers' reports are the evidence that the probe
   run went on without it (they are quoted in the message), the pod's silence that its
   node stopped reporting; or
2. its own watchdog would have ended it: ``spec.probe.timeoutSeconds`` plus
   :data:`OWN_DEADLINE_MARGIN_SECONDS` have passed since its container started (the probe
   exits at its budget, a C-level backstop 5 s later), so a pod still Running says its
   node no longer reports, whatever the peers did.

A probe whose container never started (Pending: a slow image pull looks the same) is not
judged here: the probe budget (``ProbeTimeout``) still applies to it.

The verdict (:func:`override`): ``Validated=False`` with reason ``ProbePodLost`` naming the
node(s), the pod and the fix, even when a peer's report carried a more specific reason:
the failures the other ranks saw follow from the loss (an unreachable interface, a
timed-out all-reduce), so the checks they would have failed are left Unknown, and every
rank's failure stays in ``status.probe.failures``. No new RBAC is needed: nothing is read
but the job's own pods.
"""

from __future__ import annotations

from datetime import datetime
from typing import Optional

from disttrain.api import constants
from disttrain.children import observe
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.diagnose import Diagnosis
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary

# How long after the last other rank ended a probe that still runs is judged lost (s): a
# live probe ends within its wind-down (about 5 s) of its peers; the rest is margin for a
# loaded node and for clock skew between the nodes' kubelets and the operator.
NODE_LOST_SETTLE_SECONDS = 15.0
# How long past its own budget (timeoutSeconds, from its container's start) a probe that
# still shows Running is judged lost (s): its watchdog's C-level backstop fires 5 s after
# the budget; the rest is margin for the kubelet's report and clock skew.
OWN_DEADLINE_MARGIN_SECONDS = 10.0


def _earliest(*waits: Optional[float]) -> Optional[float]:
    left = [w for w in waits if w is not None]
    return min(left) if left else None


def lost_ranks(by_rank: dict[int, dict], n: int, now: datetime, timeout_seconds: Optional[float] = None,
               excused: frozenset[int] = frozenset()) -> tuple[dict[int, str], Optional[float]]:
    """The ranks whose node is lost, each with the evidence (a phrase for the message), and
    the seconds until a rule can decide (None: none can, or one already did).

    ``by_rank`` holds the attempt's probe pods (all ``n`` of them); ``timeout_seconds`` is
    ``spec.probe.timeoutSeconds`` (None: rule 2 off). See the module docstring for the rules:
    every other rank ended :data:`NODE_LOST_SETTLE_SECONDS` ago (their ``finishedAt``), or
    the silent probe's own budget plus :data:`OWN_DEADLINE_MARGIN_SECONDS` has passed since
    its container started. Rule 1 does not judge the ``excused`` ranks
    (:func:`disttrain.reconcile.policies.stranded.excused`): rank 0 when the ranks that ended
    never reached it and say nothing against its node, the others when rank 0 failed before
    serving its store; they wait for what never comes until their own deadline, which rule
    2 still watches."""
    if n < 1 or len(by_rank) < n:
        return {}, None
    silent = {r: p for r, p in by_rank.items() if not observe.finished(p) and observe.started_at(p, "probe")}
    if not silent:
        return {}, None
    lost: dict[int, str] = {}
    wait_own: Optional[float] = None
    if timeout_seconds is not None:
        for r, p in silent.items():
            started = observe.parse_time(observe.started_at(p, "probe"))
            if started is None:
                continue
            past = (now - started).total_seconds() - timeout_seconds
            if past >= OWN_DEADLINE_MARGIN_SECONDS:
                lost[r] = (f"{past:.0f}s past its own {timeout_seconds:g}s budget (its watchdog "
                           "ends it at the budget)")
            else:
                wait_own = _earliest(wait_own, OWN_DEADLINE_MARGIN_SECONDS - past)
    ended = [p for r, p in by_rank.items() if r not in silent]
    wait_peers: Optional[float] = None
    if ended and all(observe.finished(p) for p in ended):
        ends = [observe.parse_time((observe.terminated(p, "probe") or {}).get("finishedAt")) for p in ended]
        if all(t is not None for t in ends):  # else: leave it to rule 2 and the budget
            since = (now - max(t for t in ends if t is not None)).total_seconds()
            if since >= NODE_LOST_SETTLE_SECONDS:
                for r in silent:
                    if r not in excused:
                        lost.setdefault(r, f"{since:.0f}s after every other rank ended (a probe on "
                                           "a live node ends within seconds of its peers)")
            else:
                wait_peers = NODE_LOST_SETTLE_SECONDS - since
    if lost:
        return lost, None
    return {}, _earliest(wait_own, wait_peers)


def _saw(out: ProbeOutcome) -> str:
    """What one ended rank reported, in a few words."""
    where = f"rank {out.rank} ({out.node or out.pod})"
    if out.report is None:
        return f"{where}: {out.error or 'no report'}"
    failure = out.report.failure
    if out.report.ok and not failure:
        return f"{where} passed"
    reason = (failure.reason if failure else None) or vocabulary.PROBE_FAILED
    return f"{where}: {reason}: {(failure.message if failure else None) or 'probe reported not ok'}"


def mark(outcomes: list[ProbeOutcome], lost: dict[int, str]) -> None:
    """Turn the outcomes of the ``lost`` ranks (rank -> the evidence, from :func:`lost_ranks`)
    into ``ProbePodLost`` failures whose message names the node, the pod, the evidence and
    the fix, and quotes what the other ranks reported."""
    others = [x for x in outcomes if x.rank not in lost]
    saw = "; ".join(_saw(x) for x in others if not x.running) or "nothing (none ended)"
    for out in outcomes:
        if out.rank not in lost:
            continue
        node = out.node or "its node"
        out.running = False
        out.error_reason = vocabulary.PROBE_POD_LOST
        out.error = (f"{node} was lost during the probe: {out.pod} (rank {out.rank}) still shows "
                     f"Running there {lost[out.rank]}, with no word from {node}'s kubelet; check the "
                     f"node (kubectl describe node {node}), cordon or repair it, then apply the job "
                     f"again. The other ranks saw: {saw}")


def override(diag: Diagnosis, outcomes: list[ProbeOutcome]) -> bool:
    """When a rank's probe pod was lost (``ProbePodLost``: its node was lost, or the pod was
    evicted before it reported), make that the verdict: ``Validated=False ProbePodLost`` with
    the lost rank(s)' messages; the checks the diagnosis failed from the other ranks' reports
    become Unknown (they follow from the loss). Returns True when it changed ``diag``."""
    lost = [x for x in outcomes if x.report is None and not x.running
            and x.error_reason == vocabulary.PROBE_POD_LOST]
    if not lost:
        return False
    nodes = ", ".join(sorted({x.node or x.pod for x in lost}))
    take_over(diag, f"{nodes} lost during the probe", vocabulary.PROBE_POD_LOST,
              cond.clip(" | ".join(x.error or "" for x in lost)))
    return True


def take_over(diag: Diagnosis, why: str, reason: str, message: str) -> None:
    """Make an ended probe the verdict: every check not passed becomes Unknown (NotReached,
    "not decided: ``why``": it follows from the end), ``Validated=False`` with ``reason``
    and ``message``. Shared by this module's lost nodes and
    :mod:`disttrain.reconcile.policies.kubeletended`."""
    for ctype in constants.CHECK_CONDITIONS[1:]:
        v = diag.conditions.get(ctype)
        if v is None or v.status != constants.TRUE:
            diag.conditions[ctype] = Verdict(constants.UNKNOWN, vocabulary.NOT_REACHED, f"not decided: {why}")
    diag.conditions[constants.VALIDATED] = Verdict(constants.FALSE, reason, message)
