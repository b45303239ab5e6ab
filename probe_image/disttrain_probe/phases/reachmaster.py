"""A rank reaching the master, the standard-library half of the rendezvous (it runs while
torch is still being imported): resolve MASTER_ADDR (retried, with a window for a late
record), refuse a loopback answer, and for ranks >= 1 dial the master port
(:mod:`disttrain_probe.phases.dialing`) until it answers or the failure is classified.
"""
from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.paths import is_loopback
from disttrain_probe.contract.timing import SIBLING_SECONDS
from disttrain_probe.ground.deadline import Deadline, ProbeFailure
from disttrain_probe.ground.results import SharedState
from disttrain_probe.ground.shapes import Inventory, Master
from disttrain_probe.phases.dialing import (
    HOST_CHECK_SECONDS,
    HostCheck,
    _dial,
    dial_give_up_at,
    dial_until_decided,
    host_check,
    host_words,
    order,
)
from disttrain_probe.phases.inventory import hosts_entry, nameserver, resolve, route_get
from disttrain_probe.phases.masterstore import beacon_token


def _resolve_within(addr: str, timeout: float) -> List[str]:
    """:func:`resolve` ``addr``, giving up after ``timeout`` seconds (getaddrinfo has no
    timeout of its own: a DNS server that never answers costs the resolver's timeouts for
    every search domain). Raises OSError (also when it gave up) or UnicodeError."""
    box: Dict[str, Union[List[str], BaseException]] = {}

    def run() -> None:
        try:
            box["res"] = resolve(addr)
        except BaseException as e:  # handed to the caller
            box["err"] = e

    t = threading.Thread(target=run, name="probe-resolve", daemon=True)
    t.start()
    t.join(max(0.05, timeout))
    if t.is_alive():
        raise OSError(f"no answer from the resolver within {timeout:.0f}s")
    err, res = box.get("err"), box.get("res")
    if isinstance(err, BaseException):
        raise err
    return res if isinstance(res, list) and res else []


def _resolve_retry(addr: str, deadline: Deadline,
                   cap: float = float("inf")) -> Tuple[List[str], Optional[str]]:
    """Resolve ``addr``, retrying every 0.5 s for at most ``cap`` seconds or until the
    deadline (a lookup in flight when that time comes is abandoned): ([addresses], None) or
    ([], the last error)."""
    err = None
    give_up = time.monotonic() + cap
    while True:
        try:
            left = min(give_up, deadline.at) - time.monotonic()
            res = _resolve_within(addr, max(0.5, left))
            if res:
                return res, None
            err = "no addresses"
        except (OSError, UnicodeError) as e:
            err = str(e)
        if deadline.remaining() < 0.6 or time.monotonic() >= give_up:
            return [], err
        time.sleep(0.5)


def _answer_source(name: str) -> Master:
    """``{"source": "hosts"}`` when /etc/hosts maps ``name`` (glibc reads it before DNS),
    else ``{"source": "dns", "server": <the first nameserver>}`` (no server when
    resolv.conf names none). Never raises."""
    if hosts_entry(name) is not None:
        return {"source": "hosts"}
    server = nameserver()
    return {"source": "dns", "server": server} if server else {"source": "dns"}


def _is_ip(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr)
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class _Reach:
    """What every step of :func:`reach_master` reads: the arguments, the rank's name in
    messages (``where``) and the ``master`` record it fills (``state['master']``)."""
    cfg: Any
    inv: Inventory
    deadline: Deadline
    tracker: Any
    state: SharedState
    master: Master

    @property
    def node(self) -> str:
        return str(self.cfg.node_name)

    @property
    def where(self) -> str:
        return f"{self.cfg.node_name} (rank {self.cfg.rank})"


