"""The kubelet's word is evidence (issue 30, item 3): every container state the kubelet reports
(:mod:`disttrain.children.kubelet`) decides a probe's verdict before any network rule
(:mod:`disttrain.reconcile.policies.kubeletended`), and names a failed training rank's cause.

Found on real kubelets: a job with ``memory: 64Mi`` had its probes OOMKilled, and the verdict
was ``MasterPortTimeout: ... node-a's firewall drops it, or nothing listens there``."""

import copy
import json
from datetime import timedelta

import pytest

from disttrain.api import constants as C
from disttrain.children import kubelet
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import kubeletended
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import job, json_parser, node_name, pod, report
from tests.support.reconcile import NOW, advance, step

STARTED = "2026-11-30T11:59:40Z"
ENDED = "2026-11-30T11:59:55Z"  # 5 s before NOW: past the settle
NETWORK_WORDS = ("firewall", "MasterPort", "drops", "nothing listens", "NetworkPolicy", "port 29500")
LIMITED = {"limits": {"memory": "64Mi", "cpu": "2"}}


def limited_job(n):
    """A job whose training container has ``memory: 64Mi`` (the probes get its resources)."""
    body = job(n)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = copy.deepcopy(LIMITED)
    return body


def with_limit(p, container="probe"):
    p["spec"]["containers"] = [{"name": container, "resources": copy.deepcopy(LIMITED)}]
    return p


def oomkilled(rank, n, phase="rendezvous", message="pessimistic", pod_phase="Failed"):
    """Rank ``rank``'s probe OOMKilled (exit 137) in ``phase``: its termination message the
    pessimistic report written before that phase (``final: false``), none, or the log."""
    rep = report(rank, node_name(rank), ok=False, world_size=n, failure={
        "reason": V.RENDEZVOUS_TIMEOUT, "phase": phase,
        "message": f"{node_name(rank)}: the probe ended during {phase} without a final report"})
    rep["phase"], rep["final"] = phase, False
    raw = {"pessimistic": json.dumps(rep), "none": "", "log": "importing torch"}[message]
    p = with_limit(pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase=pod_phase, node=node_name(rank),
                       host_ip=f"10.100.0.1{rank}", exit_code=137, message=raw, started_at=STARTED,
                       finished_at=ENDED))
    p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    return p


def timed_out(rank, n, silent=True):
    """Rank ``rank``'s final report: MASTER_ADDR's port silent (what a dead rank 0 looks like)."""
    rep = report(rank, node_name(rank), ok=False, world_size=n, failure={
        "reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
        "message": f"{node_name(rank)}: MASTER_ADDR 10.100.0.10:29500 timed out: node-a's firewall drops "
                   "it, or nothing listens there; open TCP 29500 on node-a"})
    rep["master"]["hostCheck"] = {"r": "timeout"} if silent else {"r": "refused"}
    rep["master"]["joined"] = False
    return with_limit(pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Failed", node=node_name(rank),
                          host_ip=f"10.100.0.1{rank}", exit_code=1, message=json.dumps(rep),
                          started_at=STARTED, finished_at=ENDED))


def waited(rank, n, reason=V.RENDEZVOUS_TIMEOUT):
    """Rank ``rank``'s final report: it waited for a peer at a gather until its deadline."""
    rep = report(rank, node_name(rank), ok=False, world_size=n, failure={
        "reason": reason, "phase": "rendezvous",
        "message": f"{node_name(rank)}: rank(s) 1 never joined within the deadline"})
    return with_limit(pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Failed", node=node_name(rank),
                          host_ip=f"10.100.0.1{rank}", exit_code=1, message=json.dumps(rep),
                          started_at=STARTED, finished_at=ENDED))


def running(rank):
    return with_limit(pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Running", node=node_name(rank),
                          host_ip=f"10.100.0.1{rank}", started_at=STARTED))


