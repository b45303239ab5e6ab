"""Fast MasterPort* diagnosis, operator side: ranks 1..n-1 start only once rank 0's probe
runs and carry its start time as evidence; a rank that failed before it could join the
rendezvous store (so nobody learns of it) gives the verdict without waiting for the probes
that would only wait for it until their deadline."""

import json
from datetime import timedelta

from disttrain.api import constants
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.diagnosis.diagnose import diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, pod, report, typed_report
from tests.support.reconcile import NOW, advance, names, step
from tests.unit.operator.children.test_builders import REF, env, spec_of

STARTED = "2026-11-30T11:59:50Z"
# one second before NOW, as the kubernetes Python client serializes times (kube.py)
ENDED = "2026-11-30T11:59:59+00:00"


def refused(rank, node, world_size=2):
    msg = (f"{node} (rank {rank}): connection to MASTER_ADDR 10.100.0.10:29500 refused for 2.0s "
           f"although rank 0's probe has been running since {STARTED}")
    return report(rank, node, ok=False, world_size=world_size,
                  failure={"reason": vocabulary.MASTER_PORT_REFUSED, "phase": "rendezvous", "message": msg})


def running0():
    return pod("j-probe-0", "probe", 0, phase="Running", node="node-a", host_ip="10.100.0.10",
               started_at=STARTED)


def failed(rank, node, rep, finished_at=ENDED):
    return pod(f"j-probe-{rank}", "probe", rank, phase="Failed", node=node,
               host_ip=f"10.100.0.1{rank}", message=json.dumps(rep), exit_code=1,
               started_at=STARTED, finished_at=finished_at)


def test_probe_pod_carries_rank0_start_only_when_given():
    s = spec_of()
    with_ev = env(build_probe_pod(REF, s, 1, ProbeMaster("10.100.0.10", STARTED), 1, "probe:1")["spec"]["containers"][0])
    assert with_ev["DISTTRAIN_PROBE_MASTER_STARTED_AT"] == STARTED
    without = env(build_probe_pod(REF, s, 0, ProbeMaster(), 1, "probe:1")["spec"]["containers"][0])
    assert "DISTTRAIN_PROBE_MASTER_STARTED_AT" not in without


def test_a_slow_rank0_start_does_not_hold_the_others_back_for_long():
    """A cold image pull on rank 0's node: the others start without the evidence after
    PEER_START_WAIT_SECONDS (their own pulls must not wait for rank 0's)."""
    from disttrain.reconcile.policies.probelaunch import PEER_START_WAIT_SECONDS

    body = advance(job(), step(job(), []))
    p0 = pod("j-probe-0", "probe", 0, phase="Pending", node="node-a", host_ip="10.100.0.10")
    p0["status"]["startTime"] = "2026-11-30T11:59:58Z"  # on its node 2 s before NOW
    assert names(step(body, [p0])) == []
    plan = step(body, [p0], now=NOW + timedelta(seconds=PEER_START_WAIT_SECONDS))
    assert names(plan) == ["j-probe-1"]
    assert "DISTTRAIN_PROBE_MASTER_STARTED_AT" not in env(plan.creates[0]["spec"]["containers"][0])


def test_rank_that_never_reached_the_store_gives_the_verdict_without_rank0():
    body = advance(job(), step(job(), []))
    plan = step(body, [running0(), failed(1, "node-b", refused(1, "node-b"))])
    conds = plan.status["conditions"]
    v = cond.get(conds, constants.MASTER_REACHABLE)
    assert (v["status"], v["reason"]) == ("False", vocabulary.MASTER_PORT_REFUSED)
    # the one dialling rank was refused: rank 0's node (or that path) is named, and the test
    assert "(node-a, rank 0) on TCP 29500 (node-b refused)" in v["message"]
    assert "decide: tcpdump on node-a" in v["message"]
    assert cond.get(conds, constants.VALIDATED)["reason"] == vocabulary.MASTER_PORT_REFUSED
    assert cond.is_true(conds, constants.FAILED) and not plan.creates
    # rank 0 would only wait for rank 1 until its deadline: stopped, rank 1 kept for its logs
    assert plan.deletes == ["j-probe-0"]
    # rank 0 is not blamed for a report it never had the chance to write
    assert all("j-probe-0" not in f for f in plan.status["probe"]["failures"])


