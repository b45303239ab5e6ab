"""What the scheduler's "unschedulable" message means for a job
(:mod:`disttrain.reconcile.policies.scheduling`): several pods' messages as one counted
clause, causes first, and the pods only held by their gang. (``classify`` has its table in
``tests/unit/operator/reconcile/test_scheduling.py``.)"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


EXCLUDED = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes"
REQUIRED = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "gpu.vendor", "operator": "In", "values": ["nvidia"]}]},
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}

FIX_ROWS = [  # (name, scheduler messages, template spec, substrings of the fix (None: no fix))
    ("the nodeSelector's pairs", [EXCLUDED], {"nodeSelector": {"node-type": "training"}},
     ["spec.template.spec.nodeSelector node-type=training", "label the nodes", "change the selector"]),
    ("required nodeAffinity keys", [EXCLUDED], {"affinity": REQUIRED},
     ["required nodeAffinity on gpu.vendor, metadata.name (spec.template.spec.affinity)"]),
    ("both", [TAINT, EXCLUDED], {"nodeSelector": {"a": "1"}, "affinity": REQUIRED},
     ["nodeSelector a=1 and required nodeAffinity on gpu.vendor"]),
    ("many pairs: four and a count", [EXCLUDED], {"nodeSelector": {f"k{i}": "v" for i in range(6)}},
     ["k0=v, k1=v, k2=v, k3=v and 2 more"]),
    ("the scheduler names no selector", [TAINT], {"nodeSelector": {"node-type": "training"}}, None),
    ("the template selects on nothing", [EXCLUDED], {"affinity": {"nodeAffinity": {"preferred": []}}}, None),
    ("shapes not the API's", [EXCLUDED], {"nodeSelector": ["x"], "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [None, {"matchExpressions": [7]}]}}}},
     None),
    ("no template spec mapping", [EXCLUDED], None, None),
]


@pytest.mark.parametrize("name,msgs,pod_spec,says", FIX_ROWS, ids=[r[0] for r in FIX_ROWS])
def test_selector_fix_names_what_the_template_selects_on(name, msgs, pod_spec, says):
    fix = scheduling.selector_fix(msgs, pod_spec)
    if says is None:
        assert fix is None
        return
    assert all(s in fix for s in says), fix
    assert "no node" not in fix and len(fix) <= 300  # the operator reads no node labels


@given(st.lists(st.sampled_from([EXCLUDED, TAINT, BUSY, ""]), max_size=3), st.recursive(
    st.one_of(st.none(), st.text(max_size=8), st.integers()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["nodeSelector", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
         "nodeSelectorTerms", "matchExpressions", "matchFields", "key", "x"]), inner, max_size=3)), max_leaves=12))
def test_selector_fix_never_raises_and_stays_short(msgs, pod_spec):
    fix = scheduling.selector_fix(msgs, pod_spec)
    assert fix is None or (EXCLUDED in msgs and len(fix) <= 400)
