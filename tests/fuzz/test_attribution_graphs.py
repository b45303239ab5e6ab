"""Generated reachability graphs (issue 19): the pure attribution names exactly the fault
injected, whatever the cluster's size, the grouping of its nodes, or the dials left out.

- Random partitions into groups that reach only each other (some dials not made, each
  group still connected by the ones that worked): ``islands``, with exactly the injected
  groups, and never a firewall.
- A full mesh with one random single fault (a node filtering inbound, a node that reaches
  no one, one blocked pair): exactly that node or pair, alone.
"""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from disttrain.diagnosis import attribution, evidence

FAILS = st.sampled_from(["timeout", "unreachable", "refused"])


def _nodes(n: int) -> tuple[str, ...]:
    return tuple(f"node-{i:02d}" for i in range(n))


@st.composite
def partitions(draw):
    """(matrix, groups): 2..5 groups of 2..5 nodes, nodes shuffled; inside a group every
    dial ok (the full mesh the probe runs up to its limit: with fewer dials inside a group,
    "node X filters inbound" fits the evidence as well); across groups a failure or no
    dial, with a failure each way between every two groups."""
    sizes = draw(st.lists(st.integers(2, 5), min_size=2, max_size=5))
    n = sum(sizes)
    order = draw(st.permutations(range(n)))
    groups, at = [], 0
    for s in sizes:
        groups.append(sorted(order[at:at + s]))
        at += s
    group_of = {x: k for k, g in enumerate(groups) for x in g}
    cells = [[None] * n for _ in range(n)]
    for g in groups:
        for a in g:
            for b in g:
                if a != b:
                    cells[a][b] = "ok"
    for k1 in range(len(groups)):
        for k2 in range(k1 + 1, len(groups)):
            for g1, g2 in ((groups[k1], groups[k2]), (groups[k2], groups[k1])):
                a, b = draw(st.sampled_from(g1)), draw(st.sampled_from(g2))
                cells[a][b] = draw(FAILS)
    for i in range(n):
        for j in range(n):
            if i != j and group_of[i] != group_of[j] and cells[i][j] is None and draw(st.booleans()):
                cells[i][j] = draw(FAILS)
    nodes = _nodes(n)
    m = evidence.Matrix("ifname:eth1", nodes, ("eth1",) * n, tuple(tuple(r) for r in cells))
    return m, {tuple(nodes[x] for x in g) for g in groups}


@given(partitions())
def test_islands_name_exactly_the_injected_groups(case):
    m, groups = case
    e = attribution.explain_matrix(m)
    assert e is not None and e.kind == "islands", e
    assert set(e.groups) == groups
    msg = e.message("x" * 500)
    assert len(msg) <= 400 and "firewall" not in msg


@st.composite
def single_faults(draw):
    """(matrix, kind, culprits): a full mesh of 3..12 nodes, every dial ok but one fault."""
    n = draw(st.integers(3, 12))
    kind = draw(st.sampled_from(["inbound", "isolated", "pairs"]))
    x = draw(st.integers(0, n - 1))
    y = draw(st.integers(0, n - 1).filter(lambda v: v != x))
    code = draw(FAILS)

    def broken(i: int, j: int) -> bool:
        if kind == "inbound":
            return j == x
        if kind == "isolated":
            return x in (i, j)
        return {i, j} == {x, y}

    cells = tuple(tuple(None if i == j else (code if broken(i, j) else "ok") for j in range(n))
                  for i in range(n))
    nodes = _nodes(n)
    culprits = {nodes[x]} if kind != "pairs" else {nodes[x], nodes[y]}
    return evidence.Matrix("10.101.0.0/24", nodes, ("eth1",) * n, cells), kind, culprits


@given(single_faults())
def test_a_single_fault_is_named_alone(case):
    m, kind, culprits = case
    e = attribution.explain_matrix(m)
    assert e is not None and (e.kind, set(e.culprits)) == (kind, culprits), e
    assert len(e.message()) <= 400


@given(st.integers(2, 12), st.data())
def test_a_random_graph_gets_a_bounded_explanation_that_names_only_its_nodes(n, data):
    """Any dial matrix at all: an explanation (or none when nothing failed), bounded, whose
    culprits are nodes of the job."""
    cells = tuple(tuple(None if i == j else data.draw(st.sampled_from([None, "ok", "ok", "timeout", "refused"]))
                        for j in range(n)) for i in range(n))
    nodes = _nodes(n)
    failed = any(c not in (None, "ok") for row in cells for c in row)
    e = attribution.explain_matrix(evidence.Matrix("10.101.0.0/24", nodes, ("eth1",) * n, cells))
    assert (e is not None) == failed
    if e is not None:
        assert set(e.culprits) <= set(nodes) and len(e.message("y" * 400)) <= 400
