"""The stall verdict (disttrain.diagnosis.stall): a table per rule, and generated
observations (any ranks, ages, duplicates, world sizes) that must never raise, keep the
message to one line of 400 characters, and name a culprit only where a rule singles it out."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import constants
from disttrain.diagnosis import stalltext
from disttrain.diagnosis.stall import RULES, judge, nodes_to_avoid
from disttrain.diagnosis.stallfacts import ADVANCING, LinkSilence
from disttrain.diagnosis.stallfacts import RankObservation as O
from disttrain_probe.contract import progress
from disttrain_probe.contract import vocabulary as V

NOW = 10_000.0
T = 300
NODES = "abcdefgh"


def node(r: int, per: int = 1) -> str:
    return f"node-{NODES[(r // per) % 8]}" if r // per < 8 else f"node-{r // per}"


def wait(r: int, age: float = 400, seq: int = 1533, op: str = "all_reduce", per: int = 1, **kw) -> O:
    return O(r, node(r, per), progress.IN_COLLECTIVE, seq=seq, seq_age_s=age, waiting_op=op,
             waiting_seq=seq, heard_age_s=kw.pop("heard", 1.0), **kw)


def python(r: int, age: float = 400, frame: str = "train.py:88 (load_batch)", **kw) -> O:
    return O(r, node(r), kw.pop("where", progress.IN_PYTHON), seq=1532, seq_age_s=age, frame=frame,
             heard_age_s=kw.pop("heard", 1.0), **kw)


def test_the_rules_are_named_once_and_in_order():
    names = [r.name for r in RULES]
    assert names == ["nothing_heard", "all_stale", "advancing", "in_python", "unresponsive", "cut_off", "mismatched",
                     "collective_stalled", "not_attributed"]


def test_collectives_advancing_is_true_and_acts_on_nothing():
    v = judge([wait(r, age=2) for r in range(8)], 8, T, NOW)
    assert (v.status, v.reason, v.rule, v.act, v.ranks) == (constants.TRUE, V.COLLECTIVES_ADVANCING,
                                                             "advancing", False, ())
    assert v.seq == 1533 and "#1533" in v.message


def test_a_rank_in_python_below_the_timeout_is_a_wait_naming_who_waits_for_whom():
    obs = [python(0, age=45, frame="ckpt.py:12 (save)")] + [wait(r, age=45) for r in range(1, 8)]
    v = judge(obs, 8, T, NOW)
    assert (v.status, v.reason, v.act) == (constants.UNKNOWN, V.RANKS_WAITING, False)
    assert v.message == ("rank 0 (node-a) is in Python at ckpt.py:12 (save) for 45 s while ranks 1-7 wait "
                         "in all_reduce #1533 (a wait, not a fault, until runPolicy.stallTimeoutSeconds 300 s)")
    assert v.ranks == (0,) and v.since == NOW - 45


def test_a_rank_in_python_at_the_timeout_is_stuck_and_acts():
    obs = [python(3, age=300)] + [wait(r, age=300) for r in range(8) if r != 3]
    v = judge(obs, 8, T, NOW)
    assert (v.status, v.reason, v.act) == (constants.FALSE, V.RANK_STUCK_IN_PYTHON, True)
    assert v.message.startswith("rank 3 (node-d) is in Python at train.py:88 (load_batch) for 300 s while "
                                "ranks 0-2, 4-7 wait in all_reduce #1533; see why with py-spy")
    assert (v.ranks, v.nodes) == ((3,), ("node-d",))


def test_a_rank_that_never_joined_the_process_group_holds_the_others_too():
    obs = [python(5, where=progress.NOT_STARTED, frame="data.py:9 (download)")] + [
        wait(r) for r in range(8) if r != 5]
    v = judge(obs, 8, T, NOW)
    assert (v.reason, v.ranks) == (V.RANK_STUCK_IN_PYTHON, (5,))
    assert "has not joined the process group at data.py:9 (download)" in v.message


def test_every_rank_in_python_past_the_timeout_is_stuck_there():
    v = judge([python(r, age=500, frame="eval.py:3 (evaluate)") for r in range(4)], 4, T, NOW)
    assert (v.status, v.reason, v.ranks) == (constants.FALSE, V.RANK_STUCK_IN_PYTHON, (0, 1, 2, 3))


def test_every_rank_in_python_within_the_timeout_is_computing():
    v = judge([python(r, age=100) for r in range(4)], 4, T, NOW)
    assert v.status == constants.TRUE


def test_a_stale_record_while_the_others_wait_is_an_unresponsive_rank():
    obs = [wait(r) for r in range(8) if r != 2] + [wait(2, heard=90)]
    v = judge(obs, 8, T, NOW)
    assert (v.status, v.reason, v.ranks, v.nodes) == (constants.FALSE, V.RANK_UNRESPONSIVE, (2,), ("node-c",))
    assert "rank 2 (node-c) stopped answering 90 s ago: its process is frozen or its node is gone" in v.message


def test_a_whole_node_gone_is_named_once_with_its_ranks():
    obs = [wait(r, per=8) for r in range(64) if r // 8 != 3] + [wait(r, per=8, heard=120) for r in range(24, 32)]
    v = judge(obs, 64, T, NOW)
    assert (v.reason, v.nodes) == (V.RANK_UNRESPONSIVE, ("node-d",))
    assert v.message.startswith("ranks 24-31 (node-d) stopped answering 120 s ago")


def test_every_rank_in_one_collective_without_evidence_blames_no_node():
    v = judge([wait(r) for r in range(8)], 8, T, NOW)
    assert (v.status, v.reason, v.ranks, v.nodes) == (constants.FALSE, V.COLLECTIVE_STALLED, (), ())
    assert "nothing yet says which" in v.message and "decide: ip -s link" in v.message


def test_every_rank_in_one_collective_with_a_silent_link_names_the_link():
    links = [("node-a", "node-c", "eth1", "has carried nothing since 12:03:07")]
    v = judge([wait(r) for r in range(8)], 8, T, NOW, links)
    assert v.message.startswith("every rank waits in all_reduce #1533 for 400 s: node-a <-> node-c on eth1 "
                                "has carried nothing since 12:03:07")
    assert (v.ranks, v.nodes) == ((), ("node-a", "node-c"))


def test_silent_links_that_share_one_node_name_that_node():
    links = [LinkSilence("node-a", "node-c", "eth1", "has carried nothing since 12:03:07"),
             LinkSilence("node-b", "node-c", "eth1", "has carried nothing since 12:03:08")]
    v = judge([wait(r) for r in range(8)], 8, T, NOW, links)
    assert v.nodes == ("node-c",)


def test_a_silent_link_of_other_nodes_is_not_blamed():
    links = [("node-x", "node-y", "eth1", "has carried nothing since 12:03:07")]
    v = judge([wait(r) for r in range(8)], 8, T, NOW, links)
    assert v.nodes == () and "node-x" not in v.message


def test_a_rank_never_heard_while_the_rest_wait_is_a_candidate_not_a_culprit():
    v = judge([wait(r) for r in range(7)], 8, T, NOW)
    assert (v.status, v.reason, v.ranks) == (constants.FALSE, V.STALL_NOT_ATTRIBUTED, ())
    assert "rank 7" in v.message


def test_ranks_in_different_collectives_name_the_minority():
    obs = [wait(r) for r in range(7)] + [wait(7, op="all_gather")]
    v = judge(obs, 8, T, NOW)
    assert (v.status, v.reason, v.ranks) == (constants.FALSE, V.COLLECTIVES_MISMATCHED, (7,))
    even = [wait(r) for r in range(4)] + [wait(r, op="all_gather") for r in range(4, 8)]
    v = judge(even, 8, T, NOW)
    assert (v.reason, v.ranks) == (V.COLLECTIVES_MISMATCHED, ()) and v.candidates


def test_a_straggler_is_named_only_when_the_shares_single_it_out():
    obs = [wait(r, age=1, wait_share=0.4) for r in range(7)] + [python(7, age=1, wait_share=0.02)]
    v = judge(obs, 8, T, NOW)
    assert (v.status, v.reason, v.ranks, v.nodes) == (constants.TRUE, V.STRAGGLER, (7,), ("node-h",))
    spread = [wait(r, age=1, wait_share=0.05 * r) for r in range(8)]
    assert judge(spread, 8, T, NOW).reason == V.COLLECTIVES_ADVANCING
    idle = [wait(r, age=1, wait_share=0.05) for r in range(7)] + [python(7, age=1, wait_share=0.0)]
    assert judge(idle, 8, T, NOW).reason == V.COLLECTIVES_ADVANCING  # nobody waits much


def test_nothing_heard_and_all_silent_never_act():
    v = judge([], 8, T, NOW)
    assert (v.status, v.reason, v.act) == (constants.UNKNOWN, V.PROGRESS_NOT_REPORTED, False)
    v = judge([wait(r, heard=1000) for r in range(8)], 8, T, NOW)
    assert (v.status, v.reason, v.act) == (constants.UNKNOWN, V.PROGRESS_NOT_REPORTED, False)


def test_at_4096_ranks_the_message_keeps_its_cause_and_fix():
    obs = [wait(r, per=8) for r in range(4096) if r % 97] + [python(r) for r in range(0, 4096, 97)]
    v = judge(obs, 4096, T, NOW)
    assert v.reason == V.RANK_STUCK_IN_PYTHON and len(v.message) <= 400
    assert "(+" in v.message and "stallTimeoutSeconds" in v.message
    assert v.ranks == tuple(range(0, 4096, 97))


@pytest.mark.parametrize("ranks, text", [
    ([0, 1, 2, 4, 5, 6, 7], "0-2, 4-7"), ([3], "3"), (list(range(0, 40, 2)), "0, 2, 4, 6, 8, 10 (+14 more)"),
])
def test_rank_ranges_are_compact(ranks, text):
    assert stalltext.ranges(ranks) == text


def test_duplicates_keep_the_most_recently_heard_and_foreign_ranks_are_left_out():
    obs = [wait(r) for r in range(4)] + [python(2, heard=0.5), wait(9), wait(-1)]
    v = judge(obs, 4, T, NOW)
    assert (v.reason, v.ranks) == (V.RANK_STUCK_IN_PYTHON, (2,))


ages = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**12))
text = st.one_of(st.none(), st.text(max_size=300))
observation = st.builds(
    O, rank=st.integers(-3, 40), node=st.text(max_size=80),
    where=st.sampled_from(progress.WHERES + (ADVANCING, "?")), seq=st.one_of(st.none(), st.integers(-5, 10**9)),
    seq_age_s=ages, waiting_op=text, waiting_seq=st.one_of(st.none(), st.integers(-5, 10**9)), frame=text,
    heard_age_s=ages, waiting_age_s=ages, wait_share=st.one_of(st.none(), st.floats()))
links = st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["node-a", "node-b", "x"]),
                                                st.sampled_from(["node-c", "y"]), st.text(max_size=20),
                                                st.text(max_size=100)), max_size=4))


@given(obs=st.lists(observation, max_size=40), world=st.integers(-2, 64),
       timeout=st.one_of(st.integers(30, 86400), st.floats(allow_nan=True)), links=links)
def test_any_observations_give_a_bounded_one_line_verdict(obs, world, timeout, links):
    v = judge(obs, world, timeout, NOW, links)
    assert len(v.message) <= 400 and "\n" not in v.message and v.message == v.message.strip()
    assert v.reason in V.REASONS and V.PROGRESSING in V.REASONS[v.reason].conditions
    assert v.act == (v.status == constants.FALSE)
    assert set(v.ranks) <= {o.rank for o in obs}
    fields = v.status_fields()
    assert len(fields["summary"]) <= 80 and len(fields["ranks"]) <= 64 and len(fields["nodes"]) <= 16


def test_the_progress_column_says_the_seq_then_the_reason_and_culprit():
    assert judge([wait(r, age=2) for r in range(4)], 4, T, NOW).summary() == "#1533"
    v = judge([python(r) for r in range(0, 64, 2)] + [wait(r) for r in range(1, 64, 2)], 64, T, NOW)
    assert v.summary() == "#1533 (RankStuckInPython: ranks 0, 2 +30)"
    links = [("node-a", "node-c", "eth1", "has carried nothing since 12:03:07")]
    assert judge([wait(r) for r in range(8)], 8, T, NOW, links).summary() == (
        "#1533 (CollectiveStalled: node-a, node-c)")
    assert judge([], 2, T, NOW).status_fields() == {
        "seq": None, "summary": "- (ProgressNotReported)", "since": None, "ranks": [], "nodes": []}


@given(obs=st.lists(observation, min_size=1, max_size=40), world=st.integers(1, 48))
def test_progressing_is_never_true_when_every_rank_is_stale_beyond_the_timeout(obs, world):
    old = [O(o.rank, o.node, o.where, o.seq, T + len(o.node), o.waiting_op, o.waiting_seq,
             o.frame, o.heard_age_s, o.waiting_age_s, o.wait_share) for o in obs]
    assert judge(old, world, T, NOW).status != constants.TRUE


@given(world=st.integers(2, 64), data=st.data())
def test_stuck_in_python_names_exactly_the_ranks_in_python_when_all_others_wait(world, data):
    py = data.draw(st.sets(st.integers(0, world - 1), min_size=1, max_size=world - 1))
    age = data.draw(st.floats(31, 10**6))
    obs = [python(r, age=age) if r in py else wait(r, age=age) for r in range(world)]
    v = judge(obs, world, T, NOW)
    assert v.reason == (V.RANK_STUCK_IN_PYTHON if age >= T else V.RANKS_WAITING)
    assert v.ranks == tuple(sorted(py))


def test_a_record_becomes_an_observation_naming_the_users_frame():
    from disttrain.diagnosis.stallfacts import observation

    rec = progress.RankProgress(
        rank=3, local_rank=0, world_size=8, pid=7, written_at=NOW - 2, where=progress.IN_PYTHON, seq=1532,
        seq_advanced_at=NOW - 300, stack=(
            progress.Frame("/usr/lib/python3.11/threading.py", 320, "wait"),
            progress.Frame("/usr/local/lib/python3.11/site-packages/torch/utils/data/dataloader.py", 1, "next"),
            progress.Frame("/workspace/train.py", 88, "load_batch")))
    o = observation(rec, "node-c", NOW)
    assert (o.rank, o.node, o.where, o.seq, o.seq_age_s, o.heard_age_s, o.frame) == (
        3, "node-c", progress.IN_PYTHON, 1532, 300, 2, "train.py:88 (load_batch)")
    waiting = progress.RankProgress(rank=1, local_rank=1, world_size=8, pid=8, written_at=0.0,
                                    where=progress.IN_COLLECTIVE, seq=1533, seq_advanced_at=NOW - 300,
                                    waiting=progress.Collective("all_reduce", 1533, "started", NOW - 300))
    o = observation(waiting, "node-a", NOW, heard_at=NOW - 1)
    assert (o.waiting_op, o.waiting_seq, o.waiting_age_s, o.heard_age_s, o.frame) == (
        "all_reduce", 1533, 300, 1, None)
    assert judge([observation(rec, "node-c", NOW), o], 8, T, NOW).ranks == (3,)


@given(world=st.integers(2, 64), data=st.data())
def test_unresponsive_names_exactly_the_silent_ranks_when_the_others_wait(world, data):
    silent = data.draw(st.sets(st.integers(0, world - 1), min_size=1, max_size=world - 1))
    heard = data.draw(st.floats(31, 10**6))
    obs = [wait(r, heard=heard if r in silent else 1.0) for r in range(world)]
    v = judge(obs, world, T, NOW)
    assert (v.reason, v.ranks) == (V.RANK_UNRESPONSIVE, tuple(sorted(silent)))


@given(world=st.integers(1, 16), links=links)
def test_a_stalled_collective_blames_only_nodes_the_link_evidence_names(world, links):
    v = judge([wait(r) for r in range(world)], world, T, NOW, links)
    named = {n for link in links or () for n in link[:2]}
    assert v.reason == V.COLLECTIVE_STALLED and v.ranks == () and set(v.nodes) <= named
    assert v.nodes or "nothing yet says which" in v.message


def test_ranks_of_a_ready_sidecar_advance_and_are_never_culprits():
    ready = [O(r, node(r), ADVANCING, seq_age_s=3, heard_age_s=3) for r in range(4)]
    v = judge(ready, 4, T, NOW)
    assert (v.status, v.reason) == (constants.TRUE, V.COLLECTIVES_ADVANCING)
    obs = ready + [python(4)] + [wait(r) for r in range(5, 8)]
    v = judge(obs, 8, T, NOW)
    assert (v.reason, v.ranks) == (V.RANK_STUCK_IN_PYTHON, (4,))
    v = judge(ready + [wait(r) for r in range(4, 8)], 8, T, NOW)
    assert v.status == constants.FALSE and v.ranks == ()


@pytest.mark.parametrize("world,silent", [(2, 1), (2, 0), (4, 2), (6, 5), (8, 0)])
def test_a_rank_frozen_before_its_process_group_is_unresponsive(world, silent):
    """Found on the real kubelets: rank 1 frozen (SIGSTOP) while the ranks were still in
    init_process_group left Progressing at "no rank has created its process group yet" for
    ever. A rank whose records stopped while the others still write is unresponsive, process
    group or not; the others are not in Python, they wait for it."""
    obs = [O(r, node(r), progress.NOT_STARTED, seq_age_s=80, frame="distributed_c10d.py:1 (init_process_group)",
             heard_age_s=77.0 if r == silent else 1.0) for r in range(world)]
    v = judge(obs, world, 30, NOW)
    assert (v.status, v.reason, v.act, v.ranks, v.nodes) == (
        constants.FALSE, V.RANK_UNRESPONSIVE, True, (silent,), (node(silent),))
    # every rank still writing: only "not reported" yet
    alike = [O(r, node(r), progress.NOT_STARTED, seq_age_s=80, heard_age_s=1.0) for r in range(world)]
    assert judge(alike, world, 30, NOW).reason == V.PROGRESS_NOT_REPORTED


def test_rank_details_keep_the_culprits_and_the_ranks_not_advancing_first_in_rank_order():
    from disttrain.diagnosis import stallfacts

    obs = [O(r, f"n{r}", ADVANCING, seq_age_s=0.0, heard_age_s=0.0) for r in range(100)]
    obs[70] = O(70, "n70", progress.IN_COLLECTIVE, seq=9, seq_age_s=40.0, waiting_op="all_reduce",
                waiting_seq=9, heard_age_s=1.0)
    obs[80] = O(80, "n80", progress.IN_PYTHON, seq=8, seq_age_s=99.5, frame="x.py:1 (f)", heard_age_s=45.0)
    f = stallfacts.facts(obs + [O(300, "out", ADVANCING)], 100, T, NOW)
    rows = stallfacts.rank_details(f, culprits=(99,), most=64)
    assert len(rows) == 64 and [r["rank"] for r in rows] == sorted(r["rank"] for r in rows)
    by = {r["rank"]: r for r in rows}
    assert {70, 80, 99} <= set(by) and 63 not in by
    assert by[80] == {"rank": 80, "node": "n80", "where": "python", "seq": 8, "idleSeconds": 99,
                      "frame": "x.py:1 (f)", "stale": True}
    assert by[70]["op"] == "all_reduce" and by[70]["waitingSeq"] == 9 and by[70]["stale"] is False
    assert stallfacts.rank_details(f, most=0) == []


def test_a_link_that_stopped_mid_collective_is_named_though_the_ranks_are_one_collective_apart():
    """The ranks that got their data went on to the next all_reduce; the link's losses, not a
    mismatch, explain it."""
    obs = [wait(0, seq=1534), wait(1, seq=1533), wait(2, seq=1534)]
    links = [("node-a", "node-b", "eth1", "loses packets: 10 B unacked after 5 TCP retransmits")]
    v = judge(obs, 3, T, NOW, links)
    assert (v.reason, v.nodes) == (V.COLLECTIVE_STALLED, ("node-a", "node-b")), v
    assert v.message.startswith("every rank waits in all_reduce #1533 or #1534 for 400 s: node-a <-> node-b")


@pytest.mark.parametrize("world", [2, 3, 8])
def test_ranks_one_collective_apart_without_link_evidence_name_no_rank_and_say_both_causes(world):
    """The same op one apart fits a link or peer that stopped mid-collective as well as a
    skipped collective: no rank is named on the split alone, even when one rank is alone."""
    v = judge([wait(r, seq=1534 if r else 1533) for r in range(world)], world, T, NOW)
    assert (v.reason, v.ranks, v.nodes) == (V.COLLECTIVE_STALLED, (), ()), v
    assert "all_reduce #1533 or #1534" in v.message and "a rank skipped a collective" in v.message
    assert "TORCH_DISTRIBUTED_DEBUG=DETAIL" in v.message and "nothing yet says which" in v.message
    assert "…" not in v.message and len(v.message) <= 400


@pytest.mark.parametrize("obs, links", [
    ([wait(0, seq=1536), wait(1, seq=1533)], []),  # 3 apart
    ([wait(0, seq=1536), wait(1, seq=1533)], [("node-a", "node-b", "eth1", "loses packets")]),  # 3 apart
    ([wait(0, seq=1533, op="broadcast"), wait(1, seq=1533)], [("node-a", "node-b", "eth1", "loses packets")]),
])
def test_ranks_in_different_collectives_without_a_link_that_explains_it_are_mismatched(obs, links):
    assert judge(obs, 2, T, NOW, links).reason == V.COLLECTIVES_MISMATCHED


def adv(r: int) -> O:
    """Rank ``r`` as its Ready sidecar last said: advancing."""
    return O(r, node(r), ADVANCING, seq_age_s=0.0, heard_age_s=0.0)


@pytest.mark.parametrize("world, cut", [(2, 1), (3, 1), (4, 0), (8, 5)])
def test_a_rank_last_said_advancing_whose_node_the_waiting_ranks_lose_packets_to_is_cut_off(world, cut):
    """The node of rank ``cut`` is gone: its sidecar's last word (Ready) stands, the others
    wait, and their connections to it lose packets (from one peer or several)."""
    obs = [adv(r) if r == cut else wait(r) for r in range(world)]
    links = [(node(r), node(cut), "eth1", "loses packets: 10 B unacked after 5 TCP retransmits")
             for r in range(world) if r != cut][:2]
    v = judge(obs, world, T, NOW, links)
    assert (v.reason, v.ranks, v.nodes) == (V.RANK_UNRESPONSIVE, (cut,), (node(cut),)), v
    assert v.message.startswith(f"rank {cut} ({node(cut)}) is unreachable (")
    assert nodes_to_avoid(v) == (node(cut),)


@pytest.mark.parametrize("world, cut", [(2, 0), (2, 1), (3, 0), (5, 3)])
def test_a_rank_its_sidecar_never_recorded_whose_node_the_others_lose_packets_to_is_cut_off(world, cut):
    """The node of rank ``cut`` was lost before its sidecar first passed: its last word is
    "no records" (where unknown, node known), the others wait, and their connections to it
    lose packets. Found on the real kubelets with rank 0's node (the verdict said only
    "none yet from rank 0")."""
    obs = [O(r, node(r), "unknown", heard_age_s=40.0) if r == cut else wait(r) for r in range(world)]
    links = [(node(r), node(cut), "eth1", "loses packets: 10 B unacked after 5 TCP retransmits")
             for r in range(world) if r != cut][:1]
    v = judge(obs, world, T, NOW, links)
    assert (v.reason, v.ranks, v.nodes) == (V.RANK_UNRESPONSIVE, (cut,), (node(cut),)), v
    assert not judge(obs, world, T, NOW, []).ranks == (cut,)  # without the lost packets: not named


@pytest.mark.parametrize("links", [[], [("node-a", "node-c", "eth1", "loses packets")], [("node-x", "node-b", "e", "l")]])
def test_a_rank_last_said_advancing_without_lost_packets_to_its_node_is_not_blamed(links):
    v = judge([wait(0), adv(1), wait(2)], 3, T, NOW, links)
    assert v.reason != V.RANK_UNRESPONSIVE and 1 not in v.ranks, v
