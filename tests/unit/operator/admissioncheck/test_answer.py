"""A probe verdict as the admission check's answer (:mod:`disttrain.admissioncheck.answer`):
Ready with the pod set updates that pin the job to what was validated, Retry when a node is
at fault, Rejected when the job is, Pending while the probes run."""
import pytest

from disttrain.admissioncheck import answer as A
from disttrain.admissioncheck.workload import Problem, parse_workload
from disttrain.api import constants
from disttrain.diagnosis.checkconditions import Verdict
from disttrain_probe.contract import vocabulary as V

from .workloads import pod_set, pytorchjob, template, workload

PLAN = parse_workload(pytorchjob(workers=2))
OWN_IFNAME = parse_workload(workload("JobSet", [pod_set("w", 3, template(
    "trainer", env=[{"name": "NCCL_SOCKET_IFNAME", "value": "eth9"}]))]))
PLACED = {0: "n0", 1: "n1", 2: "n2"}
T, F, U = constants.TRUE, constants.FALSE, constants.UNKNOWN


def failed(check, reason, message):
    """The conditions of a verdict where ``check`` failed with ``reason``."""
    out = {c: Verdict(T, "Ok", "passed") for c in V.CHECK_CONDITIONS}
    out[check] = Verdict(F, reason, message)
    out[V.VALIDATED] = Verdict(F, reason, f"{check}=False ({reason}): see the {check} condition")
    return out


def test_validated_is_ready_pinning_each_rank_pod_set_and_carrying_the_interface():
    verdicts = {V.VALIDATED: Verdict(T, V.ALL_CHECKS_PASSED, "validated on n0, n1, n2")}
    got = A.answer(verdicts, PLAN, PLACED, socket_ifnames={0: "eth1", 1: "eth1", 2: "eth1"})
    key, value = A.validated_label(PLAN)
    assert got.state == A.READY and got.message == "validated on n0, n1, n2"
    assert got.pod_set_updates == [
        {"name": "master", "nodeSelector": {key: value}, "annotations": {A.SOCKET_IFNAME_ANNOTATION: "eth1"}},
        {"name": "worker", "nodeSelector": {key: value}, "annotations": {A.SOCKET_IFNAME_ANNOTATION: "eth1"}}]
    assert key.startswith(A.LABEL_PREFIX + "/") and len(key.split("/")[1]) <= 63


