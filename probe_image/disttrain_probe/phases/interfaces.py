"""Phase 4, interface choice: a pure function of every rank's inventory and the mesh.

Every rank runs :func:`choose` over the same all-gathered inputs, so all ranks agree.

Networks are IPv4 subnets (plus, for routed pod networks where each node has its own
subnet, interfaces of the same name on every node). A network is usable when it is on
every node, with exactly one interface per node, a distinct address per node, up, and
every rank reached every peer on it (nonce-checked). Rejections carry a sub-reason
(``vocabulary.REJ_*``) and a message naming the nodes and the evidence.

A pod-network or overlay device (cni0, flannel.*, cali*, cilium_*, vxlan*, tunl0, weave,
kube-bridge, genev_sys_*: :data:`POD_NETWORK_DEVICES`; present on the node with
hostNetwork) is never chosen while a network of other interfaces joins the same nodes: its
traffic crosses those NICs anyway (``PodNetworkDevice``).

Preference among usable networks: highest minimum link speed (as the kernel reports it;
only when every usable network's speed is known on every node), then measured throughput
(the slowest measured pair, Mb/s, from the connectivity phase's timed transfers; capped at
the kernel's link speed when every compared network's is known: a link cannot beat its
line rate, and above it the measurement only shows CPU speed; sorted, the networks fall
into tiers wherever one is faster than the next by at least :data:`MEASURED_MARGIN`
times and its typical round (the middle of three) still beats the next one's best by
:data:`NOISE_MARGIN`, so noise cannot decide), then the network that carries the nodes' HOST_IP / the kernel's route to the
master, then name. The result is the same on every run of the same cluster.
"""
from __future__ import annotations

import ipaddress
from fnmatch import fnmatchcase
from typing import Any, Dict, List, Optional, Sequence, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.runtime.config import ifname_matches, parse_ifname_spec

NCCL_SKIP = ("lo", "docker", "virbr")
MEASURED_MARGIN = 2.0  # measured throughput decides only at this ratio or more
NOISE_MARGIN = 1.5     # ... and only when the faster's typical round beats the slower's best by this
# Pod-network and overlay devices (CNI bridges and tunnels) a host-network pod sees.
POD_NETWORK_DEVICES = ("cni*", "flannel*", "cali*", "cilium_*", "vxlan*", "tunl*", "weave*",
                       "kube-bridge", "genev_sys_*")


# Which rejection says most about an interface rejected on several networks (stable sort).
REJECTION_PRIORITY = {r: i for i, r in enumerate((
    vocabulary.REJ_NOT_PREFERRED, vocabulary.REJ_POD_NETWORK_DEVICE, vocabulary.REJ_UNREACHABLE, vocabulary.REJ_DOWN,
    vocabulary.REJ_MULTIPLE_ON_NODE, vocabulary.REJ_DUPLICATE_ADDRESS, vocabulary.REJ_NOT_ON_ALL_NODES, vocabulary.REJ_NOT_REQUESTED,
    vocabulary.REJ_LOOPBACK, vocabulary.REJ_NO_IPV4))}


def is_pod_network_device(name: str) -> bool:
    """A CNI bridge or overlay tunnel (:data:`POD_NETWORK_DEVICES`)."""
    return any(fnmatchcase(name, p) for p in POD_NETWORK_DEVICES)


def _entries(peer: Dict[str, Any]) -> List[Dict[str, Any]]:
    """This rank's (ifname, addr, prefix, subnet, up, speed, loopback) per IPv4 address."""
    out = []
    for i in peer.get("interfaces") or []:
        for a in i.get("addrs") or []:
            ip, _, pl = a.partition("/")
            if ":" in ip:
                continue
            try:
                net = ipaddress.IPv4Network(f"{ip}/{pl or 32}", strict=False)
            except ValueError:
                continue
            out.append({
                "ifname": i["name"], "addr": ip, "prefix": int(pl or 32), "subnet": str(net),
                "up": bool(i.get("up")), "speed": i.get("speedMbps"),
                "loopback": bool(i.get("loopback")) or ipaddress.ip_address(ip).is_loopback,
            })
    return out


