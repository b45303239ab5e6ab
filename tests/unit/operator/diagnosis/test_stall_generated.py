"""The stall verdict over generated faults, against an oracle (issue 33: fix the class).

A generator draws a job (2-8 nodes, 1-2 ranks per node), a fault and where it strikes (any
rank, any node, any pair, either end of a link), and the ages at which the operator looks;
the oracle computes from the fault alone what a right verdict holds: its reason, the ranks
and nodes it names (and only those), False once the wait passed the timeout and a wait
before. Faults: ranks stuck in Python, ranks frozen (their records stale), a pair of nodes
partitioned mid-collective (the ranks that got their data one collective ahead), a node
lost (its ranks' last word was Ready; its peers lose packets to it), and a healthy job
whose rank checkpoints under the timeout."""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.api import constants
from disttrain.diagnosis.stall import judge, nodes_to_avoid
from disttrain.diagnosis.stallfacts import ADVANCING, LinkSilence, RankObservation
from disttrain_probe.contract import progress
from disttrain_probe.contract import vocabulary as V

NOW = 100_000.0
TIMEOUT = 120


@dataclass(frozen=True)
class Case:
    nodes: int
    per: int  # ranks per node
    kind: str  # python | frozen | partition | lost | checkpoint
    culprit_nodes: tuple[int, ...]  # node indexes the fault is on (a pair for partition)
    age: float  # how long the others have waited (s)
    seq: int

    @property
    def world(self) -> int:
        return self.nodes * self.per

    def node(self, i: int) -> str:
        return f"node-{'abcdefgh'[i]}"

    def ranks_on(self, i: int) -> list[int]:
        return list(range(i * self.per, (i + 1) * self.per))


@st.composite
def cases(draw) -> Case:
    nodes = draw(st.integers(2, 8))
    per = draw(st.integers(1, 2))
    kind = draw(st.sampled_from(["python", "frozen", "partition", "lost", "checkpoint"]))
    if kind == "partition":
        pair = draw(st.lists(st.integers(0, nodes - 1), min_size=2, max_size=2, unique=True))
        culprits = tuple(pair)
    else:
        culprits = (draw(st.integers(0, nodes - 1)),)
    late = kind != "checkpoint" and draw(st.booleans())
    age = draw(st.floats(TIMEOUT + 1, TIMEOUT * 3)) if late else draw(st.floats(35, TIMEOUT - 5))
    return Case(nodes, per, kind, culprits, age, draw(st.integers(1, 10**6)))


def wait(c: Case, r: int, seq: int) -> RankObservation:
    return RankObservation(r, c.node(r // c.per), progress.IN_COLLECTIVE, seq=seq, seq_age_s=c.age,
                           waiting_op="all_reduce", waiting_seq=seq, heard_age_s=1.0)


def observe(c: Case, ahead: frozenset[int]) -> tuple[list[RankObservation], list[LinkSilence]]:
    """What the operator sees of ``c``; ``ahead``: the waiting ranks already in the next
    collective (partition)."""
    obs, links = [], []
    bad = {r for i in c.culprit_nodes for r in c.ranks_on(i)}
    for r in range(c.world):
        n = c.node(r // c.per)
        if r in bad and c.kind in ("python", "checkpoint"):
            obs.append(RankObservation(r, n, progress.IN_PYTHON, seq=c.seq - 1, seq_age_s=c.age,
                                       frame="train.py:88 (load_batch)", heard_age_s=1.0))
        elif r in bad and c.kind == "frozen":
            obs.append(RankObservation(r, n, progress.IN_PYTHON, seq=c.seq - 1, seq_age_s=c.age,
                                       heard_age_s=c.age))
        elif r in bad and c.kind == "lost":
            obs.append(RankObservation(r, n, ADVANCING, seq_age_s=0.0, heard_age_s=0.0))
        else:
            obs.append(wait(c, r, c.seq + (1 if r in ahead else 0)))
    evidence = "loses packets: 1448 B unacked after 7 TCP retransmits"
    if c.kind == "partition":
        a, b = sorted(c.culprit_nodes)
        links.append(LinkSilence(c.node(a), c.node(b), "eth1", evidence))
    if c.kind == "lost":
        lost = c.culprit_nodes[0]
        links += [LinkSilence(c.node(i), c.node(lost), "eth1", evidence) for i in range(c.nodes) if i != lost][:3]
    return obs, links


WANT = {"python": V.RANK_STUCK_IN_PYTHON, "frozen": V.RANK_UNRESPONSIVE, "partition": V.COLLECTIVE_STALLED,
        "lost": V.RANK_UNRESPONSIVE}


@settings(max_examples=300)
@given(cases(), st.data())
def test_every_generated_stall_gets_the_verdict_the_oracle_computes(c, data):
    ahead = frozenset()
    if c.kind == "partition":  # a link that stopped mid-collective: some ranks got their data
        ahead = frozenset(data.draw(st.sets(st.integers(0, c.world - 1), max_size=c.world - 1)))
    obs, links = observe(c, ahead)
    v = judge(obs, c.world, TIMEOUT, NOW, links)
    assert len(v.message) <= 400 and "\n" not in v.message
    culprit_nodes = tuple(c.node(i) for i in c.culprit_nodes)
    if c.kind == "checkpoint" or c.age < TIMEOUT:
        assert (v.status, v.reason, v.act) == (constants.UNKNOWN, V.RANKS_WAITING, False), (c, v)
        return
    assert (v.status, v.reason, v.act) == (constants.FALSE, WANT[c.kind], True), (c, v)
    if c.kind == "partition":
        assert v.ranks == () and set(v.nodes) == set(culprit_nodes), (c, v)
        assert f"{min(culprit_nodes)} <-> {max(culprit_nodes)}" in v.message
        assert nodes_to_avoid(v) == ()  # two ends: the evidence does not say which
    else:
        want_ranks = tuple(r for i in c.culprit_nodes for r in c.ranks_on(i))
        assert v.ranks == want_ranks and v.nodes == culprit_nodes, (c, v)
        assert v.message.startswith(f"rank{'s' if len(want_ranks) > 1 else ''} "), v.message
        assert culprit_nodes[0] in v.message
        assert nodes_to_avoid(v) == (culprit_nodes if c.kind in ("frozen", "lost") else ())
    innocent = [c.node(i) for i in range(c.nodes) if c.node(i) not in culprit_nodes]
    fix = v.message.rpartition("check ")[2] if "check " in v.message else ""
    assert not any(n in fix.split(":")[0] for n in innocent), (c, v.message)
