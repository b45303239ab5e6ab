"""Training pods (:mod:`disttrain.reconcile.policies.training`): one row per stage of a
training run, from the validated job to its outcome."""

import json
from pathlib import Path

from disttrain.api import constants as C
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import training
from disttrain.reconcile.step import Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import node_name, pod
from tests.support.reconcile import sidecar_worker, workers

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
# real log tails, kept beside the test of the line that says why (diagnosis/test_logline.py)
TAILS = Path(__file__).resolve().parents[2] / "diagnosis" / "logtails"
NOT_STARTED = (UNK, V.TRAINING_PENDING)


def trainer_of(p):
    """The pod's container named ``trainer``."""
    return next(c for c in p["spec"]["containers"] if c["name"] == "trainer")


def env(p, name):
    """The value of ``name`` in the trainer's environment (None: not set)."""
    return next((e.get("value") for e in trainer_of(p).get("env") or [] if e["name"] == name), None)


def sidecar_untouched(s):
    """Every planned pod has its sidecar ``logs`` exactly as the template wrote it (no
    rendezvous environment, no torchrun), and its trainer the rendezvous and torchrun."""
    tmpl = {c["name"]: c for c in s.spec.template.spec["containers"]}
    return all([c for c in p["spec"]["containers"] if c["name"] == "logs"] == [tmpl["logs"]]
               and env(p, "MASTER_ADDR") and "torch.distributed.run" in trainer_of(p)["command"]
               for p in s.plan.creates) and s.plan.creates


def pinned(s, master="10.100.0.10", ifname="eth1"):
    """Each planned training pod runs on the node its rank was validated on (rank r on
    node r), with the validated rendezvous."""
    return all(json.dumps([node_name(int(p["metadata"]["labels"][C.LABEL_RANK]))]) in json.dumps(p["spec"]["affinity"])
               and env(p, "MASTER_ADDR") == master and env(p, "GLOO_SOCKET_IFNAME") == ifname
               and env(p, "NCCL_SOCKET_IFNAME") == f"={ifname}" for p in s.plan.creates)


def rank0(host_ip="10.100.0.10"):
    """Rank 0's training pod of a job without probes, running on node-a."""
    return pod("j-worker-0", C.ROLE_WORKER, 0, attempt=0, phase="Running", node="node-a", host_ip=host_ip,
               container="trainer")