def test_a_peer_that_joined_the_store_is_waited_for():
    """A rank that failed after joining (here: RendezvousTimeout) told the others through
    the store; they end on their own with their own reports, so the verdict waits."""
    body = advance(job(), step(job(), []))
    rep = report(1, "node-b", ok=False, failure={"reason": vocabulary.RENDEZVOUS_TIMEOUT,
                                                 "phase": "rendezvous", "message": "x"})
    plan = step(body, [running0(), failed(1, "node-b", rep)])
    assert cond.status_of(plan.status["conditions"], constants.VALIDATED) == "Unknown"
    assert plan.deletes == []


def test_other_dialling_ranks_get_a_moment_to_end_on_their_own():
    body = advance(job(num_nodes=3), step(job(num_nodes=3), []))
    r2 = pod("j-probe-2", "probe", 2, phase="Running", node="node-c", host_ip="10.100.0.12",
             started_at=STARTED)
    pods = [running0(), failed(1, "node-b", refused(1, "node-b", 3)), r2]
    # one second after rank 1 ended: rank 2 (same checks, same timing) may be about to end
    assert cond.status_of(step(body, pods).status["conditions"], constants.VALIDATED) == "Unknown"
    later = step(body, pods, now=NOW + timedelta(seconds=3))
    v = cond.get(later.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.MASTER_PORT_REFUSED)
    assert sorted(later.deletes) == ["j-probe-0", "j-probe-2"]
    # had rank 2 ended too, both would be named at once
    both = step(body, [running0(), failed(1, "node-b", refused(1, "node-b", 3)),
                       failed(2, "node-c", refused(2, "node-c", 3))])
    msg = cond.get(both.status["conditions"], constants.MASTER_REACHABLE)["message"]
    assert "(node-b refused, node-c refused): node-a's firewall rejects it" in msg and len(msg) <= 400
    # Validated points at the failing check and names the culprit, without repeating it
    summary = cond.get(both.status["conditions"], constants.VALIDATED)["message"]
    assert summary.startswith("MasterReachable=False (MasterPortRefused) on node-a: see")


def test_running_outcome_adds_no_failure():
    outs = [ProbeOutcome(rank=0, pod="j-probe-0", node="node-a", running=True),
            ProbeOutcome(rank=1, pod="j-probe-1", node="node-b", report=typed_report(refused(1, "node-b")))]
    d = diagnose(outs, "10.100.0.10")
    assert d.conditions[constants.VALIDATED].reason == vocabulary.MASTER_PORT_REFUSED
    assert len(d.failures) == 1 and "node-b" in d.failures[0]
    # without the flag, a missing report is a failure of its own
    outs[0] = ProbeOutcome(rank=0, pod="j-probe-0", node="node-a")
    assert len(diagnose(outs, "10.100.0.10").failures) == 2


def test_rank0_that_never_served_the_store_gives_the_verdict_at_once():
    """Rank 0's name maps to 127.0.0.1 in its own node's /etc/hosts: it fails before it
    serves the store. The others could only be refused by its closed port: not waited for,
    and rank 0's cause is the verdict."""
    body = advance(job(num_nodes=3), step(job(num_nodes=3), []))
    rep0 = report(0, "node-a", ok=False, world_size=3, failure={
        "reason": vocabulary.MASTER_ADDR_LOOPBACK, "phase": "rendezvous",
        "message": "node-a (rank 0): MASTER_ADDR=j-0.j resolves to 127.0.0.1 (loopback) on rank 0's own node"})
    r1 = pod("j-probe-1", "probe", 1, phase="Running", node="node-b", host_ip="10.100.0.11",
             started_at=STARTED)
    plan = step(body, [failed(0, "node-a", rep0), r1, failed(2, "node-c", refused(2, "node-c", 3))])
    v = cond.get(plan.status["conditions"], constants.MASTER_REACHABLE)
    assert (v["status"], v["reason"]) == ("False", vocabulary.MASTER_ADDR_LOOPBACK)
    assert v["message"].startswith("node-a (rank 0)") and "node-c" not in v["message"]
    assert plan.deletes == ["j-probe-1"] and not plan.creates
    # a rank 0 that failed after serving the store (the all-reduce) leaves the others be
    late = report(0, "node-a", ok=False, world_size=3, failure={"reason": vocabulary.RENDEZVOUS_TIMEOUT,
                                                  "phase": "rendezvous", "message": "x"})
    assert step(body, [failed(0, "node-a", late), r1]).deletes == []


