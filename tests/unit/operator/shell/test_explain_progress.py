"""`explain`'s training progress (:func:`disttrain.shell.explain.progress_section`): each
rank's node, collective, idle seconds, frame and staleness from ``status.progress``, the
stall verdict's facts when Progressing is False; a hand-edited status never breaks it."""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console, Group

from disttrain.shell import explain

STUCK = {
    "phase": "Running",
    "conditions": [{"type": "Progressing", "status": "False", "reason": "RankStuckInPython",
                    "message": "rank 1 (node-b) is in Python at train.py:88 (load_batch) for 70 s while "
                               "rank 0 waits in all_reduce #1533"}],
    "progress": {"seq": 1533, "summary": "#1533 (RankStuckInPython: rank 1)", "since": "2026-11-30T11:58:50Z",
                 "ranks": [1], "nodes": ["node-b"], "rankDetails": [
                     {"rank": 0, "node": "node-a", "where": "collective", "seq": 1533, "op": "all_reduce",
                      "waitingSeq": 1533, "idleSeconds": 70, "stale": False},
                     {"rank": 1, "node": "node-b", "where": "python", "seq": 1532, "idleSeconds": 70,
                      "frame": "train.py:88 (load_batch)", "stale": False},
                     {"rank": 2, "node": "node-c", "where": "collective", "seq": 1533, "op": "all_reduce",
                      "waitingSeq": 1533, "idleSeconds": 95, "stale": True}]}}


def text_of(status, width: int = 200) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(Group(*explain.progress_section(status)))
    return buf.getvalue()


def line_of(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.strip("│┃ ").startswith(start))


@pytest.mark.parametrize("status, want, not_want", [
    (STUCK, ["Training progress #1533 (RankStuckInPython: rank 1)  Progressing=False (RankStuckInPython)",
             "waiting since 2026-11-30T11:58:50Z",
             "Stall verdict: RankStuckInPython; ranks 1; nodes node-b; waiting since 2026-11-30T11:58:50Z",
             "rank 1 (node-b) is in Python at train.py:88 (load_batch)"], []),
    ({**STUCK, "conditions": [{"type": "Progressing", "status": "Unknown", "reason": "RanksWaiting"}]},
     ["Progressing=Unknown (RanksWaiting)"], ["Stall verdict"]),
    ({"conditions": [{"type": "Progressing", "status": "True", "reason": "CollectivesAdvancing"}],
      "progress": {"seq": 12, "summary": "#12"}},
     ["Training progress #12  Progressing=True (CollectivesAdvancing)", "no per-rank detail in the status"],
     ["Stall verdict", "Ranks (as"]),
    ({"phase": "Running"}, [], ["Training progress"]),
])
def test_progress_section(status, want, not_want):
    out = text_of(status)
    for w in want:
        assert w in out
    for w in not_want:
        assert w not in out


def test_each_rank_row_says_node_collective_idle_frame_and_staleness():
    out = text_of(STUCK)
    cells = [c.strip() for c in line_of(out, "0 ").split("│")[1:-1]]
    assert cells == ["0", "node-a", "collective", "1533", "all_reduce #1533", "70", "-", ""]
    culprit = line_of(out, "!1")
    assert "node-b" in culprit and "python" in culprit and "train.py:88 (load_batch)" in culprit
    assert "stale" in line_of(out, "2 ") and "95" in line_of(out, "2 ")


def test_render_shows_the_progress_of_a_job():
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(Group(*explain.render({"status": STUCK})))
    assert "Stall verdict: RankStuckInPython" in out.getvalue() and "train.py:88 (load_batch)" in out.getvalue()


@pytest.mark.parametrize("progress", [
    "garbage", [], {"rankDetails": "x"}, {"rankDetails": [None, 3, "r", {"rank": "one", "seq": True}]},
    {"ranks": "1", "nodes": 5, "since": {"a": 1}, "rankDetails": [{"rank": 1, "node": "[bold]x" * 100}]},
    {"rankDetails": [{"rank": r} for r in range(500)]},
])
def test_a_hand_edited_progress_is_shown_bounded(progress):
    status = {"conditions": [{"type": "Progressing", "status": "False"}], "progress": progress}
    out = text_of(status)
    assert len(out.splitlines()) <= 80 and max(map(len, out.splitlines()), default=0) <= 200


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
                    max_leaves=30)
ROW = st.fixed_dictionaries({}, optional={k: JSON for k in (
    "rank", "node", "where", "seq", "op", "waitingSeq", "idleSeconds", "frame", "stale")})
PROGRESS = st.one_of(JSON, st.fixed_dictionaries({}, optional={
    "seq": JSON, "summary": JSON, "since": JSON, "ranks": JSON, "nodes": JSON,
    "rankDetails": st.one_of(JSON, st.lists(st.one_of(ROW, JSON), max_size=80))}))
CONDITIONS = st.one_of(JSON, st.lists(st.one_of(JSON, st.fixed_dictionaries(
    {"type": st.just("Progressing")}, optional={"status": JSON, "reason": JSON, "message": JSON})), max_size=3))


@settings(max_examples=150, deadline=None)
@given(status=st.one_of(JSON, st.fixed_dictionaries({"progress": PROGRESS}, optional={"conditions": CONDITIONS})))
def test_progress_section_never_raises_and_stays_bounded(status):
    out = text_of(status, width=160)
    lines = out.splitlines()
    assert len(lines) <= 2 * explain.MOST_PROGRESS_ROWS + 40
