"""Wait shares and stragglers in the progress contract: the histogram rule
(``straggler_view``) against an oracle over every rank's share, the record and the summary
line carrying a straggler, and any other text refused with a ValueError."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.contract import progress as p
from disttrain_probe.contract import stragglers

shares = st.floats(min_value=0, max_value=1, allow_nan=False)


def rule(xs: list[float], me: int):
    """The documented rule over the true shares (``me``: an index into ``xs``): (median of
    the others, ranks at most a quarter of it) when rank ``me`` is a straggler, else None."""
    others = sorted(xs[:me] + xs[me + 1:])
    median = others[(len(others) - 1) // 2]  # the lower median
    low = [x for x in xs if x <= median / stragglers.STRAGGLER_FACTOR]
    between = [x for x in xs if median / stragglers.STRAGGLER_FACTOR < x < median / 2]
    if (median < stragglers.STRAGGLER_MIN_SHARE or xs[me] > median / stragglers.STRAGGLER_FACTOR
            or len(low) > max(1, len(xs) // 4) or between):
        return None
    return median, len(low)


def hist_of(buckets: list[int]) -> list[int]:
    h = [0] * stragglers.SHARE_BUCKETS
    for b in buckets:
        h[b] += 1
    return h


@given(st.lists(shares, min_size=2, max_size=40), st.data())
def test_a_rank_the_histogram_names_is_a_straggler_by_the_true_shares(xs, data):
    """Sound whatever the shares are within their 5 % buckets: every view the histogram
    gives holds the rule over the shares themselves, with the same count below."""
    buckets = [stragglers.bucket(x) for x in xs]
    me = data.draw(st.integers(0, len(xs) - 1))
    got = stragglers.straggler_view(hist_of(buckets), buckets[me])
    if got is not None:
        want = rule(xs, me)
        assert want is not None, (xs, me, got)
        assert got.below == want[1] and got.counted == len(xs)
        assert abs(got.median - want[0]) <= 1 / stragglers.SHARE_BUCKETS


@given(st.lists(st.floats(0.5, 1.0), min_size=1, max_size=40), st.floats(0, 1), st.data())
def test_a_rank_clear_of_the_thresholds_by_a_bucket_is_named(victims, frac, data):
    """Complete away from the thresholds: a rank whose share is at least a bucket under a
    quarter of every other rank's (which wait at least half the time) is named."""
    limit = min(victims) / stragglers.STRAGGLER_FACTOR - 1 / stragglers.SHARE_BUCKETS
    xs = list(victims)
    me = data.draw(st.integers(0, len(xs)))
    xs.insert(me, max(0.0, limit) * frac * 0.999)
    h = hist_of([stragglers.bucket(x) for x in xs])
    assert stragglers.straggler_view(h, stragglers.bucket(xs[me])) is not None, xs


@given(st.integers(2, 64), st.integers(0, 63), shares.filter(lambda x: x >= 0.5), shares.filter(lambda x: x < 0.1))
def test_one_slow_rank_among_ranks_that_wait_is_singled_out_whatever_its_rank(n, slow, high, low):
    slow %= n
    buckets = [stragglers.bucket(low if r == slow else high) for r in range(n)]
    h = hist_of(buckets)
    assert stragglers.straggler_view(h, buckets[slow]) is not None
    assert all(stragglers.straggler_view(h, b) is None for r, b in enumerate(buckets) if r != slow)


@pytest.mark.parametrize("xs", [
    [0.9] * 8,  # every rank waits alike: communication-bound, nobody singled out
    [0.05] * 8,  # nobody waits: compute-bound
    [0.02, 0.03, 0.9, 0.9, 0.9],  # two of five: more than a quarter
    [0.02, 0.3, 0.9, 0.9, 0.9],  # a rank between a straggler and the rest: undecided
    [0.02, 0.15],  # the other waits too little
])
def test_no_straggler_where_the_shares_do_not_single_one_out(xs):
    h = hist_of([stragglers.bucket(x) for x in xs])
    assert all(stragglers.straggler_view(h, stragglers.bucket(x)) is None for x in xs)


@given(st.lists(st.integers(-3, 2**22), max_size=25), st.integers(-3, 30))
def test_any_histogram_gives_a_view_or_none(h, mine):
    v = stragglers.straggler_view(h, mine)
    assert v is None or (0 < v.below <= v.counted and v.share <= v.median / stragglers.STRAGGLER_FACTOR)


views = st.builds(stragglers.StragglerView, share=shares, median=shares, counted=st.integers(2, 10**6),
                  below=st.integers(1, 10**6)).filter(lambda v: v.below <= v.counted)


@given(views, shares)
def test_a_record_with_a_share_and_a_straggler_parses_back(v, share):
    r = p.RankProgress(rank=3, local_rank=0, world_size=8, pid=7, written_at=100.0, where=p.IN_PYTHON,
                       seq=4, seq_advanced_at=99.5, share=share, straggler=v)
    assert p.parse(r.dump()) == r


def test_a_record_without_them_is_dumped_as_before():
    r = p.RankProgress(rank=0, local_rank=0, world_size=2, pid=7, written_at=1.0, where=p.IN_PYTHON)
    assert "share" not in r.dump() and "straggler" not in r.dump()


@pytest.mark.parametrize("bad", ['"share":1.5', '"share":true', '"straggler":{"below":0,"counted":3}',
                                 '"straggler":{"below":4,"counted":3}', '"straggler":[]'])
def test_a_record_with_a_bad_share_or_straggler_is_refused_naming_it(bad):
    text = '{"v":1,"rank":0,"where":"python",' + bad + "}"
    with pytest.raises(ValueError, match="share|straggler|below"):
        p.parse(text)


def _record(rank, view=None, written_at=100.0):
    return p.RankProgress(rank=rank, local_rank=rank, world_size=64, pid=7, written_at=written_at,
                          where=p.IN_PYTHON, seq=10, seq_advanced_at=99.0, straggler=view,
                          stack=(p.Frame("/work/" + "x" * 150 + ".py", 1, "f" * 100),))


VIEW = stragglers.StragglerView(share=0.025, median=0.875, counted=64, below=1)


def test_the_straggler_leads_the_line_and_survives_any_number_of_ranks():
    records = [_record(r, VIEW if r == 37 else None) for r in range(64)]
    line = p.summarize(records, 100.5, lead=p.straggler_words(records, 100.5))
    assert len(line.encode()) <= p.MAX_SUMMARY_BYTES
    assert line.startswith("progress: straggler r37 share=0.025 median=0.875 counted=64 below=1; ")
    assert p.parse_straggler(line) == [p.StragglerWord(37, VIEW)]
    assert p.parse_summary(line)[0].rank == 0  # the ranks follow, the straggler segment skipped


def test_a_stale_record_says_no_straggler():
    assert p.straggler_words([_record(1, VIEW, written_at=90.0)], 100.0) == []


@pytest.mark.parametrize("seg", ["straggler r1", "straggler r1 share=2 median=0.5 counted=3 below=1",
                                 "straggler r1 share=0.1 median=0.5 counted=3 below=4",
                                 "straggler x share=0.1 median=0.5 counted=3 below=1",
                                 "straggler r1 share=0.1 median=0.5 counted=3 below=1 more=1"])
def test_a_malformed_straggler_segment_is_refused(seg):
    with pytest.raises(ValueError):
        p.parse_straggler(f"progress: {seg}; r1 python seq=1 idle=0s")


@given(st.text(max_size=200))
def test_any_text_parses_or_raises_value_error(text):
    try:
        p.parse_straggler("progress: straggler " + text)
    except ValueError:
        pass
