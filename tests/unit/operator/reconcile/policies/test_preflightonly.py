"""Preflight-only jobs (:mod:`disttrain.reconcile.policies.preflightonly`): one row per state
a job labelled ``disttrain.dev/preflight-only`` (or not) reaches the policy in."""

from disttrain.api import constants as C
from disttrain.reconcile.policies import preflightonly
from disttrain.reconcile.step import Outcome
from tests.support.builders import StepBuilder, Want, check, given, table


def only(b: StepBuilder, value: str = "true") -> StepBuilder:
    b.body["metadata"]["labels"] = {**(b.body["metadata"].get("labels") or {}), C.LABEL_PREFLIGHT_ONLY: value}
    return b


@table(
    ("preflight-only, validated: stops before training", only(given().validated().probes("Succeeded", "Succeeded")),
     Want(Outcome.STOP, creates=[], deletes=[])),
    ("preflight-only, probing: continues (training waits for Validated anyway)",
     only(given().probing().probes("Running", "Running")), Want(Outcome.CONTINUE)),
    ("preflight-only without probes: stops (never trains)", only(given().without_probes()), Want(Outcome.STOP)),
    ("preflight-only, finished: the cleanup runs", only(given().validated().finished(False)), Want(Outcome.CONTINUE)),
    ("the label with another value: an ordinary job", only(given().validated(), "false"), Want(Outcome.CONTINUE)),
    ("an ordinary validated job: continues to training", given().validated(), Want(Outcome.CONTINUE)),
)
def test_preflight_only(name, given, want):
    check(preflightonly.apply, given, want)