def default_ifname(peer: Dict[str, Any]) -> Optional[str]:
    """What NCCL would use on this rank with NCCL_SOCKET_IFNAME unset: NCCL's own answer
    when the probe could ask it (``ncclDefault`` published by the rank: its ifname, None
    when NCCL found none), else the re-implemented rule (:func:`nccl_default`)."""
    asked = peer.get("ncclDefault")
    if isinstance(asked, dict):
        return asked.get("ifname")
    return nccl_default(peer.get("interfaces") or [])


def nccl_default(interfaces: Sequence[Dict[str, Any]]) -> Optional[str]:
    """Predict NCCL's pick without NCCL_SOCKET_IFNAME: ib*, else the first interface
    (IPv4 addresses first, in index order, as getifaddrs lists them) not lo/docker*/virbr*,
    else docker*, else lo."""
    v4 = [i["name"] for i in interfaces
          if any(":" not in a.partition("/")[0] for a in i.get("addrs") or [])]
    v6 = [i["name"] for i in interfaces if i["name"] not in v4 and any(
        ":" in a.partition("/")[0] and a.partition("/")[0] != "::1" for a in i.get("addrs") or [])]
    names = v4 + v6
    for n in names:
        if n.startswith("ib"):
            return n
    for n in names:
        if not n.startswith(NCCL_SKIP):
            return n
    for n in names:
        if n.startswith("docker"):
            return n
    for n in names:
        if n.startswith("lo"):
            return n
    return None


NODES_NAMED = 6  # a list of nodes in a message names this many, then counts the rest


def _nodes(peers: Dict[int, Dict[str, Any]], ranks: Sequence[int]) -> str:
    """``node-a, node-b`` (rank order), or the first few and ``and N more``."""
    names: List[str] = []
    for r in sorted(ranks):
        n = peers[r].get("node") or f"rank-{r}"
        if n not in names:
            names.append(n)
    if len(names) > NODES_NAMED:
        return f"{', '.join(names[:NODES_NAMED - 1])} and {len(names) - NODES_NAMED + 1} more"
    return ", ".join(names)


class Network:
    def __init__(self, key: str, label: str, members: Dict[int, List[Dict[str, Any]]]):
        self.key = key            # "10.1.0.0/24" or "ifname:eth0"
        self.label = label        # shown in messages
        self.members = members    # rank -> entries
        self.active = members    # rank -> entries socketIfname leaves in play
        self.reason: Optional[str] = None
        self.message = ""
        self.pick: Dict[int, Dict[str, Any]] = {}
        self.kspeed: Optional[int] = None     # slowest kernel link speed, Mb/s (None: unknown)
        self.measured: Optional[float] = None  # slowest measured pair, Mb/s (None: unmeasured)
        self.low: Optional[float] = None       # slowest pair's typical round, Mb/s
        self.rank_speed = 0                   # the speed that ranks it (0: not comparable)
        self.effective: Optional[float] = None  # measured, capped at kspeed (Mb/s)
        self.tier = 0                         # 0: the measurably fastest tier, 1: next, ...

    def ifnames(self) -> List[str]:
        out: List[str] = []
        for r in sorted(self.members):
            for e in self.members[r]:
                if e["ifname"] not in out:
                    out.append(e["ifname"])
        return out

    @property
    def routed(self) -> bool:
        """A pod network: one subnet per node, grouped by interface name (key ``ifname:X``)."""
        return self.key.startswith("ifname:")

    def where(self, names: Optional[str] = None) -> str:
        """How messages name this network: "eth0 on 10.100.0.0/24" for a shared subnet,
        "cni0 (routed, per-node subnets)" for a pod network grouped by interface name."""
        names = names or "/".join(self.ifnames())
        if self.routed:
            return f"{names} (routed, per-node subnets)"
        return f"{names} on {self.label}"

    def reject(self, reason: str, message: str) -> None:
        if self.reason is None:
            self.reason, self.message = reason, message


