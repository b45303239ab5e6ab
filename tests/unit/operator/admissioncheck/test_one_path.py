"""One code path (issue 35, point 2): a checked Workload's probe pods, the reports they
write, DistTrainingJob's report parser, trust check and diagnosis, and the admission
check's answer, chained as the controller will chain them."""
import json

from disttrain.admissioncheck import answer as A
from disttrain.admissioncheck import probespec as P
from disttrain.admissioncheck.workload import parse_workload
from disttrain.children.probepod import ProbeMaster
from disttrain.diagnosis import trust
from disttrain.diagnosis.diagnose import diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import probe_env
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import report

from .workloads import pod_set, template, workload

NODES = ["node-a", "node-b", "node-c"]
MASTER = "10.100.0.10"


def _verdict(own_ifname, failures):
    """Probe the 3 ranks of a JobSet (its NCCL_SOCKET_IFNAME ``own_ifname``), each rank
    reporting ``failures.get(rank)`` (None: a pass), and answer."""
    env = [{"name": "NCCL_SOCKET_IFNAME", "value": own_ifname}] if own_ifname else []
    plan = parse_workload(workload("JobSet", [pod_set("workers", 3, template("trainer", env=env))]))
    specs = P.probe_specs(plan)
    outcomes = []
    for rank, node in enumerate(NODES):
        pod = P.probe_pod(plan, specs, rank, ProbeMaster(addr=None if rank == 0 else MASTER), attempt=1)
        penv = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        failure = failures.get(rank)
        raw = report(rank, node, ok=failure is None, failure=failure, world_size=3,
                     job_uid=penv[probe_env.JOB_UID], attempt=int(penv[probe_env.ATTEMPT]))
        exp = trust.Expected(rank=rank, world_size=int(penv["WORLD_SIZE"]), job_uid=plan.uid, attempt=1,
                             pod=pod["metadata"]["name"], node=node, master_addr=None,
                             master_port=int(penv["MASTER_PORT"]))
        checked = trust.check(parse_report(json.dumps(raw)), exp)
        assert checked.error is None, checked.error
        outcomes.append(ProbeOutcome(rank, pod["metadata"]["name"], node, report=checked.report))
    diag = diagnose(outcomes, MASTER)
    placed = dict(enumerate(NODES))
    return plan, A.answer(diag.conditions, plan, placed, A.named_nodes(diag.conditions, placed),
                          diag.socket_ifnames)


def test_reports_of_the_workload_s_probe_pods_pass_the_trust_check_and_validate():
    plan, got = _verdict(None, {})
    key, value = A.validated_label(plan)
    assert got.state == A.READY
    assert got.pod_set_updates == [{"name": "workers", "nodeSelector": {key: value},
                                    "annotations": {A.SOCKET_IFNAME_ANNOTATION: "eth1"}}]


def test_a_node_that_drops_the_ephemeral_ports_is_retry_avoiding_it():
    f = {"reason": V.EPHEMERAL_PORTS_BLOCKED, "phase": "connectivity",
         "message": "node-b drops connections on ports 32768-60999; open them on node-b"}
    _, got = _verdict(None, {1: f})
    assert got.state == A.RETRY and got.message.startswith(V.EPHEMERAL_PORTS_BLOCKED) and "node-b" in got.message
    assert got.avoid == ("node-b",)


def test_the_job_s_own_interface_absent_on_every_node_is_rejected():
    f = {"reason": V.INTERFACE_NOT_FOUND, "phase": "interface", "message": "eth9 absent (has lo, eth0, eth1)"}
    _, got = _verdict("eth9", {r: {**f, "message": f"{n}: {f['message']}"} for r, n in enumerate(NODES)})
    assert got.state == A.REJECTED and got.message.startswith(V.INTERFACE_NOT_FOUND)
