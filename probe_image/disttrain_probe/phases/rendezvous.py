"""Phase 2, rendezvous: resolve and reach MASTER_ADDR:MASTER_PORT, join the TCPStore.

Rank 0 hosts a ``torch.distributed.TCPStore`` on MASTER_PORT (the port training will
use); it binds and listens on that port as soon as it starts (:func:`listen_early`, before
torch is imported) and hands the socket to the TCPStore later, so peers' connections
queue until it is ready. Every other rank resolves MASTER_ADDR, refuses a loopback answer,
dials the port with plain TCP (so the last error can be classified) and then joins the
store. It dials until the phase deadline, unless it has evidence that rank 0's probe was
already running when this rank started (``DISTTRAIN_PROBE_MASTER_STARTED_AT``, set by the
operator): then a port that still refuses or drops its connections once this probe has
run for ``DISTTRAIN_PROBE_MASTER_GRACE_SECONDS`` (and has dialled for at least
:data:`MIN_DIAL_SECONDS`) is blocked, not "not open yet" (:func:`dial_give_up_at`). All
ranks then publish their inventory and wait for each other. The :class:`Bus` wrapper is
the all-gather used by every later phase.
"""
from __future__ import annotations

import errno
import ipaddress
import json
import socket
import threading
import time
from datetime import timedelta
from typing import Any, Dict, List, Optional, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.timing import SIBLING_SECONDS
from disttrain_probe.runtime.deadline import Deadline, ProbeFailure
from disttrain_probe.phases.inventory import hosts_entry, is_loopback, nameserver, resolve, route_get

POLL = 0.02
PREFIX = "dtp/"
# With evidence that rank 0 listens, dial at least this long (seconds) before giving up:
# two connection attempts, i.e. a SYN and its retransmission, or several refusals.
MIN_DIAL_SECONDS = 2.0
LISTEN_BACKLOG = 4096  # connections queue here while rank 0 imports torch


class Bus:
    """Publish/gather JSON values per rank through the TCPStore (an all-gather)."""

    def __init__(self, store: Any, rank: int, world_size: int, node: str):
        self.store = store
        self.rank = rank
        self.world = world_size
        self.node = node
        self.nodes: Dict[int, str] = {rank: node}
        # Every waiting rank polls rank 0's store: slow down with scale (20 ms up to 16 ranks).
        self.poll = POLL * max(1.0, world_size / 16.0)

    def _k(self, key: str) -> str:
        return PREFIX + key

    def publish(self, topic: str, value: Any) -> None:
        self.store.set(self._k(f"{topic}/{self.rank}"), json.dumps(value, separators=(",", ":")))
        self.store.add(self._k(f"{topic}/count"), 1)

    def abort(self, phase: str, reason: str, message: str) -> None:
        """Tell peers this rank failed, so they stop waiting and report it."""
        try:
            self.store.set(self._k("abort"), json.dumps(
                {"rank": self.rank, "node": self.node, "phase": phase, "reason": reason,
                 "message": message}))
        except Exception:
            pass

    def check_abort(self) -> None:
        if self.store.check([self._k("abort")]):
            a = json.loads(self.store.get(self._k("abort")))
            if a.get("rank") != self.rank:
                raise ProbeFailure(a.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                                   f"peer {a.get('node')} (rank {a.get('rank')}) failed in "
                                   f"{a.get('phase')}: {a.get('message')}", a.get("phase"),
                                   relayed=True)

    def gather(self, topic: str, deadline: Deadline, timeout_reason: str, what: str,
               fix: str = "") -> Dict[int, Any]:
        """Wait until every rank published ``topic``; raise ``timeout_reason`` naming the missing."""
        last_abort = 0.0
        while True:
            n = self.store.add(self._k(f"{topic}/count"), 0)
            if n >= self.world:
                break
            now = time.monotonic()
            if now - last_abort > 0.1:
                self.check_abort()
                last_abort = now
            if deadline.expired():
                missing = [r for r in range(self.world)
                           if not self.store.check([self._k(f"{topic}/{r}")])]
                for r in range(self.world):
                    if r not in missing and r not in self.nodes:
                        try:
                            v = json.loads(self.store.get(self._k(f"{topic}/{r}")))
                            if isinstance(v, dict) and v.get("node"):
                                self.nodes[r] = v["node"]
                        except Exception:
                            pass
                seen = [f"{r} ({self.nodes.get(r, '?')})" for r in range(self.world)
                        if r not in missing]
                raise ProbeFailure(
                    timeout_reason,
                    f"{self.node}: rank(s) {', '.join(str(r) for r in missing)} never {what} "
                    f"within the deadline; present: {', '.join(seen) or 'none'}"
                    + (f"; {fix}" if fix else ""))
            time.sleep(self.poll)
        out: Dict[int, Any] = {}
        for r in range(self.world):
            out[r] = json.loads(self.store.get(self._k(f"{topic}/{r}")))
        return out

    def barrier(self, topic: str, deadline: Deadline) -> bool:
        """Count-only barrier; returns False on deadline instead of raising."""
        self.store.add(self._k(f"{topic}/count"), 1)
        while self.store.add(self._k(f"{topic}/count"), 0) < self.world:
            if deadline.expired():
                return False
            time.sleep(self.poll)
        return True