def _networks(peers: Dict[int, Dict[str, Any]]) -> List[Network]:
    by_subnet: Dict[str, Dict[int, List[Dict[str, Any]]]] = {}
    by_name: Dict[str, Dict[int, List[Dict[str, Any]]]] = {}
    for r, p in peers.items():
        for e in _entries(p):
            by_subnet.setdefault(e["subnet"], {}).setdefault(r, []).append(e)
            by_name.setdefault(e["ifname"], {}).setdefault(r, [])
            if not by_name[e["ifname"]][r]:
                by_name[e["ifname"]][r].append(e)
    nets = [Network(k, k, m) for k, m in sorted(by_subnet.items())]
    # Routed networks (pod networks: one subnet per node) are grouped by interface name.
    for name, m in sorted(by_name.items()):
        if len(m) < 2 or len({es[0]["subnet"] for es in m.values()}) < 2:
            continue
        if any(es[0]["loopback"] for es in m.values()):
            continue
        nets.append(Network(f"ifname:{name}", "routed, per-node subnets", m))
    return nets


def _evaluate(net: Network, peers: Dict[int, Dict[str, Any]], mesh: Dict[int, Dict[int, Any]],
              mode: str, pats: List[Tuple[str, bool]], loopback_ok: bool,
              dial_plan: Dict[int, List[int]], spec: str) -> None:
    ranks = sorted(peers)
    names = "/".join(net.ifnames())
    if all(e["loopback"] for es in net.members.values() for e in es) and not loopback_ok:
        net.reject(vocabulary.REJ_LOOPBACK, f"{names} is loopback ({net.label}): it never leaves the node")
        return
    # socketIfname narrows the interfaces considered on this network (so naming one of two
    # NICs on a subnet resolves MultipleOnNode); what it filters out is NotRequested.
    if mode != "auto":
        keep = (lambda e: ifname_matches(e["ifname"], pats)) if mode == "include" else \
            (lambda e: not ifname_matches(e["ifname"], pats))
        active = {r: [e for e in es if keep(e)] for r, es in net.members.items()}
        net.active = {r: es for r, es in active.items() if es}
        if len(net.active) < len(net.members) or not net.active:
            lost = [r for r in net.members if r not in net.active]
            verb = "not named by" if mode == "include" else "excluded by"
            net.reject(vocabulary.REJ_NOT_REQUESTED, (
                f"{names} {verb} socketIfname={spec}"
                + (f" on {_nodes(peers, lost)}" if net.active else "")))
            return
        names = "/".join(sorted({e["ifname"] for es in net.active.values() for e in es}))
    members = net.active
    missing = [r for r in ranks if r not in members]
    if missing:
        net.reject(vocabulary.REJ_NOT_ON_ALL_NODES,
                   f"{net.where(names)} is missing on {_nodes(peers, missing)}")
        return
    multi = [r for r, es in members.items() if len({e["ifname"] for e in es}) > 1]
    if multi:
        r = multi[0]
        net.reject(vocabulary.REJ_MULTIPLE_ON_NODE, (
            f"{_nodes(peers, multi)}: several interfaces on {net.label} "
            f"({', '.join(sorted({e['ifname'] for e in members[r]}))}); traffic may leave by "
            f"either; name one in network.socketIfname"))
        return
    net.pick = {r: es[0] for r, es in members.items()}
    if not (loopback_ok and all(e["loopback"] for e in net.pick.values())):
        owners: Dict[str, List[int]] = {}
        for r, e in net.pick.items():
            owners.setdefault(e["addr"], []).append(r)
        for addr, rs in sorted(owners.items()):
            nodes = {peers[r].get("node") for r in rs}
            if len(nodes) > 1:
                net.reject(vocabulary.REJ_DUPLICATE_ADDRESS, (
                    f"{names} excluded (same address {addr} on {_nodes(peers, rs)}): a "
                    f"node-local bridge, it cannot carry traffic between nodes"))
                return
    down = [r for r, e in net.pick.items() if not e["up"]]
    if down:
        net.reject(vocabulary.REJ_DOWN, f"{names} is down (no carrier) on {_nodes(peers, down)}")
        return
    fails = []
    for i in ranks:
        for j in dial_plan.get(i, []):
            if i == j or j not in net.pick:
                continue
            addr = net.pick[j]["addr"]
            res = (mesh.get(i) or {}).get(j, {}).get(addr)
            code = res.get("r") if isinstance(res, dict) else None
            if code != "ok":
                fails.append((i, j, addr, code or "untested"))
    if fails:
        parts = [f"{peers[i].get('node')}->{peers[j].get('node')} {addr}: {code}"
                 for i, j, addr, code in fails[:4]]
        more = f" (+{len(fails) - 4} more)" if len(fails) > 4 else ""
        tgt = sorted({j for _, j, _, _ in fails})
        net.reject(vocabulary.REJ_UNREACHABLE, (
            f"{net.where(names)} unreachable: {'; '.join(parts)}{more}; "
            f"unreachable peers: {_nodes(peers, tgt)}"))


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


