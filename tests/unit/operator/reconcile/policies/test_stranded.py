"""Ranks stranded outside the rendezvous (:mod:`disttrain.reconcile.policies.stranded`): when
the verdict need not wait for every probe, and how long it waits for rank 0's word."""

import json

import pytest

from disttrain.api import constants as C
from disttrain.reconcile.policies import stranded
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import json_parser, node_name, pod, report
from tests.support.reconcile import NOW

STARTED = "2026-11-30T11:59:40Z"


def failed(rank, reason, ended="2026-11-30T11:59:50Z", phase="rendezvous", pod_phase="Failed", **master):
    """Rank ``rank``'s probe, failed with ``reason`` at ``ended`` (its pod in ``pod_phase``);
    ``master``: more of the report's master section (connected, hostCheck)."""
    rep = report(rank, node_name(rank), ok=False, world_size=3,
                 failure={"reason": reason, "phase": phase, "message": f"{node_name(rank)}: {reason}"})
    rep["phase"] = phase
    rep["master"].update(master)
    return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase=pod_phase, node=node_name(rank), exit_code=1,
               message=json.dumps(rep), started_at=STARTED, finished_at=ended)


def running(rank, started_at=STARTED):
    """Rank ``rank``'s probe, running since ``started_at``."""
    return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Running", node=node_name(rank), started_at=started_at)


def done(rank, started_at=None):
    """Rank ``rank``'s probe, ended with a good report (started at ``started_at``)."""
    return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Succeeded", node=node_name(rank), exit_code=0,
               message=json.dumps(report(rank, node_name(rank), world_size=3)), started_at=started_at)


REFUSED, TIMEOUT = V.MASTER_PORT_REFUSED, V.MASTER_PORT_TIMEOUT
STORE_QUIET = {"connected": "10.100.0.10", "hostCheck": {"r": "refused"}}
HOST_ANSWERS = {"hostCheck": {"r": "refused"}}