def verdict(n, pods, now=NOW):
    body = advance(limited_job(n), step(limited_job(n), []))
    plan = step(body, pods, now=now)
    return plan, cond.get(plan.status["conditions"], C.VALIDATED)


# ---- the probe path: the 64Mi job of the issue ----------------------------------------
PROBE_ROWS = [  # (name, numNodes, the probe pods, the nodes the verdict names)
    ("rank 0 of 2 OOMKilled, rank 1 timed out dialling it", 2, [oomkilled(0, 2), timed_out(1, 2)], ["node-a"]),
    ("rank 0 of 2 OOMKilled, rank 1 still dialling", 2, [oomkilled(0, 2), running(1)], ["node-a"]),
    ("rank 1 of 2 OOMKilled, rank 0 waited for it", 2, [waited(0, 2), oomkilled(1, 2)], ["node-b"]),
    ("rank 1 of 2 OOMKilled, rank 0 still waiting", 2, [running(0), oomkilled(1, 2)], ["node-b"]),
    ("rank 1 of 2 OOMKilled with no message at all", 2, [running(0), oomkilled(1, 2, message="none")], ["node-b"]),
    ("both of 2 OOMKilled", 2, [oomkilled(0, 2), oomkilled(1, 2, message="log")], ["node-a", "node-b"]),
    ("rank 0 of 4 OOMKilled, the others timed out", 4,
     [oomkilled(0, 4), timed_out(1, 4), timed_out(2, 4, silent=False), timed_out(3, 4)], ["node-a"]),
    ("rank 1 of 4 OOMKilled in connectivity, the others waited", 4,
     [waited(0, 4), oomkilled(1, 4, "connectivity"), waited(2, 4), running(3)], ["node-b"]),
    ("every rank of 4 OOMKilled", 4, [oomkilled(r, 4) for r in range(4)], ["node-a", "node-b", "node-c", "node-d"]),
]


@pytest.mark.parametrize("name,n,pods,nodes", PROBE_ROWS, ids=[r[0] for r in PROBE_ROWS])
def test_an_oomkilled_probe_is_the_verdict_never_a_firewall(name, n, pods, nodes):
    plan, v = verdict(n, pods)
    assert (v["status"], v["reason"]) == ("False", V.OOM_KILLED), v
    msg = v["message"]
    assert not [w for w in NETWORK_WORDS if w in msg], msg
    for node in nodes:
        assert node in msg
    assert "64Mi" in msg and "resources.limits.memory" in msg and "spec.template.spec.containers[0]" in msg
    assert len(msg) <= 400
    for ctype in C.CHECK_CONDITIONS[1:]:  # no network check is failed for it
        c = cond.get(plan.status["conditions"], ctype)
        assert c["status"] != "False", (ctype, c)
    failed = cond.get(plan.status["conditions"], C.FAILED)
    assert failed["status"] == "True" and V.OOM_KILLED in failed["message"]


def test_the_other_ranks_get_a_moment_to_end_the_same_way():
    """The verdict waits SETTLE_SECONDS after the first OOMKilled rank ended for the ranks still
    running (they import torch at the same moment), then names them all."""
    fresh = oomkilled(0, 2)
    fresh["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "2026-11-30T11:59:59Z"
    plan, v = verdict(2, [fresh, running(1)])
    assert (v["status"], v["reason"]) == ("Unknown", V.PROBING)
    assert plan.requeue_after == pytest.approx(kubeletended.SETTLE_SECONDS - 1)
    plan, v = verdict(2, [fresh, running(1)], now=NOW + timedelta(seconds=2))
    assert v["reason"] == V.OOM_KILLED and "node-a" in v["message"]


def test_a_probe_that_reported_its_own_failure_keeps_its_word():
    """An exit after the probe's final report is the probe's word: the kubelet's ``Error``
    (exit 1) adds nothing, and the report's reason is the verdict."""
    plan, v = verdict(2, [timed_out(0, 2), timed_out(1, 2)])
    assert v["reason"] == V.MASTER_PORT_TIMEOUT


def cannot_start(rank, reason, message, init=False):
    p = with_limit(pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Pending", node=node_name(rank),
                       host_ip=f"10.100.0.1{rank}"))
    key = "initContainerStatuses" if init else "containerStatuses"
    p["status"][key] = [{"name": "install-probe" if init else "probe",
                         "state": {"waiting": {"reason": reason, "message": message}}}]
    return p


