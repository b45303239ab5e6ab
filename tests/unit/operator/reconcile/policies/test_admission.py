"""Admission by Kueue (:mod:`disttrain.reconcile.policies.admission`): one row per state of
the queued job's Workload, and the Workload marked Finished when the job ends."""

import copy

from disttrain.api import constants as C
from disttrain.children import kueue
from disttrain.reconcile.policies import admission
from disttrain.reconcile.step import Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import (
    ADMISSION,
    ADMITTED,
    DEACTIVATED,
    EVICTED,
    FLAVOR,
    PENDING,
    Want,
    check,
    given,
    table,
    workload,
)

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
FINISHED = ADMITTED + [{"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done"}]


def foreign_workload():
    """A Workload of the job's name owned by an earlier job of that name."""
    wl = workload(PENDING)
    wl["metadata"]["ownerReferences"][0]["uid"] = "uid-0"
    return wl


def patched(kind):
    """A check that the step patched one Workload's status, with a ``kind`` condition True."""
    def more(s):
        [(api, what, name, patch)] = s.plan.status_patches
        types = {x["type"]: x["status"] for x in patch["status"]["conditions"]}
        return (api, what, name) == (kueue.KUEUE_API, "Workload", "j-uid-1") and types.get(kind) == TRUE
    return more


@table(
    ("unqueued: untouched",
     given(),
     Want(Outcome.CONTINUE, {C.ADMITTED: None}, more=lambda s: s.plan.objects == [] and s.placement is None)),
    ("queued, no Workload yet: created, nothing runs",
     given().queued(),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WAITING_FOR_QUOTA)}, says={C.ADMITTED: "LocalQueue user-queue"},
          more=lambda s: [(o["kind"], o["metadata"]["name"]) for o in s.plan.objects] == [("Workload", "j-uid-1")])),
    ("queued, Kueue unreadable: said, retried",
     given().queued().observing(kueue=kueue.KueueRead(problem="HTTP 403")),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.KUEUE_UNAVAILABLE), C.FAILED: (UNK, V.TRAINING_PENDING)},
          says={C.ADMITTED: "kueue.enabled=true"}, more=lambda s: s.plan.requeue_after == 30.0)),
    ("queued, an older job's Workload: waited for, not created again",
     given().queued().observing(kueue=kueue.KueueRead(foreign_workload())),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WAITING_FOR_QUOTA)}, says={C.ADMITTED: "waiting for Kueue to admit"},
          more=lambda s: s.plan.objects == [])),
    ("pending: Kueue's own words",
     given().workload(PENDING),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WAITING_FOR_QUOTA)}, creates=[],
          says={C.ADMITTED: "insufficient unused quota for cpu"})),
    ("admitted: the flavors' nodes",
     given().workload(ADMITTED, ADMISSION, (FLAVOR,)),
     Want(Outcome.CONTINUE, {C.ADMITTED: (TRUE, V.WORKLOAD_ADMITTED)},
          says={C.ADMITTED: "ClusterQueue cluster-queue (LocalQueue user-queue); flavors: cpu=gpu-a"},
          more=lambda s: s.placement == ({"pool": "a100"}, FLAVOR["spec"]["tolerations"]))),
    ("deactivated: the job fails",
     given().workload(DEACTIVATED, active=False),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WORKLOAD_DEACTIVATED), C.FAILED: (TRUE, V.WORKLOAD_DEACTIVATED),
                         C.SUCCEEDED: (FALSE, V.WORKLOAD_DEACTIVATED)}, says={C.FAILED: "delete the job"})),
    ("evicted while training: pods stopped, preflight forgotten, quota kept until they are gone",
     given().workload(EVICTED, ADMISSION).condition(C.ADMITTED, TRUE).training().workers("Running", "Running"),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WORKLOAD_EVICTED), C.VALIDATED: (UNK, V.WORKLOAD_EVICTED),
                         C.TRAINING_STARTED: (UNK, V.WORKLOAD_EVICTED), C.FAILED: (UNK, V.WORKLOAD_EVICTED)},
          deletes=["j-worker-0", "j-worker-1"], says={C.ADMITTED: "Preempted"}, status={"suspensions": 1},
          more=lambda s: s.plan.status_patches == [] and s.plan.requeue_after == 1.0)),
    ("evicted, every pod gone: the quota handed back",
     given().workload(EVICTED, ADMISSION).condition(C.ADMITTED, FALSE, V.WORKLOAD_EVICTED).validated(),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WORKLOAD_EVICTED), C.VALIDATED: (TRUE, "Passed")}, deletes=[],
          more=patched("Requeued"))),
    ("no longer admitted (pending again): pods stopped, probed again",
     given().workload(PENDING).condition(C.ADMITTED, TRUE).validated().probing().workers("Pending", "Running"),
     Want(Outcome.STOP, {C.ADMITTED: (FALSE, V.WAITING_FOR_QUOTA), C.VALIDATED: (UNK, V.WAITING_FOR_QUOTA)},
          deletes=["j-worker-0", "j-worker-1"], status={"probe": {"attempt": 2}})),
)
def test_admission(name, given, want):
    check(admission.apply, given, want)


def finish(s):
    """:func:`admission.finish` as a policy (it returns nothing)."""
    admission.finish(s)
    return Outcome.FINISHED


@table(
    ("succeeded: the Workload marked Finished",
     given().workload(ADMITTED, ADMISSION).training().finished(),
     Want(Outcome.FINISHED, more=patched("Finished"))),
    ("failed: Finished too, with the failure",
     given().workload(ADMITTED, ADMISSION).finished(succeeded=False),
     Want(Outcome.FINISHED, more=lambda s: patched("Finished")(s) and "Failed" in str(s.plan.status_patches))),
    ("already Finished: once only",
     given().workload(FINISHED, ADMISSION).finished(),
     Want(Outcome.FINISHED, more=lambda s: s.plan.status_patches == [])),
    ("an older job's Workload: not this job's to finish",
     given().queued().observing(kueue=kueue.KueueRead(foreign_workload())).finished(),
     Want(Outcome.FINISHED, more=lambda s: s.plan.status_patches == [])),
    ("unqueued: no Workload",
     given().observing(kueue=kueue.KueueRead(copy.deepcopy(workload(ADMITTED, ADMISSION)))).finished(),
     Want(Outcome.FINISHED, more=lambda s: s.plan.status_patches == [])),
)
def test_finish(name, given, want):
    check(finish, given, want)
