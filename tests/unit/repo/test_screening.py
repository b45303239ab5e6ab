"""Group screening (benchmarks/screening.py, pure, not part of the probe): random single faults beyond the full-mesh limit are
named exactly, two faults are both among the candidates, a healthy cluster names nothing;
and the benchmark's simulation and table."""
from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import bench_screening as B  # noqa: E402
import screening as S  # noqa: E402


def run(world: int, seed: int, fails) -> S.Verdict:
    """Both rounds against the fault predicate ``fails((a, b))``."""
    sc = S.Screening(world, seed)
    rnd = sc.first()
    while rnd:
        rnd = sc.next([p for p in rnd if fails(p)])
    assert len(sc.rounds) <= 2
    return S.verdict(world, sc.rounds, sc.failed)


worlds = st.integers(min_value=33, max_value=400)
seeds = st.integers(min_value=0, max_value=2**31)


@settings(max_examples=60, deadline=None)
@given(worlds, seeds)
def test_a_healthy_cluster_names_nothing(world, seed):
    v = run(world, seed, lambda p: False)
    assert v.findings == () and v.alone is None and v.candidates == ()


@settings(max_examples=60, deadline=None)
@given(worlds, seeds, st.data())
def test_a_dead_node_is_named_alone(world, seed, data):
    x = data.draw(st.integers(0, world - 1))
    v = run(world, seed, lambda p: x in p)
    assert v.alone == S.Finding("node", (x,))


@settings(max_examples=60, deadline=None)
@given(worlds, seeds, st.data())
def test_a_blocked_pair_the_screen_dials_is_named_alone(world, seed, data):
    # a pair inside a group or a representative pair between two groups: the screen dials it
    pair = data.draw(st.sampled_from(S.screen(world, seed)))
    v = run(world, seed, lambda p: p == pair)
    assert v.alone == S.Finding("pair", pair)


@settings(max_examples=60, deadline=None)
@given(worlds, seeds, st.data())
def test_a_link_between_two_groups_is_named_alone(world, seed, data):
    gs = [g for g in S.groups_of(world) if len(g) >= 2]
    i, j = data.draw(st.lists(st.integers(0, len(gs) - 1), min_size=2, max_size=2, unique=True))
    a, b = set(gs[i]), set(gs[j])
    v = run(world, seed, lambda p: (p[0] in a and p[1] in b) or (p[0] in b and p[1] in a))
    f = v.alone
    assert f is not None and f.kind == "link", v
    x, y = map(set, f.sides)
    assert (x <= a and y <= b) or (x <= b and y <= a)


@settings(max_examples=40, deadline=None)
@given(worlds, seeds, st.data())
def test_a_link_inside_a_group_both_halves_pass(world, seed, data):
    g = max(S.groups_of(world), key=len)
    cut = data.draw(st.integers(2, len(g) - 2))
    a, b = set(g[:cut]), set(g[cut:])
    v = run(world, seed, lambda p: (p[0] in a and p[1] in b) or (p[0] in b and p[1] in a))
    assert v.alone is not None and v.alone.kind == "link"
    assert {frozenset(s) for s in v.alone.sides} == {frozenset(a), frozenset(b)}


@settings(max_examples=60, deadline=None)
@given(worlds, seeds, st.data())
def test_two_faults_are_both_among_the_candidates(world, seed, data):
    x = data.draw(st.integers(0, world - 1))
    pair = data.draw(st.sampled_from([p for p in S.screen(world, seed) if x not in p]))
    v = run(world, seed, lambda p: x in p or p == pair)
    assert {x, *pair} <= set(v.candidates)
    assert v.alone is None


def test_an_undialled_pair_is_not_seen():
    # the limit the benchmark reports: a pair the screen never dials cannot fail there
    world, seed = 256, 7
    dialled = set(S.screen(world, seed))
    pair = next((a, b) for a in range(world) for b in range(a + 1, world) if (a, b) not in dialled)
    assert run(world, seed, lambda p: p == pair).findings == ()


def test_screen_costs_about_sqrt_n_dials_per_rank():
    for world in (33, 256, 1024):
        per = S.dials_per_rank(world, [S.screen(world, 1)])
        s = len(S.groups_of(world)[0])
        assert min(per) >= 1 and max(per) <= s - 1 + 8, (world, max(per))


def test_the_benchmark_writes_its_table(tmp_path):
    out = tmp_path / "screening"
    assert B.main(["--sizes", "256", "--trials", "1", "--out", str(out)]) == 0
    md = (out.with_suffix(".md")).read_text()
    assert "| 256 | link |" in md and "## What it found" in md
    rows = B.run([256], 2, 32, 1)
    link = next(r for r in rows if r["fault"] == "link")
    assert link["screening"]["named_alone"] == 2 and link["today"]["named_alone"] == 0


@settings(max_examples=20, deadline=None)
@given(worlds, seeds)
def test_no_node_is_named_without_a_known_good_peer(world, seed):
    # every dial fails: no rank reaches anyone, so none confirms a suspect: candidates only
    v = run(world, seed, lambda p: True)
    assert all(f.kind == "candidates" for f in v.findings) and v.findings
