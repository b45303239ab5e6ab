"""``python -m disttrain_probe``: run every phase, write the report, exit 0 only on a pass."""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional

from . import config as C
from . import reasons as R
from . import report as REP
from .deadline import Deadline, ProbeFailure, Tracker
from .torchload import TorchLoader


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:240]


class Probe:
    def __init__(self, cfg: C.Config):
        self.cfg = cfg
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
        return {
            "v": REP.VERSION,
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

    def _nccl_bootstrap(self) -> Optional[Dict[str, Any]]:
        """NCCL's own interface choice alone and with the validated interface, and the rule's
        prediction (None before torch was imported)."""
        from . import interfaces, ncclcheck
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
        r["failure"] = {"reason": reason or R.PROBE_INTERNAL_ERROR, "phase": phase, "message": (
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
            if reason is None:
                self.state["warnings"].append({"reason": R.TEARDOWN_HUNG, "message": message})
            else:
                self.ok = False
                self.failure = {"reason": reason, "phase": phase, "message": message}
                self._abort_peers(phase, reason, message, wait=0.5)
            self.phase = phase
            if self.allreduce is not None and self.allreduce.get("busbwGBps") is None:
                self.allreduce = None
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
        self.phase = phase
        d = self.tracker.begin(phase, reason, message)
        self.prewrite(phase, reason)
        if os.environ.get("DISTTRAIN_PROBE_TEST_STALL_PHASE") == phase:  # fault injection (tests)
            while True:
                time.sleep(1)
        return d

    # -- phases ---------------------------------------------------------------------
    def run(self) -> int:
        from . import (collective, connectivity, hardware, interfaces, inventory, rendezvous,
                       settings, versions)
        cfg = self.cfg
        node = cfg.node_name
        if cfg.rank == 0 and not cfg.agent_store:  # listen on the master port now, not after the slow torch import
            self.state["master_listener"] = rendezvous.listen_early(cfg.master_port)
        self.torch.start()  # import torch meanwhile; the phases that need it wait for it
        try:
            d = self.begin("inventory", R.PROBE_INTERNAL_ERROR, f"{node}: inventory hung")
            self.inv = inventory.collect(cfg, d, self.tracker)
            loop = [a for a in self.inv.get("hostResolves") or [] if inventory.is_loopback(a)]
            if loop:
                self.state["warnings"].append({"reason": R.HOSTNAME_LOOPBACK, "message": (
                    f"{node}: hostname {self.inv.get('hostname')} resolves to {', '.join(loop)} "
                    f"(loopback): gloo without GLOO_SOCKET_IFNAME binds there and a hostname-derived "
                    f"MASTER_ADDR points peers at themselves; fix /etc/hosts, keep "
                    f"GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set (the operator sets them)")})
            w = connectivity.port_range_warning(node, self.inv.get("portRange"), cfg.port_range)
            if w:
                self.state["warnings"].append(w)
            hw = hardware.collect(hardware.requested_gpus())  # GPUs, RDMA, /dev/shm (hardware.py)
            self.state["warnings"].extend(hardware.findings(hw, node))

            d = self.begin("rendezvous", R.MASTER_PORT_TIMEOUT, f"{node}: rendezvous hung")
            addr = rendezvous.reach_master(cfg, self.inv, d, self.tracker, self.state)
            self._await_torch(d)
            self.backend = collective.resolve_backend(cfg.backend)
            self.store, self.bus = rendezvous.join_store(cfg, self.inv, d, self.tracker, self.state,
                                                         addr)

            d = self.begin("connectivity", R.RENDEZVOUS_TIMEOUT, f"{node}: connectivity mesh hung")
            conn = connectivity.connectivity(cfg, self.inv, self.bus, d, self.tracker)
            mine = conn["mesh"].get(cfg.rank, {})
            self.mesh_rows = [dict({"peer": p, "addr": a}, **res)
                              for p in sorted(mine) for a, res in sorted(mine[p].items())]
            if conn.get("errors"):
                self.state["listenErrors"] = conn["errors"]
            self.paths, self.path_mbps = conn.get("paths") or {}, conn.get("pathMbps") or {}
            self.path_mbps_low = conn.get("pathMbpsLow") or {}

            d = self.begin("choice", R.PROBE_INTERNAL_ERROR, f"{node}: interface choice hung")
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

            d = self.begin("versions", R.PROBE_INTERNAL_ERROR, f"{node}: version check hung")
            v = versions.check(self.bus.peers) or settings.mismatch(self.bus.peers)
            if v:
                raise ProbeFailure(v["reason"], v["message"])

            d = self.begin("collective", R.PROCESS_GROUP_INIT_FAILED, f"{node}: collective hung")
            self.allreduce = {}
            nccl_log = hardware.start_nccl_capture(self.backend)  # NCCL's own INFO lines
            collective.run(cfg, self.store, (self.chosen or {}).get("ifname"), self.backend, d,
                           self.tracker, self.allreduce)
            seen = {w.get("reason") for w in self.state["warnings"]}
            self.state["warnings"].extend(w for w in hardware.finish_nccl_capture(nccl_log, hw, node)
                                          if w["reason"] not in seen)
            self._finish_nccl_check(min(5.0, max(0.0, self.tracker.end - self.tracker.grace
                                                 - time.monotonic() - 2.0)))
            self.ok = True
            d = self.begin("report", None, f"{node}: final barrier hung")
            self._finish_barrier(d)
        except ProbeFailure as f:
            self.ok = False
            self.failure = {"reason": f.reason, "phase": f.phase or self.phase, "message": f.message}
            self.tracker.wind_down(4.5)
            if not f.relayed:
                self._abort_peers(self.phase, f.reason, f.message, wait=1.0)
            self._linger_for_peers()
        except Exception as e:  # a bug or an unclassified torch error: still report
            self.ok = False
            self.tracker.wind_down(4.5)
            reason = R.PROBE_INTERNAL_ERROR
            msg = f"{node}: {type(e).__name__} in {self.phase}: {_first_line(e)}"
            bus = self._bus()
            if bus is not None and cfg.rank != 0 and _store_lost(e):
                reason = R.RENDEZVOUS_TIMEOUT
                msg = (f"{node}: lost the rendezvous store during {self.phase} ({_first_line(e)}); "
                       f"rank 0 ({bus.nodes.get(0, '?')}) exited or its node failed; see rank 0's "
                       f"report")
            self.failure = {"reason": reason, "phase": self.phase, "message": msg}
            traceback.print_exc(file=sys.stderr)
            self._abort_peers(self.phase, reason, msg, wait=1.0)
            self._linger_for_peers()
        if self.allreduce is not None and self.allreduce.get("busbwGBps") is None:
            self.allreduce = None  # not measured: null, never half-filled
        self.tracker.finish()
        self.emit()
        return 0 if (self.ok and self.failure is None) else 1

    def _start_nccl_check(self) -> None:
        """In the background (while versions and the collective run): ask NCCL itself, with
        NCCL_SOCKET_IFNAME set as the operator will set it, which interface its bootstrap
        uses. Skipped without a loaded libnccl."""
        from . import ncclcheck
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
            self.state["warnings"].append({"reason": R.NCCL_IGNORES_INTERFACE, "message": (
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
        self.tracker.step(R.TORCH_IMPORT_TIMEOUT, f"{node}: importing torch did not finish")
        if not self.torch.wait(d.remaining()):
            raise ProbeFailure(R.TORCH_IMPORT_TIMEOUT, (
                f"{node}: importing torch took more than {self.torch.elapsed():.0f}s and had not "
                f"finished when the probe had to go on (probe.timeoutSeconds "
                f"{self.cfg.timeout_seconds:g}); a cold image, lazily pulled layers or too little "
                f"CPU: warm the image on the node, give the pod more CPU, or raise "
                f"probe.timeoutSeconds"))
        if self.torch.error:
            raise ProbeFailure(R.PROBE_INTERNAL_ERROR, (
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
        attempt = os.environ.get("DISTTRAIN_PROBE_ATTEMPT")
        r = {"v": REP.VERSION, "rank": int(rank) if (rank or "").isdigit() else None,
             "jobUid": os.environ.get("DISTTRAIN_PROBE_JOB_UID") or None,
             "attempt": int(attempt) if (attempt or "").isdigit() else None,
             "pod": os.environ.get("POD_NAME") or None,
             "worldSize": None, "node": os.environ.get("NODE_NAME") or None, "ok": False,
             "phase": "config", "failure": {"reason": R.PROBE_INTERNAL_ERROR, "phase": "config",
                                            "message": f"bad probe input: {msg}"},
             "warnings": [], "truncated": False}
        REP.emit(r, C.report_path_hint(argv))
        return 1
    return Probe(cfg).run()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait on torch's destructors or stray threads
