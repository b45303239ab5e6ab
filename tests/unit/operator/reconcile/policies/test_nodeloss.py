"""A node lost mid-probe (policies/nodeloss.py): its probe pod outlives every peer with no
word from its kubelet; the verdict names the node within NODE_LOST_SETTLE_SECONDS of the
last peer's end instead of a ProbeTimeout listing pods at the end of the probe budget."""

import json
from datetime import timedelta

import pytest

from disttrain.api import constants
from disttrain.diagnosis.diagnose import diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.diagnosis.report import ProbeReport
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import kubeletended
from disttrain.reconcile.policies.nodeloss import (
    NODE_LOST_SETTLE_SECONDS,
    lost_ranks,
    mark,
    override,
)
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod, report, typed_report
from tests.support.reconcile import NOW, advance, step

STARTED = "2026-11-30T11:59:30Z"
ENDED = "2026-11-30T11:59:59+00:00"  # one second before NOW


def running(rank, node, started=STARTED):
    return pod(f"j-probe-{rank}", "probe", rank, phase="Running", node=node,
               host_ip=f"10.100.0.1{rank}", started_at=started)


def ended(rank, node, rep, finished_at=ENDED, phase="Failed"):
    return pod(f"j-probe-{rank}", "probe", rank, phase=phase, node=node, host_ip=f"10.100.0.1{rank}",
               message=json.dumps(rep), exit_code=0 if phase == "Succeeded" else 1,
               started_at=STARTED, finished_at=finished_at)


def waited_for_rank1():
    return report(0, "node-a", ok=False, failure={
        "reason": vocabulary.RENDEZVOUS_TIMEOUT, "phase": "connectivity",
        "message": "node-a: rank(s) 1 never published their connectivity results within the "
                   "deadline; present: 0 (node-a)"})


def lost_store():
    return report(1, "node-b", ok=False, failure={
        "reason": vocabulary.ALL_REDUCE_TIMEOUT, "phase": "collective",
        "message": "node-b: all-reduce did not complete within 12s"})


LATER = NOW + timedelta(seconds=NODE_LOST_SETTLE_SECONDS)


@pytest.mark.parametrize("pods,now,want_lost,want_wait", [
    # rank 1 still runs, rank 0 ended 1 s ago: wait out the settle time
    ([ended(0, "node-a", waited_for_rank1()), running(1, "node-b")], NOW, [], NODE_LOST_SETTLE_SECONDS - 1),
    # ... and once it has passed, rank 1 is lost
    ([ended(0, "node-a", waited_for_rank1()), running(1, "node-b")], LATER, [1], None),
    # a probe that never started (a slow image pull looks the same) is left to the budget
    ([ended(0, "node-a", waited_for_rank1()),
      pod("j-probe-1", "probe", 1, phase="Pending", node="node-b")], LATER, [], None),
    # nobody ended, both within their own budget: nothing to go on yet
    ([running(0, "node-a"), running(1, "node-b")], LATER, [], None),
    # an end time that cannot be read: left to the budget
    ([ended(0, "node-a", waited_for_rank1(), finished_at="garbage"), running(1, "node-b")], LATER, [], None),
    # every rank ended: not this rule's business
    ([ended(0, "node-a", waited_for_rank1()), ended(1, "node-b", lost_store())], LATER, [], None),
])
def test_lost_ranks_from_the_peers(pods, now, want_lost, want_wait):
    by_rank = {int(p["metadata"]["labels"][constants.LABEL_RANK]): p for p in pods}
    lost, wait = lost_ranks(by_rank, 2, now)
    assert sorted(lost) == want_lost
    assert all("after every other rank ended" in why for why in lost.values())
    assert wait == (pytest.approx(want_wait) if want_wait is not None else None)


