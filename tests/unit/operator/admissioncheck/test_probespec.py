"""A checked Workload's plan as DistTrainingJob's probe input
(:mod:`disttrain.admissioncheck.probespec`): the same probe pod builder, told the job's own
ranks, port and interface, placed where Kueue will place the job's pods."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.admissioncheck import probespec as P
from disttrain.admissioncheck.workload import Problem, parse_workload
from disttrain.api import constants
from disttrain.api.types import ProbeSpec
from disttrain.children.probepod import ProbeMaster

from .test_workload import mutated
from .workloads import hostname_assignment, pod_set, pytorchjob, template, workload

FLAVOR = {"default-flavor": P.Flavor({"pool": "gpu"}, [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])}


def _env(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def _plan(**kw):
    return parse_workload(pytorchjob(workers=2, admission=[hostname_assignment("master", ["n0"]),
                                                          hostname_assignment("worker", ["n1", "n2"])], **kw))


def test_each_rank_pod_set_gets_a_spec_of_the_job_s_ranks_port_and_interface():
    specs = P.probe_specs(_plan())
    assert set(specs) == {"master", "worker"}
    s = specs["worker"]
    assert s.num_nodes == 3 and s.rendezvous.port == 23456 and s.network.socket_ifname == "auto"
    assert s.trainer_container == "pytorch" and s.probe.placement == "Pods"


def test_the_probe_pod_is_the_disttrainingjob_one_for_that_rank_on_its_assigned_node():
    plan = _plan()
    specs = P.probe_specs(plan, FLAVOR)
    pod = P.probe_pod(plan, specs, 2, ProbeMaster(addr="10.0.0.1"), attempt=1)
    env = _env(pod)
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"], env["MASTER_ADDR"]) == ("2", "3", "23456", "10.0.0.1")
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "kubernetes.io/hostname": "n2"}
    assert {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Workload", plan.name, plan.uid, True)
    assert pod["metadata"]["name"] == f"{P.probe_job(plan).name}-probe-2"


def test_nodes_an_earlier_retry_named_are_avoided_and_the_operator_s_image_is_used():
    plan = parse_workload(pytorchjob(workers=1))
    specs = P.probe_specs(plan, probe=ProbeSpec(image="registry.local/probe:7"))
    pod = P.probe_pod(plan, specs, 1, ProbeMaster(addr="a"), attempt=2, avoid=["n1"])
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n1"]}]}]
    assert pod["spec"]["initContainers"][0]["image"] == "registry.local/probe:7"
    plain = P.probe_pod(plan, specs, 1, ProbeMaster(addr="a"), attempt=2)
    assert "nodeAffinity" not in plain["spec"]["affinity"]  # only the one-per-node podAntiAffinity


def test_rank_0_without_a_topology_assignment_keeps_the_template_s_own_selector():
    plan = parse_workload(pytorchjob(workers=1))
    pod = P.probe_pod(plan, P.probe_specs(plan), 0, ProbeMaster(), attempt=1)
    assert "nodeSelector" not in pod["spec"]
    assert _env(pod)["RANK"] == "0"


def test_the_job_s_own_rendezvous_variables_and_command_are_left_to_the_probe():
    env = [{"name": "PET_NNODES", "value": "9"}, {"name": "MASTER_PORT", "value": "3000"},
           {"name": "NCCL_SOCKET_IFNAME", "value": "eth1"}, {"name": "KEEP", "value": "1"}]
    plan = parse_workload(workload("JobSet", [pod_set("w", 2, template("trainer", env=env))]))
    specs = P.probe_specs(plan)
    spec = specs["w"]
    assert spec.network.socket_ifname == "eth1" and spec.rendezvous.port == 3000
    pod = P.probe_pod(plan, specs, 1, ProbeMaster(addr="a"), attempt=1)
    got = _env(pod)
    assert got["KEEP"] == "1" and "PET_NNODES" not in got and got["MASTER_PORT"] == "3000"
    assert got["DISTTRAIN_PROBE_SOCKET_IFNAME"] == "eth1"
    assert pod["spec"]["containers"][0]["command"] == ["python", constants.PROBE_LAUNCHER]
    assert "args" not in spec.template.spec["containers"][0]


def test_the_operator_s_probe_settings_are_used_but_placement_stays_pods():
    specs = P.probe_specs(_plan(), probe=ProbeSpec(timeout_seconds=77, placement="InPlace"))
    assert specs["master"].probe.timeout_seconds == 77 and specs["master"].probe.placement == "Pods"


def test_a_template_a_probe_pod_cannot_copy_is_a_problem_naming_the_pod_set():
    wl = workload("Job", [pod_set("main", 2, template("trainer", env=[{"name": "NCCL_SOCKET_IFNAME", "value": "eth 1"}]))])
    got = P.probe_specs(parse_workload(wl))
    assert isinstance(got, Problem) and got.reason == P.TEMPLATE_REFUSED
    assert got.field == "spec.podSets[0].template" and got.message.startswith(got.field) and len(got.message) <= 400


@pytest.mark.parametrize("owner, uid", [("Very.Long.Name" * 10, "ABCDEF12-3456"), ("x", "")])
def test_the_probe_job_name_is_a_short_dns_label(owner, uid):
    plan = _plan(owner="o")
    plan = type(plan)(**{**plan.__dict__, "owner": owner, "uid": uid or "u"})
    name = P.probe_job(plan).name
    assert len(name) <= P.NAME_ROOM and name == name.lower()
    assert all(c.isalnum() or c == "-" for c in name) and name[0].isalnum() and name[-1].isalnum()


# ---- generated: every plan the parser gives becomes probe pods or a problem --------------


@given(mutated(), st.integers(0, 5))
def test_a_parsed_plan_gives_every_rank_a_probe_pod_or_a_problem(wl, rank):
    plan = parse_workload(wl)
    if isinstance(plan, Problem):
        return
    specs = P.probe_specs(plan, FLAVOR)
    if isinstance(specs, Problem):
        assert specs.field.startswith("spec.podSets[") and len(specs.message) <= 400
        return
    rank %= plan.num_nodes
    pod = P.probe_pod(plan, specs, rank, ProbeMaster(addr="10.0.0.1"), attempt=1)
    assert _env(pod)["RANK"] == str(rank) and _env(pod)["WORLD_SIZE"] == str(plan.num_nodes)
    assert pod["metadata"]["ownerReferences"][0]["uid"] == plan.uid


@pytest.mark.parametrize("host_network", [True, False])
def test_a_host_network_template_probes_on_the_host_network(host_network):
    """Kubeflow's jobs say hostNetwork in the pod template, where a DistTrainingJob refuses
    it (found on the cluster: the digits PyTorchJob was Rejected as TemplateRefused); the
    probe takes it as network.hostNetwork, so its pods share the job's network mode."""
    tmpl = template(ports=[{"name": "pytorchjob-port", "containerPort": 23456}],
                    hostNetwork=host_network, dnsPolicy="ClusterFirstWithHostNet")
    plan = parse_workload(workload("PyTorchJob", [pod_set("master", 1, tmpl), pod_set("worker", 2, tmpl)]))
    specs = P.probe_specs(plan)
    assert not isinstance(specs, Problem), specs
    assert specs["worker"].network.host_network is host_network
    pod = P.probe_pod(plan, specs, 1, ProbeMaster(addr="10.0.0.1"), attempt=1)
    assert bool(pod["spec"].get("hostNetwork")) is host_network
    assert plan.pod_sets[0].template["spec"]["hostNetwork"] is host_network  # the plan is not changed