def _resolve_within(addr: str, timeout: float) -> List[str]:
    """:func:`resolve` ``addr``, giving up after ``timeout`` seconds (getaddrinfo has no
    timeout of its own: a DNS server that never answers costs the resolver's timeouts for
    every search domain). Raises OSError (also when it gave up) or UnicodeError."""
    box: Dict[str, Any] = {}

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
    if "err" in box:
        raise box["err"]
    return box.get("res") or []


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


def _order(addrs: List[str]) -> List[str]:
    return [a for a in addrs if ":" not in a] + [a for a in addrs if ":" in a]


def listen_early(port: int) -> Tuple[Optional[socket.socket], Optional[str]]:
    """Bind and listen on TCP ``port`` on every address (IPv6 dual-stack, else IPv4), as
    the TCPStore would, so peers can connect before torch is even imported.

    Returns (socket, None), or (None, the error) when the port cannot be bound (another
    process holds it: the caller reports that). Never raises."""
    err = None
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        s = None
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((host, port))
            s.listen(LISTEN_BACKLOG)
            return s, None
        except OSError as e:
            if s is not None:
                s.close()
            # no IPv6 here: try IPv4; anything else (the port is taken) is the answer
            if family == socket.AF_INET6 and e.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL,
                                                         errno.EPROTONOSUPPORT, errno.EINVAL):
                continue
            err = str(e)
            break
    return None, err or "cannot bind"


BEACON_SECONDS = 1.0  # a dial of rank 0's beacon port, connect and read


def beacon_token(cfg: Any) -> bytes:
    """What rank 0's beacon says, one line naming the job (UID) and the probe attempt, so
    a peer never takes another service (or another job's probe) on that port for its rank 0."""
    return f"disttrain-probe {getattr(cfg, 'job_uid', None) or '-'} " \
           f"{getattr(cfg, 'attempt', None) or '-'} rank0\n".encode()


def start_beacon(port: int, token: bytes) -> Tuple[Optional[socket.socket], Optional[str]]:
    """Rank 0, right after :func:`listen_early` bound MASTER_PORT: listen on ``port`` on
    every address and answer each connection with ``token`` (then close it), from a daemon
    thread, for the life of the probe. Returns (socket, None) or (None, the error); never
    raises (a port that cannot be bound only loses the evidence)."""
    sock, err = listen_early(port)
    if sock is None:
        return None, err

    def serve() -> None:
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            try:
                c.settimeout(1.0)
                c.sendall(token)
            except OSError:
                pass
            finally:
                c.close()

    threading.Thread(target=serve, name="probe-beacon", daemon=True).start()
    return sock, None


def beacon_answers(addr: str, port: int, token: bytes, timeout: float = BEACON_SECONDS) -> bool:
    """True when ``addr``:``port`` answers with exactly ``token`` (this job's rank 0 probe,
    which listened on MASTER_PORT before it listened here) within ``timeout`` seconds."""
    try:
        with socket.create_connection((addr, port), timeout=max(0.05, timeout)) as c:
            c.settimeout(max(0.05, timeout))
            got = b""
            while len(got) < len(token):
                more = c.recv(len(token) - len(got))
                if not more:
                    break
                got += more
            return got == token
    except OSError:
        return False


