"""The scheduler's unschedulable message: fail at once, or wait for capacity."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies.scheduling import classify, reasons, total_nodes
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod
from tests.support.reconcile import advance, step

ANTI = "didn't match pod anti-affinity rules"


@pytest.mark.parametrize("message,n,want", [
    (f"0/2 nodes are available: 2 node(s) {ANTI}.", 3, "not-enough-nodes"),
    (f"0/3 nodes are available: 3 node(s) {ANTI}. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.", 3, "not-enough-nodes"),
    (f"0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) {ANTI}.", 3, "wait"),
    ("0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 1 node(s) "
     f"{ANTI}.", 2, "wait"),
    ("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption "
     "victims found for incoming pod.", 2, "wait"),
    ("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.", 2, "unschedulable"),
    ("0/2 nodes are available: 2 node(s) had untolerated taint {gpu: true}.", 2, "unschedulable"),
    ("0/4 nodes are available: 4 Insufficient memory.", 8, "not-enough-nodes"),  # never enough nodes
    ("unschedulable", 2, "unschedulable"),
    # found on the cluster (the admission check kept the culprit out): one node busy, the
    # other ruled out by the pod's own affinity, two ranks: freeing cpu cannot place them
    ("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector.", 2,
     "unschedulable"),
    ("0/3 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
     f"1 node(s) {ANTI}.", 2, "wait"),  # two nodes remain for two ranks
    ("0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had untolerated taint {gpu: true}.", 3,
     "unschedulable"),
    ("minCount (2) cannot be satisfied: 0 scheduled, 1 remaining", 2, "gang"),
])
def test_classify(message, n, want):
    assert classify(message, n) == want


def test_reasons_are_counted_items_of_the_first_sentence():
    msg = f"0/3 nodes are available: 1 Insufficient cpu, 2 node(s) {ANTI}. preemption: 0/3 nodes are available: 3 No preemption victims"
    assert reasons(msg) == [(1, "Insufficient cpu"), (2, f"node(s) {ANTI}")]
    assert total_nodes(msg) == 3 and total_nodes("garbage") is None


def test_busy_nodes_make_the_job_wait_without_spending_its_budget():
    body = advance(job(), step(job(), []))
    p0 = pod("j-probe-0", "probe", 0, created="2026-11-30T11:50:00Z",
             unschedulable="0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports.")
    plan = step(body, [p0])
    ps = cond.get(plan.status["conditions"], constants.PROBES_SCHEDULED)
    assert (ps["status"], ps["reason"]) == ("Unknown", vocabulary.WAITING_FOR_RESOURCES)
    assert "free ports" in ps["message"] and not cond.is_true(plan.status["conditions"], constants.FAILED)
    # ten minutes after the pod was created: still waiting, never ProbeTimeout
    assert cond.status_of(plan.status["conditions"], constants.VALIDATED) == "Unknown"
    assert not plan.deletes


def test_a_training_pod_that_cannot_be_placed_says_so():
    from tests.support.reconcile import validated_body, workers

    body = validated_body()
    ws = workers("Running", "Pending")
    ws[1]["spec"]["nodeName"] = None
    ws[1]["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": "0/2 nodes are available: 1 Insufficient cpu."}]
    ts = cond.get(step(body, ws).status["conditions"], constants.TRAINING_STARTED)
    assert (ts["status"], ts["reason"]) == ("Unknown", vocabulary.WAITING_FOR_RESOURCES)
    assert "rank 1" in ts["message"] and "Insufficient cpu" in ts["message"]


def test_a_gang_waiting_for_busy_nodes_waits_instead_of_failing():
    body = advance(job(), step(job(), []))
    busy = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't have free ports for the requested pod ports."
    pods = [pod("j-probe-0", "probe", 0, unschedulable=busy),
            pod("j-probe-1", "probe", 1, unschedulable="minCount (2) cannot be satisfied: 0 scheduled, 1 remaining")]
    ps = cond.get(step(body, pods).status["conditions"], constants.PROBES_SCHEDULED)
    assert (ps["status"], ps["reason"]) == ("Unknown", vocabulary.WAITING_FOR_RESOURCES)
    # a member whose own constraints exclude every node still fails the job
    pods[0] = pod("j-probe-0", "probe", 0, unschedulable="0/2 nodes are available: 2 node(s) had untolerated taint {x: y}.")
    ps = cond.get(step(body, pods).status["conditions"], constants.PROBES_SCHEDULED)
    assert (ps["status"], ps["reason"]) == ("False", vocabulary.PROBE_UNSCHEDULABLE)


GANG_HELD = ("pod group is unschedulable, minCount (3) cannot be satisfied: 2 scheduled, 0 remaining, pod "
             "group preemption: No preemption victims found for incoming preemptor")


def test_a_gang_short_of_nodes_is_one_counted_sentence_naming_the_cause_first():
    """Seen in CI: three gang-scheduled probes on two nodes gave a 608-character message that
    repeated the gang's words per pod; the cause (rank 2, anti-affinity) must lead, short."""
    n = 3
    body = advance(job(n), step(job(n), []))
    pods = [pod(f"j-probe-{r}", "probe", r, unschedulable=GANG_HELD) for r in (0, 1)]
    pods.append(pod("j-probe-2", "probe", 2, unschedulable=f"0/2 nodes are available: 2 node(s) {ANTI}."))
    conds = step(body, pods).status["conditions"]
    ps = cond.get(conds, constants.PROBES_SCHEDULED)
    assert (ps["status"], ps["reason"]) == ("False", vocabulary.NOT_ENOUGH_NODES)
    msg = ps["message"]
    assert len(msg) <= 400 and msg.count("minCount") == 0, msg
    assert "only 2 could take one" in msg and "rank 2: 0/2 nodes are available" in msg
    assert "ranks 0, 1 held by the gang" in msg and msg.index("rank 2") < msg.index("ranks 0, 1")
    assert all(len(x["message"]) <= 400 for x in conds)


def test_summarize_counts_identical_messages_once():
    from disttrain.reconcile.policies.scheduling import summarize

    busy = "0/4 nodes are available: 4 Insufficient cpu. preemption: 0/4 nodes are available: 4 No victims."
    out = summarize([(3, busy), (1, busy), (2, "x" * 500)], 4, each=100)
    assert out.startswith("ranks 1, 3: 0/4 nodes are available: 4 Insufficient cpu;") and "preemption" not in out
    assert "rank 2: " + "x" * 97 + "..." in out and len(out) < 200


@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from(
    ["Insufficient cpu", "node(s) didn't have free ports for the requested pod ports", f"node(s) {ANTI}",
     "node(s) didn't match Pod's node affinity/selector", "node(s) had untolerated taint {x: y}"])),
    min_size=1, max_size=4), st.integers(1, 8))
def test_busy_nodes_are_waited_for_only_when_enough_nodes_could_ever_hold_the_ranks(items, n):
    """Oracle: "wait" only when the nodes not ruled out by the pod's own constraints are at
    least the ranks (one per node)."""
    total = sum(c for c, _ in items)
    msg = f"0/{total} nodes are available: " + ", ".join(f"{c} {r}" for c, r in items) + "."
    got = classify(msg, n)
    ruled_out = sum(c for c, r in items if "affinity/selector" in r or "taint" in r)
    if got == "wait":
        assert total - ruled_out >= n
    if total >= n and ruled_out and total - ruled_out < n:
        assert got == "unschedulable"
