"""Phase 3, connectivity: can every rank reach every peer, per address, on ephemeral ports?

Each rank listens on every IPv4 address it has with port 0 (so the kernel picks an
ephemeral port, exactly as NCCL's sockets do), publishes (iface, addr, prefix, port,
nonce), and dials every peer's listeners. A listener answers with its rank and nonce,
so a connection that lands on this machine (172.17.0.1 on the local docker0, the
classic trap) is not counted as reaching the peer. Results are all-gathered.

Result codes: ``ok`` (the right peer answered), ``wrong`` (someone else answered),
``refused``, ``timeout``, ``unreachable``, ``error``.

Throughput: when a rank reached peers on more than one network, it times a short bulk
download (:data:`BULK_BYTES`, 4 MiB, :data:`BULK_ROUNDS` times per network) from one peer
per network through the same listeners (``BULK <bytes>`` after the identity line), so
the choice can prefer the faster network when the kernel's link speeds tie or are
unknown (veths, virtio and bonds often report 10000 Mb/s or nothing). The best round, in
Mb/s, is ``mbps`` in the mesh entry of that address, the typical one (the middle
round) ``mbpsLow``: the run-to-run noise the choice allows for.

Listeners go on up interfaces only (a down one is rejected as Down anyway), at most
:data:`MAX_ADDRS_PER_IFACE` addresses each (kube-ipvs0 can carry hundreds of service
addresses). Up to :data:`FULL_MESH_MAX` ranks every rank dials every peer; beyond, the
plan is ring neighbours (±1, ±2) plus two rounds of disjoint random pairs shared by all
ranks, so the dials per rank stay constant (docs/probe-report.md, "Limits").
"""
from __future__ import annotations

import errno
import ipaddress
import json
import os
import random
import secrets
import socket
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple, TypedDict

from disttrain_probe.contract import paths, probe_env, vocabulary
from disttrain_probe.ground.config import ifname_matches, parse_ifname_spec
from disttrain_probe.ground.deadline import Deadline
from disttrain_probe.ground.shapes import Dial, Iface, Inventory, Listen, Mesh
from disttrain_probe.phases import pathmtu
from disttrain_probe.phases.inventory import ipv4_addrs, route_get
from disttrain_probe.phases.listeners import BULK_MAX_BYTES, Listeners

FULL_MESH_MAX = 32
BULK_BYTES = 4 * 1024 * 1024     # bytes per timed transfer (DISTTRAIN_PROBE_BULK_BYTES)
BULK_ROUNDS = 3                  # transfers per network: the fastest counts, the spread is kept
BULK_MAX_SECONDS = 1.0           # per transfer; a slow link is measured on what arrived
RANGE_SAMPLES = 32               # listeners per address spread over ip_local_port_range (a gap of
                                 # about 900 ports over the default 32768-60999: see range_ports)


