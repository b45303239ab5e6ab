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

The rule (:func:`lost_ranks`): once every other rank of the attempt has ended, a probe
whose container had started and that has still not ended :data:`NODE_LOST_SETTLE_SECONDS`
after the last of them is on a lost node. The peers' reports are the evidence that the
probe run went on without it (they are quoted in the message); the pod's own silence is
the evidence that its node stopped reporting. A probe whose container never started
(Pending: a slow image pull looks the same) is not judged here: the probe budget
(``ProbeTimeout``) still applies to it.

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

from .. import conditions as cond
from .. import constants as c
from .. import observe as o
from ..diagnosis import Diagnosis, ProbeOutcome, Verdict

# How long after the last other rank ended a probe that still runs is judged lost (s): a
# live probe ends within its wind-down (about 5 s) of its peers; the rest is margin for a
# loaded node and for clock skew between the nodes' kubelets and the operator.
NODE_LOST_SETTLE_SECONDS = 15.0


def lost_ranks(by_rank: dict[int, dict], n: int, now: datetime) -> tuple[dict[int, float], Optional[float]]:
    """The ranks whose node is lost, each with the seconds since the last other rank ended,
    and the seconds until the rule can decide (None: it cannot, or already did).

    ``by_rank`` holds the attempt's probe pods (all ``n`` of them). A rank is lost when its
    probe container started, its pod has not finished, every rank that is not in the same
    state has finished (at least one), and the last of those ended at least
    :data:`NODE_LOST_SETTLE_SECONDS` ago (its ``finishedAt``)."""
    if n < 2 or len(by_rank) < n:
        return {}, None
    silent = [r for r, p in by_rank.items() if not o.finished(p) and o.started_at(p, "probe")]
    ended = [p for r, p in by_rank.items() if r not in silent]
    if not silent or not ended or not all(o.finished(p) for p in ended):
        return {}, None
    ends = [o.parse_time((o.terminated(p, "probe") or {}).get("finishedAt")) for p in ended]
    if any(t is None for t in ends):
        return {}, None  # an end time we cannot read: leave it to the probe budget
    since = (now - max(t for t in ends if t is not None)).total_seconds()
    if since < NODE_LOST_SETTLE_SECONDS:
        return {}, NODE_LOST_SETTLE_SECONDS - since
    return {r: since for r in silent}, None


def _saw(out: ProbeOutcome) -> str:
    """What one ended rank reported, in a few words."""
    where = f"rank {out.rank} ({out.node or out.pod})"
    if out.report is None:
        return f"{where}: {out.error or 'no report'}"
    failure = out.report.get("failure") if isinstance(out.report.get("failure"), dict) else None
    if out.report.get("ok") and not failure:
        return f"{where} passed"
    reason = (failure or {}).get("reason") or c.REASON_PROBE_FAILED
    return f"{where}: {reason}: {(failure or {}).get('message') or 'probe reported not ok'}"


def mark(outcomes: list[ProbeOutcome], lost: dict[int, float]) -> None:
    """Turn the outcomes of the ``lost`` ranks (rank -> seconds since the others ended) into
    ``ProbePodLost`` failures whose message names the node, the pod, the evidence and the fix."""
    others = [x for x in outcomes if x.rank not in lost]
    saw = "; ".join(_saw(x) for x in others)
    for out in outcomes:
        if out.rank not in lost:
            continue
        node = out.node or "its node"
        out.running = False
        out.error_reason = c.REASON_PROBE_POD_LOST
        out.error = (f"{node} was lost during the probe: {out.pod} (rank {out.rank}) still shows "
                     f"Running there {lost[out.rank]:.0f}s after every other rank ended, with no word "
                     f"from {node}'s kubelet (a probe on a live node ends within seconds of its "
                     f"peers); check the node (kubectl describe node {node}), cordon or repair it, "
                     f"then apply the job again. The other ranks saw: {saw}")


def override(diag: Diagnosis, outcomes: list[ProbeOutcome]) -> bool:
    """When a rank's probe pod was lost (``ProbePodLost``: its node was lost, or the pod was
    evicted before it reported), make that the verdict: ``Validated=False ProbePodLost`` with
    the lost rank(s)' messages; the checks the diagnosis failed from the other ranks' reports
    become Unknown (they follow from the loss). Returns True when it changed ``diag``."""
    lost = [x for x in outcomes if x.report is None and not x.running
            and x.error_reason == c.REASON_PROBE_POD_LOST]
    if not lost:
        return False
    nodes = ", ".join(sorted({x.node or x.pod for x in lost}))
    for ctype in c.CHECK_CONDITIONS[1:]:
        v = diag.conditions.get(ctype)
        if v is None or v.status != cond.TRUE:
            diag.conditions[ctype] = Verdict(cond.UNKNOWN, c.REASON_NOT_REACHED,
                                             f"not decided: {nodes} lost during the probe")
    diag.conditions[c.VALIDATED] = Verdict(cond.FALSE, c.REASON_PROBE_POD_LOST,
                                           cond.clip(" | ".join(x.error or "" for x in lost)))
    return True
