"""What the scheduler's "unschedulable" message means for a job
(:mod:`disttrain.reconcile.policies.scheduling`): several pods' messages as one counted
clause, causes first, and the pods only held by their gang. (``classify`` has its table in
``tests/unit/test_scheduling.py``.)"""

import pytest

from disttrain.reconcile.policies import scheduling

BUSY = "0/4 nodes are available: 4 Insufficient cpu. preemption: 0/4 nodes are available: 4 No victims."
TAINT = "0/4 nodes are available: 4 node(s) had untolerated taint {gpu: true}."
GANG = "minCount (4) cannot be satisfied: 1 scheduled, 3 remaining"

ROWS = [  # (name, [(rank, scheduler's message)], numNodes, summarize(...), gang_held(...))
    ("nothing unschedulable", [], 4, "", 0),
    ("one pod: its words, cut before preemption", [(2, BUSY)], 4,
     "rank 2: 0/4 nodes are available: 4 Insufficient cpu", 0),
    ("the same words once, ranks in order", [(3, BUSY), (1, BUSY)], 4,
     "ranks 1, 3: 0/4 nodes are available: 4 Insufficient cpu", 0),
    ("two causes, each with its ranks", [(0, TAINT), (1, BUSY), (2, TAINT)], 4,
     "ranks 0, 2: 0/4 nodes are available: 4 node(s) had untolerated taint {gpu: true}; "
     "rank 1: 0/4 nodes are available: 4 Insufficient cpu", 0),
    ("held by the gang: said last, as a consequence", [(0, GANG), (1, GANG), (3, TAINT)], 4,
     "rank 3: 0/4 nodes are available: 4 node(s) had untolerated taint {gpu: true}; "
     "ranks 0, 1 held by the gang (all 4 or none)", 2),
    ("only held by the gang", [(1, GANG)], 4, "rank 1 held by the gang (all 4 or none)", 1),
    ("a long message cut to 150 characters", [(0, "0/4 nodes are available: 4 " + "y" * 300)], 4,
     "rank 0: 0/4 nodes are available: 4 " + "y" * 120 + "...", 0),
]


@pytest.mark.parametrize("name,unschedulable,n,summary,held", ROWS, ids=[r[0] for r in ROWS])
def test_summarize_and_gang_held(name, unschedulable, n, summary, held):
    assert scheduling.summarize(unschedulable, n) == summary
    assert scheduling.gang_held(unschedulable, n) == held
