"""spec.suspend (:mod:`disttrain.reconcile.policies.suspend`): one row per state the job is
suspended or resumed in."""

from disttrain.api import constants as C
from disttrain.reconcile.policies import suspend
from disttrain.reconcile.step import Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import pod

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE


@table(
    ("never suspended: untouched",
     given().probes("Running", "Running").probing(),
     Want(Outcome.CONTINUE, {C.SUSPENDED: None}, deletes=[], status={"probe": {"attempt": 1, "startTime": "2026-11-30T11:59:50Z"}})),
    ("created suspended: nothing runs",
     given().suspended(),
     Want(Outcome.STOP, {C.SUSPENDED: (TRUE, V.JOB_SUSPENDED), C.VALIDATED: (UNK, V.JOB_SUSPENDED)}, creates=[],
          deletes=[], status={"suspensions": 1}, says={C.SUSPENDED: "nothing runs until it is false"})),
    ("suspended while probing: probes deleted, next probe a new attempt",
     given().suspended().probing().probes("Running", "Pending"),
     Want(Outcome.STOP, {C.SUSPENDED: (TRUE, V.JOB_SUSPENDED), C.VALIDATED: (UNK, V.JOB_SUSPENDED),
                         C.NETWORK_VALIDATED: (UNK, V.JOB_SUSPENDED)},
          deletes=["j-probe-0", "j-probe-1"], status={"probe": {"attempt": 2}})),
    ("suspended while training: training stopped, not failed",
     given().suspended().training().workers("Running", "Running").status(restarts=1, suspensions=1),
     Want(Outcome.STOP, {C.SUSPENDED: (TRUE, V.JOB_SUSPENDED), C.TRAINING_STARTED: (UNK, V.JOB_SUSPENDED),
                         C.VALIDATED: (UNK, V.JOB_SUSPENDED), C.FAILED: (UNK, V.JOB_SUSPENDED)},
          deletes=["j-worker-0", "j-worker-1"], status={"startTime": None, "restarts": 1, "suspensions": 2},
          says={C.SUSPENDED: "training was stopped"})),
    ("suspended again with pods left: deleted, the stop counted once",
     given().suspended().condition(C.SUSPENDED, TRUE, V.JOB_SUSPENDED).probing(attempt=2).probes("Running"),
     Want(Outcome.STOP, {C.SUSPENDED: (TRUE, V.JOB_SUSPENDED), C.VALIDATED: (UNK, V.NOT_CHECKED)},
          deletes=["j-probe-0"], says={C.SUSPENDED: "given"}, status={"suspensions": None, "probe": {"attempt": 2, "startTime": "2026-11-30T11:59:50Z"}})),
    ("suspended without probes: the checks stay as they were",
     given().suspended().without_probes().condition(C.TRAINING_STARTED, TRUE, "AllRanksRunning").workers("Running", "Running"),
     Want(Outcome.STOP, {C.TRAINING_STARTED: (UNK, V.JOB_SUSPENDED), C.NETWORK_VALIDATED: (UNK, V.PROBE_DISABLED)},
          deletes=["j-worker-0", "j-worker-1"])),
    ("resumed: Suspended False, the stages run",
     given().condition(C.SUSPENDED, TRUE, V.JOB_SUSPENDED),
     Want(Outcome.CONTINUE, {C.SUSPENDED: (FALSE, V.JOB_RESUMED)}, deletes=[])),
    ("a foreign pod is never deleted",
     given().suspended().probes("Running").with_pods(pod("j-probe-1", C.ROLE_PROBE, 1, owner_uid="uid-0")),
     Want(Outcome.STOP, {C.SUSPENDED: (TRUE, V.JOB_SUSPENDED)}, deletes=["j-probe-0"])),
)
def test_suspend(name, given, want):
    check(suspend.apply, given, want)
