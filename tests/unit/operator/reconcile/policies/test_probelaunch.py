"""Launching a probe attempt (:mod:`disttrain.reconcile.policies.probelaunch`): its pods, rank 0
first; its number and start in ``status.probe``."""

from disttrain.api import constants as C
from disttrain.reconcile.policies import probelaunch
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import node_name, pod

POD_NETWORK = {"hostNetwork": False, "enableDNSHostnames": False}


def probe(rank, phase="Running", attempt=1, **kw):
    """Rank ``rank``'s probe pod of ``attempt`` on node r (node-a, ...)."""
    return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, attempt=attempt, phase=phase, node=node_name(rank), **kw)


def rank0(started_at="2026-11-30T11:59:58Z", **kw):
    """Rank 0's probe, on its node with its address (10.100.0.10, pod IP 10.244.0.5)."""
    return probe(0, host_ip="10.100.0.10", pod_ip="10.244.0.5", started_at=started_at, **kw)


def reached_node(seconds_ago):
    """Rank 0's probe pod, on its node since ``seconds_ago``, its container not started yet."""
    p = rank0(started_at=None)
    p["status"]["startTime"] = f"2026-11-30T11:59:{60 - seconds_ago:02d}Z"
    return p


def launch(s):
    """One launch step as :mod:`.probing` runs it: the attempt, its pods, its start, the
    missing pods; returns MASTER_ADDR once known."""
    attempt = probelaunch.attempt_of(s)
    by_rank = probelaunch.current_probes(s, attempt)
    probelaunch.record_start(s, by_rank)
    return probelaunch.launch(s, attempt, by_rank)


def master_env(rank, value):
    """A check that the planned probe of ``rank`` is given MASTER_ADDR ``value``."""
    def ok(s):
        [p] = [p for p in s.plan.creates if p["metadata"]["labels"][C.LABEL_RANK] == str(rank)]
        env = {e["name"]: e.get("value") for c in p["spec"]["containers"] for e in c.get("env") or []}
        return env.get("MASTER_ADDR") == value
    return ok


def dry_runs(*names):
    """A check that the plan sends exactly the training pods ``names`` with dry run."""
    return lambda s: [p["metadata"]["name"] for p in s.plan.dry_runs] == list(names)


@table(
    ("no pod yet: rank 0 alone, the attempt recorded, the training pods checked first",
     given(3),
     Want(None, creates=["j-probe-0"], status={"probe": {"attempt": 1}, "rendezvous": {}},
          more=dry_runs("j-worker-0", "j-worker-1"))),
    ("one node: its one training pod checked",
     given(1),
     Want(None, creates=["j-probe-0"], more=dry_runs("j-worker-0"))),
    ("rank 0 started: the others, given its node's address; nothing checked again",
     given(3).with_pods(rank0()),
     Want("10.100.0.10", creates=["j-probe-1", "j-probe-2"],
          more=lambda s: master_env(2, "10.100.0.10")(s) and not s.plan.dry_runs,
          status={"rendezvous": {"masterAddr": "10.100.0.10", "masterPort": 29500}})),
    ("rank 0 started on the pod network: its pod IP",
     given().spec(network=POD_NETWORK).with_pods(rank0()),
     Want("10.244.0.5", creates=["j-probe-1"], more=master_env(1, "10.244.0.5"))),
    ("rank 0 started with DNS hostnames: its name",
     given().spec(network={"hostNetwork": False}).with_pods(rank0()),
     Want(lambda master: master.startswith("j-0."), creates=["j-probe-1"])),
    ("rank 0 on its node for 2s, not started: the others wait the rest of 5s",
     given().with_pods(reached_node(2)),
     Want("10.100.0.10", creates=[], requeue=probelaunch.PEER_START_WAIT_SECONDS - 2)),
    ("rank 0 on its node for 5s, still not started: the others start without it",
     given().with_pods(reached_node(5)),
     Want("10.100.0.10", creates=["j-probe-1"])),
    ("rank 0 without an address: nothing yet",
     given().with_pods(probe(0, phase="Pending")),
     Want(None, creates=[], more=lambda s: s.plan.requeue_after is None)),
    ("rank 0's container started but its address gone: nothing yet",
     given().with_pods(probe(0, started_at="2026-11-30T11:59:58Z")),
     Want(None, creates=[])),
    ("a gang: every rank at once, MASTER_ADDR rank 0's name, the training pods checked first",
     given(3).run_policy(schedulingPolicy={"gang": "volcano"}),
     Want(lambda master: master.startswith("j-0."), creates=["j-probe-0", "j-probe-1", "j-probe-2"],
          status={"rendezvous": {"masterAddr": "j-0.j", "masterPort": 29500}},
          more=lambda s: master_env(2, "j-0.j")(s) and dry_runs("j-worker-0", "j-worker-1")(s))),
    ("every pod there: nothing to create",
     given().with_pods(rank0(), probe(1)),
     Want("10.100.0.10", creates=[])),
    ("the attempt's first pod: its creation starts the budget",
     given().with_pods(rank0(created="2026-11-30T11:59:30Z"), probe(1, created="2026-11-30T11:59:40Z")),
     Want("10.100.0.10", status={"probe": {"attempt": 1, "startTime": "2026-11-30T11:59:30Z"}})),
    ("a start already recorded: kept",
     given().probing(started="2026-11-30T11:58:00Z").with_pods(rank0(created="2026-11-30T11:59:30Z")),
     Want("10.100.0.10", status={"probe": {"attempt": 1, "startTime": "2026-11-30T11:58:00Z"}})),
    ("an attempt number edited to garbage: attempt 1",
     given().status(probe={"attempt": "two"}),
     Want(None, creates=["j-probe-0"], status={"probe": {"attempt": 1}})),
    ("pods of an older attempt and out of range: deleted, their names awaited",
     given().probing(attempt=2).with_pods(rank0(attempt=1), probe(1, attempt=2), probe(7, attempt=2)),
     Want(None, creates=[], deletes=["j-probe-0", "j-probe-7"])),
)
def test_launch(name, given, want):
    check(launch, given, want)