def _rank_usable(usable: List[Network], mesh: Dict[int, Dict[int, Any]],
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


def _reject_pod_network_devices(usable: List[Network]) -> None:
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


def _score(net: Network, peers: Dict[int, Dict[str, Any]]) -> Tuple[Any, ...]:
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


def _why_better(best: Network, other: Network, peers: Dict[int, Dict[str, Any]]) -> str:
    """Which ranking criterion of :func:`_score` decided between two usable networks."""
    b, o = _score(best, peers), _score(other, peers)
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


def _blocked(nets: List[Network]) -> List[Network]:
    """Structurally fine networks where not a single pair connected (firewalled ports)."""
    out = []
    for n in nets:
        if n.reason == vocabulary.REJ_UNREACHABLE and n.pick:
            out.append(n)
    return out


def _dial_ok(mesh: Dict[int, Dict[int, Any]], i: int, j: int, addr: str) -> bool:
    res = (mesh.get(i) or {}).get(j, {}).get(addr)
    return isinstance(res, dict) and res.get("r") == "ok"


def _inbound_blocked(blocked: List[Network], ranks: Sequence[int],
                     mesh: Dict[int, Dict[int, Any]], dial_plan: Dict[int, List[int]]) -> List[int]:
    """Ranks that no peer reached on any blocked network although their own connections
    out worked there: a firewall on those nodes drops/rejects new inbound connections to
    ephemeral ports (the master port passed, or we would not be here). [] if the failures
    do not fit that pattern (then the path itself may be broken)."""
    if not blocked:
        return []
    pairs = [(n, i, j) for n in blocked for i in ranks for j in dial_plan.get(i, [])
             if i != j and i in n.pick and j in n.pick]
    dead = [j for j in ranks if any(jj == j for _, _, jj in pairs)
            and not any(_dial_ok(mesh, i, jj, n.pick[jj]["addr"]) for n, i, jj in pairs if jj == j)]
    if not dead or len(dead) == len(ranks):
        return []
    for n, i, j in pairs:
        ok = _dial_ok(mesh, i, j, n.pick[j]["addr"])
        if not ok and j not in dead:
            return []  # a failure elsewhere: not (only) an inbound filter on `dead`
        if i in dead and j not in dead and not ok:
            return []
    # each dead rank's own dials out must have worked on every blocked network
    for d in dead:
        outs = [(n, j) for n, i, j in pairs if i == d and j not in dead]
        if not outs or not all(_dial_ok(mesh, d, j, n.pick[j]["addr"]) for n, j in outs):
            return []
    return dead


def _range_text(peers: Dict[int, Dict[str, Any]], ranks: Sequence[int]) -> str:
    rngs = sorted({tuple(peers[r]["portRange"]) for r in ranks if peers[r].get("portRange")})
    return ", ".join(f"{lo}-{hi}" for lo, hi in rngs) or "(unknown)"


def missing_here(node: str, spec: str, interfaces: Sequence[Dict[str, Any]]) -> Optional[str]:
    """The InterfaceNotFound message when the NCCL_SOCKET_IFNAME-style ``spec`` names
    interfaces (include mode) and none of this node's ``interfaces`` (inventory entries with
    ``name``) matches, else None. Decided at the inventory, before torch and the rendezvous:
    no peer's evidence can change it (gloo refuses such a job as it starts). The wording is
    :func:`choose`'s for the same finding. Pure; never raises."""
    mode, pats = parse_ifname_spec(spec)
    names = [str(i.get("name")) for i in interfaces or [] if isinstance(i, dict) and i.get("name")]
    if mode != "include" or any(ifname_matches(n, pats) for n in names):
        return None
    return (f"{node}: no interface matches socketIfname={spec} (it has {', '.join(names) or 'none'}); "
            f"set network.socketIfname to an interface every node has, or auto")


def choose(peers: Dict[int, Dict[str, Any]], mesh: Dict[int, Dict[int, Dict[str, Any]]],
           spec: str = "auto", master_port: Optional[int] = None,
           dial_plan: Optional[Dict[int, List[int]]] = None) -> Dict[str, Any]:
    """Choose the network and each rank's interface.

    ``peers``: rank -> published summary (node, interfaces, hostIp, masterRoute, ...).
    ``mesh``: rank -> peer -> addr -> {r, src, ms}.
    ``dial_plan``: rank -> the peers it dialled (default: all pairs); reachability is
    required on exactly those pairs.
    Returns {failure, network, chosen{rank}, measured{rank: {ifname: Mb/s}} (usable networks
    that were measured), rejected{rank}, ncclDefault{rank}, warnings{rank}}.
    """
    mode, pats = parse_ifname_spec(spec)
    # lo carries traffic between ranks only when they share one host (tests, laptops).
    one_host = len({p.get("node") for p in peers.values()}) <= 1
    loopback_ok = mode == "include" and any(ifname_matches("lo", [p]) for p in pats) and one_host
    ranks = sorted(peers)
    if dial_plan is None:
        dial_plan = {i: [j for j in ranks if j != i] for i in ranks}
    nets = _networks(peers)
    for n in nets:
        _evaluate(n, peers, mesh, mode, pats, loopback_ok, dial_plan, spec)
    usable = [n for n in nets if n.reason is None]
    _reject_pod_network_devices(usable)
    usable = [n for n in usable if n.reason is None]
    _rank_usable(usable, mesh, dial_plan)
    usable.sort(key=lambda n: _score(n, peers))
    best = usable[0] if usable else None
    if best is not None:
        for n in usable[1:]:
            # the deciding criterion first: a report cut to fit 4 KiB keeps the start
            n.reject(vocabulary.REJ_NOT_PREFERRED, f"{_why_better(best, n, peers)}; ranked below "
                                          f"{best.where()}, though {n.where()} is usable")

    failure: Optional[Dict[str, str]] = None
    if mode == "include":
        missing = {r: peers[r] for r in ranks if not any(
            ifname_matches(i["name"], pats) for i in peers[r].get("interfaces") or [])}
        if missing:
            groups: Dict[str, List[int]] = {}
            for r, p in missing.items():
                have = ", ".join(i["name"] for i in p.get("interfaces") or []) or "none"
                groups.setdefault(have, []).append(r)
            failure = {"reason": vocabulary.INTERFACE_NOT_FOUND, "message": "; ".join(
                f"{_nodes(peers, rs)}: no interface matches socketIfname={spec} "
                f"({'it has' if len(rs) == 1 else 'they have'} {have})"
                for have, rs in groups.items()) + "; set network.socketIfname to an interface "
                "every node has, or auto"}
    if best is None and failure is None:
        blocked = _blocked(nets)
        relevant = [n for n in nets if n.reason not in (vocabulary.REJ_NOT_REQUESTED, vocabulary.REJ_LOOPBACK)] \
            or [n for n in nets if n.reason != vocabulary.REJ_NOT_REQUESTED] or nets
        any_ok = any(isinstance(res, dict) and res.get("r") == "ok"
                     for n in blocked for i in ranks for j in dial_plan.get(i, [])
                     if i != j and j in n.pick
                     for res in [(mesh.get(i) or {}).get(j, {}).get(n.pick[j]["addr"])])
        detail = "; ".join(f"{n.reason}: {n.message}" for n in relevant[:4])
        inbound = _inbound_blocked(blocked, ranks, mesh, dial_plan)
        port_s = f" {master_port}" if master_port else ""
        if inbound:
            others = [r for r in ranks if r not in inbound]
            where = _nodes(peers, inbound)
            nics = "/".join(dict.fromkeys(i for n in blocked for i in n.ifnames()))
            failure = {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": (
                f"{where}: inbound TCP to its ephemeral ports (net.ipv4.ip_local_port_range "
                f"{_range_text(peers, inbound)}, where NCCL and gloo listen) is blocked: nothing "
                f"from {_nodes(peers, others)} got through on {nics}, while {where}'s own "
                f"connections out and the master port{port_s} worked; open that TCP range to the "
                f"other nodes on {where}'s firewall, or set network.portRange to the range it "
                f"admits")}
        elif blocked and not any_ok:
            n = blocked[0]
            failure = {"reason": vocabulary.EPHEMERAL_PORTS_BLOCKED, "message": (
                f"the master port{port_s} answered, but no connection to an ephemeral port "
                f"(net.ipv4.ip_local_port_range {_range_text(peers, ranks)}, where NCCL and gloo "
                f"listen) got through on {n.where()}: a firewall admits the master port but not "
                f"that range; open it between nodes, or set network.portRange to the open range; "
                f"{n.message}")}
        else:
            hint = ""
            if mode != "auto":
                auto = choose(peers, mesh, "auto", master_port, dial_plan)
                if auto.get("network"):
                    hint = "; set network.socketIfname=" + ",".join(
                        sorted({c["ifname"] for c in auto["chosen"].values()}))
            if not detail:
                detail = "no interface with an IPv4 address was reported"
            v6 = _ipv6_only(peers, ranks)
            if v6:  # say why those NICs were never candidates
                detail += (
                    f"; {v6}: only IPv6 (global) addresses, and this probe validates IPv4 "
                    f"paths only: give the NICs IPv4 addresses, or run without the probe "
                    f"(probe.enabled: false) on an IPv6-only cluster")
            if mode == "include":
                failure = {"reason": vocabulary.INTERFACE_UNREACHABLE,
                           "message": f"socketIfname={spec} is not usable: {detail}{hint}"}
            else:
                failure = {"reason": vocabulary.NO_COMMON_INTERFACE, "message": (
                    f"no network joins all {len(ranks)} nodes ({_nodes(peers, ranks)}): {detail}"
                    + (hint or "; give the nodes a common reachable network and name it in "
                               "network.socketIfname"))}

    chosen: Dict[int, Dict[str, Any]] = {}
    if best is not None and failure is None:
        chosen = {r: {"ifname": e["ifname"], "addr": e["addr"], "subnet": e["subnet"]}
                  for r, e in best.pick.items()}

    rejected: Dict[int, List[Dict[str, str]]] = {r: [] for r in ranks}
    for r in ranks:
        for i in peers[r].get("interfaces") or []:
            if not any(":" not in a.partition("/")[0] for a in i.get("addrs") or []):
                rejected[r].append({"ifname": i["name"], "reason": vocabulary.REJ_NO_IPV4,
                                    "message": f"{i['name']} has no IPv4 address"})
        for n in nets:
            if r not in n.members:
                continue
            in_play = {e["ifname"] for e in n.active.get(r, [])}
            for ifn in sorted({e["ifname"] for e in n.members[r]}):
                if n.reason == vocabulary.REJ_NOT_REQUESTED or (n.active is not n.members
                                                       and ifn not in in_play):
                    rejected[r].append({"ifname": ifn, "reason": vocabulary.REJ_NOT_REQUESTED,
                                        "message": f"{ifn} not selected by socketIfname={spec}"})
                elif n.reason is not None:
                    rejected[r].append({"ifname": ifn, "reason": n.reason, "message": n.message})

    for r, c in chosen.items():  # an interface is either chosen or rejected, never both
        rejected[r] = [x for x in rejected[r] if x["ifname"] != c["ifname"]]
    for r in ranks:  # an interface rejected twice (cni0: its /24 and the routed net): the telling reason first
        rejected[r].sort(key=lambda x: REJECTION_PRIORITY.get(x["reason"], len(REJECTION_PRIORITY)))
    defaults = {r: default_ifname(peers[r]) for r in ranks}
    warnings: Dict[int, List[Dict[str, str]]] = {r: [] for r in ranks}
    if chosen:
        _warn(peers, mesh, chosen, defaults, rejected, warnings, loopback_ok, best)
    measured: Dict[int, Dict[str, float]] = {r: {} for r in ranks}
    for n in usable:
        if n.measured is not None:
            for r, e in n.pick.items():
                measured[r][e["ifname"]] = round(n.measured, 1)
    return {
        "failure": failure,
        "network": (best.where() if best.routed else best.label)
        if (best is not None and failure is None) else None,
        "chosen": chosen,
        "measured": measured,
        "rejected": rejected,
        "ncclDefault": defaults,
        "warnings": warnings,
    }


