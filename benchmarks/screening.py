"""Group screening of the connectivity mesh beyond the full-mesh limit (pure; the benchmark
bench_screening.py measures it against the probe's plan, the probe does not use it).

After NVIDIA's Cluster Readiness Engine: split the ranks into groups of about sqrt(N),
test every group and a few representative pairs between every two groups in one round,
then spend a second round only on what failed: confirm a suspect node against a
known-good node (one whose every screening dial worked), and bisect a failing pair of
groups (a diagonal of pairs through the failed one): more failures on it while both
ends reach the known-good node is "both halves pass, the link between them fails".

Shapes and units: ranks are ``int`` in ``range(world)``; a *round* is a list of pairs
``(a, b)``, ``a < b``, each one TCP dial (either side may dial; one outcome per pair);
*failed* is the set of those pairs whose dial did not get the right peer's answer. Dials
per rank of a round: the pairs it is in. The verdict (:func:`verdict`) reads only the
rounds and their failures.

Costs (``s = ceil(sqrt(world))`` ranks a group, ``G = ceil(world / s)`` groups):
screening is ``s - 1`` dials per rank inside its group plus 4 representative pairs per
pair of groups (the four half-by-half combinations, rotated to spread the load), about
``s + 3`` dials per rank; the second round is 2 dials per suspect and ``s`` per failing
pair of groups. Coverage: every pair inside a group, and between two groups every
half-group by half-group block, so a dead node, a pair inside a group, and a link
between two blocks of at least half a group (a rack of 32 when ``s <= 64``) are found
and named alone, the link when the racks line up with the groups (a group inside a
rack, or a rack a half of a group: 256, 1024, 4096 ranks with racks of 32); a group
that straddles a linked rack and another mixes failures inside and between groups, and
the verdict then lists the ranks as candidates. A blocked pair in two different groups that is not a representative
pair is *not* seen: no plan sees every pair without dialling every pair (``N - 1`` per
rank); today's :func:`connectivity.plan` sees about 6 of them per rank.

Plugging it in (not done here: the connectivity phase and the probe's main are edited
elsewhere): beyond ``FULL_MESH_MAX`` the phase would dial ``Screening(world,
seed).first()``'s pairs instead of ``connectivity.plan``'s peers, all-gather the
results as it does today, and, when :meth:`Screening.next` returns pairs, run one more
dial-and-gather pass with only those (a round costs one gather through the rendezvous
store plus the dials, per network probed, 2 s connect timeout each, up to 64 at once in
the phase's thread pool: the 72 dials per rank at 4096 ranks are two waves, seconds,
where today's plan dials 6 peers in one; the gathered report grows alike). Every rank
computes the same second round from the gathered results (pure and deterministic given
the seed), so no coordinator is needed. The operator would then read the named culprit
from :func:`verdict` rather than from the matrix attribution.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

Pair = Tuple[int, int]


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def groups_of(world: int, size: Optional[int] = None) -> List[List[int]]:
    """Contiguous groups of ``size`` ranks (default ``ceil(sqrt(world))``), the last one
    possibly shorter; contiguous so that a rack of consecutive ranks stays whole."""
    s = size or max(2, math.ceil(math.sqrt(world)))
    return [list(range(i, min(world, i + s))) for i in range(0, world, s)]


def screen(world: int, seed: int, size: Optional[int] = None) -> List[Pair]:
    """Round 1: every pair inside each group, and between every two groups the four
    half-by-half representative pairs (which member of each half: rotated by the seed and
    the other group's index, so no rank carries them all). Sorted, no duplicates."""
    gs = groups_of(world, size)
    rot = random.Random(seed).randrange(1 << 16)
    out: Set[Pair] = set()
    for g in gs:
        out.update(_pair(a, b) for i, a in enumerate(g) for b in g[i + 1:])
    for gi, g in enumerate(gs):
        for hi in range(gi + 1, len(gs)):
            h = gs[hi]
            for ga in _halves(g):
                for hb in _halves(h):
                    a = ga[(rot + hi) % len(ga)]
                    b = hb[(rot + gi) % len(hb)]
                    out.add(_pair(a, b))
    return sorted(out)


def _halves(g: Sequence[int]) -> List[Sequence[int]]:
    mid = len(g) // 2
    return [g[:mid], g[mid:]] if mid else [g]


def dials_per_rank(world: int, rounds: Iterable[Iterable[Pair]]) -> List[int]:
    """How many pairs each rank is in, over the given rounds (index: rank)."""
    n = [0] * world
    for rnd in rounds:
        for a, b in rnd:
            n[a] += 1
            n[b] += 1
    return n


@dataclass
class Screening:
    """The adaptive plan: :meth:`first` is the screening round; :meth:`next` takes the
    failed pairs of the last round and returns the next round's pairs ([]: done). At most
    two rounds. ``rounds`` and ``failed`` keep what was dialled and what failed."""

    world: int
    seed: int
    size: Optional[int] = None
    rounds: List[List[Pair]] = field(default_factory=list)
    failed: Set[Pair] = field(default_factory=set)

    def first(self) -> List[Pair]:
        self.rounds = [screen(self.world, self.seed, self.size)]
        return self.rounds[0]

    def next(self, failed: Iterable[Pair]) -> List[Pair]:
        self.failed |= {_pair(a, b) for a, b in failed}
        if len(self.rounds) != 1 or not self.failed:
            return []
        nxt = localize(self.world, self.rounds[0], self.failed, self.size)
        if nxt:
            self.rounds.append(nxt)
        return nxt


def _good(world: int, tested: Iterable[Pair], failed: Set[Pair]) -> List[int]:
    """Ranks with at least one dial and no failed one."""
    seen: Set[int] = set()
    bad: Set[int] = set()
    for p in tested:
        seen.update(p)
        if p in failed:
            bad.update(p)
    return sorted(seen - bad)


def localize(world: int, tested: Sequence[Pair], failed: Set[Pair],
             size: Optional[int] = None) -> List[Pair]:
    """Round 2 from round 1's failures: every rank in a failed pair is confirmed against
    a known-good rank outside its group; a failed pair between two groups whose ends
    also worked elsewhere is bisected: the diagonal of pairs through it between the two
    groups. [] when nothing failed or no known-good rank exists."""
    gs = groups_of(world, size)
    s = len(gs[0])
    group = [r // s for r in range(world)]
    good = _good(world, tested, failed)
    if not failed or not good:
        return []
    out: Set[Pair] = set()
    suspects = sorted({x for p in failed for x in p})
    for k, x in enumerate(suspects):
        outside = [g for g in good if group[g] != group[x]] or good
        out.add(_pair(x, outside[(x + k) % len(outside)]))
    for a, b in sorted(failed):
        if group[a] == group[b]:
            continue
        g, h = gs[group[a]], gs[group[b]]
        ia, ib = a - g[0], b - h[0]
        for t in range(1, min(len(g), len(h))):
            out.add(_pair(g[(ia + t) % len(g)], h[(ib + t) % len(h)]))
    done = set(tested)
    return sorted(p for p in out if p[0] != p[1] and p not in done)


@dataclass(frozen=True)
class Finding:
    """One culprit: ``kind`` node (``nodes``: the one rank), pair (the two ranks), link
    (``sides``: the two blocks of ranks between which every dial tested failed while each
    block's own dials worked), or candidates (``nodes``: ranks in failures no simpler
    finding explains)."""

    kind: str
    nodes: Tuple[int, ...]
    sides: Tuple[Tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Verdict:
    """``findings``: [] when nothing failed; ``alone``: exactly one finding that is not
    ``candidates``; ``candidates``: every rank any finding names, sorted."""

    findings: Tuple[Finding, ...]

    @property
    def alone(self) -> Optional[Finding]:
        if len(self.findings) == 1 and self.findings[0].kind != "candidates":
            return self.findings[0]
        return None

    @property
    def candidates(self) -> Tuple[int, ...]:
        out: Set[int] = set()
        for f in self.findings:
            out.update(f.nodes)
            for side in f.sides:
                out.update(side)
        return tuple(sorted(out))


def verdict(world: int, rounds: Sequence[Sequence[Pair]], failed: Iterable[Pair],
            size: Optional[int] = None) -> Verdict:
    """Name the culprits from every round's pairs and the failed ones.

    A node: all its dials failed, at least two, one of them with a rank that has a
    working dial (the known-good confirmation). The failures left are grouped into
    connected blocks (a graph whose edges are the failed pairs): a block with one failed
    pair is that pair; a block whose failures form every tested pair between two sides,
    at least two failures, with each rank reaching some peer, is a link between the
    sides; anything else stays candidates."""
    fails = {_pair(a, b) for a, b in failed}
    if not fails:
        return Verdict(())
    tested = {_pair(a, b) for rnd in rounds for a, b in rnd}
    by_rank: Dict[int, List[Pair]] = {}
    for p in tested:
        for x in p:
            by_rank.setdefault(x, []).append(p)
    reaching = {x for p in tested - fails for x in p}
    findings: List[Finding] = []
    dead: Set[int] = set()
    for x in sorted({x for p in fails for x in p}):
        mine = by_rank.get(x, [])
        if (len(mine) >= 2 and all(p in fails for p in mine)
                and any((p[0] if p[1] == x else p[1]) in reaching for p in mine)):
            dead.add(x)
            findings.append(Finding("node", (x,)))
    rest = {p for p in fails if p[0] not in dead and p[1] not in dead}
    s = len(groups_of(world, size)[0])
    for block in _blocks(rest, s):
        findings.append(_explain_block(block, fails, by_rank, s))
    return Verdict(tuple(findings))


def _blocks(pairs: Set[Pair], s: int) -> List[Set[Pair]]:
    """The failed pairs split into blocks: joined when they share a rank, or when they
    join the same two groups of ``s`` ranks (a link's dials between two groups are
    disjoint pairs), or link groups already joined; in order of their lowest rank."""
    parent: Dict[int, int] = {}

    def root(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[root(a)] = root(b)
        if a // s != b // s:  # group nodes: -1 - group index
            parent[root(-1 - a // s)] = root(a)
            parent[root(-1 - b // s)] = root(b)
    out: Dict[int, Set[Pair]] = {}
    for p in pairs:
        out.setdefault(root(p[0]), set()).add(p)
    return [out[k] for k in sorted(out, key=lambda k: min(min(p) for p in out[k]))]


def _explain_block(block: Set[Pair], fails: Set[Pair],
                   by_rank: Dict[int, List[Pair]], s: int) -> Finding:
    ranks = sorted({x for p in block for x in p})
    reach = all(any(p not in fails for p in by_rank.get(x, [])) for x in ranks)
    if len(block) == 1 and reach:
        return Finding("pair", (ranks[0], ranks[1]))
    sides = _two_sides(ranks, block, s)
    if sides is not None and reach:
        left, right = sides
        both = left | right
        near = {p for x in both for p in by_rank.get(x, []) if p[0] in both and p[1] in both}
        between = [p for p in near if (p[0] in left) != (p[1] in left)]
        inside = [p for p in near if (p[0] in left) == (p[1] in left)]
        if (all(p in fails for p in between) and not any(p in fails for p in inside)
                and min(len(left), len(right)) >= 2):
            return Finding("link", tuple(ranks), (tuple(sorted(left)), tuple(sorted(right))))
    return Finding("candidates", tuple(ranks))


def _two_sides(ranks: List[int], block: Set[Pair], s: int) -> Optional[Tuple[FrozenSet[int], FrozenSet[int]]]:
    """Two sides such that every failed pair of the block joins them: a 2-colouring of
    the groups (of ``s`` ranks) the failures join when every failure crosses groups, of
    the ranks when none does; None when the block mixes both or has an odd cycle."""
    crossing = [a // s != b // s for a, b in block]
    if all(crossing):
        colour = _colour([(a // s, b // s) for a, b in block])
        if colour is None:
            return None
        return (frozenset(x for x in ranks if colour[x // s] == 0),
                frozenset(x for x in ranks if colour[x // s] == 1))
    if any(crossing):
        return None
    colour = _colour(list(block))
    if colour is None:
        return None
    return (frozenset(x for x in ranks if colour[x] == 0), frozenset(x for x in ranks if colour[x] == 1))


def _colour(edges: List[Pair]) -> Optional[Dict[int, int]]:
    """A 2-colouring of the graph (0 or 1 per vertex), None when it has an odd cycle."""
    adj: Dict[int, List[int]] = {}
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    colour: Dict[int, int] = {}
    for start in sorted(adj):
        if start in colour:
            continue
        colour[start] = 0
        todo = [start]
        while todo:
            x = todo.pop()
            for y in adj[x]:
                if y not in colour:
                    colour[y] = 1 - colour[x]
                    todo.append(y)
                elif colour[y] == colour[x]:
                    return None
    return colour
