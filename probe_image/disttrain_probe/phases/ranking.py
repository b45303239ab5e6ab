"""Phase 4, interface choice: ranking the usable networks.

Highest minimum kernel link speed (only when every usable network's is known on every
node), then measured throughput in tiers (:func:`measured_tiers`; capped at the line rate
when every compared network's is known), then the network that carries the nodes' HOST_IP
/ route to the master, then name. Pod-network-only networks lose to any other usable one
(:func:`reject_pod_network_devices`). Pure.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.shapes import Peer
from disttrain_probe.phases.networks import Network, is_pod_network_device

MEASURED_MARGIN = 2.0  # measured throughput decides only at this ratio or more
NOISE_MARGIN = 1.5     # ... and only when the faster's typical round beats the slower's best by this


def measured_mbps(net: Network, mesh: Dict[int, Dict[int, Any]],
                  dial_plan: Dict[int, List[int]]) -> Optional[float]:
    """The slowest measured throughput (Mb/s) between the network's picks: min over the
    dialled pairs' ``mbps`` on it; None when no pair was measured."""
    return measured_stats(net, mesh, dial_plan)[0]


def measured_stats(net: Network, mesh: Dict[int, Dict[int, Any]],
                   dial_plan: Dict[int, List[int]],
                   cap: Optional[float] = None) -> Tuple[Optional[float], Optional[float]]:
    """(the slowest measured pair's best round, the slowest pair's typical round), Mb/s, or
    (None, None) when no pair was measured: each measured pair keeps its best round
    (``mbps``) and its typical one (``mbpsLow``: the middle of three rounds; the best when
    measured once), both taken at most ``cap`` Mb/s (the line rate: above it rounds differ
    by CPU noise only)."""
    best, low = [], []
    for i in sorted(net.pick):
        for j in dial_plan.get(i, []):
            if i == j or j not in net.pick:
                continue
            res = (mesh.get(i) or {}).get(j, {}).get(net.pick[j]["addr"])
            v = res.get("mbps") if isinstance(res, dict) else None
            if isinstance(v, (int, float)) and v > 0:
                lo = res.get("mbpsLow")
                lo = float(lo) if isinstance(lo, (int, float)) and 0 <= lo <= v else float(v)
                best.append(float(v))
                low.append(min(lo, cap) if cap else lo)
    return (min(best), min(low)) if best else (None, None)


def measured_tiers(values: Dict[str, float], margin: float = MEASURED_MARGIN,
                   lows: Optional[Dict[str, float]] = None) -> Dict[str, int]:
    """Tier per key (0 = fastest) for throughputs in Mb/s: sorted from the fastest, a new
    tier starts wherever a value is at least ``margin`` times below the previous one and,
    when ``lows`` (each key's typical round) is given, the previous one's typical round is
    still :data:`NOISE_MARGIN` times above this one's best; so values closer than that
    (measurement noise) always share a tier."""
    out: Dict[str, int] = {}
    tier, prev = 0, None
    lows = lows or {}
    for k, v in sorted(values.items(), key=lambda kv: (-kv[1], kv[0])):
        if prev is not None and v * margin <= prev[1] and lows.get(prev[0], prev[1]) >= NOISE_MARGIN * v:
            tier += 1
        out[k] = tier
        prev = (k, v)
    return out


def rank_usable(usable: List[Network], mesh: Dict[int, Dict[int, Any]],
                 dial_plan: Dict[int, List[int]]) -> None:
    """Set each usable network's kspeed/measured and the ranking fields: kernel speed
    counts only when every usable network's is known; among networks of equal ranking
    speed, measured throughput (capped at the kernel's speed) counts only when each of
    them was measured, in tiers (:func:`measured_tiers`)."""
    for n in usable:
        speeds = [e.get("speed") for e in n.pick.values()]
        known_speeds = [x for x in speeds if isinstance(x, int) and x > 0]
        n.kspeed = min(known_speeds) if speeds and len(known_speeds) == len(speeds) else None
        n.measured, n.low = measured_stats(n, mesh, dial_plan)
    known = all(n.kspeed is not None for n in usable)
    groups: Dict[int, List[Network]] = {}
    for n in usable:
        n.rank_speed = n.kspeed if known and n.kspeed is not None else 0  # known: none is None
        groups.setdefault(n.rank_speed, []).append(n)
    for g in groups.values():
        # cap at the line rate only when every compared network's is known: capping some
        # and not others would let a device of unknown speed win on CPU speed alone
        cap = all(n.kspeed for n in g)
        for n in g:
            line_rate = float(n.kspeed) if cap and n.kspeed else None  # cap: every kspeed is set
            if line_rate is not None:
                n.measured, n.low = measured_stats(n, mesh, dial_plan, line_rate)
            n.effective = None if n.measured is None else (
                min(n.measured, line_rate) if line_rate is not None else n.measured)
        if len(g) > 1 and all(n.effective is not None for n in g):
            tiers = measured_tiers({n.key: n.effective for n in g if n.effective is not None},
                                   lows={n.key: n.low for n in g if n.low is not None})
            for n in g:
                n.tier = tiers[n.key]