def _ipv6_only(peers: Dict[int, Dict[str, Any]], ranks: List[int]) -> str:
    """"eth0 on node-a, node-b" for the up, non-loopback interfaces that have global IPv6
    addresses and no IPv4 one (grouped by name; several joined by "; "), or ''."""
    by_name: Dict[str, List[int]] = {}
    for r in ranks:
        for i in peers[r].get("interfaces") or []:
            addrs = [a.partition("/")[0] for a in i.get("addrs") or []]
            if i.get("loopback") or i.get("up") is False or any(":" not in a for a in addrs):
                continue
            if any(not ipaddress.ip_address(a.split("%")[0]).is_link_local for a in addrs):
                by_name.setdefault(i["name"], []).append(r)
    return "; ".join(f"{name} on {_nodes(peers, rs)}" for name, rs in sorted(by_name.items()))


def _warn(peers, mesh, chosen, defaults, rejected, warnings, loopback_ok, best) -> None:
    ranks = sorted(peers)
    for r in ranks:
        node = peers[r].get("node")
        c = chosen[r]
        d = defaults.get(r)
        if loopback_ok and c["ifname"] == "lo":
            warnings[r].append({"reason": vocabulary.LOOPBACK_ONLY, "message": (
                f"{node}: validated on loopback ({c['ifname']}) only; this proves nothing about "
                f"traffic between nodes")})
        elif d != c["ifname"]:
            why = next((x["reason"] for x in rejected[r] if x["ifname"] == d), "")
            warnings[r].append({"reason": vocabulary.NCCL_DEFAULT_DIFFERS, "message": (
                f"{node}: NCCL left alone would use {d or 'no interface'}"
                + (f" ({why})" if why else "")
                + f", not the validated {c['ifname']}; keep NCCL_SOCKET_IFNAME={c['ifname']} "
                f"(the operator sets it)")})
        mr = peers[r].get("masterRoute") or {}
        if r != 0 and not loopback_ok and mr.get("iface") and mr.get("iface") != c["ifname"]:
            warnings[r].append({"reason": vocabulary.ROUTE_VIA_OTHER_INTERFACE, "message": (
                f"{node}: the kernel reaches the master via {mr.get('iface')} (src "
                f"{mr.get('src')}), not the validated {c['ifname']}; rendezvous and collective "
                f"traffic take different interfaces")})
        if not loopback_ok:
            for p in ranks:
                if p == r:
                    continue
                res = (mesh.get(r) or {}).get(p, {}).get(chosen[p]["addr"]) or {}
                src = res.get("src") if isinstance(res, dict) else None
                if src and src != c["addr"]:
                    warnings[r].append({"reason": vocabulary.ROUTE_VIA_OTHER_INTERFACE, "message": (
                        f"{node}: connections to {peers[p].get('node')} ({chosen[p]['addr']}) "
                        f"leave from {src}, not {c['ifname']}'s {c['addr']}: two interfaces on one "
                        f"subnet, or a route that sends traffic out another NIC")})
                    break
    # IPv4/IPv6 mix: some nodes have a global IPv6 on the chosen interface, others not,
    # or the master name resolves to IPv6 somewhere.
    has6 = {}
    for r in ranks:
        ifs = {i["name"]: i for i in peers[r].get("interfaces") or []}
        i = ifs.get(chosen[r]["ifname"]) or {}
        has6[r] = any(":" in a.partition("/")[0] and not a.startswith("fe80")
                      for a in i.get("addrs") or [])
    master6 = [r for r in ranks if any(":" in a for a in peers[r].get("masterResolved") or [])]
    if len(set(has6.values())) > 1 or master6:
        with6 = [r for r in ranks if has6[r]]
        msg = (f"IPv4/IPv6 mix: global IPv6 on the chosen interface on "
               f"{_nodes(peers, with6) or 'no node'}"
               + (f"; MASTER_ADDR resolves to IPv6 on {_nodes(peers, master6)}" if master6 else "")
               + "; NCCL may pick different families per node: set NCCL_SOCKET_FAMILY=AF_INET")
        for r in ranks:
            warnings[r].append({"reason": vocabulary.MIXED_ADDRESS_FAMILIES, "message": msg})