def dial_give_up_at(deadline_at: float, probe_start: float, dial_start: float,
                    evidence: bool, grace: float, min_dial: float = MIN_DIAL_SECONDS) -> float:
    """When (monotonic seconds) a rank >= 1 stops dialling the master.

    Without ``evidence`` that rank 0's probe was running before this rank started, at
    ``deadline_at`` (the phase deadline): a refusal may just mean rank 0 is not up yet.
    With it, once this probe has run ``grace`` seconds (``probe_start`` + ``grace``; rank 0
    started earlier, so it has run longer and listens within moments of starting) and has
    dialled at least ``min_dial`` seconds, never after ``deadline_at``. The bound uses
    only this machine's clock, so clock skew between nodes cannot cause a false alarm."""
    if not evidence:
        return deadline_at
    return min(deadline_at, max(probe_start + grace, dial_start + min_dial))


def _dial(addrs: List[str], port: int, deadline: Deadline) -> Tuple[Optional[str], str, float]:
    """TCP-connect until one succeeds or the deadline. Returns (addr, last_error, seconds)."""
    t0 = time.monotonic()
    last = "timeout"
    while True:
        for a in _order(addrs):
            rem = deadline.remaining()
            if rem <= 0:
                return None, last, time.monotonic() - t0
            try:
                s = socket.create_connection((a, port), timeout=min(2.0, max(0.05, rem)))
                s.close()
                return a, "", time.monotonic() - t0
            except ConnectionRefusedError:
                last = "refused"
            except socket.timeout:
                last = "timeout"
            except OSError as e:
                if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                    last = "unreachable"
                elif e.errno == errno.ECONNREFUSED:
                    last = "refused"
                else:
                    last = f"error: {e}"
        if deadline.remaining() <= 0:
            return None, last, time.monotonic() - t0
        time.sleep(min(0.25, deadline.remaining()))


# Seconds of silence (no SYN-ACK, no reset, on the master port and on another port) after
# which a rank stops dialling without evidence of rank 0's start: a host that is up resets a
# closed port whether or not rank 0 listens yet, and a name that resolves (the pod has its
# address) or a node address is live, so silence is a filter or a broken path, never "rank 0
# not started". The window only covers transient drops (routes being programmed for a new
# pod, a SYN queue overflowing at rank 0: a closed port still resets then).
SILENCE_DECIDES_SECONDS = 6.0


def dial_until_decided(addrs: List[str], port: int, deadline: Deadline, probe_quiet: float = 2.0,
                       check: Any = None, silence_decides: float = SILENCE_DECIDES_SECONDS,
                       beacon: Optional[Tuple[int, bytes]] = None,
                       ) -> Tuple[Optional[str], str, float, Optional[Dict[str, Any]]]:
    """Dial like :func:`_dial`, but when a dial times out (the SYN got no answer at all) ask
    whether the host answers on another port (:func:`host_check`): a live host resets a
    closed port, so silence on the master port while another port answers is a filter on
    that port whatever rank 0 is doing: decided at once, without waiting for evidence of
    rank 0's start (gang-scheduled probes start together and carry none). Silence on both
    for ``silence_decides`` seconds in a row decides too (dropped on the way or at the
    host: :data:`SILENCE_DECIDES_SECONDS`). A refused master port is not decided here
    (rank 0 may not listen yet) unless ``beacon`` (rank 0's beacon port and token) is
    given and rank 0 answers there (:func:`beacon_answers`): it listened on the master
    port first, so the refusal is a rule, decided at once. Returns (addr, last error,
    seconds, the deciding host check or None); a silence verdict's host check carries
    ``silentSeconds``, a beacon verdict's ``listening: true`` and the beacon ``port``."""
    check = check or host_check
    t0 = time.monotonic()
    last = "timeout"
    silent_since: Optional[float] = None
    while deadline.remaining() > 0:
        addr, last, _ = _dial(addrs, port, Deadline(min(deadline.at, time.monotonic() + probe_quiet)))
        if addr is not None:
            return addr, "", time.monotonic() - t0, None
        if last == "refused" and beacon and deadline.remaining() > 0:
            target = _order(addrs)[0]
            if beacon_answers(target, beacon[0], beacon[1], min(BEACON_SECONDS, deadline.remaining())):
                # rank 0 listens: one more dial of the master port, now that it surely does
                addr, last, _ = _dial([target], port, Deadline(time.monotonic() + 0.5))
                if addr is not None:
                    return addr, "", time.monotonic() - t0, None
                if last == "refused":
                    return None, last, time.monotonic() - t0, {
                        "port": beacon[0], "r": "ok", "arp": arp_state(target) if ":" not in target
                        else None, "listening": True}
        if last != "timeout" or deadline.remaining() <= 0:
            silent_since = None  # refused or unreachable: not silence
            continue
        began = time.monotonic() - probe_quiet  # this dial was silent throughout
        h = check(_order(addrs)[0], port, min(1.0, deadline.remaining()))
        if h.get("r") in ("refused", "ok"):
            return None, last, time.monotonic() - t0, h
        if h.get("r") != "timeout":
            silent_since = None
            continue
        silent_since = began if silent_since is None else silent_since
        now = time.monotonic()
        if now - silent_since >= silence_decides:
            return None, last, now - t0, dict(h, silentSeconds=round(now - silent_since, 1))
    return None, last, time.monotonic() - t0, None