def reach_master(cfg: Any, inv: Inventory, deadline: Deadline, tracker: Any,
                 state: SharedState) -> Optional[str]:
    """The standard-library half of the rendezvous (it runs while torch is still being
    imported): resolve MASTER_ADDR, refuse a loopback answer, and for ranks >= 1 dial the
    master port until it answers. Fills ``state['master']``; returns the address the dial
    reached (None for rank 0). Raises :class:`ProbeFailure` with the classified reason."""
    master: Master = {"addr": cfg.master_addr, "port": cfg.master_port,
                              "resolved": [], "route": None, "joined": False}
    state["master"] = master
    r = _Reach(cfg, inv, deadline, tracker, state, master)
    t_resolve = time.monotonic()
    resolved, rerr, late = _resolve_master(r)
    _record_answer(r, resolved)
    if not resolved:  # rank 0 too: its own TCPStore client dials MASTER_ADDR in training
        raise _unresolvable(r, rerr, time.monotonic() - t_resolve, late)
    loop = [a for a in resolved if is_loopback(a)]
    agent_store = getattr(cfg, "agent_store", False)  # torchrun's agent hosts it: join
    if cfg.rank == 0 and not agent_store:
        _check_rank0(r, resolved, loop)
        return None
    if loop and not cfg.loopback_requested and cfg.rank != 0:
        raise ProbeFailure(vocabulary.MASTER_ADDR_LOOPBACK, (
            f"{r.where}: MASTER_ADDR={cfg.master_addr} resolves to {', '.join(loop)} (loopback), "
            f"so this rank would dial itself instead of rank 0; set MASTER_ADDR to rank 0's "
            f"node address, not localhost or a hostname mapped to 127.0.0.1 in /etc/hosts"))
    addr = _dial_master(r, resolved)
    master["connected"] = addr
    return addr


def _resolve_master(r: _Reach) -> Tuple[List[str], Optional[str], str]:
    """Resolve MASTER_ADDR, waiting for a late record while another name of the job
    resolves. Returns (addresses, the last error, the late-record clause or "")."""
    cfg, deadline = r.cfg, r.deadline
    r.tracker.step(vocabulary.MASTER_ADDR_UNRESOLVABLE, f"{r.where}: resolving MASTER_ADDR={cfg.master_addr} hung")
    # Every rank, rank 0 too, gets the same window: cluster DNS may publish rank 0's own
    # record a moment after its pod starts, and a rank 0 that gave up sooner than its
    # peers would fail a healthy job.
    resolved, rerr = _resolve_retry(cfg.master_addr, deadline,
                                    getattr(cfg, "resolve_seconds", float("inf")))
    sibling = getattr(cfg, "peer_dns_name", None)
    late = ""
    if not resolved and sibling and sibling != cfg.master_addr and deadline.remaining() > 1.0:
        # Another name of this job resolves: the Service and this node's DNS path work, so
        # rank 0's record is only late (pods created together, rank 0's without an address
        # yet, or cluster DNS slow to publish under load): wait for it to the deadline.
        mine, _ = _resolve_retry(sibling, Deadline(min(deadline.at, time.monotonic() + SIBLING_SECONDS)), 0.0)
        if mine:
            r.master["peerName"] = sibling
            r.tracker.step(vocabulary.MASTER_ADDR_UNRESOLVABLE,
                           f"{r.where}: resolving MASTER_ADDR={cfg.master_addr} (late record) hung")
            resolved, rerr = _resolve_retry(cfg.master_addr, Deadline(deadline.at - HOST_CHECK_SECONDS))
            late = (f" while {sibling} (this job's) resolves: the Service and DNS work, rank 0's "
                    f"pod has had no address all along (not started: see its pod's events)")
    return resolved, rerr, late


def _record_answer(r: _Reach, resolved: List[str]) -> None:
    """``master``: the addresses, where the answer came from and the route to the first."""
    r.master["resolved"] = resolved
    if resolved and not _is_ip(r.cfg.master_addr):  # where the answer came from, for the operator
        r.master.update(_answer_source(r.cfg.master_addr))
    if resolved:
        r.master["route"] = route_get(order(resolved)[0], r.inv["interfaces"],
                                      timeout=min(2.0, r.deadline.remaining()))


