"""``python -m disttrain_probe``: run every phase, write the report, exit 0 only on a pass."""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional

from disttrain_probe.runtime import config as C
from disttrain_probe.localranks import roles as LR
from disttrain_probe.contract import probe_env, vocabulary
from disttrain_probe.runtime import report as REP
from disttrain_probe.runtime.deadline import Deadline, ProbeFailure, Tracker
from disttrain_probe.runtime import torchload
from disttrain_probe.runtime.torchload import TorchLoader


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:240]


class Probe:
    def __init__(self, cfg: C.Config, argv: Optional[List[str]] = None):
        self.cfg = cfg
        self.argv = list(argv or [])
        self.lock = threading.RLock()
        self.emitted = False
        self.bus: Any = None
        self.store: Any = None
        self.inv: Dict[str, Any] = {"interfaces": []}
        self.state: Dict[str, Any] = {"warnings": [], "master": None,
                                      "self_summary": self._self_summary}
        self.phase = "config"
        self.ok = False
        self.failure: Optional[Dict[str, str]] = None
        self.chosen: Optional[Dict[str, Any]] = None
        self.rejected: List[Dict[str, str]] = []
        self.nccl_default: Optional[str] = None
        self.backend: Optional[str] = None
        self.allreduce: Optional[Dict[str, Any]] = None
        self.mesh_rows: List[Dict[str, Any]] = []
        self.paths: Dict[str, str] = {}  # network -> one character per peer rank (paths.py)
        self.path_mbps: Dict[str, Dict[str, float]] = {}
        self.path_mbps_low: Dict[str, Dict[str, float]] = {}
        self.network: Optional[str] = None
        self.measured: Dict[str, float] = {}  # ifname -> Mb/s measured on its network
        self.nccl_chosen: Optional[Dict[str, Any]] = None  # NCCL's answer with our ifname
        self.tracker = Tracker(cfg.timeout_seconds, on_overrun=self._overrun)
        self.torch = TorchLoader()
        # Several processes per node (localranks.py): local ranks 1..P-1, started by this one.
        self.layout = LR.Layout(cfg.rank, cfg.world_size, 0, cfg.nproc_per_node)
        self.local: Optional[Any] = None            # spawn.LocalRanks
        self.local_failure: Optional[Dict[str, str]] = None  # a local rank's own failure
        self.local_published = False  # ... and it was the first failure peers were told of
        self.local_final: Optional[List[Dict[str, Any]]] = None  # their outcomes, collected
        self.intra: Optional[Dict[str, Any]] = None  # the intra-node all-reduce (this process)

    # -- report ---------------------------------------------------------------------
    def _self_summary(self) -> Dict[str, Any]:
        m = self.state.get("master") or {}
        return {
            "rank": self.cfg.rank, "node": self.cfg.node_name, "pod": self.cfg.pod_name,
            "hostname": self.inv.get("hostname"), "hostIp": self.cfg.host_ip,
            "interfaces": self.inv.get("interfaces"), "versions": self.inv.get("versions"),
            "portRange": self.inv.get("portRange"), "masterRoute": m.get("route"),
            "masterResolved": m.get("resolved"), "hostResolves": self.inv.get("hostResolves"),
            "ncclDefault": self.torch.nccl_default if self.torch.done else None,
            "settings": self.inv.get("settings") or {},
        }

    def build(self) -> Dict[str, Any]:
        cfg = self.cfg
        timings = dict(self.tracker.timings)
        if self.torch.started is not None:  # seconds importing torch, in the background
            timings["torchImport"] = round(self.torch.elapsed(), 3)
        timings["total"] = round(self.tracker.elapsed(), 3)
        ver = dict(self.inv.get("versions") or (self.torch.versions if self.torch.done else {}))
        versions = {k: ver.get(k) for k in ("python", "torch", "cuda", "nccl", "ncclBuild", "ncclLib",
                                             "driver", "gpus")}
        out = {
            "v": REP.REPORT_VERSION,
            "rank": cfg.rank,
            "worldSize": cfg.world_size,
            "jobUid": cfg.job_uid,
            "attempt": cfg.attempt,
            "node": cfg.node_name,
            "pod": cfg.pod_name,
            "hostname": self.inv.get("hostname"),
            "hostIp": cfg.host_ip,
            "ok": bool(self.ok and self.failure is None),
            "phase": self.phase,
            "failure": self.failure,
            "warnings": list(self.state["warnings"]),
            "versions": versions,
            "master": self.state.get("master") or {"addr": cfg.master_addr, "port": cfg.master_port,
                                                   "resolved": [], "route": None},
            "portRange": self.inv.get("portRange"),
            "portRangeAllowed": list(cfg.port_range) if cfg.port_range else None,
            "interfaces": [dict({"name": i.get("name"), "addrs": i.get("addrs"), "up": i.get("up"),
                                 "speedMbps": i.get("speedMbps"), "mtu": i.get("mtu")},
                                **({"measuredMbps": self.measured[i.get("name")]}
                                   if i.get("name") in self.measured else {}))
                           for i in self.inv.get("interfaces") or []],
            "chosen": self.chosen,
            "network": self.network,
            "rejected": self.rejected,
            "ncclDefaultIfname": self.nccl_default,
            "ncclBootstrap": self._nccl_bootstrap(),
            "socketIfname": cfg.socket_ifname,
            "backend": self.backend,
            "allreduce": self.allreduce,
            "timings": timings,
            "paths": self.paths,
            "settings": self.inv.get("settings") or {},
            "pathMbps": self.path_mbps,
            "pathMbpsLow": self.path_mbps_low,
            "hostResolves": self.inv.get("hostResolves"),
            "mesh": self.mesh_rows,
            "env": self.inv.get("env"),
            "listenErrors": self.state.get("listenErrors"),
            "truncated": False,
        }
        if cfg.spawns_local_ranks:  # only with several processes per node: the report is unchanged otherwise
            out["localWorldSize"] = cfg.nproc_per_node
            out["intraNode"] = self.intra if (self.intra or {}).get("busbwGBps") is not None else None
            out["localRanks"] = self._local_entries()
        return out

    def _local_entries(self) -> List[Dict[str, Any]]:
        """One compact outcome per local rank (localranks.entry), this process first."""
        own = self.failure
        if own is not None and self.local_failure is not None \
                and own.get("message") == self.local_failure.get("message"):
            own = None  # the node failed because of another local rank: not this one's own
        mine = LR.entry(0, bool(self.ok and self.failure is None), self.phase,
                        # its message is the report's failure: not said twice
                        {"reason": own.get("reason"), "phase": own.get("phase")} if own else None,
                        "cuda:0" if self.backend == "nccl" else None,
                        LR.AllReduces(self.intra, self.allreduce))
        if self.local_final is not None:
            rest = self.local_final
        elif self.local is not None:
            rest = self.local.outcomes(wait=0.0)
        else:
            rest = [LR.entry(k, False, "start") for k in range(1, self.cfg.nproc_per_node)]
        return [mine] + list(rest)

    def _nccl_bootstrap(self) -> Optional[Dict[str, Any]]:
        """NCCL's own interface choice alone and with the validated interface, and the rule's
        prediction (None before torch was imported)."""
        from disttrain_probe.phases import interfaces, ncclcheck
        if not self.torch.done:
            return None
        return ncclcheck.summary(self.torch.nccl_default, self.nccl_chosen,
                                 interfaces.nccl_default(self.inv.get("interfaces") or []))

    def emit(self) -> None:
        with self.lock:
            if self.emitted:
                return
            self.emitted = True
            REP.emit(self.build(), self.cfg.report_path)

    def prewrite(self, phase: str, reason: Optional[str]) -> None:
        """Write a pessimistic report before each phase: if the process is killed (OOM,
        SIGKILL, the C-level backstop) the termination message still names the phase."""
        r = self.build()
        r["ok"] = False
        r["failure"] = {"reason": reason or vocabulary.PROBE_INTERNAL_ERROR, "phase": phase, "message": (
            f"{self.cfg.node_name}: the probe ended during {phase} without a final report "
            f"(killed, out of memory, or hung past the {self.cfg.timeout_seconds:g}s budget)")}
        r.pop("mesh", None)
        text, _ = REP.cap(r)
        REP.write(self.cfg.report_path, text)

    def _overrun(self, phase: str, reason: Optional[str], message: str) -> None:
        """Watchdog: the phase overran its hard deadline (possibly stuck in C++)."""
        with self.lock:
            if self.emitted:
                return
            if self.local_failure is not None:  # a local rank's own failure is why this one hung
                reason, message = self.local_failure["reason"], self.local_failure["message"]
            if reason is None:
                self.state["warnings"].append({"reason": vocabulary.TEARDOWN_HUNG, "message": message})
            else:
                self.ok = False
                self.failure = {"reason": reason, "phase": phase, "message": message}
                self._abort_peers(phase, reason, message, wait=0.5)
            self.phase = phase
            if self.allreduce is not None and self.allreduce.get("busbwGBps") is None:
                self.allreduce = None
            if self.local is not None:
                self.local_final = self.local.outcomes(wait=0.0)
                self.local.kill()
            self.emit()
            code = 0 if (self.ok and self.failure is None) else 1
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
        if self.local_failure is not None:  # a local rank failed on its own: the node fails with it
            f = self.local_failure
            raise ProbeFailure(f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR, f.get("message") or "",
                               f.get("phase"))
        self.phase = phase
        d = self.tracker.begin(phase, reason, message)
        self.prewrite(phase, reason)
        if os.environ.get(probe_env.TEST_STALL_PHASE) == phase:  # fault injection (tests)
            while True:
                time.sleep(1)
        return d

    # -- phases ---------------------------------------------------------------------
    def run(self) -> int:
        from disttrain_probe.phases import collective, connectivity, interfaces, inventory, masterstore, rendezvous
        from disttrain_probe.gpu import hardware
        from disttrain_probe.contract import settings, versions
        cfg = self.cfg
        node = cfg.node_name
        if cfg.rank == 0 and not cfg.agent_store:  # listen on the master port now, not after the slow torch import
            self.state["master_listener"] = masterstore.listen_early(cfg.master_port)
            if cfg.beacon_port and self.state["master_listener"][0] is not None:
                # after MASTER_PORT: a peer answered here knows rank 0 listens there too
                self.state["beacon"] = masterstore.start_beacon(cfg.beacon_port,
                                                                masterstore.beacon_token(cfg))
        spawn_error = self._start_local_ranks()  # they import torch meanwhile too
        self.torch.start_after(torchload.INVENTORY_HEAD_START)  # unless the inventory is done first
        try:
            if spawn_error:
                raise ProbeFailure(vocabulary.PROBE_INTERNAL_ERROR, spawn_error, "config")
            d = self.begin("inventory", vocabulary.PROBE_INTERNAL_ERROR, f"{node}: inventory hung")
            self.inv = inventory.collect(cfg, d, self.tracker)
            loop = [a for a in self.inv.get("hostResolves") or [] if inventory.is_loopback(a)]
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

            d = self.begin("rendezvous", vocabulary.MASTER_PORT_TIMEOUT, f"{node}: rendezvous hung")
            addr = rendezvous.reach_master(cfg, self.inv, d, self.tracker, self.state)
            self._await_torch(d)
            self.backend = collective.resolve_backend(cfg.backend)
            self.store, self.bus = rendezvous.join_store(cfg, self.inv, d, self.tracker, self.state,
                                                         addr)

            d = self.begin("connectivity", vocabulary.RENDEZVOUS_TIMEOUT, f"{node}: connectivity mesh hung")
            conn = connectivity.connectivity(cfg, self.inv, self.bus, d, self.tracker)
            mine = conn["mesh"].get(cfg.rank, {})
            self.mesh_rows = [dict({"peer": p, "addr": a}, **res)
                              for p in sorted(mine) for a, res in sorted(mine[p].items())]
            if conn.get("errors"):
                self.state["listenErrors"] = conn["errors"]
            self.paths, self.path_mbps = conn.get("paths") or {}, conn.get("pathMbps") or {}
            self.path_mbps_low = conn.get("pathMbpsLow") or {}

            d = self.begin("choice", vocabulary.PROBE_INTERNAL_ERROR, f"{node}: interface choice hung")
            ch = interfaces.choose(self.bus.peers, conn["mesh"], cfg.socket_ifname, cfg.master_port,
                                   conn.get("plan"))
            self.chosen = ch["chosen"].get(cfg.rank)
            self.network = ch.get("network")
            self.rejected = ch["rejected"].get(cfg.rank, [])
            self.nccl_default = ch["ncclDefault"].get(cfg.rank)
            self.measured = dict((ch.get("measured") or {}).get(cfg.rank) or {})
            self.state["warnings"].extend(ch["warnings"].get(cfg.rank, []))
            if ch["failure"]:
                raise ProbeFailure(ch["failure"]["reason"], ch["failure"]["message"])
            self._start_nccl_check()
            self.state["warnings"].extend(settings.risky(
                node, os.environ, self.inv.get("rdma") or [], (self.chosen or {}).get("ifname")))

            d = self.begin("versions", vocabulary.PROBE_INTERNAL_ERROR, f"{node}: version check hung")
            v = versions.check(self.bus.peers) or settings.mismatch(self.bus.peers)
            if v:
                raise ProbeFailure(v["reason"], v["message"])

            d = self.begin("collective", vocabulary.PROCESS_GROUP_INIT_FAILED, f"{node}: collective hung")
            self.allreduce = {}
            nccl_log = hardware.start_nccl_capture(self.backend)  # NCCL's own INFO lines
            if self.local is not None:
                self.intra = {}
                self.local.go(rendezvous.local_store_addr(cfg, self.inv, self.state),
                              (self.chosen or {}).get("ifname"), self.backend, d.remaining())
            collective.run(cfg, self.store,
                           collective.CollectivePath((self.chosen or {}).get("ifname"), self.backend, self.layout),
                           d, self.tracker, collective.CollectiveResults(self.allreduce, self.intra))
            seen = {w.get("reason") for w in self.state["warnings"]}
            self.state["warnings"].extend(w for w in hardware.finish_nccl_capture(nccl_log, hw, node)
                                          if w["reason"] not in seen)
            self._finish_nccl_check(min(5.0, max(0.0, self.tracker.end - self.tracker.grace
                                                 - time.monotonic() - 2.0)))
            d = self.begin("report", None, f"{node}: final barrier hung")
            self._collect_local_ranks(d)
            self.ok = True
            self._finish_barrier(d)
        except ProbeFailure as f:
            self.ok = False
            f = self._local_cause(f)
            self.failure = {"reason": f.reason, "phase": f.phase or self.phase, "message": f.message}
            self.tracker.wind_down(4.5)
            if not f.relayed:
                self._abort_peers(self.phase, f.reason, f.message, wait=1.0)
            self._linger_for_peers()
        except Exception as e:  # a bug or an unclassified torch error: still report
            self.ok = False
            self.tracker.wind_down(4.5)
            reason = vocabulary.PROBE_INTERNAL_ERROR
            msg = f"{node}: {type(e).__name__} in {self.phase}: {_first_line(e)}"
            bus = self._bus()
            if bus is not None and cfg.rank != 0 and _store_lost(e):
                reason = vocabulary.RENDEZVOUS_TIMEOUT
                msg = (f"{node}: lost the rendezvous store during {self.phase} ({_first_line(e)}); "
                       f"rank 0 ({bus.nodes.get(0, '?')}) exited or its node failed; see rank 0's "
                       f"report")
            self.failure = {"reason": reason, "phase": self.phase, "message": msg}
            if self.local_failure is not None:
                self.failure = dict(self.local_failure)
            traceback.print_exc(file=sys.stderr)
            self._abort_peers(self.phase, reason, msg, wait=1.0)
            self._linger_for_peers()
        if self.allreduce is not None and self.allreduce.get("busbwGBps") is None:
            self.allreduce = None  # not measured: null, never half-filled
        self.tracker.finish()
        self._end_local_ranks()
        self.emit()
        return 0 if (self.ok and self.failure is None) else 1

    # -- several processes per node (localranks.py, spawn.py) ---------------------------
    def _start_local_ranks(self) -> Optional[str]:
        """Start local ranks 1..P-1 (with several processes per node); the error, if they
        cannot be started."""
        if not self.cfg.spawns_local_ranks:
            return None
        from disttrain_probe.localranks import spawn
        try:
            self.local = spawn.LocalRanks.start(self.argv, self.cfg.node_name,
                                                self.cfg.nproc_per_node)
        except OSError as e:
            return (f"{self.cfg.node_name}: could not start local ranks 1..{self.cfg.nproc_per_node - 1} "
                    f"(python -m disttrain_probe.localranks.worker): {e}")
        self.local.watch(self._local_failed)
        return None

    def _local_failed(self, outcome: Dict[str, Any]) -> None:
        """A local rank ended with a failure of its own (watch thread): it is the node's
        failure. Peers learn it through the store at once (a second connection: the main
        thread may be blocked in a store call), so their gathers stop waiting and a rank
        whose collective then fails passes it on; this process fails at its next phase or
        when its own collective, now missing a rank, gives up."""
        f = outcome.get("failure") or {}
        self.local_failure = {"reason": f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                              "phase": f.get("phase") or self.phase,
                              "message": f.get("message") or f"{self.cfg.node_name}: a local rank failed"}
        if self._bus() is None:
            return
        try:
            from disttrain_probe.phases import rendezvous
            side = rendezvous.side_store(self.cfg, rendezvous.local_store_addr(
                self.cfg, self.inv, self.state), 2.0)
            if side.check([rendezvous.PREFIX + "abort"]):
                return  # another node failed first: this may only follow from it
            rendezvous.Bus(side, self.cfg.rank, self.cfg.world_size, self.cfg.node_name).abort(
                self.local_failure["phase"], self.local_failure["reason"],
                self.local_failure["message"])
            self.local_published = True
        except Exception:
            pass

    def _local_cause(self, f: ProbeFailure) -> ProbeFailure:
        """The failure to report. A local rank's own beats this process's (its collective
        failed because that rank was missing) when it was the first failure peers were told
        of, or before the collective; in the collective, a failure another node published
        first beats both (this node's ranks only waited for that node's). Local ranks that
        have not started their collective are stopped."""
        if self.local is not None:
            self.local.unwatch()  # what the node reports is decided here
            if self.phase not in ("collective", "report"):
                self.local.stop(f"local rank 0 failed: {f.reason}")
        lf = self.local_failure
        if lf is not None and (self.local_published or self.phase != "collective"):
            return ProbeFailure(lf["reason"], lf["message"], lf.get("phase"), relayed=f.relayed)
        if (self.local is not None and self.phase == "collective" and not f.relayed
                and self._bus() is not None):
            from disttrain_probe.phases import rendezvous
            try:
                side = rendezvous.side_store(self.cfg, rendezvous.local_store_addr(
                    self.cfg, self.inv, self.state), 1.5)
                a = rendezvous.peer_abort(side, self.cfg.rank)
            except Exception:
                a = None
            if a:
                return ProbeFailure(a.get("reason") or f.reason, (
                    f"peer {a.get('node')} (rank {a.get('rank')}) failed in {a.get('phase')}: "
                    f"{a.get('message')}"), a.get("phase"), relayed=True)
        if lf is not None:
            return ProbeFailure(lf["reason"], lf["message"], lf.get("phase"), relayed=f.relayed)
        return f

    def _collect_local_ranks(self, d: Deadline) -> None:
        """After this process's collective passed: wait for the local ranks' outcomes (within
        the report phase); the first that failed is the node's failure."""
        if self.local is None:
            return
        self.local.unwatch()
        self.tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                          f"{self.cfg.node_name}: waiting for local ranks 1..{self.cfg.nproc_per_node - 1} "
                          f"to finish the collective")
        self.local.wait(max(0.0, d.remaining() - 0.5))
        self.tracker.step(None, f"{self.cfg.node_name}: final barrier hung")
        self.local_final = self.local.outcomes(final=True)
        f = LR.first_failure(self.local_final)
        if f is None and not LR.ready([LR.entry(0, True, "report")] + self.local_final,
                                      self.cfg.nproc_per_node):
            f = {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "report", "message": (
                f"{self.cfg.node_name}: a local rank did not report a pass")}
        if f is not None:
            self.local_failure = {"reason": f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                                  "phase": f.get("phase") or "collective",
                                  "message": f.get("message") or ""}
            raise ProbeFailure(self.local_failure["reason"], self.local_failure["message"],
                               self.local_failure["phase"])

    def _end_local_ranks(self) -> None:
        """Before the final report: the local ranks' last outcomes, then none is left running;
        the output of those that failed goes to this pod's log (stderr)."""
        if self.local is None:
            return
        self.local.unwatch()
        if self.local_final is None:
            self.local.wait(0.5 if self.failure else 0.0)
            self.local_final = self.local.outcomes(wait=0.2)
        self.local.kill()
        for line in self.local.tails():
            print(line, file=sys.stderr)

    def _start_nccl_check(self) -> None:
        """In the background (while versions and the collective run): ask NCCL itself, with
        NCCL_SOCKET_IFNAME set as the operator will set it, which interface its bootstrap
        uses. Skipped without a loaded libnccl."""
        from disttrain_probe.phases import ncclcheck
        ifname = (self.chosen or {}).get("ifname")
        lib = ncclcheck.loaded_library() if self.torch.nccl_default is not None else None
        if not ifname or not lib:
            return

        def ask() -> None:
            self.nccl_chosen = ncclcheck.bootstrap_interface(lib, f"={ifname}", timeout=10.0)
        self._nccl_thread = threading.Thread(target=ask, name="probe-nccl-check", daemon=True)
        self._nccl_thread.start()

    def _finish_nccl_check(self, timeout: float) -> None:
        """Wait up to ``timeout`` s for :meth:`_start_nccl_check`; NCCLIgnoresInterface when
        NCCL does not take the chosen interface."""
        t = getattr(self, "_nccl_thread", None)
        if t is None:
            return
        t.join(timeout)
        got, ifname = self.nccl_chosen, (self.chosen or {}).get("ifname")
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


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = C.load(argv)
    except (C.ConfigError, SystemExit) as e:
        if isinstance(e, SystemExit) and e.code in (0, None):
            return 0  # --help
        msg = str(e) if isinstance(e, C.ConfigError) else "invalid command line (see --help)"
        rank = os.environ.get("RANK")
        attempt = os.environ.get(probe_env.ATTEMPT)
        r: Dict[str, Any]
        r = {"v": REP.REPORT_VERSION, "rank": int(rank) if rank and rank.isdigit() else None,
             "jobUid": os.environ.get(probe_env.JOB_UID) or None,
             "attempt": int(attempt) if attempt and attempt.isdigit() else None,
             "pod": os.environ.get("POD_NAME") or None,
             "worldSize": None, "node": os.environ.get("NODE_NAME") or None, "ok": False,
             "phase": "config", "failure": {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "config",
                                            "message": f"bad probe input: {msg}"},
             "warnings": [], "truncated": False}
        REP.emit(r, C.report_path_hint(argv))
        return 1
    return Probe(cfg, argv).run()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait on torch's destructors or stray threads
