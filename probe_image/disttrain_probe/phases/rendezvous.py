"""Phase 2, rendezvous: resolve and reach MASTER_ADDR:MASTER_PORT, join the TCPStore.

Rank 0 hosts a ``torch.distributed.TCPStore`` on MASTER_PORT (the port training will
use), on the socket it listened on as it started (:mod:`disttrain_probe.phases.masterstore`).
Every other rank reaches the master first (:mod:`disttrain_probe.phases.reachmaster`, which
dials with :mod:`disttrain_probe.phases.dialing`) and then joins the store
(:func:`join_store`). All ranks then publish their inventory and wait for each other. The
:class:`Bus` wrapper is the all-gather used by every later phase.

torch is imported lazily: the probe must report before torch loads (the store is joined
once the background import is done, ground/torchload.py).
"""
from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any, Dict, Optional, Tuple, TypedDict

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.deadline import Deadline, ProbeFailure
from disttrain_probe.ground.results import SharedState
from disttrain_probe.ground.shapes import Inventory
from disttrain_probe.phases import masterstore
from disttrain_probe.phases.dialing import order
from disttrain_probe.phases.masterstore import beacon_token, serve_store
from disttrain_probe.phases.reachmaster import reach_master


class Abort(TypedDict, total=False):
    """What a failed rank publishes for its peers (:meth:`Bus.abort`)."""
    rank: int
    node: str
    phase: str
    reason: str
    message: str

POLL = 0.02
PREFIX = "dtp/"


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


def handshake_failure(cfg: Any, where: str, addr: str, error: str) -> ProbeFailure:
    """The failure when TCP to MASTER_ADDR:MASTER_PORT connected but the TCPStore handshake
    failed (torch's ``recvValue failed ... got 0 bytes``, a reset): the master port closing
    a connection on its own, or rank 0's beacon port doing so (rank 0's probe sends its
    token at once), means a proxy intercepts the job's connections, such as a service-mesh
    sidecar: ``ConnectionIntercepted``; otherwise another service owns the master port."""
    first = (error.splitlines() or [""])[0][:160]
    beacon = (masterstore.beacon_reply(addr, cfg.beacon_port, beacon_token(cfg))
              if cfg.beacon_port else "none")
    if beacon == "closed" or masterstore.closed_on_connect(addr, cfg.master_port):
        ports = (f"MASTER_PORT {cfg.master_port} and port {cfg.beacon_port}" if beacon == "closed"
                 else f"MASTER_PORT {cfg.master_port}")
        return ProbeFailure(vocabulary.CONNECTION_INTERCEPTED, (
            f"{where}: connections to {addr} ({ports}) are accepted and then closed before "
            f"rank 0's probe answers ({first}): a proxy intercepts them, such as a service-mesh "
            f"sidecar (istio-proxy, linkerd-proxy); exclude the job's ports from it or disable "
            f"injection for the job's pods"))
    return ProbeFailure(vocabulary.MASTER_PORT_TIMEOUT, (
        f"{where}: TCP to {addr}:{cfg.master_port} works but the TCPStore handshake failed "
        f"({first}); another service may own that port; change rendezvous.port"))