def test_ready_leaves_out_a_key_the_template_already_sets_and_lists_differing_interfaces():
    wl = pytorchjob(workers=1)
    key, _ = A.validated_label(parse_workload(wl))
    wl["spec"]["podSets"][1]["template"]["metadata"]["annotations"] = {A.SOCKET_IFNAME_ANNOTATION: "mine"}
    wl["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {key: "true"}
    plan = parse_workload(wl)
    got = A.answer({V.VALIDATED: Verdict(T, V.ALL_CHECKS_PASSED, "ok")}, plan, {0: "a", 1: "b"},
                   socket_ifnames={0: "eth1", 1: "ens5"})
    assert got.pod_set_updates == [{"name": "master", "annotations": {A.SOCKET_IFNAME_ANNOTATION: "ens5,eth1"}},
                                   {"name": "worker", "nodeSelector": {key: "true"}}]


@pytest.mark.parametrize("verdicts", [{}, {V.VALIDATED: Verdict(U, V.PROBING, "probing 3 nodes")}])
def test_no_verdict_yet_is_pending(verdicts):
    got = A.answer(verdicts, PLAN, PLACED)
    assert got.state == A.PENDING and got.message and not got.pod_set_updates


def test_a_node_at_fault_is_retry_with_the_failed_check_s_sentence():
    msg = "n2 drops connections to ports 32768-60999: open the ephemeral range on n2"
    got = A.answer(failed(V.NETWORK_VALIDATED, V.EPHEMERAL_PORTS_BLOCKED, msg), PLAN, PLACED, named=["n2"])
    assert got.state == A.RETRY and got.message == f"{V.EPHEMERAL_PORTS_BLOCKED}: {msg}"
    assert got.requeue_after_seconds == A.RETRY_AFTER_SECONDS and not got.pod_set_updates
    assert got.avoid == ("n2",)


def test_retry_avoids_only_probed_nodes_the_verdict_named_once_each():
    got = A.answer(failed(V.COLLECTIVE_VALIDATED, V.ALL_REDUCE_TIMEOUT, "m"), PLAN, PLACED,
                   named=["n1", "elsewhere", "n1", "n0"])
    assert got.state == A.RETRY and got.avoid == ("n1", "n0")


@pytest.mark.parametrize("reason", sorted(A.JOB_FAULTS))
def test_the_job_s_own_faults_are_rejected(reason):
    got = A.answer(failed(V.NETWORK_VALIDATED, reason, "x " * 300), PLAN, PLACED)
    assert got.state == A.REJECTED and got.message.startswith(reason) and len(got.message) <= 400


@pytest.mark.parametrize("plan, named, state", [
    (OWN_IFNAME, ["n0", "n1", "n2"], A.REJECTED),  # the job's eth9 is on no node
    (OWN_IFNAME, ["n1"], A.RETRY),  # one node lacks it: other nodes may have it
    (PLAN, ["n0", "n1", "n2"], A.RETRY),  # the probe chose (auto): the nodes are at fault
])
def test_interface_not_found_is_the_job_s_fault_only_for_its_own_interface_everywhere(plan, named, state):
    got = A.answer(failed(V.NETWORK_VALIDATED, V.INTERFACE_NOT_FOUND, "no eth9"), plan, PLACED, named=named)
    assert got.state == state


@pytest.mark.parametrize("named, retry_count, state", [
    (["n1", "n2"], 1, A.REJECTED),  # every dialler refused, again after a retry
    (["n1", "n2"], 0, A.RETRY),  # the first time: rank 0's node's firewall looks the same
    (["n1"], 3, A.RETRY),  # n2 got through: n1 is at fault
])
def test_master_port_refused_everywhere_after_a_retry_is_rejected(named, retry_count, state):
    got = A.answer(failed(V.MASTER_REACHABLE, V.MASTER_PORT_REFUSED, "refused"), PLAN, PLACED,
                   named=named, retry_count=retry_count)
    assert got.state == state


def test_a_failure_of_the_run_itself_answers_with_validated_s_message():
    verdicts = {V.VALIDATED: Verdict(F, V.PROBE_TIMEOUT, "the probe on n1 ran past its deadline")}
    got = A.answer(verdicts, PLAN, PLACED)
    assert got.state == A.RETRY and got.message == f"{V.PROBE_TIMEOUT}: the probe on n1 ran past its deadline"


def test_named_nodes_are_the_probed_nodes_false_messages_mention():
    verdicts = failed(V.NETWORK_VALIDATED, V.EPHEMERAL_PORTS_BLOCKED, "n2 and n10 drop; n1x fine")
    assert A.named_nodes(verdicts, {0: "n1", 1: "n2", 2: "n10"}) == ["n2", "n10"]


def test_a_workload_problem_is_rejected_with_its_field():
    got = A.problem_answer(Problem("WorkloadUnreadable", "spec.podSets", "spec.podSets: not a list"))
    assert got.state == A.REJECTED and "spec.podSets" in got.message and len(got.message) <= 400


def test_ready_does_not_name_the_probes_own_master_as_the_job_s():
    """Seen on the cluster: the Ready message said MASTER_ADDR=<the preflight's probe pod>,
    a pod gone once the probes end; the job's own operator sets its MASTER_ADDR."""
    msg = "2 nodes validated; NCCL_SOCKET_IFNAME=eth0; MASTER_ADDR=job-pf-0556bfb6-0.job-pf-0556bfb6; busbw 0.61 GB/s"
    got = A.answer({V.VALIDATED: Verdict(T, V.ALL_CHECKS_PASSED, msg)}, PLAN, PLACED)
    assert got.message == "2 nodes validated; NCCL_SOCKET_IFNAME=eth0; busbw 0.61 GB/s"


@pytest.mark.parametrize("culprit,peer", [("n0", "n1"), ("n1", "n0"), ("n2", "n0")])
def test_a_retry_avoids_the_culprit_not_the_peer_its_message_mentions(culprit, peer):
    """Found on the cluster: the Retry's avoid list held both nodes of a 2-node job, the
    blocked one and the peer whose connections it dropped, so the next round had none."""
    msg = (f"{culprit}: inbound TCP to its ephemeral ports (net.ipv4.ip_local_port_range 32768-60999) is "
           f"blocked: nothing from {peer} got through on eth0, while {culprit}'s own connections out and the "
           f"master port 29500 worked; open that TCP range to the other nodes on {culprit}'s firewall")
    verdicts = failed(V.NETWORK_VALIDATED, V.EPHEMERAL_PORTS_BLOCKED, msg)
    named = A.named_nodes(verdicts, PLACED)
    assert named == [culprit]
    got = A.answer(verdicts, PLAN, PLACED, named)
    assert got.state == A.RETRY and got.avoid == (culprit,)


@pytest.mark.parametrize("reason", [V.WAITING_FOR_RESOURCES, V.RESOURCE_NOT_OFFERED])
def test_pending_says_why_the_probes_cannot_start_yet(reason):
    """Seen on the cluster: an earlier job held every node's CPU; the shadow said
    WaitingForResources with the scheduler's sentence, the Workload only "preflight probe
    running"."""
    why = "waiting for capacity: rank 1: 0/3 nodes are available: 3 Insufficient cpu"
    verdicts = {V.VALIDATED: Verdict(U, V.PROBING, "preflight probe running"),
                V.PROBES_SCHEDULED: Verdict(U, reason, why)}
    got = A.answer(verdicts, PLAN, {})
    assert got.state == A.PENDING and got.message == why
    verdicts[V.PROBES_SCHEDULED] = Verdict(U, V.PROBES_PENDING, "1/3 probe pods scheduled")
    assert A.answer(verdicts, PLAN, {}).message == "preflight probe running"
