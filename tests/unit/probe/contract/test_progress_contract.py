"""The progress record's contract: what the recorder dumps the operator parses back, and any
other text is refused with a ValueError (never another exception)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.contract import progress as p

finite = st.floats(min_value=0, max_value=4e9, allow_nan=False)
text = st.text(max_size=p.MAX_TEXT)
frames = st.builds(p.Frame, file=text, line=st.integers(0, 10**6), func=text)
colls = st.builds(p.Collective, op=text, seq=st.integers(0, 10**9),
                  state=st.sampled_from(p.COLLECTIVE_STATES), since=finite)
records = st.builds(p.RankProgress, rank=st.integers(0, 10**5), local_rank=st.integers(0, 64),
                    world_size=st.integers(1, 10**5), pid=st.integers(1, 2**22), written_at=finite,
                    where=st.sampled_from(p.WHERES), seq=st.none() | st.integers(0, 10**9),
                    seq_advanced_at=finite, waiting=st.none() | colls,
                    stack=st.lists(frames, max_size=3).map(tuple))


@given(records)
def test_a_dumped_record_parses_back_the_same(r):
    assert p.parse(r.dump()) == r


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4)))
def test_any_json_is_parsed_or_refused_with_value_error(doc):
    try:
        r = p.parse(json.dumps(doc))
    except ValueError:
        return
    assert isinstance(r, p.RankProgress)


@pytest.mark.parametrize("change, word", [
    ({"v": 2}, "version"), ({"where": "asleep"}, "where"), ({"rank": None}, "rank"),
    ({"rank": "3"}, "rank"), ({"written_at": "soon"}, "written_at"),
    ({"waiting": {"op": "all_reduce", "seq": 3, "state": "lost", "since": 1}}, "waiting"),
])
def test_a_bad_field_is_refused_naming_it(change, word):
    d = json.loads(p.RankProgress(rank=0, local_rank=0, world_size=2, pid=1, written_at=1.0,
                                  where=p.IN_PYTHON).dump())
    d.update(change)
    with pytest.raises(ValueError, match=word):
        p.parse(json.dumps(d))


def test_a_record_over_the_cap_is_refused():
    with pytest.raises(ValueError, match="bytes"):
        p.parse(" " * (p.MAX_RECORD_BYTES + 1))


# --- the readiness probe's one-line summary -------------------------------------------------

names = st.text(max_size=300)
stacks = st.lists(st.builds(p.Frame, file=names, line=st.integers(0, 10**6), func=names), max_size=4).map(tuple)
readable = st.builds(p.RankProgress, rank=st.integers(0, 10**5), local_rank=st.integers(0, 64),
                     world_size=st.integers(1, 10**5), pid=st.integers(1, 2**22), written_at=finite,
                     where=st.sampled_from(p.WHERES), seq=st.none() | st.integers(0, 10**9),
                     seq_advanced_at=finite,
                     waiting=st.none() | st.builds(p.Collective, op=names, seq=st.integers(0, 10**9),
                                                   state=st.sampled_from(p.COLLECTIVE_STATES), since=finite),
                     stack=stacks)
unreadable = st.builds(p.Unreadable, file=names, error=names)
pods = st.lists(readable | unreadable, max_size=12)


@given(pods, finite)
def test_a_summary_fits_the_event_and_parses_back_what_it_says(items, now):
    line = p.summarize(items, now)
    assert len(line.encode()) <= p.MAX_SUMMARY_BYTES
    assert "\n" not in line
    parsed = p.parse_summary(line)
    want = [p.summary_of(r, now) for r in sorted(
        items, key=lambda r: (1, 0, r.file) if isinstance(r, p.Unreadable) else (0, r.rank, ""))]
    assert len(parsed) <= len(want)
    if not line.split("; ")[-1].endswith(" more"):
        assert len(parsed) == len(want)
    for got, full in zip(parsed, want):
        # the cap may drop ``at`` and ``op``, never anything else
        assert got == full or got in (p.RankSummary(**{**full.__dict__, "at": ""}),
                                      p.RankSummary(**{**full.__dict__, "at": "", "op": ""}))


def _rank(rank, where, seq, advanced, written, stack=(), op=None):
    waiting = p.Collective(op=op, seq=seq, state="scheduled", since=advanced) if op else None
    return p.RankProgress(rank=rank, local_rank=rank, world_size=2, pid=10 + rank, written_at=written,
                          where=where, seq=seq, seq_advanced_at=advanced, waiting=waiting, stack=stack)


def test_the_summary_names_the_sleeping_rank_the_waiting_one_and_a_stale_one():
    torch_frame = p.Frame("/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
                          2931, "all_reduce")
    user = p.Frame("/workspace/app/train.py", 12, "step")
    items = [_rank(1, p.IN_PYTHON, 965, 100.0, 120.0, (p.Frame("/workspace/app/train.py", 30, "load"),)),
             _rank(0, p.IN_COLLECTIVE, 966, 101.0, 112.0, (torch_frame, user), op="all_reduce"),
             p.Unreadable("rank-7.json", "not JSON: Expecting value")]
    line = p.summarize(items, now=120.5)
    assert line == ("progress: r0 collective seq=966 idle=19s op=all_reduce at=app/train.py:12(step) stale; "
                    "r1 python seq=965 idle=20s at=app/train.py:30(load); "
                    "unreadable file=rank-7.json error=not%20JSON:%20Expecting%20value")
    assert [s.rank for s in p.parse_summary(line)] == [0, 1, None]


def test_a_pod_with_many_ranks_keeps_under_the_cap_dropping_frames_first():
    long = p.Frame("/workspace/" + "d" * 150 + "/train.py", 12, "f" * 150)
    items = [_rank(r, p.IN_COLLECTIVE if r else p.IN_PYTHON, 5, 0.0, 10.0, (long,), op="all_reduce")
             for r in range(8)]
    line = p.summarize(items, now=10.0)
    assert len(line.encode()) <= p.MAX_SUMMARY_BYTES
    parsed = p.parse_summary(line)
    assert [s.rank for s in parsed] == list(range(8))
    assert parsed[0].at and not parsed[1].at  # the python rank's frame is the last to go
    many = [_rank(r, p.IN_PYTHON, 5, 0.0, 10.0, (long,)) for r in range(64)]
    line = p.summarize(many, now=10.0)
    assert len(line.encode()) <= p.MAX_SUMMARY_BYTES and line.endswith(" more")
    assert [s.rank for s in p.parse_summary(line)] == list(range(len(p.parse_summary(line))))


@pytest.mark.parametrize("line", [
    "", "progress:", "progress r0 python seq=1 idle=1s", "progress: r0 asleep seq=1 idle=1s",
    "progress: r0 python seq=x idle=1s", "progress: r0 python seq=1", "progress: r0 python seq=1 idle=1s who=me",
    "progress: r0 python seq=1 seq=2 idle=1s", "progress: unreadable file=x", "progress: rx python seq=1 idle=1s",
    "Readiness probe failed: progress: r0 python seq=1 idle=1s", "progress: r0 python seq=1 idle=1s " + "x" * 900,
])
def test_any_other_line_is_refused_with_value_error(line):
    with pytest.raises(ValueError):
        p.parse_summary(line)


@given(st.text(max_size=300))
def test_any_text_is_parsed_or_refused_with_value_error(line):
    try:
        p.parse_summary(p.SUMMARY_PREFIX + " " + line)
    except ValueError:
        pass


@pytest.mark.parametrize("stack, want", [
    ((), ""),
    ((p.Frame("/usr/lib/python3.11/threading.py", 320, "wait"), p.Frame("/srv/job/train.py", 9, "main")),
     "job/train.py:9(main)"),
    ((p.Frame("/opt/venv/lib/python3.10/site-packages/torch/nn/modules/module.py", 1, "_call_impl"),
      p.Frame("/opt/venv/lib/python3.10/site-packages/mylib/model.py", 40, "forward")), "mylib/model.py:40(forward)"),
    ((p.Frame("<frozen importlib._bootstrap>", 1, "_load"),), "<frozen importlib._bootstrap>:1(_load)"),
])
def test_the_user_frame_skips_torch_and_the_standard_library(stack, want):
    assert p.user_frame(stack) == want


# --- the tcp segments: peers the pod's connections lose packets to ---------------------------

addresses = st.ip_addresses().map(str)
tcp_peers = st.lists(st.builds(p.TcpPeer, peer=addresses, sockets=st.integers(1, 10**4),
                               unacked=st.integers(0, 10**12), retrans=st.integers(1, 255)), max_size=8)


@given(pods, finite, tcp_peers)
def test_tcp_segments_go_first_fit_the_event_and_parse_back(items, now, peers):
    line = p.summarize(items, now, peers)
    assert len(line.encode()) <= p.MAX_SUMMARY_BYTES and "\n" not in line
    want = sorted(peers, key=lambda t: (-t.retrans, -t.unacked, t.peer))[:p.MAX_TCP_PEERS]
    assert p.parse_tcp(line) == want
    ranks = p.parse_summary(line)  # the ranks' segments that were kept, none of the tcp ones
    full = [p.summary_of(r, now) for r in sorted(
        items, key=lambda r: (1, 0, r.file) if isinstance(r, p.Unreadable) else (0, r.rank, ""))]
    assert len(ranks) <= len(full)
    for got, whole in zip(ranks, full):  # the cap drops ``at``, then ``op``, then trailing ranks
        assert got in (whole, p.RankSummary(**{**whole.__dict__, "at": ""}),
                       p.RankSummary(**{**whole.__dict__, "at": "", "op": ""}))


def test_a_line_without_tcp_segments_is_the_line_of_the_ranks_alone():
    assert p.summarize([], 1.0, []) == p.summarize([], 1.0) == "progress: no records"
    assert p.parse_tcp(p.summarize([], 1.0)) == []


@pytest.mark.parametrize("seg", ["tcp peer=10.0.0.1 sockets=1 unacked=2", "tcp peer=x;y sockets=1 unacked=2 retrans=3",
                                 "tcp peer=10.0.0.1 sockets=-1 unacked=2 retrans=3",
                                 "tcp peer=10.0.0.1 sockets=1 unacked=2 retrans=3 extra=1"])
def test_a_malformed_tcp_segment_is_refused_with_value_error(seg):
    with pytest.raises(ValueError):
        p.parse_tcp(f"{p.SUMMARY_PREFIX} {seg}")
