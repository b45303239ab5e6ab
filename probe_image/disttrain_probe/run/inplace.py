"""In place: the probe as the training container's first step, ``python -m disttrain_probe
[probe args] -- <command...>``: the go rule every rank obeys (:func:`await_go`), then, on a
pass, everything the probe holds released (:func:`release`) and the command run
(:func:`hand_over`, its forms in ``run.handover``).

The go rule: no rank trains unless every rank passed. In place it is the probe's final
barrier: each rank publishes its pass in the rendezvous store; rank 0 waits for all of them
(a peer's failure, published as ``abort``, or the deadline ends the wait), then sets the go
key and keeps its store up until every other rank has read it; the others wait for the go
within the same deadline, watching for a peer's failure, and only then tell rank 0 they are
done (a rank 0 that failed keeps its store up for them, so they read its failure rather
than lose the store). A rank without the go fails (the peer's failure passed on, or
``RendezvousTimeout`` naming the ranks that never passed), writes that report and exits 1
without running the command.

The release, before the command runs in this process: the deadline tracker (its watchdog
and the C-level backstop: never during training), NCCL's check still running in a child,
the local ranks, the torch.distributed process groups, rank 0's early listener and beacon
and its TCPStore on MASTER_PORT (the training binds MASTER_PORT next: rank 0 checks that it
can), and each other rank's client of that store, once rank 0 has closed it (so the
training's first dial never reaches the probe's store).
"""
from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any, List, Mapping, NoReturn, Sequence

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.deadline import Deadline, ProbeFailure
from disttrain_probe.phases import masterstore, ncclcheck
from disttrain_probe.phases.rendezvous import PREFIX
from disttrain_probe.run import handover

PASSED = "pass"                   # the topic every rank publishes once it passed
GO = PREFIX + "go"                # rank 0 sets it once every rank passed
GONE = PREFIX + "gone/count"      # ranks >= 1 that read the go
ACK_SECONDS = 5.0                 # rank 0 keeps its store up this long at most for them
GO_RESERVE_SECONDS = 1.0          # rank 0 sets the go this long before its deadline at the latest
STORE_CLOSE_SECONDS = 10.0        # a rank >= 1 waits this long at most for rank 0 to close it
PORT_FREE_SECONDS = 2.0           # rank 0 waits this long at most for MASTER_PORT to be free
_WHAT = "passed the probe (in place, no rank trains unless every rank passed)"


def await_go(bus: Any, cfg: Any, d: Deadline, tracker: Any) -> None:
    """In place, the final barrier (run.probe), within ``d``: publish this rank's pass; rank
    0 waits for every rank's and sets the go, the others wait for it. Raises
    :class:`ProbeFailure`: a peer's failure passed on, or RendezvousTimeout naming the ranks
    that never passed."""
    node = cfg.node_name
    tracker.step(vocabulary.RENDEZVOUS_TIMEOUT, f"{node}: waiting for every rank's pass (in place)")
    bus.publish(PASSED, {"node": node})
    if cfg.rank == 0:  # a go set at the last moment would not be read before the deadline
        go_by = Deadline(d.at - min(GO_RESERVE_SECONDS, d.remaining() / 2))
        bus.gather(PASSED, go_by, vocabulary.RENDEZVOUS_TIMEOUT, _WHAT, "their reports say why")
        bus.store.set(GO, "1")
        _wait_count(bus, GONE, cfg.world_size - 1, d.sub(ACK_SECONDS))
        return
    last_abort = 0.0
    while not bus.store.check([GO]):
        now = time.monotonic()
        if now - last_abort > 0.1:
            bus.check_abort()
            last_abort = now
        if d.expired():
            missing = [r for r in range(cfg.world_size)
                       if not bus.store.check([f"{PREFIX}{PASSED}/{r}"])]
            raise ProbeFailure(vocabulary.RENDEZVOUS_TIMEOUT, (
                f"{node}: no go from rank 0 ({bus.nodes.get(0, '?')}) within the deadline: "
                f"rank(s) {', '.join(str(r) for r in missing) or 'none'} never {_WHAT}"))
        time.sleep(bus.poll)
    bus.store.add(GONE, 1)


def _wait_count(bus: Any, key: str, n: int, d: Deadline) -> bool:
    """Wait until the counter ``key`` reaches ``n`` or ``d`` expires; whether it did."""
    while bus.store.add(key, 0) < n:
        if d.expired():
            return False
        time.sleep(bus.poll)
    return True


def release(probe: Any) -> List[str]:
    """Release everything ``probe`` (a passed :class:`disttrain_probe.run.probe.Probe`)
    holds, so the training can bind the same ports and nothing of the probe acts later.
    Returns what could not be released, one line each. Never raises."""
    cfg, notes = probe.cfg, []
    probe.tracker.disarm()
    ncclcheck.stop_children()
    procs = probe.kept.ranks.procs
    if procs is not None:  # killed before the report: reaped here
        procs.kill()
        procs.wait(1.0)
    dist = sys.modules.get("torch.distributed")  # torch is loaded: never imported anew here
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as e:
        notes.append(f"destroy_process_group failed: {e}")
    for key in ("beacon", "master_listener"):
        sock, _ = probe.state.pop(key, None) or (None, None)
        masterstore.stop_listening(sock)
    if probe.bus is not None and cfg.rank != 0 and not cfg.agent_store \
            and not _store_closed(probe.bus, cfg.master_port, STORE_CLOSE_SECONDS):
        notes.append(f"rank 0's probe store on MASTER_PORT {cfg.master_port} was still up "
                     f"after {STORE_CLOSE_SECONDS:g}s; handing over anyway")
    probe.store = probe.bus = None  # the TCPStore (server or client) closes with its last reference
    probe.state.pop("bus", None)
    if cfg.rank == 0 and not cfg.agent_store and not masterstore.port_free(cfg.master_port):
        gc.collect()  # a reference in a cycle (70 ms with torch loaded: only when needed)
        if not masterstore.port_free(cfg.master_port, PORT_FREE_SECONDS):
            notes.append(f"MASTER_PORT {cfg.master_port} is still bound in this process after "
                         f"the probe released it: the training's store may fail to listen there")
    return notes


def _store_closed(bus: Any, port: int, wait: float) -> bool:
    """A rank >= 1 after the go: wait until rank 0 closes its store, so the training's first
    dial to MASTER_PORT reaches the training's store, not the probe's. Seen in /proc (this
    process's connection to ``port`` leaves ESTABLISHED), else by a store call that fails
    (torch then logs a warning). Whether it closed within ``wait`` seconds."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        open_now = masterstore.connected_to(port)
        if open_now == 0:
            return True
        if open_now is None:
            try:
                bus.store.check([GO])
            except Exception:
                return True
        time.sleep(bus.poll)
    return False


def hand_over(probe: Any, command: Sequence[str], given: Mapping[str, str]) -> NoReturn:
    """After a pass with the go: release the probe, put the validated rendezvous into the
    environment (``given``: the environment the probe started with) and run ``command``;
    never returns (SystemExit with the command's exit code, or the process replaced)."""
    cmd = handover.parse_command(command)
    for note in release(probe):
        print(f"disttrain-probe: {note}", file=sys.stderr)
    handover.bind_environment(os.environ, given, probe.choice.ifname)
    print(f"disttrain-probe: every rank passed; handing over to {' '.join(command)[:300]} "
          f"({cmd.form})", file=sys.stderr, flush=True)
    handover.run(cmd)


__all__ = ["await_go", "hand_over", "release"]