def killed(rank, reason, code, init=False, pod_reason=None, pod_message=""):
    p = with_limit(pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Failed", node=node_name(rank),
                       host_ip=f"10.100.0.1{rank}"))
    term = {"exitCode": code, "reason": reason, "finishedAt": ENDED}
    key = "initContainerStatuses" if init else "containerStatuses"
    p["status"][key] = [{"name": "install-probe" if init else "probe", "state": {"terminated": term}}]
    if pod_reason:
        p["status"].update(reason=pod_reason, message=pod_message)
    return p


OTHER_STATES = [  # (name, rank 1's pod, the reason, words the message must have)
    ("SIGKILL (exit 137, Error)", killed(1, "Error", 137), V.PROBE_CONTAINER_FAILED, ["SIGKILL", "137"]),
    ("SIGSEGV (exit 139)", killed(1, "Error", 139), V.PROBE_CONTAINER_FAILED, ["SIGSEGV", "signal 11"]),
    ("ContainerCannotRun", killed(1, "ContainerCannotRun", 128), V.PROBE_CONTAINER_FAILED, ["ContainerCannotRun"]),
    ("StartError", killed(1, "StartError", 128), V.PROBE_CONTAINER_FAILED, ["StartError"]),
    ("the install init container failed", killed(1, "Error", 1, init=True), V.PROBE_CONTAINER_FAILED,
     ["init container install-probe", "exit 1"]),
    ("the install init container OOMKilled", killed(1, "OOMKilled", 137, init=True), V.OOM_KILLED,
     ["init container install-probe", "LimitRange"]),
    ("a missing ConfigMap", cannot_start(1, "CreateContainerConfigError", 'configmap "train-cfg" not found'),
     V.PROBE_CONFIG_ERROR, ['ConfigMap "train-cfg"']),
    ("a missing ConfigMap named after a long kubelet preamble (the clip cuts the message)", cannot_start(
        1, "CreateContainerConfigError", "failed to prepare the container's environment "
        + "while resolving the env of every container of the pod " * 5 + 'configmap "train-cfg" not found'),
     V.PROBE_CONFIG_ERROR, ['create ConfigMap "train-cfg"']),
    ("a missing key of a Secret", cannot_start(
        1, "CreateContainerConfigError", "couldn't find key token in Secret ns/hf"),
     V.PROBE_CONFIG_ERROR, ["key token of Secret ns/hf"]),
    ("CreateContainerError", cannot_start(1, "CreateContainerError", "context deadline exceeded"),
     V.PROBE_CONTAINER_FAILED, ["CreateContainerError"]),
    ("evicted for memory", killed(1, "Error", 137, pod_reason="Evicted", pod_message=(
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container "
        "probe was using 900Mi, request is 0, has larger consumption of memory.")),
     V.PROBE_POD_LOST, ["evicted", "memory", "900Mi"]),
    ("preempted", killed(1, "Error", 137, pod_reason="Preempting", pod_message="Preempted by a pod"),
     V.PROBE_POD_LOST, ["preempted"]),
    ("past its activeDeadlineSeconds", killed(1, "Error", 137, pod_reason=kubelet.POD_DEADLINE,
                                              pod_message="Pod was active on the node longer than the specified deadline"),
     V.PROBE_TIMEOUT, ["activeDeadlineSeconds"]),
]


