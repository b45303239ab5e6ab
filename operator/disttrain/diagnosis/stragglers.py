"""Stragglers (pure): a node whose link is far slower than the job's others.

Every probe times downloads from its ring neighbours (both sides) on each network
(``pathMbps``). On the chosen network a node's figure is the best pair it was part of
(as sender or receiver): a slow NIC slows every pair it is in, a slow peer only its own
pairs. A node below half the job's median figure is a ``SlowLink`` warning naming the
node, the interface, its figure against the median and the slowdown to expect (a
collective runs at its slowest member's pace); ``probe.maxLinkImbalance`` turns a node
slower than that many times the median into a failure. Neither is said when the gap is
within the measurements' own noise: the median node's typical round (the middle of three)
must still beat the node's best by 1.5x (the interface choice's rule), so 16 probes on 2
cores starving each other make no straggler. With two nodes
there is one pair: nothing singles a node out, so nothing is said.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

from disttrain_probe.contract import vocabulary

from disttrain.diagnosis.findings import Finding, RankInput

WARN_RATIO = 2.0  # a node below median / WARN_RATIO is a straggler


@dataclass(frozen=True)
class SlowLink:
    """``node``'s ``ifname`` moved ``mbps`` Mb/s against the job's ``median`` Mb/s."""

    node: str
    ifname: str
    mbps: float
    median: float

    @property
    def ratio(self) -> float:
        return self.median / self.mbps if self.mbps > 0 else float("inf")

    def finding(self, limit: Optional[float] = None) -> Finding:
        """The SlowLink finding (a failure when ``limit``, probe.maxLinkImbalance, is set)."""
        over = f" (over probe.maxLinkImbalance {limit:g})" if limit else ""
        return Finding(vocabulary.SLOW_LINK, self.node, (
            f"{self.node}: {self.ifname} moved {self.mbps:.0f} Mb/s, {self.ratio:.1f}x below the "
            f"job's median {self.median:.0f} Mb/s{over}: collectives run at its pace, about "
            f"{self.ratio:.1f}x slower; check its link (speed, errors, a rate limit)"))


def chosen_key(r: RankInput) -> Optional[str]:
    """The network key (as in ``paths``) of the interface this rank chose."""
    rep = r.report
    if rep is None or rep.chosen is None:
        return None
    if rep.chosen.subnet and (rep.chosen.subnet in rep.path_mbps or rep.chosen.subnet in rep.paths):
        return rep.chosen.subnet
    return f"ifname:{rep.chosen.ifname}"


def node_stats(ranks: Sequence[RankInput]) -> dict[int, tuple[float, float]]:
    """Rank index -> (the best Mb/s of a measured pair it was part of on its chosen network,
    that pair's typical round: ``pathMbpsLow``, the best again when not reported)."""
    best: dict[int, tuple[float, float]] = {}
    by_rank = {r.rank: i for i, r in enumerate(ranks)}
    for i, r in enumerate(ranks):
        key, rep = chosen_key(r), r.report
        if key is None or rep is None:  # no key without a report
            continue
        lows = rep.path_mbps_low.get(key) or {}
        for peer, v in (rep.path_mbps.get(key) or {}).items():
            try:
                j = by_rank.get(int(peer))
            except ValueError:
                continue
            if v is None or v <= 0:
                continue
            low = lows.get(peer)
            low = float(low) if isinstance(low, (int, float)) and 0 <= low <= v else float(v)
            for x in (i, j):
                if x is not None and float(v) > best.get(x, (0.0, 0.0))[0]:
                    best[x] = (float(v), low)
    return best


def node_throughput(ranks: Sequence[RankInput]) -> dict[int, float]:
    """Rank index -> the best Mb/s of a measured pair it was part of on its chosen network."""
    return {i: v for i, (v, _) in node_stats(ranks).items()}


NOISE_MARGIN = 1.5  # the median's typical round must beat a straggler's best by this


def slow_links(ranks: Sequence[RankInput], ratio: float = WARN_RATIO) -> list[SlowLink]:
    """The nodes below the job's median / ``ratio`` and below it beyond the measurements'
    own noise: the median node's typical round still :data:`NOISE_MARGIN` times above the
    node's best (the interface choice's rule); three or more measured nodes."""
    stats = node_stats(ranks)
    if len(stats) < 3:
        return []
    median = statistics.median(v for v, _ in stats.values())
    median_low = statistics.median(lo for _, lo in stats.values())
    out = []
    for i, (v, _) in sorted(stats.items()):
        if v * ratio < median and median_low >= NOISE_MARGIN * v:
            rep = ranks[i].report
            out.append(SlowLink(ranks[i].node, rep.chosen.ifname if rep and rep.chosen else "?",
                                v, median))
    return out


def findings(ranks: Sequence[RankInput], max_imbalance: Optional[float]) -> tuple[list[Finding], list[Finding]]:
    """(failures, warnings): with ``max_imbalance`` (probe.maxLinkImbalance) the nodes
    slower than that many times the median fail, and the others below half the median
    warn; without it they all warn."""
    fails, warns = [], []
    for s in slow_links(ranks, min(WARN_RATIO, max_imbalance) if max_imbalance else WARN_RATIO):
        if max_imbalance and s.ratio > max_imbalance:
            fails.append(s.finding(max_imbalance))
        elif s.ratio > WARN_RATIO:
            warns.append(s.finding())
    return fails, warns


__all__ = ["SlowLink", "WARN_RATIO", "chosen_key", "findings", "node_throughput", "slow_links"]
