"""Wait shares and stragglers (pure, standard library only): the recorder's and the
operator's one rule.

Each rank measures the share of the last :data:`SHARE_WINDOW_S` its main thread spent
waiting in a collective and adds it, as one of :data:`SHARE_BUCKETS` buckets, to a
per-window histogram in the job's rendezvous store (``disttrain_probe.progress.shares``); a
rank that the histogram singles out (:func:`straggler_view`) records it, and its sidecar
says so in one failed readiness check every :data:`STRAGGLER_REPORT_S` (the pod stays Ready:
the probe's failureThreshold is 2). The operator checks a reported view against the same
thresholds (``disttrain.diagnosis.stall``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

SHARE_WINDOW_S = 30.0  # the window a wait share is measured over (s)
SHARE_MIN_SAMPLES = 20  # samples (one per recorder wake) a share needs
SHARE_BUCKETS = 20  # histogram buckets of 5 %
STRAGGLER_MIN_SHARE = 0.2  # the median rank waits at least this share of the time ...
STRAGGLER_FACTOR = 4.0  # ... and a straggler at most 1/4 of it (every other rank at least 1/2)
STRAGGLER_REPORT_S = 300.0  # a straggler's sidecar says so at most this often (the kubelet's
#                             event spam filter refills one Event per object per 5 minutes)
MAX_COUNTED = 1 << 21  # ranks a histogram may count


@dataclass(frozen=True)
class StragglerView:
    """What a rank's recorder read from the job's share histogram: its own ``share``, the
    median of the other ranks' (bucket middles, 0-1), the ranks ``counted`` in the window and how many
    of them (``below``, this rank among them) wait at most ``median / STRAGGLER_FACTOR``."""
    share: float
    median: float
    counted: int
    below: int


def bucket(share: float) -> int:
    """The histogram bucket (0 .. SHARE_BUCKETS-1) of a share (clipped to 0-1)."""
    return min(SHARE_BUCKETS - 1, max(0, int(min(1.0, max(0.0, share)) * SHARE_BUCKETS)))


def _middle(b: int) -> float:
    return (b + 0.5) / SHARE_BUCKETS


def straggler_view(hist: Sequence[int], mine: int) -> Optional[StragglerView]:
    """The view of the rank in bucket ``mine`` of ``hist`` (counts per bucket, one window, every
    rank counted once, this one included) when it is certainly a straggler, whatever the
    shares are within their 5 % buckets: the median of the other ranks waits at least
    :data:`STRAGGLER_MIN_SHARE`, this rank at most a :data:`STRAGGLER_FACTOR`-th of it, at
    most a quarter of the ranks (one when fewer than 8) are that low, and every other rank
    waits at least half the median. None otherwise: also when a bucket's bounds leave it
    undecided (a rank near a threshold is not named), for a malformed histogram or a bucket
    nobody is in.

    >>> straggler_view([1] + [0] * 16 + [3, 0, 0], 0)
    StragglerView(share=0.025, median=0.875, counted=4, below=1)
    """
    if len(hist) != SHARE_BUCKETS or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in hist):
        return None
    counted = sum(hist)
    if counted < 2 or counted > MAX_COUNTED or not 0 <= mine < SHARE_BUCKETS or hist[mine] == 0:
        return None
    others = [n - (b == mine) for b, n in enumerate(hist)]
    half, seen, m = (counted - 2) // 2, 0, 0
    for b, n in enumerate(others):  # the lower median of the other ranks' buckets
        if seen + n > half:
            m = b
            break
        seen += n
    lo, hi = m / SHARE_BUCKETS, (m + 1) / SHARE_BUCKETS  # the median lies in [lo, hi)
    low = [b for b in range(SHARE_BUCKETS) if hist[b] and (b + 1) / SHARE_BUCKETS <= lo / STRAGGLER_FACTOR]
    high = [b for b in range(SHARE_BUCKETS) if hist[b] and b / SHARE_BUCKETS >= hi / 2]
    if lo < STRAGGLER_MIN_SHARE or mine not in low or len(low) + len(high) < sum(1 for n in hist if n):
        return None
    below = sum(hist[b] for b in low)
    if below > max(1, counted // 4):
        return None
    return StragglerView(share=_middle(mine), median=_middle(m), counted=counted, below=below)


def share_of(v: Any, key: str) -> Optional[float]:
    """A record's share (0-1; None stays None).

    Raises:
        ValueError: not a number from 0 to 1 (the message names ``key``).
    """
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{key} must be a number from 0 to 1, not {v!r:.40}")
    return float(v)


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"straggler counts must be integers, not {v!r:.40}")
    return v


def view_of(v: Any) -> Optional[StragglerView]:
    """A record's ``straggler`` object as a view (None stays None).

    Raises:
        ValueError: not an object, counts out of order, shares out of 0-1.
    """
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ValueError("straggler must be an object")
    counted, below = _count(v.get("counted", 0)), _count(v.get("below", 0))
    if not 0 < below <= counted <= MAX_COUNTED or counted < 2:
        raise ValueError("straggler needs 0 < below <= counted and counted >= 2")
    return StragglerView(share=share_of(v.get("share"), "straggler.share") or 0.0,
                         median=share_of(v.get("median"), "straggler.median") or 0.0,
                         counted=counted, below=below)


def fields(v: StragglerView) -> str:
    """A view as a summary segment's fields: ``share=0.025 median=0.875 counted=8 below=1``."""
    return f"share={v.share:.3f} median={v.median:.3f} counted={v.counted} below={v.below}"


_NUM = re.compile(r"^(0(\.[0-9]{1,6})?|1(\.0{1,6})?)$")
_FIELDS = ("share", "median", "counted", "below")


def parse_fields(tokens: List[str]) -> StragglerView:
    """The view :func:`fields` wrote, split at spaces.

    Raises:
        ValueError: a field missing, repeated, unknown or out of range.
    """
    f = dict(t.partition("=")[::2] for t in tokens)
    nums = [f.get("counted", ""), f.get("below", "")]
    if (len(f) != len(tokens) or set(f) != set(_FIELDS) or not all(_NUM.fullmatch(f[k]) for k in ("share", "median"))
            or not all(re.fullmatch("[0-9]{1,9}", n) for n in nums)):
        raise ValueError(f"not a straggler segment: {' '.join(tokens)[:40]!r}")
    counted, below = int(nums[0]), int(nums[1])
    if not 0 < below <= counted <= MAX_COUNTED or counted < 2:
        raise ValueError(f"not a straggler segment: {' '.join(tokens)[:40]!r}")
    return StragglerView(float(f["share"]), float(f["median"]), counted, below)
