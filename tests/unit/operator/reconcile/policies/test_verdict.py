"""The probe verdict (:mod:`disttrain.reconcile.policies.verdict`): one row per kind of
probe run, from the checked outcomes to the conditions, the status and the Events."""

from disttrain.api import constants as C
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile.policies import verdict
from disttrain.reconcile.step import Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import report, typed_report

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
PASSED = (TRUE, V.ALL_CHECKS_PASSED)
PREFLIGHT_FAILED = (TRUE, V.PREFLIGHT_FAILED)
TIMEOUT = {"reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous", "message": "node-b: timeout to 10.100.0.10:29500"}
LOOPBACK = {"reason": V.HOSTNAME_LOOPBACK, "message": "node-b: hostname node-b resolves to 127.0.1.1"}
LOST = ProbeOutcome(rank=1, pod="j-probe-1", node="node-b", error="node-b stopped reporting (NotReady)",
                    error_reason=V.PROBE_POD_LOST)
BLOCKED = {"reason": V.EPHEMERAL_PORTS_BLOCKED, "phase": "choice", "message": "node-a: ephemeral ports blocked"}
DENY = {"kind": "NetworkPolicy", "metadata": {"name": "default-deny"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
ADMIT_JOB = {"kind": "NetworkPolicy", "metadata": {"name": "job-peers"},
             "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {C.LABEL_JOB: "j"}}}]}]}}
# admits the job's pods only from namespaces labelled team=ml (issue 31)
TEAM_ONLY = {"kind": "NetworkPolicy", "metadata": {"name": "team-only"},
             "spec": {"podSelector": {"matchLabels": {C.LABEL_JOB: "j"}}, "policyTypes": ["Ingress"],
                      "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "ml"}},
                                             "podSelector": {}}]}]}}
INTERCEPTED_FAILURE = {"reason": V.CONNECTION_INTERCEPTED, "phase": "rendezvous", "message": (
    "node-b (rank 1): connections to 10.100.0.10 (MASTER_PORT 29500) are accepted and then closed "
    "before rank 0's probe answers")}
INTERCEPTED = (ProbeOutcome(rank=0, pod="j-probe-0", node="node-a", report=typed_report(report(0, "node-a"))),
               ProbeOutcome(rank=1, pod="j-probe-1", node="node-b",
                            report=typed_report(report(1, "node-b", ok=False, failure=INTERCEPTED_FAILURE))))
RENDEZVOUS = {"masterAddr": "10.100.0.10", "masterPort": 29500, "socketIfname": "eth1"}


def events(*want):
    """A check that the step recorded exactly these (type, reason, message) Events."""
    return lambda s: s.plan.events == list(want)