def join_store(cfg: Any, inv: Inventory, deadline: Deadline, tracker: Any,
               state: SharedState, addr: Optional[str]) -> Tuple[Any, Bus]:
    """The torch half: rank 0 serves the TCPStore on the socket it listened on early, the
    others join it at ``addr`` (what :func:`reach_master` reached); every rank publishes its
    inventory and waits for all. Returns (store, bus) with ``bus.peers`` set. Raises
    :class:`ProbeFailure`."""
    import torch.distributed as dist  # the slow import: the rendezvous starts before torch loads

    node = cfg.node_name
    where = f"{node} (rank {cfg.rank})"
    if cfg.rank == 0:
        tracker.step(vocabulary.MASTER_PORT_REFUSED, f"{where}: starting the TCPStore on port {cfg.master_port} hung")
        sock, _ = state.get("master_listener") or (None, None)
        try:
            store = serve_store(dist, cfg, sock, timedelta(seconds=max(1.0, deadline.remaining())),
                                local_store_addr(cfg, inv, state))
        except Exception as e:
            raise ProbeFailure(vocabulary.MASTER_PORT_REFUSED, (
                f"{where}: rank 0 could not listen on MASTER_PORT {cfg.master_port}: "
                f"{str(e).splitlines()[0][:160]}; another process holds the port (hostNetwork?); "
                f"set rendezvous.port to a free port"))
    else:
        assert addr is not None  # reach_master returns the address it reached for every rank but 0
        tracker.step(vocabulary.MASTER_PORT_TIMEOUT,
                     f"{where}: TCP to {addr}:{cfg.master_port} works but the TCPStore did not answer")
        # torch's client retries a connection closed on it until its timeout: tell a proxy
        # that accepts and closes (a mesh sidecar) first, in about a second
        if masterstore.closed_on_connect(addr, cfg.master_port, min(1.0, max(0.1, deadline.remaining()))):
            raise handshake_failure(cfg, where, addr, "accepted, then closed with no byte")
        try:
            store = dist.TCPStore(host_name=addr, port=cfg.master_port, world_size=cfg.world_size,
                                  is_master=False,
                                  timeout=timedelta(seconds=max(1.0, deadline.remaining())))
        except Exception as e:
            raise handshake_failure(cfg, where, addr, str(e)) from None
    if getattr(cfg, "store_prefix", ""):  # a shared store: keys of this attempt only
        store = dist.PrefixStore(cfg.store_prefix, store)
    store.set_timeout(timedelta(seconds=max(5.0, cfg.timeout_seconds)))
    bus = Bus(store, cfg.rank, cfg.world_size, node)
    state["bus"] = bus  # the caller needs it to abort peers even if the gather below fails
    master = state.get("master")
    if isinstance(master, dict):  # from here on, a failure of this rank reaches its peers
        master["joined"] = True
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


def local_store_addr(cfg: Any, inv: Inventory, state: SharedState) -> str:
    """Where this node's other processes (local ranks > 0) reach the store: the master
    address this rank's dial reached; on node rank 0, which serves it on every address, one
    of MASTER_ADDR's addresses that is this node's own, else 127.0.0.1."""
    master = state.get("master") or {}
    if cfg.rank != 0 and master.get("connected"):
        return str(master["connected"])
    local = {a.partition("/")[0] for i in inv.get("interfaces") or [] for a in i.get("addrs") or []}
    mine = [a for a in order(master.get("resolved") or []) if a in local]
    return mine[0] if mine else "127.0.0.1"


def side_store(cfg: Any, addr: str, timeout: float) -> Any:
    """A second, short-lived client of the rendezvous store at ``addr`` (its own connection,
    so another thread may use it while the main thread is blocked in a store call), with
    the launcher's prefix. Raises what TCPStore raises."""
    import torch.distributed as dist  # the slow import: the rendezvous starts before torch loads
    store: dist.Store = dist.TCPStore(host_name=addr, port=cfg.master_port, is_master=False,
                                      timeout=timedelta(seconds=max(0.5, timeout)), wait_for_workers=False)
    if getattr(cfg, "store_prefix", ""):
        store = dist.PrefixStore(cfg.store_prefix, store)
    return store


def peer_abort(store: Any, rank: int) -> Optional[Abort]:
    """The abort another rank published (``Bus.abort``'s dict), None when there is none, it
    is this rank's own, or the store cannot be read."""
    try:
        if not store.check([PREFIX + "abort"]):
            return None
        a = json.loads(store.get(PREFIX + "abort"))
    except Exception:
        return None
    return Abort(**a) if isinstance(a, dict) and a.get("rank") != rank else None


def rendezvous(cfg: Any, inv: Inventory, deadline: Deadline, tracker: Any,
               state: SharedState) -> Tuple[Any, Bus]:
    """Both halves at once (:func:`reach_master`, then :func:`join_store`), for callers
    that have torch imported already."""
    addr = reach_master(cfg, inv, deadline, tracker, state)
    return join_store(cfg, inv, deadline, tracker, state, addr)
