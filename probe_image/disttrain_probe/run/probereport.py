"""The probe's report, built from what a run kept (:mod:`disttrain_probe.ground.results`):
the final one (:func:`build`), the pessimistic one written before each phase
(:func:`prewrite`) and this rank's summary published at the rendezvous (:func:`self_summary`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground import roles as LR
from disttrain_probe.ground.shapes import Failure, LocalEntry, Peer
from disttrain_probe.phases import interfaces, ncclcheck
from disttrain_probe.run import report as REP

if TYPE_CHECKING:
    from disttrain_probe.run.probe import Probe


def self_summary(p: Probe) -> Peer:
    """This rank's inventory as it publishes it at the rendezvous (``state['self_summary']``)."""
    m = p.state.get("master") or {}
    return {
        "rank": p.cfg.rank, "node": p.cfg.node_name, "pod": p.cfg.pod_name,
        "hostname": p.inv.get("hostname"), "hostIp": p.cfg.host_ip,
        "interfaces": p.inv.get("interfaces"), "versions": p.inv.get("versions"),
        "portRange": p.inv.get("portRange"), "masterRoute": m.get("route"),
        "masterResolved": m.get("resolved"), "hostResolves": p.inv.get("hostResolves"),
        "ncclDefault": p.torch.nccl_default if p.torch.done else None,
        "settings": p.inv.get("settings") or {},
    }


def build(p: Probe) -> Dict[str, Any]:
    """The report as it stands (run/report.py caps and writes it)."""
    cfg = p.cfg
    timings = dict(p.tracker.timings)
    if p.torch.started is not None:  # seconds importing torch, in the background
        timings["torchImport"] = round(p.torch.elapsed(), 3)
    timings["total"] = round(p.tracker.elapsed(), 3)
    ver = dict(p.inv.get("versions") or (p.torch.versions if p.torch.done else {}))
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
        "hostname": p.inv.get("hostname"),
        "hostIp": cfg.host_ip,
        "ok": bool(p.outcome.ok and p.outcome.failure is None),
        "phase": p.outcome.phase,
        "failure": p.outcome.failure,
        "warnings": list(p.state["warnings"]),
        "versions": versions,
        "master": p.state.get("master") or {"addr": cfg.master_addr, "port": cfg.master_port,
                                            "resolved": [], "route": None},
        "portRange": p.inv.get("portRange"),
        "portRangeAllowed": list(cfg.port_range) if cfg.port_range else None,
        "interfaces": [dict({"name": i.get("name"), "addrs": i.get("addrs"), "up": i.get("up"),
                             "speedMbps": i.get("speedMbps"), "mtu": i.get("mtu")},
                            **({"measuredMbps": p.choice.measured[str(i.get("name"))]}
                               if i.get("name") in p.choice.measured else {}))
                       for i in p.inv.get("interfaces") or []],
        "chosen": p.choice.chosen,
        "network": p.choice.network,
        "rejected": p.choice.rejected,
        "ncclDefaultIfname": p.choice.nccl_default,
        "ncclBootstrap": nccl_bootstrap(p),
        "socketIfname": cfg.socket_ifname,
        "backend": p.coll.backend,
        "allreduce": p.coll.allreduce,
        "timings": timings,
        "paths": p.mesh.paths,
        "settings": p.inv.get("settings") or {},
        "pathMbps": p.mesh.path_mbps,
        "pathMbpsLow": p.mesh.path_mbps_low,
        "hostResolves": p.inv.get("hostResolves"),
        "mesh": p.mesh.rows,
        "env": p.inv.get("env"),
        "listenErrors": p.mesh.listen_errors,
        "truncated": False,
    }
    if cfg.spawns_local_ranks:  # only with several processes per node: the report is unchanged otherwise
        out["localWorldSize"] = cfg.nproc_per_node
        out["intraNode"] = p.coll.intra if (p.coll.intra or {}).get("busbwGBps") is not None else None
        out["localRanks"] = local_entries(p)
    return out


def local_entries(p: Probe) -> List[LocalEntry]:
    """One compact outcome per local rank (localranks.entry), this process first."""
    own = p.outcome.failure
    if own is not None and p.ranks.failure is not None \
            and own.get("message") == p.ranks.failure.get("message"):
        own = None  # the node failed because of another local rank: not this one's own
    brief: Optional[Failure] = None
    if own:
        brief = LR.present(own)
        brief.pop("message", None)  # its message is the report's failure: not said twice
    mine = LR.entry(0, bool(p.outcome.ok and p.outcome.failure is None), p.outcome.phase,
                    brief,
                    "cuda:0" if p.coll.backend == "nccl" else None,
                    LR.AllReduces(p.coll.intra, p.coll.allreduce))
    if p.ranks.final is not None:
        rest = p.ranks.final
    elif p.ranks.procs is not None:
        rest = p.ranks.procs.outcomes(wait=0.0)
    else:
        rest = [LR.entry(k, False, "start") for k in range(1, p.cfg.nproc_per_node)]
    return [mine] + list(rest)


def nccl_bootstrap(p: Probe) -> Optional[ncclcheck.NcclBootstrap]:
    """NCCL's own interface choice alone and with the validated interface, and the rule's
    prediction (None before torch was imported)."""
    if not p.torch.done:
        return None
    return ncclcheck.summary(p.torch.nccl_default, p.choice.nccl_chosen,
                             interfaces.nccl_default(p.inv.get("interfaces") or []))



def prewrite(p: Probe, phase: str, reason: Optional[str]) -> None:
    """Write a pessimistic report before each phase: if the process is killed (OOM,
    SIGKILL, the C-level backstop) the termination message still names the phase. It says
    ``final: false`` (the final report has no such key): a rank that ends with it told its
    peers nothing, so they may wait for it until their own deadline."""
    r = build(p)
    r["ok"] = False
    r["final"] = False  # the operator: this rank's peers were told nothing if it ends with this
    r["failure"] = {"reason": reason or vocabulary.PROBE_INTERNAL_ERROR, "phase": phase, "message": (
        f"{p.cfg.node_name}: the probe ended during {phase} without a final report "
        f"(killed, out of memory, or hung past the {p.cfg.timeout_seconds:g}s budget)")}
    r.pop("mesh", None)
    text, _ = REP.cap(r)
    REP.write(p.cfg.report_path, text)