def test_a_probe_past_its_own_budget_is_lost_whatever_its_peers_do():
    """Its watchdog ends a probe at timeoutSeconds (a backstop 5 s later): a pod that still
    shows Running OWN_DEADLINE_MARGIN_SECONDS past that has a node that stopped reporting."""
    by_rank = {0: running(0, "node-a"), 1: running(1, "node-b")}  # both started 30 s before NOW
    lost, wait = lost_ranks(by_rank, 2, NOW + timedelta(seconds=35), timeout_seconds=60)
    assert lost == {} and wait == pytest.approx(5.0)  # woken when the margin ends
    lost, wait = lost_ranks(by_rank, 2, NOW + timedelta(seconds=40), timeout_seconds=60)
    assert sorted(lost) == [0, 1] and wait is None
    assert "past its own 60s budget" in lost[0]
    # without the timeout the rule is off
    assert lost_ranks(by_rank, 2, NOW + timedelta(seconds=400)) == ({}, None)


def test_a_rank_still_pending_among_three_keeps_the_rule_out():
    by_rank = {0: ended(0, "node-a", waited_for_rank1()), 1: running(1, "node-b"),
               2: pod("j-probe-2", "probe", 2, phase="Pending", node="node-c")}
    assert lost_ranks(by_rank, 3, LATER) == ({}, None)
    assert lost_ranks({0: by_rank[0], 1: by_rank[1]}, 3, LATER) == ({}, None)  # incomplete


def test_two_silent_ranks_are_both_lost():
    by_rank = {0: ended(0, "node-a", waited_for_rank1()), 1: running(1, "node-b"), 2: running(2, "node-c")}
    lost, _ = lost_ranks(by_rank, 3, LATER)
    assert sorted(lost) == [1, 2]


def test_both_nodes_lost_are_named_once_past_their_own_budgets():
    """Every node of the job died: no peer reports, but each probe outlived its watchdog."""
    body = advance(job(), step(job(), []))
    pods = [running(0, "node-a"), running(1, "node-b")]
    plan = step(body, pods, now=NOW + timedelta(seconds=45))  # 75 s after they started
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_POD_LOST)
    assert "node-a was lost" in v["message"] and len(v["message"]) <= cond.MAX_MESSAGE
    assert "node-b was lost" in plan.status["probe"]["failures"][1]