@table(
    ("no verdict yet: nothing written",
     given().probing(),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.NOT_CHECKED)}, status={"nodes": None, "rendezvous": {}},
          more=events())),
    ("every rank passed: validated, the rendezvous recorded",
     given().probing().with_probe_reports(),
     Want(Outcome.CONTINUE, {C.VALIDATED: PASSED, C.MASTER_REACHABLE: (TRUE, V.MASTER_PORT_OPEN),
                             C.NETWORK_VALIDATED: (TRUE, V.INTERFACE_SELECTED), C.FAILED: (UNK, V.TRAINING_PENDING)},
          status={"rendezvous": RENDEZVOUS, "completionTime": None},
          says={C.VALIDATED: "2 nodes validated; NCCL_SOCKET_IFNAME=eth1; MASTER_ADDR=10.100.0.10"},
          more=lambda s: [(n["rank"], n["name"], n["interface"]) for n in s.status["nodes"]]
          == [(0, "node-a", "eth1"), (1, "node-b", "eth1")] and not s.plan.events)),
    ("the probe's own record: attempt kept, timed from its start, earlier findings dropped",
     given().status(probe={"attempt": 3, "startTime": "2026-11-30T11:59:50Z", "failures": ["old"]})
     .with_probe_reports(report(0, "node-a", attempt=3), report(1, "node-b", attempt=3)),
     Want(Outcome.CONTINUE, {C.VALIDATED: PASSED},
          status={"probe": {"attempt": 3, "startTime": "2026-11-30T11:59:50Z", "completionTime": "2026-11-30T12:00:00Z",
                            "durationSeconds": 10.0, "backend": "gloo", "messageSizeBytes": 4194304,
                            "algBandwidthGBps": 1.5, "busBandwidthGBps": 1.5,
                            "phaseSeconds": {"inventory": 0.01, "rendezvous": 0.2},
                            "interfacesNotChosen": ["not chosen: docker0 (DuplicateAddress: the same address on "
                                                    "every node)"]}})),
    ("ProbesScheduled already True: its placement message kept",
     given().condition(C.PROBES_SCHEDULED, TRUE, V.PROBES_SCHEDULED_OK).with_probe_reports(),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (TRUE, V.PROBES_SCHEDULED_OK)}, says={C.PROBES_SCHEDULED: "given"})),
    ("a warning: validated, the warning an Event and in status.probe",
     given().with_probe_reports(report(0, "node-a"), report(1, "node-b", warnings=[LOOPBACK])),
     Want(Outcome.CONTINUE, {C.VALIDATED: (TRUE, V.PASSED_WITH_WARNINGS)},
          more=lambda s: s.plan.events == [("Normal", V.PROBE_DETAIL, s.status["probe"]["warnings"][0])]
          and "127.0.1.1" in s.status["probe"]["warnings"][0])),
    ("a rank could not reach the master: the preflight failed",
     given().probing().with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.MASTER_REACHABLE: (FALSE, V.MASTER_PORT_TIMEOUT),
                             C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT), C.FAILED: PREFLIGHT_FAILED,
                             C.SUCCEEDED: (FALSE, V.PREFLIGHT_FAILED),
                             C.NETWORK_VALIDATED: (UNK, V.NOT_REACHED)},
          status={"completionTime": "2026-11-30T12:00:00Z"}, says={C.FAILED: "no training pods were created"},
          more=events(("Warning", V.PROBE_DETAIL, TIMEOUT["message"])))),
    ("torch differs between nodes: VersionsConsistent False",
     given().with_probe_reports(report(0, "node-a"), report(1, "node-b", torch="2.7.0")),
     Want(Outcome.FINISHED, {C.VERSIONS_CONSISTENT: (FALSE, V.TORCH_VERSION_MISMATCH),
                             C.VALIDATED: (FALSE, V.TORCH_VERSION_MISMATCH), C.FAILED: PREFLIGHT_FAILED},
          says={C.VERSIONS_CONSISTENT: "node-b: torch 2.7.0"})),
    ("a probe pod lost with its node: the loss is the cause, not what its peer then saw",
     given().with_outcomes(ProbeOutcome(rank=0, pod="j-probe-0", node="node-a", report=typed_report(report(
         0, "node-a", ok=False, failure=TIMEOUT))), LOST),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.PROBE_POD_LOST), C.FAILED: PREFLIGHT_FAILED,
                             C.MASTER_REACHABLE: (UNK, V.NOT_REACHED)},
          says={C.VALIDATED: "node-b stopped reporting", C.FAILED: "(ProbePodLost)"})),
    ("ports blocked on hostNetwork with a portRange: the fix the spec allows",
     given().spec(network={"hostNetwork": True, "portRange": "61000-62000"})
     .with_probe_reports(report(0, "node-a", ok=False, failure=BLOCKED), report(1, "node-b", ok=False, failure=BLOCKED)),
     Want(Outcome.FINISHED, {C.NETWORK_VALIDATED: (FALSE, V.EPHEMERAL_PORTS_BLOCKED)},
          says={C.NETWORK_VALIDATED: "blocked; with hostNetwork the operator cannot set net.ipv4.ip_local_port_range"})),
    ("a NetworkPolicy drops the job's traffic: the policy is named, not a firewall",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(DENY,))
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.MASTER_REACHABLE: (FALSE, V.NETWORK_POLICY_BLOCKS),
                             C.VALIDATED: (FALSE, V.NETWORK_POLICY_BLOCKS), C.FAILED: PREFLIGHT_FAILED},
          says={C.VALIDATED: "NetworkPolicy default-deny in namespace ns drops TCP 29500 (rendezvous), 29501"},
          more=lambda s: "firewall" not in s.status["probe"]["failures"][0]
          and s.status["probe"]["failures"][1] == TIMEOUT["message"])),
    ("a policy that admits the job's pods: the probes' own verdict stands",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(DENY, ADMIT_JOB))
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT)})),
    ("a policy admitting only namespaces labelled team=ml, the job's lacks it: the policy and the label, no firewall",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(TEAM_ONLY,), namespace_labels={})
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.MASTER_REACHABLE: (FALSE, V.NETWORK_POLICY_BLOCKS),
                             C.VALIDATED: (FALSE, V.NETWORK_POLICY_BLOCKS)},
          says={C.MASTER_REACHABLE: "team-only drops the job's own traffic: its namespaceSelector "
                "needs team=ml, which namespace ns lacks (TCP 29500 (rendezvous), 29501",
                C.VALIDATED: "its namespaceSelector needs team=ml, which namespace ns lacks"},
          more=lambda s: all("firewall" not in c["message"] for c in s.conds))),
    ("the same policy, the namespace's labels unread: the policy is the named candidate, never a firewall",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(TEAM_ONLY,))
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.MASTER_REACHABLE: (FALSE, V.MASTER_PORT_TIMEOUT),
                             C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT)},
          says={C.MASTER_REACHABLE: "NetworkPolicy team-only may drop the job's own traffic: "
                "its namespaceSelector needs team=ml, and namespace ns's labels could not be read (TCP 29500 (",
                C.VALIDATED: "needs team=ml, and namespace ns's labels could not be read"},
          more=lambda s: all("firewall" not in c["message"] for c in s.conds)
          and "kubectl get namespace ns --show-labels" in s.status["probe"]["failures"][0])),
    ("the same policy, the namespace labelled team=ml: it admits, the probes' own verdict stands",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(TEAM_ONLY,),
                                                            namespace_labels={"team": "ml"})
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT)},
          more=lambda s: "NetworkPolicy" not in s.status["probe"]["failures"][0])),
    ("an undecided policy on the ephemeral range only: a failed rendezvous is not put on it",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(
         {"kind": "NetworkPolicy", "metadata": {"name": "eph"}, "spec": {
             "podSelector": {}, "ingress": [{"ports": [{"port": 29500, "endPort": 29501}]},
                                            {"from": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]}]}},))
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT)},
          more=lambda s: "NetworkPolicy" not in s.status["probe"]["failures"][0])),
    ("hostNetwork pods are exempt from NetworkPolicy: the probes' verdict stands",
     given().spec(network={"hostNetwork": True}).observing(network_policies=(DENY,))
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", ok=False, failure=TIMEOUT)),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT)})),
    ("a failure a dropped connection does not cause is not blamed on a policy",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(DENY,))
     .with_probe_reports(report(0, "node-a"), report(1, "node-b", torch="2.7.0")),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.TORCH_VERSION_MISMATCH)})),
    ("the probes passed under a policy the operator reads as dropping: validated (no enforcer)",
     given().spec(network={"hostNetwork": False}).observing(network_policies=(DENY,)).with_probe_reports(),
     Want(Outcome.CONTINUE, {C.VALIDATED: PASSED})),
    ("connections intercepted on pods carrying Istio's sidecar: the sidecar and its fix are named",
     given().with_outcomes(*INTERCEPTED, sidecar="istio-proxy"),
     Want(Outcome.FINISHED, {C.MASTER_REACHABLE: (FALSE, V.CONNECTION_INTERCEPTED),
                             C.VALIDATED: (FALSE, V.CONNECTION_INTERCEPTED)},
          says={C.MASTER_REACHABLE: "the Istio sidecar (container istio-proxy) injected into the job's pods"})),
    ("connections intercepted, no sidecar on the pods: the probe's own words stand",
     given().with_outcomes(*INTERCEPTED),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.CONNECTION_INTERCEPTED)},
          says={C.MASTER_REACHABLE: "node-b (rank 1): connections to 10.100.0.10"})),
    ("dials to the ephemeral ports intercepted after the rendezvous worked: NetworkValidated carries it",
     given().with_outcomes(*(ProbeOutcome(rank=r, pod=f"j-probe-{r}", node=n, report=typed_report(report(r, n, ok=False, failure=dict(
         INTERCEPTED_FAILURE, phase="choice")))) for r, n in ((0, "node-a"), (1, "node-b"))), sidecar="istio-proxy"),
     Want(Outcome.FINISHED, {C.MASTER_REACHABLE: (TRUE, V.MASTER_PORT_OPEN),
                             C.NETWORK_VALIDATED: (FALSE, V.CONNECTION_INTERCEPTED),
                             C.VALIDATED: (FALSE, V.CONNECTION_INTERCEPTED)},
          says={C.NETWORK_VALIDATED: "the Istio sidecar (container istio-proxy)"})),
    ("many failing ranks: at most MAX_DETAIL_EVENTS Events, 16 in status.probe",
     given().nodes(20).with_probe_reports(report(0, "node-a", world_size=20), *(
         report(r, f"node-{r}", ok=False, world_size=20, failure=dict(TIMEOUT, message=f"node-{r}: timeout"))
         for r in range(1, 20))),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.MASTER_PORT_TIMEOUT)},
          more=lambda s: len(s.plan.events) == verdict.MAX_DETAIL_EVENTS and len(s.status["probe"]["failures"]) == 16)),
)
def test_verdict(name, given, want):
    check(verdict.apply, given, want)
