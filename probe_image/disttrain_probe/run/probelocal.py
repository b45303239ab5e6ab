"""Several processes per node (ground/roles.py, spawn.py), as local rank 0's probe
sees them: starting local ranks 1..P-1, taking a local rank's own failure as the node's
(and telling peers), choosing which failure the node reports, and collecting their outcomes.
"""
from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground import roles as LR
from disttrain_probe.ground.deadline import Deadline, ProbeFailure
from disttrain_probe.localranks import spawn
from disttrain_probe.phases import rendezvous

if TYPE_CHECKING:
    from disttrain_probe.run.probe import Probe


def start_local_ranks(p: Probe) -> Optional[str]:
    """Start local ranks 1..P-1 (with several processes per node); the error, if they
    cannot be started."""
    if not p.cfg.spawns_local_ranks:
        return None
    try:
        p.ranks.procs = spawn.LocalRanks.start(p.argv, p.cfg.node_name,
                                            p.cfg.nproc_per_node)
    except OSError as e:
        return (f"{p.cfg.node_name}: could not start local ranks 1..{p.cfg.nproc_per_node - 1} "
                f"(python -m disttrain_probe.run.worker): {e}")
    p.ranks.procs.watch(functools.partial(local_failed, p))
    return None


def local_failed(p: Probe, outcome: LR.LocalEntry) -> None:
    """A local rank ended with a failure of its own (watch thread): it is the node's
    failure. Peers learn it through the store at once (a second connection: the main
    thread may be blocked in a store call), so their gathers stop waiting and a rank
    whose collective then fails passes it on; this process fails at its next phase or
    when its own collective, now missing a rank, gives up."""
    f = outcome.get("failure") or {}
    p.ranks.failure = {"reason": f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                          "phase": f.get("phase") or p.outcome.phase,
                          "message": f.get("message") or f"{p.cfg.node_name}: a local rank failed"}
    if p._bus() is None:
        return
    try:
        side = rendezvous.side_store(p.cfg, rendezvous.local_store_addr(
            p.cfg, p.inv, p.state), 2.0)
        if side.check([rendezvous.PREFIX + "abort"]):
            return  # another node failed first: this may only follow from it
        rendezvous.Bus(side, p.cfg.rank, p.cfg.world_size, p.cfg.node_name).abort(
            p.ranks.failure["phase"], p.ranks.failure["reason"],
            p.ranks.failure["message"])
        p.ranks.published = True
    except Exception:
        pass


def local_cause(p: Probe, f: ProbeFailure) -> ProbeFailure:
    """The failure to report. A local rank's own beats this process's (its collective
    failed because that rank was missing) when it was the first failure peers were told
    of, or before the collective; in the collective, a failure another node published
    first beats both (this node's ranks only waited for that node's). Local ranks that
    have not started their collective are stopped."""
    if p.ranks.procs is not None:
        p.ranks.procs.unwatch()  # what the node reports is decided here
        if p.outcome.phase not in ("collective", "report"):
            p.ranks.procs.stop(f"local rank 0 failed: {f.reason}")
    lf = p.ranks.failure
    if lf is not None and (p.ranks.published or p.outcome.phase != "collective"):
        return ProbeFailure(lf["reason"], lf["message"], lf.get("phase"), relayed=f.relayed)
    if (p.ranks.procs is not None and p.outcome.phase == "collective" and not f.relayed
            and p._bus() is not None):
        try:
            side = rendezvous.side_store(p.cfg, rendezvous.local_store_addr(
                p.cfg, p.inv, p.state), 1.5)
            a = rendezvous.peer_abort(side, p.cfg.rank)
        except Exception:
            a = None
        if a:
            return ProbeFailure(a.get("reason") or f.reason, (
                f"peer {a.get('node')} (rank {a.get('rank')}) failed in {a.get('phase')}: "
                f"{a.get('message')}"), a.get("phase"), relayed=True)
    if lf is not None:
        return ProbeFailure(lf["reason"], lf["message"], lf.get("phase"), relayed=f.relayed)
    return f


def collect_local_ranks(p: Probe, d: Deadline) -> None:
    """After this process's collective passed: wait for the local ranks' outcomes (within
    the report phase); the first that failed is the node's failure."""
    if p.ranks.procs is None:
        return
    p.ranks.procs.unwatch()
    p.tracker.step(vocabulary.PROCESS_GROUP_INIT_FAILED,
                      f"{p.cfg.node_name}: waiting for local ranks 1..{p.cfg.nproc_per_node - 1} "
                      f"to finish the collective")
    p.ranks.procs.wait(max(0.0, d.remaining() - 0.5))
    p.tracker.step(None, f"{p.cfg.node_name}: final barrier hung")
    p.ranks.final = p.ranks.procs.outcomes(final=True)
    f = LR.first_failure(p.ranks.final)
    if f is None and not LR.ready([LR.entry(0, True, "report")] + p.ranks.final,
                                  p.cfg.nproc_per_node):
        f = {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "report", "message": (
            f"{p.cfg.node_name}: a local rank did not report a pass")}
    if f is not None:
        p.ranks.failure = {"reason": f.get("reason") or vocabulary.PROBE_INTERNAL_ERROR,
                              "phase": f.get("phase") or "collective",
                              "message": f.get("message") or ""}
        raise ProbeFailure(p.ranks.failure["reason"], p.ranks.failure["message"],
                           p.ranks.failure["phase"])


def end_local_ranks(p: Probe) -> None:
    """Before the final report: the local ranks' last outcomes, then none is left running;
    the output of those that failed goes to this pod's log (stderr)."""
    if p.ranks.procs is None:
        return
    p.ranks.procs.unwatch()
    if p.ranks.final is None:
        p.ranks.procs.wait(0.5 if p.outcome.failure else 0.0)
        p.ranks.final = p.ranks.procs.outcomes(wait=0.2)
    p.ranks.procs.kill()
    for line in p.ranks.procs.tails():
        print(line, file=sys.stderr)
