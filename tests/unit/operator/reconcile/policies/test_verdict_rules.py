"""The verdict's rules (:data:`disttrain.reconcile.policies.verdict.RULES`): their names in
order, and for built probe runs which rules made the verdict (:func:`~disttrain.reconcile.policies.verdict.decide`)."""

import pytest

from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile.policies import verdict
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import given
from tests.support.fixtures import report
from tests.unit.operator.reconcile.policies.test_verdict import BLOCKED, DENY, INTERCEPTED, LOST, TIMEOUT

OOM = ProbeOutcome(rank=0, pod="j-probe-0", node="node-a", error="node-a: the kubelet says OOMKilled",
                   error_reason=V.OOM_KILLED)
FAILED = (report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT))


def test_the_rules_in_order():
    assert [r.name for r in verdict.RULES] == [
        "diagnose", "advice", "kubelet-ended", "node-loss", "network-policy", "mesh-sidecar"]
    assert [r.name for r in verdict.RULES if r.final] == ["kubelet-ended", "node-loss"]


ROWS = [
    ("every rank passed: the diagnosis alone", given().with_probe_reports(), ["diagnose"], "True"),
    ("a rank could not reach the master: the diagnosis alone",
     given().with_probe_reports(*FAILED), ["diagnose"], V.MASTER_PORT_TIMEOUT),
    ("ports blocked on hostNetwork with a portRange: the diagnosis and the fix the spec allows",
     given().spec(network={"hostNetwork": True, "portRange": "61000-62000"}).with_probe_reports(
         report(0, "node-a", ok=False, failure=BLOCKED), report(1, "node-b", ok=False, failure=BLOCKED)),
     ["diagnose", "advice"], V.EPHEMERAL_PORTS_BLOCKED),
    ("a probe pod lost with its node: the loss decides",
     given().with_outcomes(ProbeOutcome(rank=0, pod="j-probe-0", node="node-a"), LOST),
     ["diagnose", "node-loss"], V.PROBE_POD_LOST),
    ("the kubelet ended one probe, the other lost: the kubelet's word, the loss not reached",
     given().with_outcomes(OOM, LOST), ["diagnose", "kubelet-ended"], V.OOM_KILLED),
    ("a NetworkPolicy drops the job's traffic: the policy decides",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(DENY,)).with_probe_reports(*FAILED),
     ["diagnose", "network-policy"], V.NETWORK_POLICY_BLOCKS),
    ("the same policy on hostNetwork: exempt, the probes' verdict stands",
     given().spec(network={"hostNetwork": True}).observing(network_policies=(DENY,)).with_probe_reports(*FAILED),
     ["diagnose"], V.MASTER_PORT_TIMEOUT),
    ("connections intercepted on pods with Istio's sidecar: the sidecar decides",
     given().with_outcomes(*INTERCEPTED, sidecar="istio-proxy"), ["diagnose", "mesh-sidecar"],
     V.CONNECTION_INTERCEPTED),
]


@pytest.mark.parametrize("name,built,made,validated", ROWS, ids=[r[0] for r in ROWS])
def test_which_rules_made_the_verdict(name, built, made, validated):
    s = built.build()
    diag, got = verdict.decide(verdict.Context.of(s, verdict.collect(s, s.probe_run), s.probe_run.master))
    assert got == made
    top = diag.conditions[V.VALIDATED]
    assert (top.status if validated == "True" else top.reason) == validated
