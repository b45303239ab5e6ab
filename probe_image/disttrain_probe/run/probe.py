"""One probe run (:class:`Probe`): every phase in order, each phase's results kept in
:mod:`disttrain_probe.ground.results`, the report written at the end (or by the watchdog);
``python -m disttrain_probe`` runs it (:mod:`disttrain_probe.__main__`)."""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional, cast

from disttrain_probe.contract import paths, probe_env, settings, versions, vocabulary
from disttrain_probe.gpu import hardware, nccldiag, rdmalimits
from disttrain_probe.ground import config as C
from disttrain_probe.ground import roles as LR
from disttrain_probe.ground import torchload
from disttrain_probe.ground.deadline import Deadline, ProbeFailure, Tracker
from disttrain_probe.ground.results import Kept, MeshRow, SharedState
from disttrain_probe.ground.shapes import Failure, Inventory, Peer
from disttrain_probe.ground.torchload import TorchLoader
from disttrain_probe.phases import (
    collective,
    connectivity,
    interfaces,
    inventory,
    masterstore,
    ncclcheck,
    rendezvous,
    torchfacts,
)
from disttrain_probe.run import inplace, probelocal, probereport
from disttrain_probe.run import report as REP


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:240]


class Probe:
    """One probe run: the phases in order (:meth:`run`), what each left
    (:mod:`disttrain_probe.ground.results`), and the report written at the end, or by the
    watchdog when a phase overran (:meth:`_overrun`)."""

    def __init__(self, cfg: C.Config, argv: Optional[List[str]] = None):
        self.cfg = cfg
        self.argv = list(argv or [])
        self.lock = threading.RLock()
        self.bus: Any = None
        self.store: Any = None
        self.tracker = Tracker(cfg.timeout_seconds, on_overrun=self._overrun)
        self.torch = TorchLoader(torchfacts.load)
        state: SharedState = {"warnings": [], "master": None, "self_summary": self._self_summary}
        # What the run keeps (the report is built from it alone); the names below are its.
        self.kept = Kept(cfg, self.tracker, self.torch, state)
        self.state, self.outcome, self.mesh = state, self.kept.outcome, self.kept.mesh
        self.choice, self.coll, self.ranks = self.kept.choice, self.kept.coll, self.kept.ranks
        # Several processes per node (localranks.py): local ranks 1..P-1, started by this one.
        self.layout = LR.Layout(cfg.rank, cfg.world_size, 0, cfg.nproc_per_node)
        self._nccl_thread: Optional[threading.Thread] = None

    @property
    def inv(self) -> Inventory:
        """Phase 1's inventory (``kept.inv``)."""
        return self.kept.inv

    @inv.setter
    def inv(self, inv: Inventory) -> None:
        self.kept.inv = inv

    # -- report (probereport.py) ----------------------------------------------------
    def _self_summary(self) -> Peer:
        return probereport.self_summary(self.kept)

    def build(self) -> Dict[str, Any]:
        return probereport.build(self.kept)

    def prewrite(self, phase: str, reason: Optional[str]) -> None:
        """Write a pessimistic report before each phase (:func:`probereport.prewrite`)."""
        probereport.prewrite(self.kept, phase, reason)

    def emit(self) -> None:
        with self.lock:
            if self.outcome.emitted:
                return
            self.outcome.emitted = True
            REP.emit(self.build(), self.cfg.report_path, atomic=self.cfg.in_place, limit=self.cfg.report_bytes)

    def _overrun(self, phase: str, reason: Optional[str], message: str) -> None:
        """Watchdog: the phase overran its hard deadline (possibly stuck in C++)."""
        with self.lock:
            if self.outcome.emitted:
                return
            if self.ranks.failure is not None:  # a local rank's own failure is why this one hung
                reason, message = self.ranks.failure["reason"], self.ranks.failure["message"]
            if reason is None:
                self.state["warnings"].append({"reason": vocabulary.TEARDOWN_HUNG, "message": message})
            else:
                self.outcome.ok = False
                self.outcome.failure = {"reason": reason, "phase": phase, "message": message}
                self._abort_peers(phase, reason, message, wait=0.5)
            self.outcome.phase = phase
            if self.coll.allreduce is not None and self.coll.allreduce.get("busbwGBps") is None:
                self.coll.allreduce = None
            if self.ranks.procs is not None:
                self.ranks.final = self.ranks.procs.outcomes(wait=0.0)
                self.ranks.procs.kill()
            self.emit()
            code = 0 if (self.outcome.ok and self.outcome.failure is None) else 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)

    def _bus(self) -> Any:
        return self.bus if self.bus is not None else self.state.get("bus")

    def _abort_peers(self, phase: str, reason: str, message: str, wait: float) -> None:
        bus = self._bus()
        if bus is None:
            return
        t = threading.Thread(target=bus.abort, args=(phase, reason, message), daemon=True)
        t.start()
        t.join(wait)

    def begin(self, phase: str, reason: Optional[str] = None, message: str = ""):
        if self.ranks.failure is not None:  # a local rank failed on its own: the node fails with it
            f = self.ranks.failure
            raise ProbeFailure(f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR, f.get("message") or "",
                               f.get("phase"))
        self.outcome.phase = phase
        d = self.tracker.begin(phase, reason, message)
        self.prewrite(phase, reason)
        if os.environ.get(probe_env.TEST_STALL_PHASE) == phase:  # fault injection (tests)
            while True:
                time.sleep(1)
        return d

    # -- phases ---------------------------------------------------------------------
    def run(self) -> int:
        """Every phase in order, then the report; the exit code (0 only on a pass)."""
        cfg = self.cfg
        self._listen_early()
        spawn_error = probelocal.start_local_ranks(self.kept, self.argv, self._bus)  # they import torch meanwhile too
        self.torch.start_after(torchload.INVENTORY_HEAD_START)  # unless the inventory is done first
        try:
            if spawn_error:
                raise ProbeFailure(vocabulary.PROBE_INTERNAL_ERROR, spawn_error, "config")
            hw = self._inventory_phase()
            self._rendezvous_phase()
            conn = self._connectivity_phase()
            self._choice_phase(conn)
            self._versions_phase()
            self._collective_phase(hw)
            d = self.begin("report", None, f"{cfg.node_name}: final barrier hung")
            probelocal.collect_local_ranks(self.kept, d)
            self.outcome.ok = True
            if cfg.in_place:  # the training runs next, here: only once every rank passed
                inplace.await_go(self.bus, cfg, d, self.tracker)  # the barrier, and more
            else:
                self._finish_barrier(d)
        except ProbeFailure as f:
            self._failed(f)
        except Exception as e:  # a bug or an unclassified torch error: still report
            self._crashed(e)
        if self.coll.allreduce is not None and self.coll.allreduce.get("busbwGBps") is None:
            self.coll.allreduce = None  # not measured: null, never half-filled
        self.tracker.finish()
        probelocal.end_local_ranks(self.kept)
        self.emit()
        return 0 if (self.outcome.ok and self.outcome.failure is None) else 1

    def _listen_early(self) -> None:
        """Rank 0 listens on the master port now, not after the slow torch import."""
        cfg = self.cfg
        if cfg.rank == 0 and not cfg.agent_store:
            self.state["master_listener"] = masterstore.listen_early(cfg.master_port)
            if cfg.beacon_port and self.state["master_listener"][0] is not None:
                # after MASTER_PORT: a peer answered here knows rank 0 listens there too
                self.state["beacon"] = masterstore.start_beacon(cfg.beacon_port,
                                                                masterstore.beacon_token(cfg))

    def _inventory_phase(self) -> hardware.Hardware:
        """Phase 1; returns the hardware found (GPUs, RDMA, /dev/shm), and starts the
        background torch import."""
        cfg = self.cfg
        node = cfg.node_name
        d = self.begin("inventory", vocabulary.PROBE_INTERNAL_ERROR, f"{node}: inventory hung")
        self.inv = inventory.collect(cfg, d, self.tracker)
        loop = [a for a in self.inv.get("hostResolves") or [] if paths.is_loopback(a)]
        if loop:
            self.state["warnings"].append({"reason": vocabulary.HOSTNAME_LOOPBACK, "message": (
                f"{node}: hostname {self.inv.get('hostname')} resolves to {', '.join(loop)} "
                f"(loopback): gloo without GLOO_SOCKET_IFNAME binds there and a hostname-derived "
                f"MASTER_ADDR points peers at themselves; fix /etc/hosts, keep "
                f"GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set (the operator sets them)")})
        absent = interfaces.missing_here(node, cfg.socket_ifname, self.inv.get("interfaces") or [])
        if absent:  # decided here: the operator need not wait for the rendezvous (stranded)
            raise ProbeFailure(vocabulary.INTERFACE_NOT_FOUND, absent)
        w = connectivity.port_range_warning(node, self.inv.get("portRange"), cfg.port_range)
        if w:
            self.state["warnings"].append(w)
        hw = hardware.collect(hardware.requested_gpus())  # GPUs, RDMA, /dev/shm (hardware.py)
        self.state["warnings"].extend(hardware.findings(hw, node))
        # Import torch in the background from here on; the phases that need it wait for it.
        # Not earlier: the inventory loads shared libraries (NSS for the hostname, NVML),
        # and while torch's own libraries load (dlopen holds the loader lock) each such
        # load waits; alone the inventory takes tens of milliseconds, beside the import
        # it took seconds (2 nodes, bench: inventory 2.1 s of a 4.3 s probe).
        self.torch.start()
        return hw

    def _rendezvous_phase(self) -> None:
        """Phase 2: reach the master, wait for torch, join the store."""
        cfg = self.cfg
        d = self.begin("rendezvous", vocabulary.MASTER_PORT_TIMEOUT, f"{cfg.node_name}: rendezvous hung")
        addr = rendezvous.reach_master(cfg, self.inv, d, self.tracker, self.state)
        self._await_torch(d)
        self.coll.backend = collective.resolve_backend(cfg.backend)
        self.store, self.bus = rendezvous.join_store(cfg, self.inv, d, self.tracker, self.state,
                                                     addr)

    def _connectivity_phase(self) -> connectivity.Connectivity:
        """Phase 3: the mesh; returns connectivity's answer (the choice reads it)."""
        cfg = self.cfg
        d = self.begin("connectivity", vocabulary.RENDEZVOUS_TIMEOUT, f"{cfg.node_name}: connectivity mesh hung")
        conn = connectivity.connectivity(cfg, self.inv, self.bus, d, self.tracker)
        mine = conn["mesh"].get(cfg.rank, {})
        self.mesh.rows = [MeshRow(peer=p, addr=a, **res)
                          for p in sorted(mine) for a, res in sorted(mine[p].items())]
        if conn.get("errors"):
            self.mesh.listen_errors = conn["errors"]
        self.mesh.paths, self.mesh.path_mbps = conn.get("paths") or {}, conn.get("pathMbps") or {}
        self.mesh.path_mbps_low = conn.get("pathMbpsLow") or {}
        return conn

    def _choice_phase(self, conn: connectivity.Connectivity) -> None:
        """Phase 4: every rank computes the same interface choice; NCCL's own check starts."""
        cfg = self.cfg
        node = cfg.node_name
        self.begin("choice", vocabulary.PROBE_INTERNAL_ERROR, f"{node}: interface choice hung")
        ch = interfaces.choose(self.bus.peers, conn["mesh"], cfg.socket_ifname, cfg.master_port,
                               conn.get("plan"))
        self.choice.chosen = ch["chosen"].get(cfg.rank)
        self.choice.network = ch.get("network")
        self.choice.rejected = ch["rejected"].get(cfg.rank, [])
        self.choice.nccl_default = ch["ncclDefault"].get(cfg.rank)
        self.choice.measured = dict((ch.get("measured") or {}).get(cfg.rank) or {})
        self.state["warnings"].extend(ch["warnings"].get(cfg.rank, []))
        if ch["failure"]:
            raise ProbeFailure(ch["failure"]["reason"], ch["failure"]["message"])
        self._start_nccl_check()
        self.state["warnings"].extend(settings.risky(
            node, os.environ, self.inv.get("rdma") or [], self.choice.ifname))

    def _versions_phase(self) -> None:
        """Phase 5: all ranks' versions, then the settings that must agree."""
        self.begin("versions", vocabulary.PROBE_INTERNAL_ERROR, f"{self.cfg.node_name}: version check hung")
        v = versions.check(self.bus.peers) or settings.mismatch(self.bus.peers)
        if v:
            raise ProbeFailure(v["reason"], v["message"])

    def _collective_phase(self, hw: hardware.Hardware) -> None:
        """Phase 6: the real all-reduce (local ranks 1..P-1 join it), NCCL's log read after."""
        cfg = self.cfg
        node = cfg.node_name
        d = self.begin("collective", vocabulary.PROCESS_GROUP_INIT_FAILED, f"{node}: collective hung")
        backend = cast(str, self.coll.backend)  # resolved in the rendezvous phase
        limits = rdmalimits.check(hw, os.environ, node, backend)  # before NCCL opens RDMA ports
        self.state["warnings"].extend(limits.warnings)
        if limits.failure:
            raise ProbeFailure(limits.failure["reason"], limits.failure["message"])
        self.coll.allreduce = {}
        nccl_log = hardware.start_nccl_capture(backend)  # NCCL's own INFO lines
        # NCCL >= 2.31: its own diagnostics too (NCCL DIAG lines on stdout, gpu/nccldiag.py)
        diag = hardware.start_diag_capture(backend, (self.inv.get("versions") or {}).get("nccl"))
        try:
            if self.ranks.procs is not None:
                self.coll.intra = {}
                self.ranks.procs.go(rendezvous.local_store_addr(cfg, self.inv, self.state),
                                    self.choice.ifname, backend, d.remaining(), diag.env if diag else None)
            collective.run(cfg, self.store,
                           collective.CollectivePath(self.choice.ifname, backend, self.layout),
                           d, self.tracker, collective.CollectiveResults(self.coll.allreduce, self.coll.intra))
        except BaseException:
            hardware.stop_diag_capture(diag, 0.0)  # stdout back before the failure is reported
            raise
        diag_lines = hardware.stop_diag_capture(diag, min(2.0, d.remaining()))
        seen = {w.get("reason") for w in self.state["warnings"]}
        self.state["warnings"].extend(w for w in hardware.finish_nccl_capture(nccl_log, hw, node)
                                      if w["reason"] not in seen)
        self._finish_nccl_check(min(5.0, max(0.0, self.tracker.end - self.tracker.grace
                                             - time.monotonic() - 2.0)))
        self._nccl_diagnostics(diag_lines)

    def _nccl_diagnostics(self, lines: List[str]) -> None:
        """NCCL's DIAG lines (rank 0's process, and each node's first rank for a failed P2P
        pair) as evidence: its warnings join the report's, its first failure ends the probe."""
        lay, nodes = self.layout, getattr(self.bus, "nodes", None) or {}
        rank_nodes = {g: nodes[g // lay.nproc] for g in range(lay.world) if g // lay.nproc in nodes}
        fails, warns = nccldiag.findings(nccldiag.parse(lines), self.cfg.node_name, rank_nodes)
        self.state["warnings"].extend(w for w in warns if w not in self.state["warnings"])
        if fails:
            raise ProbeFailure(fails[0]["reason"], fails[0]["message"])

    def _failed(self, f: ProbeFailure) -> None:
        """A classified failure: it is the report's; peers are told (unless it is theirs)."""
        self.outcome.ok = False
        f = probelocal.local_cause(self.kept, self._bus, f)
        self.outcome.failure = {"reason": f.reason, "phase": f.phase or self.outcome.phase, "message": f.message}
        self.tracker.wind_down(4.5)
        if not f.relayed:
            self._abort_peers(self.outcome.phase, f.reason, f.message, wait=1.0)
        self._linger_for_peers()

    def _crashed(self, e: Exception) -> None:
        """An unclassified error: ProbeInternalError, or RendezvousTimeout when rank 0's
        store was lost; peers are told."""
        cfg = self.cfg
        node = cfg.node_name
        self.outcome.ok = False
        self.tracker.wind_down(4.5)
        reason = vocabulary.PROBE_INTERNAL_ERROR
        msg = f"{node}: {type(e).__name__} in {self.outcome.phase}: {_first_line(e)}"
        bus = self._bus()
        if bus is not None and cfg.rank != 0 and _store_lost(e):
            reason = vocabulary.RENDEZVOUS_TIMEOUT
            msg = (f"{node}: lost the rendezvous store during {self.outcome.phase} ({_first_line(e)}); "
                   f"rank 0 ({bus.nodes.get(0, '?')}) exited or its node failed; see rank 0's "
                   f"report")
        self.outcome.failure = {"reason": reason, "phase": self.outcome.phase, "message": msg}
        if self.ranks.failure is not None:
            self.outcome.failure = Failure(**self.ranks.failure)
        traceback.print_exc(file=sys.stderr)
        self._abort_peers(self.outcome.phase, reason, msg, wait=1.0)
        self._linger_for_peers()

    def _start_nccl_check(self) -> None:
        """In the background (while versions and the collective run): ask NCCL itself, with
        NCCL_SOCKET_IFNAME set as the operator will set it, which interface its bootstrap
        uses. Skipped without a loaded libnccl."""
        ifname = (self.choice.chosen or {}).get("ifname")
        lib = ncclcheck.loaded_library() if self.torch.nccl_default is not None else None
        if not ifname or not lib:
            return

        def ask() -> None:
            self.choice.nccl_chosen = ncclcheck.bootstrap_interface(lib, f"={ifname}", timeout=10.0)
        self._nccl_thread = threading.Thread(target=ask, name="probe-nccl-check", daemon=True)
        self._nccl_thread.start()

    def _finish_nccl_check(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for :meth:`_start_nccl_check`; NCCLIgnoresInterface when
        NCCL does not take the chosen interface."""
        t = self._nccl_thread
        if t is None:
            return
        t.join(timeout)
        got, ifname = self.choice.nccl_chosen, (self.choice.chosen or {}).get("ifname")
        if got is not None and got.get("ifname") != ifname:
            self.state["warnings"].append({"reason": vocabulary.NCCL_IGNORES_INTERFACE, "message": (
                f"{self.cfg.node_name}: with NCCL_SOCKET_IFNAME=={ifname} NCCL itself reports "
                f"{got.get('ifname') or got.get('error')}, not {ifname}: training may not use the "
                f"validated interface; check the image's NCCL settings (NCCL_SOCKET_FAMILY, "
                f"NCCL_COMM_ID)")})

    def _await_torch(self, d: Deadline) -> None:
        """Wait for the background torch import within the phase deadline (the rendezvous
        may use most of the probe's budget); put its versions into the inventory. A slow
        import is a warning; none by the deadline is TorchImportTimeout; a failed one is
        ProbeInternalError with the import's error."""
        node = self.cfg.node_name
        self.tracker.step(vocabulary.TORCH_IMPORT_TIMEOUT, f"{node}: importing torch did not finish")
        if not self.torch.wait(d.remaining()):
            raise ProbeFailure(vocabulary.TORCH_IMPORT_TIMEOUT, (
                f"{node}: importing torch took more than {self.torch.elapsed():.0f}s and had not "
                f"finished when the probe had to go on (probe.timeoutSeconds "
                f"{self.cfg.timeout_seconds:g}); a cold image, lazily pulled layers or too little "
                f"CPU: warm the image on the node, give the pod more CPU, or raise "
                f"probe.timeoutSeconds"))
        if self.torch.error:
            raise ProbeFailure(vocabulary.PROBE_INTERNAL_ERROR, (
                f"{node}: import torch failed: {self.torch.error}; the training image's torch "
                f"is broken: check it with python -c 'import torch'"))
        self.inv["versions"] = self.torch.versions
        w = self.torch.slow_warning(node)
        if w:
            self.state["warnings"].append(w)

    def _finish_barrier(self, d) -> None:
        """Rank 0 hosts the store: it waits until every rank is done with it."""
        if self.bus is None:
            return
        self.bus.store.add("dtp/done/count", 1)
        if self.cfg.rank == 0:
            while self.bus.store.add("dtp/done/count", 0) < self.cfg.world_size:
                if d.expired():
                    return
                time.sleep(0.02)

    def _linger_for_peers(self) -> None:
        """After a failure rank 0 keeps the store up briefly so peers can read the abort."""
        bus = self._bus()
        if bus is None:
            return
        try:
            bus.store.add("dtp/done/count", 1)
            if self.cfg.rank == 0:
                until = time.monotonic() + min(3.0, max(0.0, self.tracker.end - self.tracker.grace
                                                         - time.monotonic()))
                arrived = bus.store.add("dtp/inv/count", 0)  # ranks that ever joined the store
                while bus.store.add("dtp/done/count", 0) < arrived \
                        and time.monotonic() < until:
                    time.sleep(0.05)
        except Exception:
            pass


def _store_lost(e: BaseException) -> bool:
    text = f"{type(e).__name__} {e}".lower()
    return any(k in text for k in ("distnetworkerror", "diststoreerror", "connection", "recv",
                                   "broken pipe", "socket"))