def test_lost_rank1_is_named_within_the_settle_time_not_at_the_budget():
    """Rank 1's node died: rank 0 waited for it at a gather until its phase deadline and
    reported; rank 1's pod stays Running in the API. Before this rule the job waited for
    the probe budget (timeoutSeconds + 30 s) and said ProbeTimeout listing the pod."""
    body = advance(job(), step(job(), []))
    pods = [ended(0, "node-a", waited_for_rank1()), running(1, "node-b")]
    first = step(body, pods)
    assert cond.status_of(first.status["conditions"], constants.VALIDATED) == "Unknown"
    assert first.requeue_after == pytest.approx(NODE_LOST_SETTLE_SECONDS - 1)  # woken for it
    plan = step(body, pods, now=LATER)
    conds = plan.status["conditions"]
    v = cond.get(conds, constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_POD_LOST)
    assert v["message"].startswith("node-b was lost during the probe: j-probe-1 (rank 1)")
    assert "kubectl describe node node-b" in v["message"] and len(v["message"]) <= cond.MAX_MESSAGE
    f = cond.get(conds, constants.FAILED)
    assert (f["status"], f["reason"]) == ("True", vocabulary.PREFLIGHT_FAILED) and "node-b" in f["message"]
    # rank 0's RendezvousTimeout follows from the loss: not the verdict, kept in the details
    assert cond.get(conds, constants.MASTER_REACHABLE)["status"] == "Unknown"
    assert any("never published" in x for x in plan.status["probe"]["failures"])
    assert not [p for p in plan.creates if p["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_WORKER]
    # the lost pod is deleted (it holds nothing but may come back with its node); rank 0's is
    # kept for its logs (keepPods OnFailure)
    assert plan.deletes == ["j-probe-1"]


def test_lost_rank0_beats_the_specific_reason_its_peer_reported():
    """Rank 0's node (the rendezvous store) died: rank 1's all-reduce timed out. The
    timeout is what followed, node-a is the cause."""
    body = advance(job(), step(job(), []))
    plan = step(body, [running(0, "node-a"), ended(1, "node-b", lost_store())], now=LATER)
    conds = plan.status["conditions"]
    v = cond.get(conds, constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_POD_LOST)
    assert v["message"].startswith("node-a was lost during the probe: j-probe-0 (rank 0)")
    assert "rank 1 (node-b): AllReduceTimeout" in v["message"]
    col = cond.get(conds, constants.COLLECTIVE_VALIDATED)
    assert (col["status"], col["reason"]) == ("Unknown", vocabulary.NOT_REACHED)
    assert vocabulary.PROBE_POD_LOST in col["message"]


def test_peers_that_passed_still_make_the_silent_one_lost():
    """Every other rank passed the final barrier with it: a live probe would have ended
    with them. Its node died before it could report."""
    body = advance(job(), step(job(), []))
    ok0 = report(0, "node-a")
    plan = step(body, [ended(0, "node-a", ok0, phase="Succeeded"), running(1, "node-b")], now=LATER)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_POD_LOST)
    assert "rank 0 (node-a) passed" in v["message"]


def test_a_probe_that_never_started_still_times_out_at_the_budget():
    body = advance(job(), step(job(), []))
    p1 = pod("j-probe-1", "probe", 1, phase="Pending", node="node-b", created="2026-11-30T12:00:00Z")
    p0 = ended(0, "node-a", waited_for_rank1())
    p0["metadata"]["creationTimestamp"] = "2026-11-30T12:00:00Z"
    assert cond.status_of(step(body, [p0, p1], now=LATER).status["conditions"], constants.VALIDATED) == "Unknown"
    plan = step(body, [p0, p1], now=NOW + timedelta(seconds=91))
    assert cond.get(plan.status["conditions"], constants.VALIDATED)["reason"] == vocabulary.PROBE_TIMEOUT


def test_mark_quotes_the_other_ranks_typed_reports_too():
    """ProbeOutcome.report may be the typed ProbeReport (as diagnose takes it): quoting what
    the other ranks saw read it as a dict and raised AttributeError."""
    failed = report(0, "node-a", ok=False, failure={"reason": "MasterPortTimeout", "message": "no answer"})
    outs = [ProbeOutcome(rank=0, pod="j-probe-0", node="node-a", report=ProbeReport.model_validate(failed)),
            ProbeOutcome(rank=1, pod="j-probe-1", node="node-b",
                         report=ProbeReport.model_validate(report(1, "node-b"))),
            ProbeOutcome(rank=2, pod="j-probe-2", node="node-c", running=True)]
    mark(outs, {2: "20s after every other rank ended"})
    assert outs[2].error.endswith("The other ranks saw: rank 0 (node-a): MasterPortTimeout: no answer; "
                                  "rank 1 (node-b) passed")


def test_mark_and_override_leave_other_verdicts_alone():
    outs = [ProbeOutcome(rank=0, pod="j-probe-0", node="node-a", report=typed_report(report(0, "node-a"))),
            ProbeOutcome(rank=1, pod="j-probe-1", node="node-b", report=typed_report(report(1, "node-b")))]
    mark(outs, {})
    d = diagnose(outs, "10.100.0.10")
    assert not override(d, outs) and d.validated
    outs[1] = ProbeOutcome(rank=1, pod="j-probe-1", node="node-b", running=True)
    mark(outs, {1: "20s after every other rank ended"})
    assert outs[1].error_reason == vocabulary.PROBE_POD_LOST and not outs[1].running
    assert "Running there 20s after every other rank ended" in outs[1].error
    assert outs[1].error.endswith("The other ranks saw: rank 0 (node-a) passed")
    d = diagnose(outs, "10.100.0.10")
    assert override(d, outs) and d.conditions[constants.VALIDATED].reason == vocabulary.PROBE_POD_LOST


OWN = [  # (name, pods, numNodes, now, spec.probe.timeoutSeconds, lost ranks, wait)
    ("within its own budget: wait for budget + margin",
     [running(0, "node-a"), running(1, "node-b")], 2, NOW, 25.0, [], 5.0),
    ("past its own budget + margin: lost whatever its peers do",
     [running(0, "node-a"), running(1, "node-b")], 2, NOW + timedelta(seconds=1), 20.0, [0, 1], None),
    ("the earlier of the two rules' waits",
     [ended(0, "node-a", waited_for_rank1()), running(1, "node-b", "2026-11-30T11:59:59Z")], 2, NOW, 20.0, [],
     NODE_LOST_SETTLE_SECONDS - 1),
    ("a pod missing from the attempt: no rule applies",
     [running(0, "node-a")], 2, LATER, 1.0, [], None),
    ("no rank at all: nothing", [], 0, LATER, 1.0, [], None),
]


@pytest.mark.parametrize("name,pods,n,now,timeout,want_lost,want_wait", OWN, ids=[r[0] for r in OWN])
def test_lost_ranks_past_their_own_budget(name, pods, n, now, timeout, want_lost, want_wait):
    by_rank = {int(p["metadata"]["labels"][constants.LABEL_RANK]): p for p in pods}
    lost, wait = lost_ranks(by_rank, n, now, timeout)
    assert sorted(lost) == want_lost
    assert all("past its own 20s budget" in why for why in lost.values())
    assert wait == (pytest.approx(want_wait) if want_wait is not None else None)


def intercepted():
    """Rank 1's report when a mesh's proxy accepted and closed its connections to rank 0."""
    return report(1, "node-b", ok=False, failure={
        "reason": vocabulary.CONNECTION_INTERCEPTED, "phase": "rendezvous",
        "message": "node-b (rank 1): connections to 10.244.0.2 (MASTER_PORT 29500 and port 29501) are "
                   "accepted and then closed before rank 0's probe answers"})


def test_rank0_waiting_for_a_rank_that_never_reached_it_is_not_lost():
    """Found on real nodes (scenario mesh-sidecar-intercepts): Istio's sidecar closed rank 1's
    connections, rank 1 ended in 1.6 s, and rank 0, waiting at its store for a rank that could
    never arrive, was named lost 15 s later ("node-a was lost during the probe"). Rank 1's
    report is the cause and says nothing against node-a."""
    body = advance(job(), step(job(), []))
    for now in (NOW, LATER, LATER + timedelta(seconds=20)):  # however late the operator looks
        plan = step(body, [running(0, "node-a"), ended(1, "node-b", intercepted())], now=now)
        v = cond.get(plan.status["conditions"], constants.VALIDATED)
        assert (v["status"], v["reason"]) == ("False", vocabulary.CONNECTION_INTERCEPTED), (now, v)
        assert "was lost" not in v["message"] and "node-b" in v["message"]
        m = cond.get(plan.status["conditions"], constants.MASTER_REACHABLE)
        assert m["reason"] == vocabulary.CONNECTION_INTERCEPTED and "node-b (rank 1)" in m["message"]


def test_an_excused_rank_is_judged_by_its_own_budget_only():
    pods = {0: running(0, "node-a"), 1: ended(1, "node-b", intercepted())}
    assert lost_ranks(pods, 2, LATER, 60.0, frozenset({0})) == ({}, pytest.approx(10.0 + 60 - 45))
    assert list(lost_ranks(pods, 2, LATER, 60.0)[0]) == [0]  # not excused: rule 1 names it
    late = NOW + timedelta(seconds=60 + 10 - 29)  # 70 s after its start at 11:59:30
    assert list(lost_ranks(pods, 2, late, 60.0, frozenset({0}))[0]) == [0]


def broken_torch():
    """Rank 1's report when ``import torch`` failed on its node: in the rendezvous phase,
    before it joined rank 0's store (``master.joined`` false)."""
    rep = report(1, "node-b", ok=False, failure={
        "reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "rendezvous",
        "message": "node-b: import torch failed: ImportError: libcudart.so.12: cannot open shared "
                   "object file; the training image's torch is broken: check it with python -c "
                   "'import torch'"})
    rep["master"]["joined"] = False
    return rep


def test_rank0_waiting_for_a_rank_whose_torch_never_loaded_is_not_lost():
    """Any failure before a rank joined rank 0's store strands it, whatever the reason: rank 0
    waits at its store for it until its own deadline, and its outliving node-b says nothing
    against node-a. The verdict is node-b's report, however late the operator looks."""
    body = advance(job(), step(job(), []))
    for now in (NOW, LATER, LATER + timedelta(seconds=20)):
        plan = step(body, [running(0, "node-a"), ended(1, "node-b", broken_torch())], now=now)
        v = cond.get(plan.status["conditions"], constants.VALIDATED)
        assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_INTERNAL_ERROR), (now, v)
        assert "was lost" not in v["message"] and "node-b: import torch failed" in v["message"]