def _unresolvable(r: _Reach, rerr: Optional[str], took: float, late: str) -> ProbeFailure:
    """MASTER_ADDR did not resolve: the failure, with the path to the DNS server recorded."""
    cfg = r.cfg
    server = nameserver() if not _is_ip(cfg.master_addr) else None
    via = ""
    if server:  # evidence for the operator: the path to the DNS server
        dns = route_get(server, r.inv["interfaces"], timeout=min(2.0, max(0.1, r.deadline.remaining())))
        r.master["dns"] = dict(dns or {}, server=server)
        if dns and dns.get("iface"):
            via = f"; its DNS server {server} is reached by {dns['iface']} ({dns.get('src')})"
    if late:
        return ProbeFailure(vocabulary.MASTER_ADDR_UNRESOLVABLE, (
            f"{r.where}: MASTER_ADDR={cfg.master_addr} does not resolve ({rerr}) after "
            f"{took:.0f}s of retries{late}"))
    return ProbeFailure(vocabulary.MASTER_ADDR_UNRESOLVABLE, (
        f"{r.where}: MASTER_ADDR={cfg.master_addr} does not resolve ({rerr}) after "
        f"{took:.0f}s of retries{via}; use rank 0's node IP or a headless "
        f"Service name that exists before the probe starts"))


def _check_rank0(r: _Reach, resolved: List[str], loop: List[str]) -> None:
    """Rank 0 (it serves the store): its name mapped to loopback here blocks, an address
    not its own warns, and a master port it could not listen on fails."""
    cfg, where, node = r.cfg, r.where, r.node
    local_addrs = {a.partition("/")[0] for i in r.inv["interfaces"] for a in i.get("addrs") or []}
    if (loop and cfg.world_size > 1 and not cfg.loopback_requested and not _is_ip(cfg.master_addr)
            and not cfg.master_addr.lower().startswith("localhost")):
        # Rank 0 itself would serve, but the name is mapped to loopback on this node
        # (a stale /etc/hosts entry): any other rank placed here, as on a retry, dials
        # itself. Block now rather than by the luck of placement.
        raise ProbeFailure(vocabulary.MASTER_ADDR_LOOPBACK, (
            f"{where}: MASTER_ADDR={cfg.master_addr} resolves to {', '.join(loop)} (loopback) "
            f"on rank 0's own node: rank 0 serves on every address, but any other rank placed "
            f"on {node} (a retry places ranks anew) would dial itself instead of rank 0; remove "
            f"the entry mapping {cfg.master_addr} to {loop[0]} from {node}'s /etc/hosts"))
    if resolved and not (set(resolved) & local_addrs):
        r.state["warnings"].append({"reason": vocabulary.MASTER_ADDR_NOT_LOCAL, "message": (
            f"{where}: MASTER_ADDR={cfg.master_addr} resolves to {', '.join(resolved)}, none of "
            f"which is an address of this node; other ranks may reach another host")})
    sock, early_err = r.state.get("master_listener") or (None, None)
    if early_err:
        raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
            f"{where}: rank 0 could not listen on MASTER_PORT {cfg.master_port}: "
            f"{early_err[:160]}; another process holds the port (hostNetwork?); "
            f"set rendezvous.port to a free port"))