def typical(rounds: List[float]) -> float:
    """The typical of several timed rounds (Mb/s): the middle one, the lower middle of an
    even count; one starved round (CPU noise) does not move it."""
    s = sorted(rounds, reverse=True)
    return s[len(s) // 2]


def bulk_bytes() -> int:
    """Bytes per timed transfer: $DISTTRAIN_PROBE_BULK_BYTES (0 = no measurement), else
    :data:`BULK_BYTES`; capped at :data:`BULK_MAX_BYTES`."""
    try:
        v = int(os.environ.get(probe_env.BULK_BYTES, BULK_BYTES))
    except ValueError:
        return BULK_BYTES
    return max(0, min(v, BULK_MAX_BYTES))


def full_mesh_max() -> int:
    try:
        return max(2, int(os.environ.get(probe_env.FULL_MESH_MAX, FULL_MESH_MAX)))
    except ValueError:
        return FULL_MESH_MAX


def plan(world: int, seed: int, full_max: int = FULL_MESH_MAX) -> Dict[int, List[int]]:
    """Which peers each rank dials (symmetric: j in plan[i] iff i in plan[j])."""
    if world <= full_max:
        return {r: [p for p in range(world) if p != r] for r in range(world)}
    peers: Dict[int, set] = {r: set() for r in range(world)}
    for r in range(world):
        for d in (1, 2):
            for p in ((r + d) % world, (r - d) % world):
                if p != r:
                    peers[r].add(p)
                    peers[p].add(r)
    rng = random.Random(seed)
    for _ in range(2):
        perm = list(range(world))
        rng.shuffle(perm)
        for a, b in zip(perm[0::2], perm[1::2]):
            peers[a].add(b)
            peers[b].add(a)
    return {r: sorted(ps) for r, ps in peers.items()}


def range_ports(kernel: Optional[List[int]], n: int = RANGE_SAMPLES) -> List[int]:
    """``n`` ports spread evenly over the kernel's ephemeral range ``[lo, hi]``, both ends
    included (every port when the range is smaller); [] without a valid range."""
    if not kernel or len(kernel) != 2 or not 0 < kernel[0] <= kernel[1] <= 65535:
        return []
    lo, hi = int(kernel[0]), int(kernel[1])
    if hi - lo + 1 <= n:
        return list(range(lo, hi + 1))
    return sorted({lo + round(k * (hi - lo) / (n - 1)) for k in range(n)})


def plan_seed(master_addr: str, master_port: int, world: int) -> int:
    """The same seed on every rank, without another round trip."""
    return zlib.crc32(f"{master_addr}:{master_port}:{world}".encode())


class Connectivity(TypedDict):
    """Phase 3's answer (:func:`connectivity`): this rank's ``listeners`` and the addresses
    it could not listen on (``errors``), every rank's dials (``mesh``), the dial ``plan``,
    and this rank's compact ``paths`` with the Mb/s measured on them (paths.py)."""
    listeners: List[List[Any]]
    errors: List[Any]
    mesh: Mesh
    dialTimeout: float
    plan: Dict[int, List[int]]
    paths: Dict[str, str]
    pathMbps: Dict[str, Dict[str, float]]
    pathMbpsLow: Dict[str, Dict[str, float]]


# Seconds a connected dial waits for the peer's identity at most (the connect itself: 2 s).
ANSWER_MAX_SECONDS = 10.0


def dial(addr: str, port: int, want_rank: int, want_nonce: str, timeout: float,
         answer_timeout: Optional[float] = None) -> Dial:
    """Connect within ``timeout`` seconds and read the listener's identity within
    ``answer_timeout`` (default: ``timeout``) more. Returns {r, ms, src[, noroute]}
    (``noroute``: ENETUNREACH, the node has no route to ``addr``); ``r`` is ok,
    wrong (another listener answered), closed (accepted, then closed or reset before a byte
    came: something between intercepts the connection, such as a service-mesh sidecar's
    proxy; a probe listener always answers), refused, timeout, unreachable or error. Once connected the
    path is proven (the SYN-ACK came back): a peer slow to answer (its probe starved of
    CPU) gets the longer answer budget instead of reading as a dropped path."""
    t0 = time.monotonic()
    res: Dial = {"r": "error"}
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
        s.settimeout(max(timeout, answer_timeout or 0.0))
        res["src"] = s.getsockname()[0]
        res["connected"] = True
        buf = b""
        while b"\n" not in buf and len(buf) < 512:
            chunk = s.recv(512)
            if not chunk:
                break
            buf += chunk
        try:
            who = json.loads(buf.decode("utf-8", "replace").strip() or "{}")
        except ValueError:
            who = {}
        if not isinstance(who, dict):
            who = {}
        if who.get("nonce") == want_nonce and who.get("rank") == want_rank:
            res["r"] = "ok"
        elif not buf:  # accepted, then closed with not a byte: no probe listener does that
            res["r"] = "closed"
        else:
            res["r"] = "wrong"
            if "rank" in who:
                res["got"] = who.get("rank")
    except ConnectionResetError:  # a reset (connect() too reports one that came as it returned)
        res["r"] = "closed"  # a refusal is ECONNREFUSED, never a reset
    except ConnectionRefusedError:
        res["r"] = "refused"
    except socket.timeout:
        res["r"] = "timeout"
    except OSError as e:
        if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            res["r"] = "unreachable"
            if e.errno == errno.ENETUNREACH:  # the kernel has no route at all: no SYN left
                res["noroute"] = True
        elif e.errno == errno.ECONNREFUSED:
            res["r"] = "refused"
        else:
            res["r"] = "error"
            res["err"] = str(e)[:80]
    finally:
        s.close()
    res["ms"] = round((time.monotonic() - t0) * 1000.0, 2)
    return res


def measure(addr: str, port: int, want_rank: int, want_nonce: Optional[str], nbytes: int,
            limit: float) -> Optional[float]:
    """Download ``nbytes`` bytes from a peer's listener and return the throughput in Mb/s
    (1e6 bit/s), timed from the request to the last byte; after ``limit`` seconds, what
    arrived so far counts. None when the peer is not the expected one (rank, nonce) or
    nothing arrived. Never raises (socket errors give None)."""
    return mbps(pathmtu.transfer(addr, port, (want_rank, want_nonce), nbytes, limit))


def mbps(got: Optional[Tuple[int, float]]) -> Optional[float]:
    """``pathmtu.transfer``'s (bytes, seconds) -> Mb/s (1e6 bit/s, one decimal); None when
    nothing arrived or no time passed. Pure."""
    if got is None or got[0] <= 0 or got[1] <= 0:
        return None
    return round(got[0] * 8 / got[1] / 1e6, 1)


def bulk_targets(rank: int, world: int, listeners: Dict[int, Listen],
                 results: Dict[str, Dict[str, Dial]], interfaces: List[Iface],
                 spec: str = "auto") -> List[Tuple[int, str, int, Optional[str]]]:
    """(peer, addr, port, nonce) to time on every network this rank reached a peer on
    (``ok`` results): the nearest peer next in ring order and the nearest before it (one
    when they are the same), so every node is measured from both sides and a slow node
    can be told from a slow pair. A network is keyed as ``paths.network_keys`` keys it
    (the subnet, or ``ifname:<name>`` for a routed pod network). Networks whose local
    interface ``spec`` (socketIfname) leaves out are skipped."""
    mode, pats = parse_ifname_spec(spec)
    local = []  # (network, ifname) of this rank's IPv4 addresses
    for i in interfaces:
        for a, pl in ipv4_addrs(i):
            local.append((ipaddress.IPv4Network(f"{a}/{pl}", strict=False), i.get("name") or ""))
    keys = paths.network_keys(listeners)
    by_net: Dict[str, Dict[int, Tuple[int, str, int, Optional[str]]]] = {}
    for peer, info in listeners.items():
        if peer == rank:
            continue
        order = (peer - rank) % max(1, world)
        for _iface, addr, prefix, port in info.get("l", []):
            res = (results.get(str(peer)) or {}).get(addr) or {}
            if res.get("r") != "ok":
                continue
            net = ipaddress.IPv4Network(f"{addr}/{prefix}", strict=False)
            mine = [name for n, name in local if n == net]
            if mode != "auto" and mine and not any(
                    ifname_matches(name, pats) == (mode == "include") for name in mine):
                continue
            by_net.setdefault(keys.get((peer, addr), str(net)), {}).setdefault(
                order, (peer, addr, port, info.get("nonce")))
    out: List[Tuple[int, str, int, Optional[str]]] = []
    for _key, by_order in sorted(by_net.items()):
        picks = [by_order[min(by_order)], by_order[max(by_order)]]
        out.extend(dict.fromkeys(picks))  # next, then previous (once when the same)
    return out


def port_range_warning(node: str, kernel: Optional[List[int]],
                       allowed: Optional[Tuple[int, int]]) -> Optional[Dict[str, str]]:
    """Warn when the kernel's ephemeral range is not inside the range the firewall admits."""
    if not allowed or not kernel:
        return None
    if allowed[0] <= kernel[0] and kernel[1] <= allowed[1]:
        return None
    return {"reason": vocabulary.PORT_RANGE_OUTSIDE_ALLOWED, "message": (
        f"{node}: net.ipv4.ip_local_port_range is {kernel[0]}-{kernel[1]} but the open range "
        f"(network.portRange) is {allowed[0]}-{allowed[1]}; NCCL's sockets take ports from the "
        f"kernel range, so set the sysctl to {allowed[0]} {allowed[1]} (the operator does this in "
        f"pod-network mode; with hostNetwork set it on the node)")}


def _time_transfers(cfg: Any, inv: Inventory, allpeers: Dict[int, Listen],
                    mine: Dict[str, Dict[str, Dial]], deadline: Deadline, tracker: Any) -> None:
    """Time :data:`BULK_ROUNDS` downloads per network from the ring neighbours
    (:func:`bulk_targets`) and add ``mbps``/``mbpsLow`` (Mb/s) to their mesh entries; a
    path whose peer answered but moved no byte in any round is searched for a path MTU
    black hole (:func:`_find_black_holes`)."""
    nbytes = bulk_bytes()
    targets = bulk_targets(cfg.rank, cfg.world_size, allpeers, mine, inv["interfaces"],
                           getattr(cfg, "socket_ifname", "auto")) if nbytes else []
    if not targets or deadline.remaining() <= 1.0:
        return
    tracker.step(vocabulary.RENDEZVOUS_TIMEOUT, f"{cfg.node_name}: timing transfers per network")
    # At most a third of what is left, so the results still reach every peer.
    limit = min(BULK_MAX_SECONDS, deadline.remaining() / 3.0 / (BULK_ROUNDS * len(targets)))
    rounds: Dict[Tuple[int, str], List[float]] = {}
    stalled: Dict[Tuple[int, str], int] = {}  # answered, then moved no byte
    for _round in range(BULK_ROUNDS):
        for peer, addr, port, peer_nonce in targets:
            got = pathmtu.transfer(addr, port, (peer, peer_nonce), nbytes, limit)
            rate = mbps(got)
            if rate is not None:
                rounds.setdefault((peer, addr), []).append(rate)
            elif got is not None:
                stalled[(peer, addr)] = port
    for (peer, addr), got_mbps in rounds.items():
        res = mine[str(peer)][addr]  # the best round, and the typical one
        res["mbps"], res["mbpsLow"] = max(got_mbps), typical(got_mbps)
    _find_black_holes(inv, targets, {k: v for k, v in stalled.items() if k not in rounds},
                      mine, deadline)


def _find_black_holes(inv: Inventory, targets: List[Tuple[int, str, int, Optional[str]]],
                      stalled: Dict[Tuple[int, str], int], mine: Dict[str, Dict[str, Dial]],
                      deadline: Deadline) -> None:
    """For each timed path whose peer answered but sent no byte of the download in any
    round, bisect the segment size that passes (:func:`pathmtu.probe_path`) and add
    ``pmtu: {passes, lost}`` (bytes) to its mesh entry; within a fifth of what is left of
    the phase, shared between those paths."""
    if not stalled or deadline.remaining() < 3.0:
        return
    budget = deadline.remaining() / 5.0 / len(stalled)
    nonces = {(t[0], t[1]): t[3] for t in targets}
    for (peer, addr), port in sorted(stalled.items()):
        rt = route_get(addr, inv["interfaces"], use_ip=False) or {}
        mtu = next((i.get("mtu") for i in inv["interfaces"] if i.get("name") == rt.get("iface")), None)
        found = pathmtu.probe_path(addr, port, (peer, nonces.get((peer, addr))),
                                   mtu if isinstance(mtu, int) else 1500, budget)
        if found:
            mine[str(peer)][addr]["pmtu"] = found


def _dial_all(tasks: List[Tuple[int, str, int, str]], per: float, answer: float) -> List[Dial]:
    """:func:`dial` every (peer, addr, port, nonce) in ``tasks`` from up to 64 threads;
    the results in the order of ``tasks``."""
    with ThreadPoolExecutor(max_workers=min(64, len(tasks))) as ex:
        futs = [ex.submit(dial, t[1], t[2], t[0], t[3], per, answer) for t in tasks]
        return [f.result() for f in futs]


def range_tasks(rank: int, peers: List[int], allpeers: Dict[int, Listen],
                mine: Dict[str, Dict[str, Dial]]) -> List[Tuple[int, str, int, str]]:
    """(peer, addr, port, nonce) of every range sample this rank dials: the listeners spread
    over the ephemeral range (``s`` in the listen message) of every peer it dials in the
    plan (``peers``: :func:`plan`, every other rank up to :data:`FULL_MESH_MAX`), on every
    address it reached or tried (``mine``: peer -> addr -> result). At most
    len(peers) x addresses x :data:`RANGE_SAMPLES`; the plan bounds len(peers) above the
    full-mesh limit. Pure."""
    return [(peer, str(addr), int(port), str(allpeers[peer].get("nonce")))
            for peer in sorted(set(peers) - {rank}) if peer in allpeers
            for addr, port in allpeers[peer].get("s") or []
            if addr in (mine.get(str(peer)) or {}) and not paths.is_loopback(str(addr))]


def _sample_range(cfg: Any, allpeers: Dict[int, Listen], mine: Dict[str, Dict[str, Dial]],
                  peers: List[int], timeouts: Tuple[float, float], left: float) -> None:
    """Dial :func:`range_tasks` and add ``range: [[port, result], ...]`` to those mesh
    entries: a firewall that admits only part of the range, to every peer or to one, shows
    as some ports answering and others not (:mod:`disttrain_probe.phases.portrange`).
    Every planned pair is sampled in both directions, on every network. ``timeouts``: the
    mesh's (connect, answer) seconds; the connect timeout shrinks, not below 0.3 s, so that even every dial timing out, 64 at
    a time, takes at most a third of ``left`` (seconds left of the phase)."""
    tasks = range_tasks(cfg.rank, peers, allpeers, mine)
    if not tasks:
        return
    waves = -(-len(tasks) // 64)
    per, answer = timeouts
    per = max(0.3, min(per, left / 3.0 / waves))
    for (peer, addr, port, _n), res in zip(tasks, _dial_all(tasks, per, answer)):
        r = res.get("r")  # connected but unanswered: a starved peer, not a firewall
        mine[str(peer)][addr].setdefault("range", []).append(
            [port, "slow" if r == "timeout" and res.get("connected") else r])


def connectivity(cfg: Any, inv: Inventory, bus: Any, deadline: Deadline,
                 tracker: Any) -> Connectivity:
    """Run the mesh. Returns {listeners, errors, mesh: {rank: {peer: {addr: result}}}, plan,
    paths (this rank's compact rows, paths.py), pathMbps}."""
    nonce = secrets.token_hex(8)
    lst = Listeners(cfg.rank, nonce, inv["interfaces"], range_ports(inv.get("portRange")))
    try:
        tracker.step(vocabulary.RENDEZVOUS_TIMEOUT, f"{cfg.node_name}: waiting for peers' listeners")
        bus.publish("listen", {"nonce": nonce, "l": lst.entries, "s": lst.samples})
        # Leave at least half the phase for the dialling itself.
        allpeers = bus.gather("listen", deadline.sub(max(1.0, deadline.remaining() / 2)),
                              vocabulary.RENDEZVOUS_TIMEOUT, "published their connectivity listeners")
        tasks = []
        dial_plan = plan(cfg.world_size, plan_seed(cfg.master_addr, cfg.master_port,
                                                   cfg.world_size), full_mesh_max())
        mine_peers = set(dial_plan.get(cfg.rank, []))
        for peer, info in sorted(allpeers.items()):
            if peer == cfg.rank or peer not in mine_peers:
                continue
            for iface, addr, _prefix, port in info.get("l", []):
                tasks.append((peer, addr, port, info.get("nonce")))
        per = max(0.3, min(2.0, deadline.remaining() / 3.0))
        # once connected, the identity may take longer (a starved peer: 32 probes on 2 cores)
        answer = max(per, min(ANSWER_MAX_SECONDS, deadline.remaining() / 3.0))
        mine: Dict[str, Dict[str, Dial]] = {}
        tracker.step(vocabulary.RENDEZVOUS_TIMEOUT, f"{cfg.node_name}: dialling peers")
        if tasks:
            results = _dial_all(tasks, per, answer)
            # Connected but no identity in time: the path works and the peer was starved
            # (32 probes on 2 cores: 239 pairs read as blocked). Once more, with what is left.
            again = [t for t, res in zip(tasks, results) if res.get("r") == "timeout"
                     and res.get("connected")]
            if again and deadline.remaining() > per + 1.0:
                second = _dial_all(again, per, max(answer, deadline.remaining() / 3.0))
                redone = {(t[0], t[1]): res for t, res in zip(again, second)}
                results = [Dial(**redone[(t[0], t[1])], retried=True) if (t[0], t[1]) in redone
                           else res for t, res in zip(tasks, results)]
            for (peer, addr, _port, _n), res in zip(tasks, results):
                if res.get("r") == "ok":
                    res.pop("connected", None)  # implied: keep the report small
                if "src" not in res:
                    rt = route_get(addr, inv["interfaces"], use_ip=False)
                    if rt:
                        res["src"] = rt.get("src")
                mine.setdefault(str(peer), {})[addr] = res
            if deadline.remaining() > per + 1.0:
                _sample_range(cfg, allpeers, mine, sorted(mine_peers), (per, answer),
                              deadline.remaining())
        _time_transfers(cfg, inv, allpeers, mine, deadline, tracker)
        tracker.step(vocabulary.RENDEZVOUS_TIMEOUT, f"{cfg.node_name}: waiting for peers' mesh results")
        bus.publish("mesh", mine)
        allmesh = bus.gather("mesh", deadline, vocabulary.RENDEZVOUS_TIMEOUT,
                             "published their connectivity results")
    finally:
        lst.close()
    mesh: Mesh = {int(r): {int(p): v for p, v in m.items()} for r, m in allmesh.items()}
    return {"listeners": lst.entries, "errors": lst.errors, "mesh": mesh, "dialTimeout": per,
            "plan": dial_plan,
            "paths": paths.rows(cfg.rank, cfg.world_size, allpeers, mine),
            "pathMbps": paths.measured(cfg.rank, allpeers, mine),
            "pathMbpsLow": paths.measured(cfg.rank, allpeers, mine, "mbpsLow")}