@pytest.mark.parametrize("name,pod1,reason,words", OTHER_STATES, ids=[r[0] for r in OTHER_STATES])
def test_every_kubelet_state_is_the_verdict_on_the_right_node(name, pod1, reason, words):
    plan, v = verdict(2, [timed_out(0, 2), pod1])  # rank 0's report blames a firewall: never the cause
    assert (v["status"], v["reason"]) == ("False", reason), v
    assert v["message"].startswith("node-b: j-probe-1 (rank 1)"), v["message"]
    assert not [w for w in NETWORK_WORDS if w in v["message"]], v["message"]
    for w in words:
        assert w in v["message"], (w, v["message"])


def test_a_probe_that_cannot_start_at_rank_0_fails_before_the_others_exist():
    """Rank 0 first: while its container cannot start, the other ranks are never created, and
    the verdict comes at once instead of the probe budget's ProbeTimeout."""
    body = advance(limited_job(2), step(limited_job(2), []))
    plan = step(body, [cannot_start(0, "CreateContainerConfigError", 'secret "hf-token" not found')])
    v = cond.get(plan.status["conditions"], C.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", V.PROBE_CONFIG_ERROR), v
    assert 'Secret "hf-token"' in v["message"] and "node-a" in v["message"]


# ---- the reader ------------------------------------------------------------------------
READER = [  # (name, status, want kind, kubelet reason, container, exit code, signal)
    ("nothing", {}, None, None, None, None, None),
    ("exit 0", {"containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 0}}}]},
     None, None, None, None, None),
    ("OOMKilled", {"containerStatuses": [{"name": "a", "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled"}}}]}, kubelet.OOM, "OOMKilled", "a", 137, 9),
    ("OOMKilled second, after a sidecar's error", {"containerStatuses": [
        {"name": "side", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "a", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]},
     kubelet.OOM, "OOMKilled", "a", 137, 9),
    ("SIGTERM", {"containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 143}}}]},
     kubelet.SIGNAL, "Error", "a", 143, 15),
    ("CrashLoopBackOff after an OOM", {"containerStatuses": [{"name": "a", "state": {
        "waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {
            "exitCode": 137, "reason": "OOMKilled"}}}]}, kubelet.OOM, "OOMKilled", "a", 137, 9),
    ("NodeLost", {"reason": "NodeLost", "message": "Node node-a which was running pod x is unresponsive"},
     kubelet.NODE, "NodeLost", "", None, None),
    ("Ready False NodeNotReady", {"conditions": [{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]},
     kubelet.NODE, "NodeNotReady", "", None, None),
    ("preempted by the scheduler", {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                                    "reason": "PreemptionByScheduler"}]},
     kubelet.POD, "Preempting", "", None, None),
    ("a NoExecute taint's eviction", {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                                      "reason": "DeletionByTaintManager"}]},
     kubelet.NODE, "DeletionByTaintManager", "", None, None),
    ("ContainerStatusUnknown (exit 137)", {"containerStatuses": [{"name": "a", "state": {"terminated": {
        "exitCode": 137, "reason": "ContainerStatusUnknown"}}}]}, kubelet.NODE, "ContainerStatusUnknown",
     "a", 137, None),
    ("ImagePullBackOff", {"containerStatuses": [{"name": "a", "state": {"waiting": {
        "reason": "ImagePullBackOff"}}}]}, kubelet.IMAGE, "ImagePullBackOff", "a", None, None),
    ("malformed everywhere", {"containerStatuses": [None, 3, {"name": 5, "state": {"terminated": {
        "exitCode": "137", "reason": ["OOMKilled"]}}}], "conditions": "x", "reason": 7},
     None, None, None, None, None),
]


@pytest.mark.parametrize("name,status,kind,reason,container,code,sig", READER, ids=[r[0] for r in READER])
def test_container_failure_reads_every_state(name, status, kind, reason, container, code, sig):
    f = kubelet.container_failure({"status": status, "spec": {"containers": [{"name": "a"}]}})
    if kind is None:
        assert f is None
        return
    assert (f.kind, f.reason, f.container, f.exit_code, f.signal) == (kind, reason, container, code, sig)
    assert f.describe() and f.fix()


