"""Several processes per node (``numProcPerNode`` > 1): who is who, and what the pod reports.

The probe pod runs one process per local rank, as training will (``torchrun
--nproc-per-node P``). Local rank 0 is the node's probe as with one process (inventory,
master port, the connectivity mesh per node, the interface choice, versions: every
node-level check, once per node); it starts local ranks 1..P-1 itself
(:mod:`disttrain_probe.localranks.spawn`, each runs :mod:`disttrain_probe.run.worker`) and they
join only the collective phase: one process group of ``nodes x P`` ranks (global rank =
node rank x P + local rank, as torchrun numbers them), first an all-reduce among the
node's local ranks (the intra-node path: NVLink/P2P/SHM with NCCL, loopback with gloo),
then one over the whole world (the inter-node path).

The pod's one report (its termination message) comes from local rank 0 and carries
``localWorldSize`` = P, its own intra-node measurement (``intraNode``) and one compact
entry per local rank (``localRanks``, :func:`entry`). A failure of local rank k is the
pod's failure, its message naming the node and the local rank (``node-b local rank 1:
...``). Pure: no processes, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from disttrain_probe.contract import probe_env, vocabulary
from disttrain_probe.ground.shapes import AllReduce, Failure, LocalEntry

MAX_NPROC = 256  # local ranks per node the probe will start (8 GPUs is the usual; 72 on NVL72 trays)
# A local rank's outcome line on its stdout: this marker, then one JSON object (entry()).
MARK = "@@disttrain-local "
STOPPED = 3  # a local rank's exit code when local rank 0 told it to stop (not its failure)
# Set by local rank 0 in the environment of the local ranks it starts.
WORKER_VAR = probe_env.LOCAL_WORKER
PARENT_VAR = probe_env.PARENT_PID


@dataclass(frozen=True)
class Layout:
    """Where one process sits: ``node_rank`` of ``nodes``, ``local_rank`` of ``nproc``.

    ``global_rank`` = node_rank x nproc + local_rank and ``world`` = nodes x nproc (torchrun's
    numbering). With ``nproc`` 1 it is the one-process probe: global rank = node rank."""

    node_rank: int
    nodes: int
    local_rank: int = 0
    nproc: int = 1

    @property
    def global_rank(self) -> int:
        return self.node_rank * self.nproc + self.local_rank

    @property
    def world(self) -> int:
        return self.nodes * self.nproc

    def node_group(self) -> List[int]:
        """The global ranks on this node (the intra-node group)."""
        first = self.node_rank * self.nproc
        return list(range(first, first + self.nproc))

    def who(self, node: str) -> str:
        """How messages name this process: ``node`` with one process per node, else
        ``<node> local rank <k>``."""
        return node if self.nproc == 1 else f"{node} local rank {self.local_rank}"


def who(node: str, local_rank: int, nproc: int) -> str:
    """:meth:`Layout.who` without a layout."""
    return node if nproc <= 1 else f"{node} local rank {local_rank}"


def _bw(result: Optional[AllReduce], key: str) -> Optional[float]:
    v = (result or {}).get(key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class AllReduces:
    """A local rank's own results of the intra-node (``intra``) and the world (``world``)
    all-reduce, as :mod:`disttrain_probe.phases.collective` returns them (None: not run)."""
    intra: Optional[AllReduce] = None
    world: Optional[AllReduce] = None


def present(failure: Failure) -> Failure:
    """``failure`` without its keys whose value is None (reason, phase, message order)."""
    out: Failure = {}
    if failure.get("reason") is not None:
        out["reason"] = failure["reason"]
    if failure.get("phase") is not None:
        out["phase"] = failure["phase"]
    if failure.get("message") is not None:
        out["message"] = failure["message"]
    return out


def entry(local_rank: int, ok: bool, phase: str, failure: Optional[Failure] = None,
          device: Optional[str] = None, allreduces: AllReduces = AllReduces()) -> LocalEntry:
    """One local rank's compact outcome (an element of the report's ``localRanks``):
    ``{localRank, ok, phase, device?, intraBusbwGBps?, busbwGBps?, failure?}``, bandwidths
    in GB/s (1e9 B/s) from its own timing of the intra-node and the world all-reduce
    (``allreduces``). Optional keys are left out when unknown (a 4 KiB report has to carry
    P of these)."""
    out: LocalEntry = {"localRank": local_rank, "ok": bool(ok), "phase": phase}
    if device:
        out["device"] = device
    ib, wb = _bw(allreduces.intra, "busbwGBps"), _bw(allreduces.world, "busbwGBps")
    if ib is not None:
        out["intraBusbwGBps"] = ib
    if wb is not None:
        out["busbwGBps"] = wb
    if failure:
        out["failure"] = present(failure)
    return out


@dataclass(frozen=True)
class Ending:
    """How a local rank's process ended as local rank 0 saw it: ``code`` (its exit code;
    negative: the signal; None: still running), ``tail`` (its last output lines) and
    ``final`` (local rank 0 is reporting: one still running hung)."""
    code: Optional[int]
    tail: Sequence[str] = ()
    final: bool = True


def exited(local_rank: int, ending: Ending, last: Optional[LocalEntry], node: str,
           nproc: int) -> LocalEntry:
    """The outcome of a local rank from what local rank 0 saw: its last outcome line
    (``last``, :func:`entry`'s shape, or None) and its ``ending`` (:class:`Ending`).
    A process that ended without a final outcome (killed, out of memory, a crash in C++)
    gets a failure naming the node, the local rank, the phase it was in and the exit
    code; so does one still running when ``final`` (local rank 0 waited for it in vain).
    Returns an :func:`entry`-shaped dict."""
    code, tail, final = ending.code, ending.tail, ending.final
    base = LocalEntry(**last) if isinstance(last, dict) else entry(local_rank, False, "start")
    base["localRank"] = local_rank
    if (base.get("ok") is True or base.get("failure") or base.get("stopped")
            or (code is None and not final)):
        return base
    phase = str(base.get("phase") or "start")
    name = who(node, local_rank, nproc)
    if code is None:
        message = (f"{name}: still running in {phase} when local rank 0 reported; it hung "
                   f"(see the pod's log)")
    else:
        how = f"signal {-code}" if code < 0 else f"code {code}"
        seen = f"; last output: {tail[-1][:160]}" if tail else ""
        message = (f"{name}: the probe process ended ({how}) during {phase} without reporting "
                   f"(killed, out of memory, or a crash in torch/NCCL){seen}; read the probe "
                   f"pod's log (probe.keepPods: Always)")
    base.update({"ok": False, "failure": {"reason": vocabulary.PROBE_INTERNAL_ERROR if phase != "collective"
                                          else vocabulary.PROCESS_GROUP_INIT_FAILED,
                                          "phase": phase, "message": message}})
    return base


def first_failure(entries: Sequence[LocalEntry]) -> Optional[Failure]:
    """The failure the pod reports for its local ranks: the first local rank (> 0) whose
    outcome failed for a reason of its own, else the first that failed at all; its failure
    dict ``{reason, phase, message}``, None when none failed. A local rank that only
    stopped because local rank 0 failed (``stopped``) is not a failure."""
    failed = [e for e in entries if isinstance(e, dict) and e.get("localRank") != 0
              and isinstance(e.get("failure"), dict) and not e.get("stopped")]
    return Failure(**failed[0]["failure"]) if failed else None


def ready(entries: Sequence[LocalEntry], nproc: int) -> bool:
    """Every local rank 0..nproc-1 present and ok."""
    seen = {e.get("localRank"): e for e in entries if isinstance(e, dict)}
    return all(seen.get(i, {}).get("ok") is True for i in range(nproc))
