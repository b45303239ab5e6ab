"""The scheduler's unschedulable message: fail at once, or wait for capacity."""

import pytest

from disttrain import conditions as cond
from disttrain import constants as c
from disttrain.policies.scheduling import classify, reasons, total_nodes

from .fixtures import job, pod
from .test_reconcile import advance, step

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
    ps = cond.get(plan.status["conditions"], c.PROBES_SCHEDULED)
    assert (ps["status"], ps["reason"]) == ("Unknown", c.REASON_WAITING_FOR_RESOURCES)
    assert "free ports" in ps["message"] and not cond.is_true(plan.status["conditions"], c.FAILED)
    # ten minutes after the pod was created: still waiting, never ProbeTimeout
    assert cond.status_of(plan.status["conditions"], c.VALIDATED) == "Unknown"
    assert not plan.deletes


def test_a_training_pod_that_cannot_be_placed_says_so():
    from .test_reconcile import validated_body, workers

    body = validated_body()
    ws = workers("Running", "Pending")
    ws[1]["spec"]["nodeName"] = None
    ws[1]["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": "0/2 nodes are available: 1 Insufficient cpu."}]
    ts = cond.get(step(body, ws).status["conditions"], c.TRAINING_STARTED)
    assert (ts["status"], ts["reason"]) == ("Unknown", c.REASON_WAITING_FOR_RESOURCES)
    assert "rank 1" in ts["message"] and "Insufficient cpu" in ts["message"]