def test_exit_code_128_plus_n_is_signal_n():
    assert kubelet.signal_of(137) == 9 and kubelet.signal_name(9) == "SIGKILL"
    assert kubelet.signal_of(1) is None and kubelet.signal_of(128) is None and kubelet.signal_of(255) is None


def test_ended_by_kubelet_ignores_an_unparsed_report_and_a_pull_error():
    p = pod("j-probe-1", C.ROLE_PROBE, 1, phase="Failed", node="node-b", exit_code=1, message="{not json")
    assert kubeletended.ended_by_kubelet(p, json_parser) is None  # ProbeReportInvalid says so
    assert kubeletended.ended_by_kubelet(cannot_start(1, "ErrImagePull", "not found"), json_parser) is None


def test_a_sidecar_stopped_with_the_pod_is_not_the_cause():
    """A trainer's own exit 1 is the cause, not the SIGTERM the kubelet then sent a log
    shipper, nor a native sidecar's exit."""
    status = {"containerStatuses": [
        {"name": "shipper", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}},
        {"name": "a", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
        "initContainerStatuses": [{"name": "proxy", "state": {"terminated": {"exitCode": 137}}}]}
    pod_ = {"status": status, "spec": {"containers": [{"name": "shipper"}, {"name": "a"}],
                                       "initContainers": [{"name": "proxy", "restartPolicy": "Always"}]}}
    f = kubelet.container_failure(pod_)
    assert (f.kind, f.container, f.exit_code) == (kubelet.EXIT, "a", 1)


def test_a_probe_evicted_after_its_final_report_keeps_its_word():
    p = timed_out(1, 2)
    p["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    assert kubeletended.ended_by_kubelet(p, json_parser) is None


@pytest.mark.parametrize("message,quoted", [
    ("pessimistic", None),  # its own report, written before the phase: no log line to quote
    ("log", "importing torch"),
])
def test_a_probe_that_exited_without_a_final_report_quotes_its_log_never_its_report(message, quoted):
    p = oomkilled(1, 2, message=message)
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    term.update(exitCode=1, reason="Error")
    _, v = verdict(2, [running(0), p])
    assert (v["status"], v["reason"]) == ("False", V.PROBE_CONTAINER_FAILED), v
    assert '"v"' not in v["message"] and "{" not in v["message"], v["message"]
    assert quoted is None or quoted in v["message"], v["message"]


def test_an_injected_sidecar_killed_after_every_rank_passed_is_not_the_verdict():
    """A mesh's istio-proxy in the probe pod OOMKilled once both probes wrote their final,
    passing reports: the probes' word stands (found by an adversarial review: the verdict
    was OOMKilled with a fix naming a field the job does not have)."""
    from tests.support.reconcile import finished_probes

    pods = finished_probes()
    pods[0]["status"]["containerStatuses"].append(
        {"name": "istio-proxy", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}})
    body = advance(job(), step(job(), []))
    plan = step(body, pods)
    v = cond.get(plan.status["conditions"], C.VALIDATED)
    assert (v["status"], v["reason"]) == ("True", V.ALL_CHECKS_PASSED), v


def test_the_probes_own_container_oomkilled_is_the_verdict_whatever_its_report():
    from tests.support.reconcile import finished_probes

    pods = finished_probes()
    term = pods[1]["status"]["containerStatuses"][0]["state"]["terminated"]
    term.update(exitCode=137, reason="OOMKilled")
    pods[1]["status"]["phase"] = "Failed"
    body = advance(job(), step(job(), []))
    v = cond.get(step(body, pods).status["conditions"], C.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", V.OOM_KILLED) and "node-b" in v["message"], v