@table(
    ("not validated yet: nothing",
     given().probes("Running", "Running"),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: NOT_STARTED}, creates=[], deletes=[])),
    ("preflight failed: nothing",
     given().condition(C.VALIDATED, FALSE, V.PREFLIGHT_FAILED),
     Want(Outcome.CONTINUE, creates=[])),
    ("already finished: nothing",
     given().training().finished().workers("Succeeded", "Running"),
     Want(Outcome.CONTINUE, {C.SUCCEEDED: (TRUE, "Given")}, creates=[], deletes=[])),
    ("validated: one pod per rank, on its validated node, probes deleted",
     given().nodes(3).validated().probes("Succeeded", "Succeeded", "Succeeded"),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: NOT_STARTED},
          creates=["j-worker-0", "j-worker-1", "j-worker-2"], deletes=["j-probe-0", "j-probe-1", "j-probe-2"],
          more=pinned)),
    ("validated, keepPods Always: probes kept",
     given().spec(probe={"keepPods": "Always"}).validated().probes("Succeeded", "Succeeded"),
     Want(Outcome.CONTINUE, creates=["j-worker-0", "j-worker-1"], deletes=[])),
    ("validated, a probe still running: no training pod yet",
     given().validated().probes("Succeeded", "Running"),
     Want(Outcome.CONTINUE, creates=[], deletes=["j-probe-0", "j-probe-1"],
          more=lambda s: s.plan.requeue_after == 1.0)),
    ("validated, the rendezvous lost from the status: probed again",
     given().validated(master=None).probing(attempt=3),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.PROBING), C.TRAINING_STARTED: (UNK, V.TRAINING_PENDING),
                             C.NETWORK_VALIDATED: (UNK, V.NOT_CHECKED)},
          creates=[], status={"probe": {"attempt": 4}}, says={C.TRAINING_STARTED: "masterAddr is missing"})),
    ("one rank created, the other missing: only the missing one",
     given().validated().workers("Pending"),
     Want(Outcome.CONTINUE, creates=["j-worker-1"], deletes=[], status={"startTime": "2026-11-30T12:00:00Z"})),
    ("some ranks not running yet: not started",
     given().validated().workers("Pending", "Running"),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: NOT_STARTED, C.SUCCEEDED: NOT_STARTED}, creates=[])),
    ("every rank running: started",
     given().validated().workers("Running", "Running"),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (TRUE, V.ALL_RANKS_RUNNING), C.SUCCEEDED: (UNK, V.TRAINING_RUNNING),
                             C.FAILED: (UNK, V.TRAINING_RUNNING)},
          creates=[], says={C.TRAINING_STARTED: "2 training pods started (rank:node 0:node-a, 1:node-b)"})),
    ("every rank running after a restart: said",
     given().validated().status(restarts=1).workers("Running", "Running", attempt=1),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (TRUE, V.ALL_RANKS_RUNNING)},
          says={C.TRAINING_STARTED: "after 1 gang restart(s)"})),
    ("every rank succeeded: the job succeeded",
     given().training().workers("Succeeded", "Succeeded"),
     Want(Outcome.FINISHED, {C.SUCCEEDED: (TRUE, V.ALL_RANKS_SUCCEEDED), C.FAILED: (FALSE, V.ALL_RANKS_SUCCEEDED)},
          status={"completionTime": "2026-11-30T12:00:00Z"})),
    ("a rank failed, no restarts allowed: the job failed naming it",
     given().training().workers("Running", "Failed"),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)}, creates=[],
          says={C.FAILED: "rank 1 (j-worker-1 on node-b) container trainer exited 1: Traceback: boom"})),
    ("a rank failed, restarts left: gang restart",
     given().training().run_policy(backoffLimit=2).workers("Running", "Failed"),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (UNK, V.RESTARTING), C.FAILED: (UNK, V.RESTARTING),
                             C.VALIDATED: (TRUE, "Passed")},
          creates=[], deletes=["j-worker-0", "j-worker-1"], status={"restarts": 1},
          says={C.TRAINING_STARTED: "gang restart 1/2 after: rank 1"})),
    ("a rank failed, reprobeOnFailure: probed again before the restart",
     given().training().probing(attempt=1).run_policy(backoffLimit=2, reprobeOnFailure=True)
     .workers("Failed", "Running"),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.PROBING), C.TRAINING_STARTED: (UNK, V.RESTARTING)},
          deletes=["j-worker-0", "j-worker-1"], status={"restarts": 1, "probe": {"attempt": 2}})),
    ("a rank failed, the backoff limit reached: the job failed",
     given().training().run_policy(backoffLimit=2).status(restarts=2).workers("Failed", "Running", attempt=2),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.BACKOFF_LIMIT_EXCEEDED)}, status={"restarts": 2})),
    ("a rank's pod deleted while training: a failure",
     given().training().workers("Running"),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)}, creates=[],
          says={C.FAILED: "rank 1 (j-worker-1): its pod was deleted while training"})),
    ("a pod of an older attempt: deleted, nothing created until it is gone",
     given().validated().status(restarts=1).workers("Running", "Running", attempt=0),
     Want(Outcome.CONTINUE, creates=[], deletes=["j-worker-0", "j-worker-1"],
          more=lambda s: s.plan.requeue_after == 1.0)),
    ("past activeDeadlineSeconds: the job failed",
     given().training().run_policy(activeDeadlineSeconds=30).workers("Running", "Running"),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.DEADLINE_EXCEEDED)},
          says={C.FAILED: "activeDeadlineSeconds=30"})),
    ("within activeDeadlineSeconds: run again when it is due",
     given().training().run_policy(activeDeadlineSeconds=90).workers("Running", "Running"),
     Want(Outcome.CONTINUE, {C.FAILED: (UNK, V.TRAINING_RUNNING)}, says={C.TRAINING_STARTED: "given"},
          more=lambda s: s.plan.requeue_after == 30.0)),
    ("a sidecar listed first: the rendezvous and torchrun go to the trainer alone",
     given().sidecar().validated().probes("Succeeded", "Succeeded"),
     Want(Outcome.CONTINUE, creates=["j-worker-0", "j-worker-1"], more=lambda s: pinned(s) and sidecar_untouched(s))),
    ("a sidecar listed first, without probes: rank 0's own address on the trainer",
     given().sidecar().without_probes(),
     Want(Outcome.CONTINUE, creates=["j-worker-0"],
          more=lambda s: env(s.plan.creates[0], "MASTER_ADDR") == "$(OWN_IP)"
          and "OWN_IP" in {e["name"] for e in trainer_of(s.plan.creates[0])["env"]} and sidecar_untouched(s))),
    ("every trainer exited 0, a plain sidecar still running: the job succeeded",
     given().sidecar().training().with_pods(sidecar_worker(0, trainer=0), sidecar_worker(1, trainer=0)),
     Want(Outcome.FINISHED, {C.SUCCEEDED: (TRUE, V.ALL_RANKS_SUCCEEDED)})),
    ("one trainer exited 0, the other runs: still running",
     given().sidecar().training().with_pods(sidecar_worker(0, trainer=0), sidecar_worker(1)),
     Want(Outcome.CONTINUE, {C.SUCCEEDED: (UNK, V.TRAINING_RUNNING)})),
    ("a trainer exited 1, its sidecar still running (pod Running): the job failed naming it",
     given().sidecar().training().with_pods(sidecar_worker(0), sidecar_worker(1, trainer=1)),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)},
          says={C.FAILED: "rank 1 (j-worker-1 on node-b) container trainer exited 1: Traceback: boom"})),
    ("a trainer exited 1 behind a proxy that exited 0: the trainer's code and log",
     given().sidecar().training().with_pods(sidecar_worker(0), sidecar_worker(1, trainer=1, sidecar=0, phase="Failed")),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)},
          says={C.FAILED: "container trainer exited 1: Traceback: boom"},
          more=lambda s: "proxy" not in cond.get(s.conds, C.FAILED)["message"])),
    ("a trainer exited 1 with its sidecar running, restarts left: gang restart",
     given().sidecar().training().run_policy(backoffLimit=1).with_pods(sidecar_worker(0), sidecar_worker(1, trainer=1)),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (UNK, V.RESTARTING)}, deletes=["j-worker-0", "j-worker-1"],
          status={"restarts": 1})),
    ("a sidecar exited 1, the trainers run: not a failure",
     given().sidecar().training().with_pods(sidecar_worker(0, sidecar=1), sidecar_worker(1)),
     Want(Outcome.CONTINUE, {C.FAILED: (UNK, V.TRAINING_RUNNING)}, deletes=[])),
    ("a sidecar exited 1 after every trainer exited 0 (pods Failed): the job succeeded",
     given().sidecar().training().with_pods(sidecar_worker(0, trainer=0, sidecar=1, phase="Failed"),
                                            sidecar_worker(1, trainer=0)),
     Want(Outcome.FINISHED, {C.SUCCEEDED: (TRUE, V.ALL_RANKS_SUCCEEDED)})),
    ("a plain init container exited 1: the rank failed, naming it",
     given().sidecar().training().with_pods(sidecar_worker(0), sidecar_worker(1, init=("fetch", 1), phase="Failed")),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)},
          says={C.FAILED: "rank 1 (j-worker-1 on node-b) container fetch exited 1: pip: no such package"})),
    ("without probes: rank 0 first, its own address",
     given().without_probes(),
     Want(Outcome.CONTINUE, creates=["j-worker-0"],
          more=lambda s: env(s.plan.creates[0], "MASTER_ADDR") == "$(OWN_IP)")),
    ("without probes, rank 0 has its address: the others",
     given().nodes(3).without_probes().with_pods(rank0()),
     Want(Outcome.CONTINUE, creates=["j-worker-1", "j-worker-2"],
          status={"rendezvous": {"masterAddr": "10.100.0.10", "masterPort": 29500, "socketIfname": None}})),
    ("without probes, rank 0 without an address yet: wait",
     given().without_probes().with_pods(rank0(host_ip=None)),
     Want(Outcome.CONTINUE, creates=[])),
    ("a foreign pod holds a training pod's name: wait, say so, create no rank meanwhile",
     given().validated().with_pods(pod("j-worker-1", C.ROLE_WORKER, 1, attempt=0, owner_uid=None)),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (UNK, V.NAME_CONFLICT)}, creates=[],
          says={C.TRAINING_STARTED: "j-worker-1 exist(s) and is not this job's"})),
    ("a foreign pod held the name too long: the job failed",
     given().validated().status(nameConflictSince="2026-11-30T11:50:00Z")
     .with_pods(pod("j-worker-1", C.ROLE_WORKER, 1, attempt=0, owner_uid=None)),
     Want(Outcome.FINISHED, {C.TRAINING_STARTED: (FALSE, V.NAME_CONFLICT), C.FAILED: (TRUE, V.NAME_CONFLICT)})),
    ("a training pod the scheduler cannot place: said",
     given().validated().with_pods(pod("j-worker-0", C.ROLE_WORKER, 0, attempt=0, container="trainer",
                                       unschedulable="0/3 nodes are available: 1 Insufficient cpu")),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (UNK, V.WAITING_FOR_RESOURCES)}, creates=["j-worker-1"],
          says={C.TRAINING_STARTED: "rank 0 (j-worker-0) cannot be placed yet: 0/3 nodes"})),
    ("training started, a pod the scheduler cannot place: started stays",
     given().training().with_pods(pod("j-worker-0", C.ROLE_WORKER, 0, attempt=0, container="trainer",
                                      unschedulable="0/3 nodes are available"), *workers("Running", "Running")[1:]),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (TRUE, "AllRanksRunning")}, says={C.TRAINING_STARTED: "given"})),
)
def test_training(name, given, want):
    check(training.apply, given, want)