def arp_state(addr: str, table: str = "/proc/net/arp") -> Optional[str]:
    """The kernel's neighbour entry for IPv4 ``addr``: ``complete`` (a host answered ARP),
    ``incomplete`` (asked, nobody answered), or None (no entry, or not readable)."""
    try:
        with open(table) as f:
            for line in f.readlines()[1:]:
                p = line.split()
                if len(p) >= 3 and p[0] == addr:
                    return "complete" if int(p[2], 16) & 0x2 else "incomplete"
    except (OSError, ValueError):
        pass
    return None


HOST_CHECK_SECONDS = 1.5  # the dial of another port after the master port failed


def host_check(addr: str, master_port: int, timeout: float = HOST_CHECK_SECONDS) -> Dict[str, Any]:
    """After the master port failed: does MASTER_ADDR's host answer at all? A TCP dial to
    another port (1, normally closed: a live host resets it) and the ARP entry tell a
    filter on the master port alone (the host answers elsewhere) from a host whose replies
    never come back (ARP answered, no port answers: replies leave by another NIC, or
    everything from here is dropped) or one nobody answers for (no ARP reply).
    Returns {port, r (refused|ok|timeout|unreachable|error), arp}."""
    port = 1 if master_port != 1 else 2
    _, last, _ = _dial([addr], port, Deadline(time.monotonic() + timeout))
    r = "ok" if last == "" else ("error" if last.startswith("error") else last)
    return {"port": port, "r": r, "arp": arp_state(addr) if ":" not in addr else None}


def _host_words(h: Optional[Dict[str, Any]], node: str) -> str:
    """What :func:`host_check` says about the master's host, as a clause."""
    if not h:
        return ""
    if h["r"] in ("refused", "ok"):
        return f"the host answers on other ports (TCP {h['port']}: {h['r']}): the master port alone is filtered"
    if h.get("arp") == "complete":
        return (f"the host answered ARP but no TCP port answers (TCP {h['port']}: {h['r']}): its replies "
                f"to {node} are lost (a route out another NIC, two NICs on one subnet, or a firewall "
                f"dropping everything from {node})")
    if h.get("arp") == "incomplete" or h["r"] == "unreachable":
        return "no host answers ARP for it: the address is on a NIC this node's network does not reach"
    return ""


def _serve_store(dist: Any, cfg: Any, sock: Optional[socket.socket], timeout: timedelta) -> Any:
    """Rank 0's TCPStore, adopting the early socket (torch >= 2.4: ``master_listen_fd``) so
    connections queued on it are served; older torch binds the port itself after the early
    socket is closed. Raises what TCPStore raises."""
    kw = dict(host_name=cfg.master_addr, port=cfg.master_port, world_size=cfg.world_size,
              is_master=True, timeout=timeout, wait_for_workers=False)
    if sock is not None:
        try:
            store = dist.TCPStore(master_listen_fd=sock.fileno(), **kw)
            sock.detach()  # the store owns the descriptor now
            return store
        except Exception:  # no master_listen_fd (older torch), or it was refused
            sock.close()
    return dist.TCPStore(**kw)


def _answer_source(name: str) -> Dict[str, str]:
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