def test_a_silent_master_host_waits_for_rank0s_own_report_until_its_checks_end():
    """Found by bench-diagnosis (two-nics-one-subnet, gang probes, rank 0 on the node with two
    NICs on one subnet): the dialler decided on silence at 6 s, before rank 0's own report
    (its name did not resolve: its queries leave by the wrong NIC) could name the NICs. When
    the host is silent, rank 0's report is awaited until its resolve window has passed since
    it started; a host that answers elsewhere (a port filter) is decided without it."""
    from disttrain.reconcile.policies.stranded import rank0_wait

    def timeout_report(host_r):
        rep = report(1, "node-b", ok=False, failure={
            "reason": vocabulary.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
            "message": "node-b (rank 1): connection to MASTER_ADDR j-0.j:29500 timeout for 8.0s"})
        rep["master"] = {"addr": "j-0.j", "port": 29500, "resolved": ["10.100.0.10"],
                         "hostCheck": {"port": 1, "r": host_r, "arp": "complete"}}
        return rep

    body = advance(job(), step(job(), []))
    wait = rank0_wait(spec_of())
    assert wait == 15.0  # the 10 s resolve window of a 60 s budget + 2 s sibling + 3 s settle
    silent = [running0(), failed(1, "node-b", timeout_report("timeout"))]
    # NOW is 10 s after rank 0's probe started: 5 s of its wait are left
    plan = step(body, silent)
    assert cond.status_of(plan.status["conditions"], constants.VALIDATED) == "Unknown" and plan.deletes == []
    later = step(body, silent, now=NOW + timedelta(seconds=5.5))
    assert cond.get(later.status["conditions"], constants.MASTER_REACHABLE)["reason"] == vocabulary.MASTER_PORT_TIMEOUT
    filtered = step(body, [running0(), failed(1, "node-b", timeout_report("refused"))])
    assert cond.get(filtered.status["conditions"], constants.MASTER_REACHABLE)["reason"] == vocabulary.MASTER_PORT_TIMEOUT


def test_a_silent_store_waits_until_a_dead_rank0_node_is_named_not_the_dialler():
    """Found on real nodes: node-b (rank 0) was killed (kubelet, containerd, containers)
    while node-a's probe had connected to its store; node-a reported MasterPortTimeout
    ("TCP ... works but the TCPStore did not answer") and the verdict, taken at once, was
    MasterPortTimeout on node-a. Now rank 0's report is awaited long enough for its silence
    to count (nodeloss): the lost node is named."""
    from disttrain.reconcile.policies.stranded import STORE_SILENT_WAIT_SECONDS

    rep = report(1, "node-b", ok=False, failure={
        "reason": vocabulary.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
        "message": "node-b (rank 1): TCP to 10.100.0.10:29500 works but the TCPStore did not answer"})
    rep["master"] = {"addr": "10.100.0.10", "port": 29500, "connected": "10.100.0.10"}
    body = advance(job(), step(job(), []))
    pods = [running0(), failed(1, "node-b", rep)]
    early = step(body, pods)  # 1 s after rank 1 ended
    assert cond.status_of(early.status["conditions"], constants.VALIDATED) == "Unknown" and early.deletes == []
    later = step(body, pods, now=NOW + timedelta(seconds=STORE_SILENT_WAIT_SECONDS))
    v = cond.get(later.status["conditions"], constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.PROBE_POD_LOST), v
    assert "node-a" in v["message"]
    # a store that refused (not this case) is still decided at once
    assert cond.status_of(step(body, [running0(), failed(1, "node-b", refused(1, "node-b"))])
                          .status["conditions"], constants.VALIDATED) == "False"