def test_a_failed_rank_under_torchrun_is_quoted_by_its_exception_not_the_banner():
    """Rank 1 ran torchrun, which raised ValueError; the kubelet kept the log's last 2048
    bytes: the job's message quotes the ValueError, not torchrun's summary table."""
    tail = (TAILS / "torchrun_bad.txt").read_bytes()[-2048:].decode()
    failed = pod("j-worker-1", C.ROLE_WORKER, 1, attempt=0, phase="Failed", node=node_name(1),
                 container="trainer", exit_code=1, message=tail)
    check(training.apply, given().training().with_pods(workers("Running")[0], failed),
          Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)},
               says={C.FAILED: "rank 1 (j-worker-1 on node-b) container trainer exited 1: ValueError: bad shape: "
                               "expected (4, 8), "
                               "got (4, 9)"}))


def test_a_failed_rank_whose_error_left_the_kubelets_tail_points_at_its_log():
    """Two local ranks: torchrun's summary tables fill the kubelet's 2048 bytes; the message
    makes up no cause from them and says where the error is."""
    tail = (TAILS / "torchrun2_bad.txt").read_bytes()[-2048:].decode()
    failed = pod("j-worker-1", C.ROLE_WORKER, 1, attempt=0, phase="Failed", node=node_name(1),
                 container="trainer", exit_code=1, message=tail)
    check(training.apply, given().training().with_pods(workers("Running")[0], failed),
          Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.RANK_FAILED)},
               says={C.FAILED: "rank 1 (j-worker-1 on node-b) container trainer exited 1: no error line in its "
                               "log's last 2048 bytes (kubectl logs j-worker-1 -c trainer)"}))