def reach_master(cfg: Any, inv: Dict[str, Any], deadline: Deadline, tracker: Any,
                 state: Dict[str, Any]) -> Optional[str]:
    """The standard-library half of the rendezvous (it runs while torch is still being
    imported): resolve MASTER_ADDR, refuse a loopback answer, and for ranks >= 1 dial the
    master port until it answers. Fills ``state['master']``; returns the address the dial
    reached (None for rank 0). Raises :class:`ProbeFailure` with the classified reason."""
    node = cfg.node_name
    where = f"{node} (rank {cfg.rank})"
    master: Dict[str, Any] = {"addr": cfg.master_addr, "port": cfg.master_port,
                              "resolved": [], "route": None}
    state["master"] = master
    tracker.step(vocabulary.MASTER_ADDR_UNRESOLVABLE, f"{where}: resolving MASTER_ADDR={cfg.master_addr} hung")
    # Every rank, rank 0 too, gets the same window: cluster DNS may publish rank 0's own
    # record a moment after its pod starts, and a rank 0 that gave up sooner than its
    # peers would fail a healthy job.
    t_resolve = time.monotonic()
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
            master["peerName"] = sibling
            tracker.step(vocabulary.MASTER_ADDR_UNRESOLVABLE,
                         f"{where}: resolving MASTER_ADDR={cfg.master_addr} (late record) hung")
            resolved, rerr = _resolve_retry(cfg.master_addr, Deadline(deadline.at - HOST_CHECK_SECONDS))
            late = (f" while {sibling} (this job's) resolves: the Service and DNS work, rank 0's "
                    f"pod has had no address all along (not started: see its pod's events)")
    master["resolved"] = resolved
    if resolved and not _is_ip(cfg.master_addr):  # where the answer came from, for the operator
        master.update(_answer_source(cfg.master_addr))
    if resolved:
        master["route"] = route_get(_order(resolved)[0], inv["interfaces"],
                                    timeout=min(2.0, deadline.remaining()))
    local_addrs = {a.partition("/")[0] for i in inv["interfaces"] for a in i.get("addrs") or []}

    if not resolved:  # rank 0 too: its own TCPStore client dials MASTER_ADDR in training
        took = time.monotonic() - t_resolve
        server = nameserver() if not _is_ip(cfg.master_addr) else None
        via = ""
        if server:  # evidence for the operator: the path to the DNS server
            dns = route_get(server, inv["interfaces"], timeout=min(2.0, max(0.1, deadline.remaining())))
            master["dns"] = dict(dns or {}, server=server)
            if dns and dns.get("iface"):
                via = f"; its DNS server {server} is reached by {dns['iface']} ({dns.get('src')})"
        if late:
            raise ProbeFailure(vocabulary.MASTER_ADDR_UNRESOLVABLE, (
                f"{where}: MASTER_ADDR={cfg.master_addr} does not resolve ({rerr}) after "
                f"{took:.0f}s of retries{late}"))
        raise ProbeFailure(vocabulary.MASTER_ADDR_UNRESOLVABLE, (
            f"{where}: MASTER_ADDR={cfg.master_addr} does not resolve ({rerr}) after "
            f"{took:.0f}s of retries{via}; use rank 0's node IP or a headless "
            f"Service name that exists before the probe starts"))
    loop = [a for a in resolved if is_loopback(a)]
    agent_store = getattr(cfg, "agent_store", False)  # torchrun's agent hosts it: join
    if cfg.rank == 0 and not agent_store:
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
            state["warnings"].append({"reason": vocabulary.MASTER_ADDR_NOT_LOCAL, "message": (
                f"{where}: MASTER_ADDR={cfg.master_addr} resolves to {', '.join(resolved)}, none of "
                f"which is an address of this node; other ranks may reach another host")})
        sock, early_err = state.get("master_listener") or (None, None)
        if early_err:
            raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
                f"{where}: rank 0 could not listen on MASTER_PORT {cfg.master_port}: "
                f"{early_err[:160]}; another process holds the port (hostNetwork?); "
                f"set rendezvous.port to a free port"))
        return None
    else:
        if loop and not cfg.loopback_requested and cfg.rank != 0:
            raise ProbeFailure(vocabulary.MASTER_ADDR_LOOPBACK, (
                f"{where}: MASTER_ADDR={cfg.master_addr} resolves to {', '.join(loop)} (loopback), "
                f"so this rank would dial itself instead of rank 0; set MASTER_ADDR to rank 0's "
                f"node address, not localhost or a hostname mapped to 127.0.0.1 in /etc/hosts"))
        tracker.step(vocabulary.MASTER_PORT_TIMEOUT, f"{where}: connecting to {cfg.master_addr}:{cfg.master_port}")
        started_at = getattr(cfg, "master_started_at", None)
        now = time.monotonic()
        give_up = dial_give_up_at(deadline.at, getattr(tracker, "start", now), now,
                                  bool(started_at), getattr(cfg, "master_grace_seconds", 5.0))
        # keep time for the host check after a failed dial (at the deadline it had none and
        # a host that resets other ports read as silent)
        give_up = max(now, min(give_up, deadline.at - HOST_CHECK_SECONDS))
        if started_at:
            addr, last, took = _dial(resolved, cfg.master_port, Deadline(give_up))
            decided = None
        else:  # no evidence of rank 0's start: a port that drops while its host answers decides
            bp = getattr(cfg, "beacon_port", None)
            addr, last, took, decided = dial_until_decided(
                resolved, cfg.master_port, Deadline(give_up),
                beacon=(bp, beacon_token(cfg)) if bp else None)
        if addr is None:
            shown = f"{cfg.master_addr}:{cfg.master_port}" + (
                f" ({', '.join(resolved)})" if resolved != [cfg.master_addr] else "")
            target = _order(resolved)[0]
            tracker.step(vocabulary.MASTER_PORT_TIMEOUT, f"{where}: checking whether {target} answers at all")
            master["hostCheck"] = decided or host_check(target, cfg.master_port,
                                                        min(HOST_CHECK_SECONDS, deadline.remaining()))
            seen = _host_words(master["hostCheck"], node)
            seen = f"; {seen}" if seen else ""
            if decided and decided.get("listening") and last == "refused":
                raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
                    f"{where}: connection to MASTER_ADDR {shown} refused for {took:.1f}s although "
                    f"rank 0's probe listens there: it answers on TCP {decided['port']}, bound "
                    f"after {cfg.master_port}; a firewall (or NetworkPolicy) on rank 0's node rejects "
                    f"TCP {cfg.master_port}; open TCP {cfg.master_port} to rank 0's node"))
            if started_at and last == "refused":
                raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
                    f"{where}: connection to MASTER_ADDR {shown} refused for {took:.1f}s although "
                    f"rank 0's probe has been running since {started_at} (it listens on that port "
                    f"as it starts){seen}; a firewall on rank 0's node rejects TCP "
                    f"{cfg.master_port}, or MASTER_ADDR names another host; open TCP "
                    f"{cfg.master_port} to rank 0's node or fix MASTER_ADDR"))
            if started_at:
                raise ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
                    f"{where}: connection to MASTER_ADDR {shown} {last} for {took:.1f}s although "
                    f"rank 0's probe has been running since {started_at}{seen}; a firewall drops "
                    f"TCP {cfg.master_port} or the address is not routable from this node; open TCP "
                    f"{cfg.master_port} between nodes or fix MASTER_ADDR"))
            if last == "refused":
                raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
                    f"{where}: connection to MASTER_ADDR {shown} refused for {took:.1f}s: nothing "
                    f"listens there (rank 0 not started, MASTER_PORT wrong, or MASTER_ADDR names "
                    f"another host); make MASTER_ADDR rank 0's address and rendezvous.port its port"))
            raise ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
                f"{where}: connection to MASTER_ADDR {shown} {last} for {took:.1f}s{seen}; a "
                f"firewall drops TCP {cfg.master_port} or the address is not routable from this "
                f"node; open TCP {cfg.master_port} between nodes or fix MASTER_ADDR"))
        master["connected"] = addr
        return addr


