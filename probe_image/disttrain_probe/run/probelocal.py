"""Several processes per node (ground/roles.py, spawn.py), as local rank 0's probe
sees them: starting local ranks 1..P-1, taking a local rank's own failure as the node's
(and telling peers), choosing which failure the node reports, and collecting their outcomes.
"""
from __future__ import annotations

import functools
import sys
from typing import Any, Callable, List, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground import roles as LR
from disttrain_probe.ground.deadline import Deadline, ProbeFailure
from disttrain_probe.ground.results import Kept
from disttrain_probe.ground.shapes import LocalEntry
from disttrain_probe.localranks import spawn
from disttrain_probe.phases import rendezvous

BusOf = Callable[[], Any]  # the run's store bus once joined, else None (Probe._bus)



def start_local_ranks(k: Kept, argv: List[str], bus: BusOf) -> Optional[str]:
    """Start local ranks 1..P-1 (with several processes per node); the error, if they
    cannot be started."""
    if not k.cfg.spawns_local_ranks:
        return None
    try:
        k.ranks.procs = spawn.LocalRanks.start(argv, k.cfg.node_name,
                                            k.cfg.nproc_per_node)
    except OSError as e:
        return (f"{k.cfg.node_name}: could not start local ranks 1..{k.cfg.nproc_per_node - 1} "
                f"(python -m disttrain_probe.run.worker): {e}")
    k.ranks.procs.watch(functools.partial(local_failed, k, bus))
    return None


def local_failed(k: Kept, bus: BusOf, outcome: LocalEntry) -> None:
    """A local rank ended with a failure of its own (watch thread): it is the node's
    failure. Peers learn it through the store at once (a second connection: the main
    thread may be blocked in a store call), so their gathers stop waiting and a rank
    whose collective then fails passes it on; this process fails at its next phase or
    when its own collective, now missing a rank, gives up."""
    f = outcome.get("failure") or {}
    k.ranks.failure = {"reason": f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                          "phase": f.get("phase") or k.outcome.phase,
                          "message": f.get("message") or f"{k.cfg.node_name}: a local rank failed"}
    if bus() is None:
        return
    try:
        side = rendezvous.side_store(k.cfg, rendezvous.local_store_addr(
            k.cfg, k.inv, k.state), 2.0)
        if side.check([rendezvous.PREFIX + "abort"]):
            return  # another node failed first: this may only follow from it
        rendezvous.Bus(side, k.cfg.rank, k.cfg.world_size, k.cfg.node_name).abort(
            k.ranks.failure["phase"], k.ranks.failure["reason"],
            k.ranks.failure["message"])
        k.ranks.published = True
    except Exception:
        pass


def local_cause(k: Kept, bus: BusOf, f: ProbeFailure) -> ProbeFailure:
    """The failure to report. A local rank's own beats this process's (its collective
    failed because that rank was missing) when it was the first failure peers were told
    of, or before the collective; in the collective, a failure another node published
    first beats both (this node's ranks only waited for that node's). Local ranks that
    have not started their collective are stopped."""
    if k.ranks.procs is not None:
        k.ranks.procs.unwatch()  # what the node reports is decided here
        if k.outcome.phase not in ("collective", "report"):
            k.ranks.procs.stop(f"local rank 0 failed: {f.reason}")
    lf = k.ranks.failure
    if lf is not None and (k.ranks.published or k.outcome.phase != "collective"):
        return ProbeFailure(lf["reason"], lf["message"], lf.get("phase"), relayed=f.relayed)
    if (k.ranks.procs is not None and k.outcome.phase == "collective" and not f.relayed
            and bus() is not None):
        try:
            side = rendezvous.side_store(k.cfg, rendezvous.local_store_addr(
                k.cfg, k.inv, k.state), 1.5)
            a = rendezvous.peer_abort(side, k.cfg.rank)
        except Exception:
            a = None
        if a:
            return ProbeFailure(a.get("reason") or f.reason, (
                f"peer {a.get('node')} (rank {a.get('rank')}) failed in {a.get('phase')}: "
                f"{a.get('message')}"), a.get("phase"), relayed=True)
    if lf is not None:
        return ProbeFailure(lf["reason"], lf["message"], lf.get("phase"), relayed=f.relayed)
    return f


def collect_local_ranks(k: Kept, d: Deadline) -> None:
    """After this process's collective passed: wait for the local ranks' outcomes (within
    the report phase); the first that failed is the node's failure."""
    if k.ranks.procs is None:
        return
    k.ranks.procs.unwatch()
    k.tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                      f"{k.cfg.node_name}: waiting for local ranks 1..{k.cfg.nproc_per_node - 1} "
                      f"to finish the collective")
    k.ranks.procs.wait(max(0.0, d.remaining() - 0.5))
    k.tracker.step(None, f"{k.cfg.node_name}: final barrier hung")
    k.ranks.final = k.ranks.procs.outcomes(final=True)
    f = LR.first_failure(k.ranks.final)
    if f is None and not LR.ready([LR.entry(0, True, "report")] + k.ranks.final,
                                  k.cfg.nproc_per_node):
        f = {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "report", "message": (
            f"{k.cfg.node_name}: a local rank did not report a pass")}
    if f is not None:
        k.ranks.failure = {"reason": f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                              "phase": f.get("phase") or "collective",
                              "message": f.get("message") or ""}
        raise ProbeFailure(k.ranks.failure["reason"], k.ranks.failure["message"],
                           k.ranks.failure["phase"])


def end_local_ranks(k: Kept) -> None:
    """Before the final report: the local ranks' last outcomes, then none is left running;
    the output of those that failed goes to this pod's log (stderr)."""
    if k.ranks.procs is None:
        return
    k.ranks.procs.unwatch()
    if k.ranks.final is None:
        k.ranks.procs.wait(0.5 if k.outcome.failure else 0.0)
        k.ranks.final = k.ranks.procs.outcomes(wait=0.2)
    k.ranks.procs.kill()
    for line in k.ranks.procs.tails():
        print(line, file=sys.stderr)