def test_ranks_dialling_a_rank_0_whose_torch_never_loaded_are_not_lost():
    """The mirror case: rank 0's ``import torch`` failed before it served its store; rank 1
    dials a store that will never answer until its own deadline. An operator that looks late
    (restarted, say) must still name node-a's report, not take node-b for lost."""
    rep = broken_torch()
    rep.update(rank=0, node="node-a", hostname="node-a")
    rep["failure"]["message"] = rep["failure"]["message"].replace("node-b", "node-a")
    body = advance(job(), step(job(), []))
    for now in (NOW, LATER, LATER + timedelta(seconds=20)):
        plan = step(body, [ended(0, "node-a", rep), running(1, "node-b")], now=now)
        v = cond.get(plan.status["conditions"], constants.VALIDATED)
        assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_INTERNAL_ERROR), (now, v)
        assert "was lost" not in v["message"] and "node-a: import torch failed" in v["message"]


def killed_in_connectivity():
    """Rank 1's pod after the kernel killed its probe (out of memory) in the connectivity
    phase: its termination message is the pessimistic report written before that phase
    (``final: false``), and it told rank 0 nothing."""
    rep = report(1, "node-b", ok=False, failure={
        "reason": vocabulary.RENDEZVOUS_TIMEOUT, "phase": "connectivity",
        "message": "node-b: the probe ended during connectivity without a final report (killed, "
                   "out of memory, or hung past the 60s budget)"})
    rep["master"]["joined"] = True
    rep["final"] = False
    p = ended(1, "node-b", rep)
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    term.update(exitCode=137, reason="OOMKilled")
    return p


