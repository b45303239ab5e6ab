"""The probe's report, built from what a run kept alone (:class:`disttrain_probe.ground.results.Kept`):
the final one (:func:`build`), the pessimistic one written before each phase
(:func:`prewrite`) and this rank's summary published at the rendezvous (:func:`self_summary`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground import roles as LR
from disttrain_probe.ground.results import Kept
from disttrain_probe.ground.shapes import Failure, LocalEntry, Peer
from disttrain_probe.phases import interfaces, ncclcheck
from disttrain_probe.run import report as REP


def self_summary(k: Kept) -> Peer:
    """This rank's inventory as it publishes it at the rendezvous (``state['self_summary']``)."""
    m = k.state.get("master") or {}
    return {
        "rank": k.cfg.rank, "node": k.cfg.node_name, "pod": k.cfg.pod_name,
        "hostname": k.inv.get("hostname"), "hostIp": k.cfg.host_ip,
        "interfaces": k.inv.get("interfaces"), "versions": k.inv.get("versions"),
        "portRange": k.inv.get("portRange"), "masterRoute": m.get("route"),
        "masterResolved": m.get("resolved"), "hostResolves": k.inv.get("hostResolves"),
        "ncclDefault": k.torch.nccl_default if k.torch.done else None,
        "settings": k.inv.get("settings") or {},
    }


def build(k: Kept) -> Dict[str, Any]:
    """The report as it stands (run/report.py caps and writes it)."""
    cfg = k.cfg
    timings = dict(k.tracker.timings)
    if k.torch.started is not None:  # seconds importing torch, in the background
        timings["torchImport"] = round(k.torch.elapsed(), 3)
    timings["total"] = round(k.tracker.elapsed(), 3)
    ver = dict(k.inv.get("versions") or (k.torch.versions if k.torch.done else {}))
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
        "hostname": k.inv.get("hostname"),
        "hostIp": cfg.host_ip,
        "ok": bool(k.outcome.ok and k.outcome.failure is None),
        "phase": k.outcome.phase,
        "failure": k.outcome.failure,
        "warnings": list(k.state["warnings"]),
        "versions": versions,
        "master": k.state.get("master") or {"addr": cfg.master_addr, "port": cfg.master_port,
                                            "resolved": [], "route": None},
        "portRange": k.inv.get("portRange"),
        "portRangeAllowed": list(cfg.port_range) if cfg.port_range else None,
        "interfaces": [dict({"name": i.get("name"), "addrs": i.get("addrs"), "up": i.get("up"),
                             "speedMbps": i.get("speedMbps"), "mtu": i.get("mtu")},
                            **({"measuredMbps": k.choice.measured[str(i.get("name"))]}
                               if i.get("name") in k.choice.measured else {}))
                       for i in k.inv.get("interfaces") or []],
        "chosen": k.choice.chosen,
        "network": k.choice.network,
        "rejected": k.choice.rejected,
        "ncclDefaultIfname": k.choice.nccl_default,
        "ncclBootstrap": nccl_bootstrap(k),
        "socketIfname": cfg.socket_ifname,
        "backend": k.coll.backend,
        "allreduce": k.coll.allreduce,
        "timings": timings,
        "paths": k.mesh.paths,
        "settings": k.inv.get("settings") or {},
        "pathMbps": k.mesh.path_mbps,
        "pathMbpsLow": k.mesh.path_mbps_low,
        "hostResolves": k.inv.get("hostResolves"),
        "mesh": k.mesh.rows,
        "env": k.inv.get("env"),
        "listenErrors": k.mesh.listen_errors,
        "truncated": False,
    }
    if cfg.spawns_local_ranks:  # only with several processes per node: the report is unchanged otherwise
        out["localWorldSize"] = cfg.nproc_per_node
        out["intraNode"] = k.coll.intra if (k.coll.intra or {}).get("busbwGBps") is not None else None
        out["localRanks"] = local_entries(k)
    return out


def local_entries(k: Kept) -> List[LocalEntry]:
    """One compact outcome per local rank (localranks.entry), this process first."""
    own = k.outcome.failure
    if own is not None and k.ranks.failure is not None \
            and own.get("message") == k.ranks.failure.get("message"):
        own = None  # the node failed because of another local rank: not this one's own
    brief: Optional[Failure] = None
    if own:
        brief = LR.present(own)
        brief.pop("message", None)  # its message is the report's failure: not said twice
    mine = LR.entry(0, bool(k.outcome.ok and k.outcome.failure is None), k.outcome.phase,
                    brief,
                    "cuda:0" if k.coll.backend == "nccl" else None,
                    LR.AllReduces(k.coll.intra, k.coll.allreduce))
    if k.ranks.final is not None:
        rest = k.ranks.final
    elif k.ranks.procs is not None:
        rest = k.ranks.procs.outcomes(wait=0.0)
    else:
        rest = [LR.entry(k, False, "start") for k in range(1, k.cfg.nproc_per_node)]
    return [mine] + list(rest)


def nccl_bootstrap(k: Kept) -> Optional[ncclcheck.NcclBootstrap]:
    """NCCL's own interface choice alone and with the validated interface, and the rule's
    prediction (None before torch was imported)."""
    if not k.torch.done:
        return None
    return ncclcheck.summary(k.torch.nccl_default, k.choice.nccl_chosen,
                             interfaces.nccl_default(k.inv.get("interfaces") or []))



def prewrite(k: Kept, phase: str, reason: Optional[str]) -> None:
    """Write a pessimistic report before each phase: if the process is killed (OOM,
    SIGKILL, the C-level backstop) the termination message still names the phase. It says
    ``final: false`` (the final report has no such key): a rank that ends with it told its
    peers nothing, so they may wait for it until their own deadline."""
    r = build(k)
    r["ok"] = False
    r["final"] = False  # the operator: this rank's peers were told nothing if it ends with this
    r["failure"] = {"reason": reason or vocabulary.PROBE_INTERNAL_ERROR, "phase": phase, "message": (
        f"{k.cfg.node_name}: the probe ended during {phase} without a final report "
        f"(killed, out of memory, or hung past the {k.cfg.timeout_seconds:g}s budget)")}
    r.pop("mesh", None)
    text, _ = REP.cap(r, k.cfg.report_bytes)
    REP.write(k.cfg.report_path, text, k.cfg.in_place)