def _dial_master(r: _Reach, resolved: List[str]) -> str:
    """A rank >= 1 (or any rank joining an agent's store): dial the master port until it
    answers, the grace after rank 0's start or a decided verdict. Returns the address."""
    cfg, deadline, tracker = r.cfg, r.deadline, r.tracker
    tracker.step(vocabulary.MASTER_PORT_TIMEOUT, f"{r.where}: connecting to {cfg.master_addr}:{cfg.master_port}")
    started_at = getattr(cfg, "master_started_at", None)
    now = time.monotonic()
    give_up = dial_give_up_at(deadline.at, getattr(tracker, "start", now), now,
                              bool(started_at), getattr(cfg, "master_grace_seconds", 5.0))
    # keep time for the host check after a failed dial (at the deadline it had none and
    # a host that resets other ports read as silent)
    give_up = max(now, min(give_up, deadline.at - HOST_CHECK_SECONDS))
    decided: Optional[HostCheck]
    if started_at:
        addr, last, took = _dial(resolved, cfg.master_port, Deadline(give_up))
        decided = None
    else:  # no evidence of rank 0's start: a port that drops while its host answers decides
        bp = getattr(cfg, "beacon_port", None)
        addr, last, took, decided = dial_until_decided(
            resolved, cfg.master_port, Deadline(give_up),
            beacon=(bp, beacon_token(cfg)) if bp else None)
    if addr is None:
        raise _dial_failure(r, resolved, _Dialled(last, took, decided, started_at))
    return addr


@dataclass(frozen=True)
class _Dialled:
    """How a failed dial ended: the last error, its seconds, the deciding host check (or
    None) and rank 0's start (None without that evidence)."""
    last: str
    took: float
    decided: Optional[HostCheck]
    started_at: Optional[str]


def _dial_failure(r: _Reach, resolved: List[str], d: _Dialled) -> ProbeFailure:
    """The dial failed: check whether the host answers at all, and classify."""
    cfg, where = r.cfg, r.where
    last, took, decided, started_at = d.last, d.took, d.decided, d.started_at
    shown = f"{cfg.master_addr}:{cfg.master_port}" + (
        f" ({', '.join(resolved)})" if resolved != [cfg.master_addr] else "")
    target = order(resolved)[0]
    r.tracker.step(vocabulary.MASTER_PORT_TIMEOUT, f"{where}: checking whether {target} answers at all")
    r.master["hostCheck"] = decided or host_check(target, cfg.master_port,
                                                  min(HOST_CHECK_SECONDS, r.deadline.remaining()))
    seen = host_words(r.master["hostCheck"], r.node)
    seen = f"; {seen}" if seen else ""
    if decided and decided.get("listening") and last == "refused":
        return ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
            f"{where}: connection to MASTER_ADDR {shown} refused for {took:.1f}s although "
            f"rank 0's probe listens there: it answers on TCP {decided['port']}, bound "
            f"after {cfg.master_port}; a firewall (or NetworkPolicy) on rank 0's node rejects "
            f"TCP {cfg.master_port}; open TCP {cfg.master_port} to rank 0's node"))
    if started_at and last == "refused":
        return ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
            f"{where}: connection to MASTER_ADDR {shown} refused for {took:.1f}s although "
            f"rank 0's probe has been running since {started_at} (it listens on that port "
            f"as it starts){seen}; a firewall on rank 0's node rejects TCP "
            f"{cfg.master_port}, or MASTER_ADDR names another host; open TCP "
            f"{cfg.master_port} to rank 0's node or fix MASTER_ADDR"))
    if started_at:
        return ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
            f"{where}: connection to MASTER_ADDR {shown} {last} for {took:.1f}s although "
            f"rank 0's probe has been running since {started_at}{seen}; a firewall drops "
            f"TCP {cfg.master_port} or the address is not routable from this node; open TCP "
            f"{cfg.master_port} between nodes or fix MASTER_ADDR"))
    if last == "refused":
        return ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
            f"{where}: connection to MASTER_ADDR {shown} refused for {took:.1f}s: nothing "
            f"listens there (rank 0 not started, MASTER_PORT wrong, or MASTER_ADDR names "
            f"another host); make MASTER_ADDR rank 0's address and rendezvous.port its port"))
    return ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
        f"{where}: connection to MASTER_ADDR {shown} {last} for {took:.1f}s{seen}; a "
        f"firewall drops TCP {cfg.master_port} or the address is not routable from this "
        f"node; open TCP {cfg.master_port} between nodes or fix MASTER_ADDR"))