def join_store(cfg: Any, inv: Dict[str, Any], deadline: Deadline, tracker: Any,
               state: Dict[str, Any], addr: Optional[str]) -> Tuple[Any, Bus]:
    """The torch half: rank 0 serves the TCPStore on the socket it listened on early, the
    others join it at ``addr`` (what :func:`reach_master` reached); every rank publishes its
    inventory and waits for all. Returns (store, bus) with ``bus.peers`` set. Raises
    :class:`ProbeFailure`."""
    import torch.distributed as dist

    node = cfg.node_name
    where = f"{node} (rank {cfg.rank})"
    if cfg.rank == 0:
        tracker.step(vocabulary.MASTER_PORT_REFUSED, f"{where}: starting the TCPStore on port {cfg.master_port} hung")
        sock, _ = state.get("master_listener") or (None, None)
        try:
            store = _serve_store(dist, cfg, sock, timedelta(seconds=max(1.0, deadline.remaining())))
        except Exception as e:
            raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
                f"{where}: rank 0 could not listen on MASTER_PORT {cfg.master_port}: "
                f"{str(e).splitlines()[0][:160]}; another process holds the port (hostNetwork?); "
                f"set rendezvous.port to a free port"))
    else:
        assert addr is not None  # reach_master returns the address it reached for every rank but 0
        tracker.step(vocabulary.MASTER_PORT_TIMEOUT,
                     f"{where}: TCP to {addr}:{cfg.master_port} works but the TCPStore did not answer")
        try:
            store = dist.TCPStore(host_name=addr, port=cfg.master_port, world_size=cfg.world_size,
                                  is_master=False,
                                  timeout=timedelta(seconds=max(1.0, deadline.remaining())))
        except Exception as e:
            raise ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
                f"{where}: TCP to {addr}:{cfg.master_port} works but the TCPStore handshake failed "
                f"({str(e).splitlines()[0][:160]}); another service may own that port; change "
                f"rendezvous.port"))
    if getattr(cfg, "store_prefix", ""):  # a shared store: keys of this attempt only
        store = dist.PrefixStore(cfg.store_prefix, store)
    store.set_timeout(timedelta(seconds=max(5.0, cfg.timeout_seconds)))
    bus = Bus(store, cfg.rank, cfg.world_size, node)
    state["bus"] = bus  # the caller needs it to abort peers even if the gather below fails
    tracker.step(vocabulary.RENDEZVOUS_TIMEOUT, f"{where}: waiting for peers at the rendezvous")
    bus.publish("inv", state["self_summary"]())
    peers = bus.gather("inv", deadline, vocabulary.RENDEZVOUS_TIMEOUT,
                       f"arrived at the rendezvous {cfg.master_addr}:{cfg.master_port}",
                       "check that their pods were scheduled and started, and that they can reach "
                       "MASTER_ADDR")
    for r, p in peers.items():
        bus.nodes[r] = p.get("node", "?")
    bus.peers = peers  # type: ignore[attr-defined]
    return store, bus


