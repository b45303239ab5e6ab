"""API calls that fail (:mod:`disttrain.reconcile.policies.apierrors`): which are terminal,
the backoff, and what one step does with the previous step's failures."""

import pytest

from disttrain.api import constants as C
from disttrain.reconcile.policies import apierrors
from disttrain.reconcile.step import ApiFailure, Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, table

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
INVALID_POD = ApiFailure("create", "Pod", "j-probe-0", 422,
                         'Pod "j-probe-0" is invalid: spec.containers[0].image: Required value')
INVALID_SERVICE = ApiFailure("create", "Service", "j", 422, "invalid")
ETCD = ApiFailure("create", "Pod", "j-worker-1", 500, "etcd timeout", attempts=apierrors.SHOW_AFTER)
NOT_YET = ApiFailure("create", "Pod", "j-worker-1", 500, "etcd timeout", attempts=apierrors.SHOW_AFTER - 1)
SILENT = ApiFailure("patch", "status", "j", 0, "ConnectionRefused", attempts=7)
# the kubernetes client refused the body before sending it (its models: quantities are strings)
CLIENT_REFUSED = ApiFailure("create", "Pod", "j-probe-0", 0, "spec.containers[0].resources.requests.cpu: "
                            "Input should be a valid string (got 1)", client=True)
SHOWN = (UNK, V.API_ERROR)


def failing(*failures):
    """The job, its previous step's calls having failed so."""
    return given().observing(api_failures=failures)


@pytest.mark.parametrize("failure,terminal", [
    (INVALID_POD, True),
    (CLIENT_REFUSED, True),
    (ApiFailure("patch", "status", "j", 0, "x", client=True), False),
    (ApiFailure("create", "Pod", "j-probe-0", 400, "bad request"), True),
    (ApiFailure("create", "Pod", "j-probe-0", 403, 'pods "j-probe-0" is forbidden: violates PodSecurity "restricted:latest"'), True),
    (ApiFailure("create", "Pod", "j-probe-0", 403, 'pods "j-probe-0" is forbidden: exceeded quota: q'), False),
    (INVALID_SERVICE, True),
    (ApiFailure("create", "Pod", "j-probe-0", 500, "etcd timeout"), False),
    (ApiFailure("create", "Pod", "j-probe-0", 0, "ConnectionRefused"), False),
    (ApiFailure("patch", "status", "j", 422, "invalid status"), False),
    (ApiFailure("delete", "Pod", "j-probe-0", 422, "x"), False),
])
def test_which_api_failures_are_terminal(failure, terminal):
    assert apierrors.is_terminal(failure) is terminal


def test_backoff_doubles_to_a_cap():
    assert [apierrors.backoff_seconds(n) for n in (1, 2, 3, 4, 7, 30)] == [1, 2, 4, 8, 60, 60]


def test_pod_field_paths_become_the_jobs():
    msg = 'Pod "j-probe-0" is invalid: spec.containers[0].resources.limits[cpu]: Invalid value: "abc"; metadata.labels: bad'
    out = apierrors.template_field_message(msg)
    assert "spec.template.spec.containers[0].resources.limits[cpu]" in out
    assert "spec.template.metadata.labels" in out and out.startswith('Pod "j-probe-0" is invalid: ')
    # a probe pod's one container is the trainer's, wherever the trainer is in the template
    assert "spec.template.spec.containers[2].resources" in apierrors.template_field_message(msg, probe_of=2)


@table(
    ("no failure: nothing",
     given(),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.NOT_CHECKED), C.FAILED: (UNK, V.TRAINING_PENDING)})),
    ("a probe pod refused as invalid: the preflight failed, the field named",
     failing(INVALID_POD),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.INVALID_POD_TEMPLATE), C.FAILED: (TRUE, V.INVALID_POD_TEMPLATE),
                             C.MASTER_REACHABLE: (UNK, V.NOT_REACHED)},
          says={C.FAILED: "spec.template.spec.containers[0].image"})),
    ("a probe pod refused as invalid, the trainer second: the trainer's field named",
     failing(INVALID_POD).sidecar(),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.INVALID_POD_TEMPLATE)},
          says={C.FAILED: "spec.template.spec.containers[1].image"})),
    ("a probe pod the client refused: at the first refusal, the field named, never a retry loop",
     failing(CLIENT_REFUSED),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.INVALID_POD_TEMPLATE), C.FAILED: (TRUE, V.INVALID_POD_TEMPLATE)},
          says={C.FAILED: "the kubernetes client refused pod j-probe-0: "
                          "spec.template.spec.containers[0].resources.requests.cpu: Input should be a valid string"})),
    ("a training pod refused as invalid: the job failed, the preflight stays passed",
     given().validated().observing(api_failures=(INVALID_POD,)),
     Want(Outcome.FINISHED, {C.VALIDATED: (TRUE, "Passed"), C.FAILED: (TRUE, V.INVALID_POD_TEMPLATE),
                             C.SUCCEEDED: (FALSE, V.INVALID_POD_TEMPLATE)})),
    ("the Service refused as invalid: InvalidSpec",
     failing(NOT_YET, INVALID_SERVICE),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.INVALID_SPEC), C.FAILED: (TRUE, V.INVALID_SPEC)})),
    ("a failure retried, not yet shown",
     failing(NOT_YET),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.NOT_CHECKED), C.FAILED: (UNK, V.TRAINING_PENDING)})),
    ("a failure retried SHOW_AFTER times while probing: on Validated",
     failing(NOT_YET, ETCD),
     Want(Outcome.CONTINUE, {C.VALIDATED: SHOWN, C.TRAINING_STARTED: (UNK, V.TRAINING_PENDING)},
          says={C.VALIDATED: "create Pod j-worker-1 failed 3 times (HTTP 500): etcd timeout; retrying every 4s"})),
    ("validated, training not started: on TrainingStarted",
     given().validated().observing(api_failures=(ETCD,)),
     Want(Outcome.CONTINUE, {C.VALIDATED: (TRUE, "Passed"), C.TRAINING_STARTED: SHOWN, C.FAILED: (UNK, V.TRAINING_PENDING)})),
    ("without probes: on TrainingStarted",
     given().without_probes().observing(api_failures=(ETCD,)),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.NOT_CHECKED), C.TRAINING_STARTED: SHOWN})),
    ("training: on Succeeded and Failed, no answer said so",
     given().training().observing(api_failures=(ETCD, SILENT)),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (TRUE, "AllRanksRunning"), C.SUCCEEDED: SHOWN, C.FAILED: SHOWN},
          says={C.FAILED: "patch status j failed 7 times (no answer): ConnectionRefused; retrying every 60s"})),
    ("a finished job: nothing",
     given().finished().observing(api_failures=(INVALID_POD, ETCD)),
     Want(Outcome.CONTINUE, {C.SUCCEEDED: (TRUE, "Given"), C.VALIDATED: (UNK, V.NOT_CHECKED)})),
)
def test_apply(name, given, want):
    check(apierrors.apply, given, want)
