"""Gang scheduling: which gang the pods join, the objects, and pods created together."""

import pytest
from pydantic import ValidationError

from disttrain.api import constants
from disttrain.api.jobname import job_name_problem
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import gang as gang_objects
from disttrain.children.names import JobRef
from disttrain.reconcile.policies.gang import CAP_WORKLOAD_API, effective_spec
from tests.support.fixtures import TEMPLATE, job
from tests.support.reconcile import advance, names, step

REF = JobRef("j", "ns", "uid-1")


def spec(gang="auto", dns=None, host_network=True):
    net = {"hostNetwork": host_network}
    if dns is not None:
        net["enableDNSHostnames"] = dns
    return DistTrainingJobSpec.model_validate({"numNodes": 3, "template": TEMPLATE, "network": net,
                                               "runPolicy": {"schedulingPolicy": {"gang": gang}}})


@pytest.mark.parametrize("gang,served,want", [
    ("auto", True, "workload"), ("auto", False, None), ("none", True, None),
    ("workload", True, "workload"), ("coscheduling", False, "coscheduling"), ("volcano", True, "volcano"),
])
def test_provider(gang, served, want):
    assert gang_objects.provider(spec(gang), served) == want


def test_effective_spec_turns_on_dns_names_or_says_why_it_cannot():
    caps = frozenset({CAP_WORKLOAD_API})
    s, problem = effective_spec(spec("auto"), caps)
    assert problem is None and s.network.enable_dns_hostnames is True
    s, problem = effective_spec(spec("auto", dns=False), caps)  # falls back to no gang
    assert problem is None and gang_objects.provider(s, True) is None
    with pytest.raises(ValidationError, match="needs DNS hostnames"):  # refused at apply
        spec("volcano", dns=False)
    s = spec("volcano")  # a spec that got past (an older CRD): the step refuses it too
    s = s.model_copy(update={"network": s.network.model_copy(update={"enable_dns_hostnames": False})})
    _, problem = effective_spec(s, caps)
    assert "enableDNSHostnames" in problem
    _, problem = effective_spec(spec("workload"), frozenset())
    assert "GenericWorkload" in problem
    s, problem = effective_spec(spec("auto"), frozenset())
    assert problem is None and s.network.enable_dns_hostnames is None  # nothing changes


@pytest.mark.parametrize("provider,api,where", [
    ("workload", gang_objects.WORKLOAD_API, ("spec", "schedulingGroup")),
    ("coscheduling", gang_objects.COSCHEDULING_API, ("metadata", "labels")),
    ("volcano", gang_objects.VOLCANO_API, ("metadata", "annotations")),
])
def test_objects_and_decoration(provider, api, where):
    gang = gang_objects.Gang(provider, "j-probe-1", "probe", 3)
    objs = gang_objects.objects(REF, spec(provider), gang)
    group = objs[-1]
    assert (group["apiVersion"], group["kind"], group["metadata"]["name"]) == (api, "PodGroup", "j-probe-1")
    assert group["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    size = group["spec"].get("minMember") or group["spec"]["schedulingPolicy"]["gang"]["minCount"]
    assert size == 3
    assert (provider == "workload") == (objs[0]["kind"] == "Workload")
    pod = {"metadata": {"name": "p"}, "spec": {}}
    gang_objects.decorate(pod, spec(provider), gang)
    assert "j-probe-1" in str(pod[where[0]][where[1]])
    assert pod["spec"].get("schedulerName") == gang_objects.DEFAULT_SCHEDULERS.get(provider)


def test_with_the_workload_api_all_probe_pods_are_created_together_in_one_gang():
    body = job(num_nodes=3)
    plan = step(body, [], capabilities={CAP_WORKLOAD_API})
    assert names(plan) == ["j-probe-0", "j-probe-1", "j-probe-2"]
    groups = {p["spec"]["schedulingGroup"]["podGroupName"] for p in plan.creates}
    assert groups == {"j-probe-1"}
    assert [(o["kind"], o["metadata"]["name"]) for o in plan.objects] == [("Workload", "j"), ("PodGroup", "j-probe-1")]
    envs = [{e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]} for p in plan.creates]
    assert {e["MASTER_ADDR"] for e in envs} == {"j-0.j"}  # rank 0's DNS name: no address yet
    assert all(p["spec"]["hostname"] == f"j-{r}" for r, p in enumerate(plan.creates))
    assert [s["metadata"]["name"] for s in plan.services] == ["j"]
    # without the API: rank 0 first, no group
    plan = step(body, [])
    assert names(plan) == ["j-probe-0"] and not plan.objects
    assert "schedulingGroup" not in plan.creates[0]["spec"]


def test_a_resumed_training_gang_is_a_new_group():
    from tests.support.reconcile import finished_probes, workers
    body = job()
    caps = {CAP_WORKLOAD_API}
    body = advance(body, step(body, [], capabilities=caps))
    plan = step(body, finished_probes(), capabilities=caps)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in plan.creates} == {"j-training-0-0"}
    body = advance(body, plan)
    body["spec"]["suspend"] = True
    body = advance(body, step(body, workers("Running", "Running"), capabilities=caps))
    assert body["status"]["suspensions"] == 1
    body["spec"]["suspend"] = False
    plan = step(body, [], capabilities=caps)  # probes again, as a new gang
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in plan.creates} == {"j-probe-2"}
    assert constants.ROLE_PROBE == plan.creates[0]["metadata"]["labels"][constants.LABEL_ROLE]


def test_a_name_that_cannot_name_dns_hostnames_keeps_auto_off_the_gang():
    caps = frozenset({CAP_WORKLOAD_API})
    s, problem = effective_spec(spec("auto"), caps, "7up")  # a Service cannot start with a digit
    assert problem is None and gang_objects.provider(s, True) is None
    # an explicit gang: DNS hostnames are part of the name rules (the CRD's too), so the
    # name is refused by job_name_problem, not left to effective_spec
    assert "must start with a letter" in job_name_problem("7up", spec("workload"))
    _, problem = effective_spec(spec("workload"), caps, "7up")
    assert problem is None
    s, problem = effective_spec(spec("auto"), caps, "ok-name")
    assert problem is None and gang_objects.provider(s, True) == "workload"