def local_store_addr(cfg: Any, inv: Dict[str, Any], state: Dict[str, Any]) -> str:
    """Where this node's other processes (local ranks > 0) reach the store: the master
    address this rank's dial reached; on node rank 0, which serves it on every address, one
    of MASTER_ADDR's addresses that is this node's own, else 127.0.0.1."""
    master = state.get("master") or {}
    if cfg.rank != 0 and master.get("connected"):
        return str(master["connected"])
    local = {a.partition("/")[0] for i in inv.get("interfaces") or [] for a in i.get("addrs") or []}
    mine = [a for a in _order(master.get("resolved") or []) if a in local]
    return mine[0] if mine else "127.0.0.1"


def side_store(cfg: Any, addr: str, timeout: float) -> Any:
    """A second, short-lived client of the rendezvous store at ``addr`` (its own connection,
    so another thread may use it while the main thread is blocked in a store call), with
    the launcher's prefix. Raises what TCPStore raises."""
    import torch.distributed as dist
    store: dist.Store = dist.TCPStore(host_name=addr, port=cfg.master_port, is_master=False,
                                      timeout=timedelta(seconds=max(0.5, timeout)), wait_for_workers=False)
    if getattr(cfg, "store_prefix", ""):
        store = dist.PrefixStore(cfg.store_prefix, store)
    return store


def peer_abort(store: Any, rank: int) -> Optional[Dict[str, Any]]:
    """The abort another rank published (``Bus.abort``'s dict), None when there is none, it
    is this rank's own, or the store cannot be read."""
    try:
        if not store.check([PREFIX + "abort"]):
            return None
        a = json.loads(store.get(PREFIX + "abort"))
    except Exception:
        return None
    return a if isinstance(a, dict) and a.get("rank") != rank else None


def rendezvous(cfg: Any, inv: Dict[str, Any], deadline: Deadline, tracker: Any,
               state: Dict[str, Any]) -> Tuple[Any, Bus]:
    """Both halves at once (:func:`reach_master`, then :func:`join_store`), for callers
    that have torch imported already."""
    addr = reach_master(cfg, inv, deadline, tracker, state)
    return join_store(cfg, inv, deadline, tracker, state, addr)
