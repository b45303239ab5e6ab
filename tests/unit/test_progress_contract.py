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