ROWS = [  # (name, the probe pods, rank0_wait, what stranded() answers)
    ("every probe running: wait for them", [running(0), running(1), running(2)], 0.0, (False, None)),
    ("rank 0 failed before serving the store: no wait",
     [failed(0, V.MASTER_ADDR_LOOPBACK, phase="config"), running(1), running(2)], 0.0, (True, None)),
    ("rank 0 failed after serving it: wait",
     [failed(0, V.RENDEZVOUS_TIMEOUT), running(1), running(2)], 0.0, (False, None)),
    ("a rank refused, settled: no wait for the others",
     [running(0), failed(1, REFUSED, **HOST_ANSWERS), running(2)], 0.0, (True, None)),
    ("a rank refused 1s ago: settle for the rest of 3s",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:59Z", **HOST_ANSWERS), running(2)], 0.0, (False, 2.0)),
    ("a rank refused 1s ago, every other rank ended: no wait",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:59Z", **HOST_ANSWERS), done(2)], 0.0, (True, None)),
    ("a rank failed in its collective, not stranded: wait",
     [running(0), failed(1, V.ALL_REDUCE_WRONG_RESULT), running(2)], 0.0, (False, None)),
    ("rank 0's host silent: rank 0's report awaited rank0_wait after it started",
     [running(0, "2026-11-30T11:59:55Z"), failed(1, TIMEOUT), done(2)], 30.0, (False, 25.0)),
    ("rank 0's host silent, rank0_wait over: no wait",
     [running(0, "2026-11-30T11:59:25Z"), failed(1, TIMEOUT), done(2)], 30.0, (True, None)),
    ("rank 0's store silent 2s ago: rank 0 awaited past the node-loss settle",
     [running(0), failed(1, TIMEOUT, "2026-11-30T11:59:58Z", **STORE_QUIET), done(2)], 0.0,
     (False, stranded.STORE_SILENT_WAIT_SECONDS - 2)),
    ("rank 0's store silent, rank 0 ended: no wait",
     [failed(0, V.RENDEZVOUS_TIMEOUT), failed(1, TIMEOUT, "2026-11-30T11:59:58Z", **STORE_QUIET), done(2)], 0.0,
     (True, None)),
    ("a rank's pod Succeeded despite its report: not stranded",
     [running(0), failed(1, REFUSED, pod_phase="Succeeded", **HOST_ANSWERS), running(2)], 0.0, (False, None)),
    ("a rank failed taking its inventory: stranded whatever the reason",
     [running(0), failed(1, "InventoryFailed", phase="inventory"), running(2)], 0.0, (True, None)),
    ("rank 0's host answered on another port: rank 0 not awaited",
     [running(0, "2026-11-30T11:59:55Z"), failed(1, TIMEOUT, **HOST_ANSWERS), done(2)], 30.0, (True, None)),
    ("refused although connected: the store was not silent",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:58Z", **STORE_QUIET), done(2)], 0.0, (True, None)),
    ("two ranks stranded: settled from the first to end",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:58Z", **HOST_ANSWERS),
      failed(2, REFUSED, "2026-11-30T11:59:59Z", **HOST_ANSWERS), running(3)], 0.0, (False, 1.0)),
    ("rank 0's host silent but rank 0 ended: no wait",
     [done(0, "2026-11-30T11:59:55Z"), failed(1, TIMEOUT), done(2)], 30.0, (True, None)),
    ("a rank's connections to rank 0 intercepted in the rendezvous: stranded",
     [running(0), failed(1, V.CONNECTION_INTERCEPTED), done(2)], 0.0, (True, None)),
    ("intercepted in the connectivity phase, after the store was joined: not stranded",
     [running(0), failed(1, V.CONNECTION_INTERCEPTED, phase="connectivity"), running(2)], 0.0, (False, None)),
    ("a rank whose torch failed to import before it joined the store: stranded",
     [running(0), failed(1, V.PROBE_INTERNAL_ERROR, joined=False), running(2)], 0.0, (True, None)),
    ("a torch import that timed out before the store, the others ended: stranded",
     [running(0), failed(1, V.TORCH_IMPORT_TIMEOUT, "2026-11-30T11:59:59Z", joined=False), done(2)], 0.0,
     (True, None)),
    ("a rank failed at the rendezvous after it joined the store: not stranded",
     [running(0), failed(1, V.RENDEZVOUS_TIMEOUT, joined=True), running(2)], 0.0, (False, None)),
    ("rank 0 failed in the rendezvous before serving the store: no wait",
     [failed(0, V.PROBE_INTERNAL_ERROR, joined=False), running(1), running(2)], 0.0, (True, None)),
    ("rank 0 failed in the rendezvous after serving the store: wait",
     [failed(0, V.RENDEZVOUS_TIMEOUT, joined=True), running(1), running(2)], 0.0, (False, None)),
    ("not joined, but after the rendezvous (a report cannot say so): not stranded",
     [running(0), failed(1, V.ALL_REDUCE_WRONG_RESULT, phase="collective", joined=False), running(2)], 0.0,
     (False, None)),
    # ranks start seconds apart: a late one is heard before the verdict (regression gen-1-157)
    ("a rank refused 1s ago, another started 2s ago: settled until 8s after its start",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:59Z", **HOST_ANSWERS), running(2, "2026-11-30T11:59:58Z")],
     0.0, (False, 6.0)),
    ("a rank refused 1s ago, another not started yet: waited for up to 20s after the end",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:59Z", **HOST_ANSWERS),
      pod("j-probe-2", C.ROLE_PROBE, 2, phase="Pending")], 0.0, (False, 19.0)),
    ("rank 0 failed before serving its store 1s ago, rank 2 started 2s ago: settled for it",
     [failed(0, V.MASTER_ADDR_LOOPBACK, "2026-11-30T11:59:59Z", phase="config"), done(1),
      running(2, "2026-11-30T11:59:58Z")], 0.0, (False, 6.0)),
    ("a rank refused 21s ago, another never started: no more wait",
     [running(0), failed(1, REFUSED, "2026-11-30T11:59:39Z", **HOST_ANSWERS),
      pod("j-probe-2", C.ROLE_PROBE, 2, phase="Pending")], 0.0, (True, None)),
    ("rank 0's host and store silent: the longer wait",
     [running(0, "2026-11-30T11:59:55Z"), failed(1, TIMEOUT, "2026-11-30T11:59:58Z", connected="10.100.0.10"),
      done(2)], 30.0, (False, 25.0)),
]


@pytest.mark.parametrize("name,pods,rank0_wait,want", ROWS, ids=[r[0] for r in ROWS])
def test_stranded(name, pods, rank0_wait, want):
    by_rank = {int(p["metadata"]["labels"][C.LABEL_RANK]): p for p in pods}
    assert stranded.stranded(by_rank, len(pods), json_parser, NOW, rank0_wait) == want


EXCUSED = [  # (name, the probe pods, whether rank 0 may outlive them only by waiting for them)
    ("intercepted: rank 0 waits for a rank that never reached it", [running(0), failed(1, V.CONNECTION_INTERCEPTED)], True),
    ("refused, rank 0's host answered", [running(0), failed(1, REFUSED, **HOST_ANSWERS)], True),
    ("rank 0's host silent: its node may be lost", [running(0), failed(1, TIMEOUT)], False),
    ("rank 0's store silent: its node may be lost", [running(0), failed(1, TIMEOUT, **STORE_QUIET)], False),
    ("nobody stranded", [running(0), failed(1, V.ALL_REDUCE_WRONG_RESULT)], False),
    ("intercepted after the store was joined", [running(0), failed(1, V.CONNECTION_INTERCEPTED, phase="connectivity")],
     False),
    ("torch broken on rank 1, which never joined", [running(0), failed(1, V.PROBE_INTERNAL_ERROR, joined=False)], True),
    ("rank 1 failed at the gather, after it joined (rank 0 reads its abort)",
     [running(0), failed(1, V.RENDEZVOUS_TIMEOUT, joined=True)], False),
]


@pytest.mark.parametrize("name,pods,want", EXCUSED, ids=[r[0] for r in EXCUSED])
def test_rank0_excused(name, pods, want):
    by_rank = {int(p["metadata"]["labels"][C.LABEL_RANK]): p for p in pods}
    assert stranded.rank0_excused(by_rank, len(pods), json_parser) is want


RULE1_EXCUSED = [  # (name, the probe pods, the ranks node-loss rule 1 must not judge)
    ("rank 0's torch broken before it served the store: the others wait for it",
     [failed(0, V.PROBE_INTERNAL_ERROR, joined=False), running(1), running(2)], {1, 2}),
    ("rank 0 failed after serving its store: its peers read its abort",
     [failed(0, V.RENDEZVOUS_TIMEOUT, joined=True), running(1), running(2)], set()),
    ("rank 1 intercepted: rank 0 waits for it", [running(0), failed(1, V.CONNECTION_INTERCEPTED), running(2)], {0}),
    ("rank 0's store silent: nobody", [running(0), failed(1, TIMEOUT, **STORE_QUIET), running(2)], set()),
    ("every probe running: nobody", [running(0), running(1), running(2)], set()),
]


@pytest.mark.parametrize("name,pods,want", RULE1_EXCUSED, ids=[r[0] for r in RULE1_EXCUSED])
def test_excused(name, pods, want):
    by_rank = {int(p["metadata"]["labels"][C.LABEL_RANK]): p for p in pods}
    assert stranded.excused(by_rank, len(pods), json_parser) == frozenset(want)


def killed(rank, phase="connectivity", final=False, message=True):
    """Rank ``rank``'s pod after its probe was killed (exit 137) with the pessimistic report
    written before ``phase`` (``final``), or no report at all (``message`` False)."""
    p = failed(rank, V.RENDEZVOUS_TIMEOUT, phase=phase, joined=True)
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    if final is not None:
        rep = json.loads(term["message"])
        rep["final"] = final
        term["message"] = json.dumps(rep)
    if not message:
        term["message"] = ""
    term["exitCode"] = 137
    return p


UNHEARD = [  # (name, the pod, whether it ended without telling its peers)
    ("killed, its pessimistic report left", killed(1), True),
    ("killed before any report", killed(1, message=False), True),
    ("a final report (no final key)", killed(1, final=None), False),
    ("a final report that says final: true", killed(1, final=True), False),
    ("running", running(1), False),
    ("no pod", None, False),
    ("Succeeded with a report that says final: false", dict(killed(1), status=dict(
        killed(1)["status"], phase="Succeeded")), False),
]


@pytest.mark.parametrize("name,pod_,want", UNHEARD, ids=[r[0] for r in UNHEARD])
def test_ended_unheard(name, pod_, want):
    assert stranded.ended_unheard(pod_, json_parser) is want


def test_a_rank_killed_unheard_excuses_every_rank_from_rule_1():
    pods = {0: running(0), 1: killed(1), 2: running(2)}
    assert stranded.excused(pods, 3, json_parser) == frozenset({0, 1, 2})
    pods[1] = killed(1, final=None)  # the same failure, reported: rank 0 and 2 read its abort
    assert stranded.excused(pods, 3, json_parser) == frozenset()
