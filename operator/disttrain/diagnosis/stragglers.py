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
there is one pair: nothing singles a node out against the median.

The median is one reference; the nodes give others (:func:`slow_sides`): the link speed the
kernel reports for the interface on both ends and the other direction of the same pair. A
directed path (a sender's upload, as its receiver timed it) far below those is a ``SlowLink`` warning even with two nodes, and when
every slow path shares its sender (or its receiver) while that node's other direction is
fast, that node's side is named.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

from disttrain.diagnosis.findings import Finding, RankInput
from disttrain.diagnosis.report import ProbeReport
from disttrain_probe.contract import vocabulary

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


def _measured(rep: ProbeReport, key: str, by_rank: dict[int, int]) -> Iterator[tuple[Optional[int], float, float]]:
    """(peer index or None when the peer is no rank of the job, best Mb/s, typical Mb/s)
    for every pair ``rep``'s rank timed on network ``key`` (``pathMbps``); the typical round
    (``pathMbpsLow``) is the best again when missing or not between 0 and the best; pairs
    with a peer that is no number or a rate <= 0 are skipped."""
    lows = rep.path_mbps_low.get(key) or {}
    for peer, v in (rep.path_mbps.get(key) or {}).items():
        try:
            j = by_rank.get(int(peer))
        except ValueError:
            continue
        if v is None or v <= 0:
            continue
        low = lows.get(peer)
        yield j, float(v), float(low) if isinstance(low, (int, float)) and 0 <= low <= v else float(v)


def node_stats(ranks: Sequence[RankInput]) -> dict[int, tuple[float, float]]:
    """Rank index -> (the best Mb/s of a measured pair it was part of on its chosen network,
    that pair's typical round: ``pathMbpsLow``, the best again when not reported)."""
    best: dict[int, tuple[float, float]] = {}
    by_rank = {r.rank: i for i, r in enumerate(ranks)}
    for i, r in enumerate(ranks):
        key, rep = chosen_key(r), r.report
        if key is None or rep is None:  # no key without a report
            continue
        for j, v, low in _measured(rep, key, by_rank):
            for x in (i, j):
                if x is not None and v > best.get(x, (0.0, 0.0))[0]:
                    best[x] = (v, low)
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


DIRECTION_RATIO = 8.0  # a path below the other direction / DIRECTION_RATIO is slow: veth on
                       # a busy 2-core host timed one direction of a healthy pair at half the
                       # other (CI: 15125 against 30090 Mb/s); an egress rate limit is 100x+
SPEED_RATIO = 50.0  # a path below the link speed / SPEED_RATIO is slow (veth and busy hosts
                    # move a few Gb/s on a 10 Gb/s "speed": only a far lower rate is a fault)


@dataclass(frozen=True)
class SlowPath:
    """Rank ``receiver`` timed ``mbps`` Mb/s downloading from rank ``sender`` on the chosen
    network (``ifname``), against each of ``references``: (Mb/s, where it comes from: the
    link speed, the other direction), highest first."""

    sender: int
    receiver: int
    ifname: str
    mbps: float
    references: tuple[tuple[float, str], ...]

    def against(self) -> str:
        """``10000 Mb/s (eth1's link speed), 9400 Mb/s (the other direction)``."""
        return ", ".join(f"{v:.0f} Mb/s ({what})" for v, what in self.references[:3])


def _speed(r: RankInput, ifname: Optional[str]) -> Optional[int]:
    rep = r.report
    if rep is None or not ifname:
        return None
    return next((i.speed_mbps for i in rep.interfaces if i.name == ifname and i.speed_mbps), None)


def _rates(ranks: Sequence[RankInput]) -> dict[str, dict[tuple[int, int], tuple[float, float]]]:
    """Network key -> (sender index, receiver index) -> (best, typical) Mb/s."""
    by_rank = {r.rank: i for i, r in enumerate(ranks)}
    out: dict[str, dict[tuple[int, int], tuple[float, float]]] = {}
    for i, r in enumerate(ranks):
        rep = r.report
        if rep is None:
            continue
        for key in rep.path_mbps:
            for j, v, low in _measured(rep, key, by_rank):
                if j is not None and j != i:
                    out.setdefault(key, {})[(j, i)] = (v, low)
    return out


def slow_paths(ranks: Sequence[RankInput]) -> list[SlowPath]:
    """The directed paths on each rank's chosen network far below a reference the nodes
    give: the link speed of the chosen interface on both ends (/ :data:`SPEED_RATIO`), or,
    the other direction of the pair, its typical round :data:`DIRECTION_RATIO` times
    above this path's best (far beyond the noise between two directions of a healthy pair). Not another network: on the proving ground the pod
    network (cni0, riding on the same NICs) timed 1.6x a healthy eth0 (hostnet-pod-bridges)."""
    rates = _rates(ranks)
    out = []
    for i, r in enumerate(ranks):
        key = chosen_key(r)
        rep = r.report
        if key is None or rep is None or rep.chosen is None:
            continue
        ifname = rep.chosen.ifname
        for (j, rcv), (v, _) in sorted(rates.get(key, {}).items()):
            if rcv != i:
                continue
            refs: list[tuple[float, str]] = []
            speeds = [s for s in (_speed(ranks[j], ifname), _speed(r, ifname)) if s]
            if speeds and v * SPEED_RATIO < min(speeds):
                refs.append((float(min(speeds)), f"{ifname}'s link speed"))
            back = rates[key].get((i, j))
            if back and back[1] >= DIRECTION_RATIO * v:
                refs.append((back[1], "the other direction"))
            if refs:
                out.append(SlowPath(j, i, ifname, v, tuple(sorted(refs, reverse=True))))
    return out


def slow_sides(ranks: Sequence[RankInput]) -> list[Finding]:
    """One ``SlowLink`` warning per node whose side the slow paths single out (every slow
    path has it as sender, or every one as receiver), else one naming the slow pairs."""
    paths = slow_paths(ranks)
    if not paths:
        return []
    senders = {p.sender for p in paths}
    receivers = {p.receiver for p in paths}
    p = min(paths, key=lambda x: x.mbps)
    seen = (f"{ranks[p.receiver].node} timed {p.mbps:.0f} Mb/s from {ranks[p.sender].node} on "
            f"{p.ifname}, against {p.against()}")
    fix = "; collectives run at its pace; check the link (a rate limit: tc qdisc show, errors, speed)"
    if len(senders) == 1 and not any(q.receiver in senders for q in paths):
        node = ranks[p.sender].node
        return [Finding(vocabulary.SLOW_LINK, node, f"{node}: its {p.ifname} sends slowly ({seen})" + fix)]
    if len(receivers) == 1 and not any(q.sender in receivers for q in paths):
        node = ranks[p.receiver].node
        return [Finding(vocabulary.SLOW_LINK, node, f"{node}: its {p.ifname} receives slowly ({seen})" + fix)]
    pairs = sorted({tuple(sorted((ranks[q.sender].node, ranks[q.receiver].node))) for q in paths})
    shown = ", ".join(f"{a}<->{b}" for a, b in pairs[:3]) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")
    return [Finding(vocabulary.SLOW_LINK, "", f"slow paths on {p.ifname}: {shown} ({seen})" + fix)]


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
    if not fails and not warns:  # the median singled out no one: the other references
        warns.extend(slow_sides(ranks))
    return fails, warns


__all__ = ["DIRECTION_RATIO", "SlowLink", "SlowPath", "WARN_RATIO", "slow_paths", "slow_sides", "chosen_key", "findings", "node_throughput", "slow_links"]