def test_a_rank_killed_without_a_word_does_not_make_its_waiting_peer_lost():
    """A killed probe publishes no abort: rank 0 waits for it at the connectivity gather
    until its own deadline, on a live node. Outliving node-b's end is no evidence against
    node-a: the kubelet's word (OOMKilled) on node-b is the verdict, at once, however late
    the operator looks (issue 30: the kubelet's word is evidence)."""
    body = advance(job(), step(job(), []))
    plan = step(body, [running(0, "node-a"), killed_in_connectivity()], now=NOW)
    v = cond.get(plan.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("Unknown", vocabulary.PROBING), v  # rank 0 may end the same way
    assert plan.requeue_after == kubeletended.SETTLE_SECONDS - 1
    for now in (NOW + timedelta(seconds=2), LATER, NOW + timedelta(seconds=45)):  # rank 0 started at 11:59:30
        plan = step(body, [running(0, "node-a"), killed_in_connectivity()], now=now)
        v = cond.get(plan.status["conditions"], constants.VALIDATED)
        assert (v["status"], v["reason"]) == ("False", vocabulary.OOM_KILLED), (now, v)
        assert v["message"].startswith("node-b: j-probe-1 (rank 1)") and "was lost" not in v["message"]
        assert "during its connectivity phase" in v["message"]