def _pod_network_only(net: Network) -> bool:
    return bool(net.pick) and all(is_pod_network_device(e["ifname"]) for e in net.pick.values())


def reject_pod_network_devices(usable: List[Network]) -> None:
    """A network of pod-network/overlay devices only (cni0 seen with hostNetwork) is
    rejected while another usable network joins the same nodes: one reason, said once."""
    physical = [n for n in usable if not _pod_network_only(n)]
    if not physical:
        return
    for n in usable:
        if _pod_network_only(n):
            n.reject(vocabulary.REJ_POD_NETWORK_DEVICE, (
                f"{n.where()} is a pod-network device: its traffic crosses the nodes' NICs "
                f"anyway, and {physical[0].where()} joins the same nodes"))


def score(net: Network, peers: Dict[int, Peer]) -> Tuple[Any, ...]:
    route = 0
    for r, e in net.pick.items():
        p = peers[r]
        mr = p.get("masterRoute") or {}
        if e["addr"] == p.get("hostIp") or (mr.get("src") and mr.get("src") == e["addr"]) \
                or (mr.get("iface") and mr.get("iface") == e["ifname"] and not e["loopback"]):
            route += 1
    first = net.pick[min(net.pick)]["ifname"] if net.pick else ""
    return (-net.rank_speed, net.tier, -route, first, net.key)


def _mbps(v: Optional[float]) -> str:
    return "?" if v is None else f"{v:.0f}"


def _eff(n: Network) -> float:
    return n.effective if n.effective is not None else (n.measured or 0.0)


def why_better(best: Network, other: Network, peers: Dict[int, Peer]) -> str:
    """Which ranking criterion of :func:`score` decided between two usable networks."""
    b, o = score(best, peers), score(other, peers)
    if b[0] != o[0]:
        return f"faster (slowest link {-b[0]} vs {-o[0]} Mb/s)"
    kernel = (f"the kernel reports {best.kspeed} Mb/s for both" if best.kspeed == other.kspeed
              and best.kspeed is not None else "the kernel's link speeds do not rank them")
    if b[1] != o[1]:
        return (f"faster by measurement ({_mbps(best.measured)} vs {_mbps(other.measured)} Mb/s "
                f"measured; {kernel})")
    same = ""
    if best.measured is not None and other.measured is not None:
        capped = [n.kspeed for n in (best, other) if n.kspeed and n.measured is not None
                  and n.measured >= n.kspeed and n.effective is not None and n.effective < n.measured]
        kspeeds = "/".join(str(x) for x in sorted(set(capped)))
        why = (f"at or above the {kspeeds} Mb/s the kernel reports" if len(capped) == 2 else
               (f"less than {MEASURED_MARGIN:g}x apart" if max(_eff(best), _eff(other))
                < MEASURED_MARGIN * min(_eff(best), _eff(other))
                else "within the measurements' own noise (typical rounds "
                     f"{_mbps(best.low)} vs {_mbps(other.low)} Mb/s)")
               + (f" once capped at the kernel's {kspeeds} Mb/s" if capped else ""))
        same = f"; measured {_mbps(best.measured)} vs {_mbps(other.measured)} Mb/s, {why}"
    if b[2] != o[2]:
        spd = f"equal speed ({-b[0]} Mb/s)" if b[0] else "speed not decisive"
        return (f"{spd}{same}; it carries the nodes' own address / route to the "
                f"master on {-b[2]} of {len(best.pick)} nodes vs {-o[2]}; set "
                f"network.socketIfname to choose the other")
    return f"equal on speed{same} and routing; first by name (set network.socketIfname to choose)"
