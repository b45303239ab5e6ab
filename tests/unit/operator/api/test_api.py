"""pydantic validation repeats the admission rules and names the field."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from disttrain.api.fieldpath import spec_error_message
from disttrain.api.jobname import job_name_problem
from disttrain.api.types import (
    DistTrainingJobSpec,
    gpus_requested,
)
from tests.fuzz.crd_admission import admit
from tests.support.fixtures import TEMPLATE


def spec(**kw):
    return {"numNodes": 2, "template": TEMPLATE, **kw}


def err(data) -> str:
    with pytest.raises(ValidationError) as exc:
        DistTrainingJobSpec.model_validate(data)
    return spec_error_message(exc.value)


def test_defaults():
    s = DistTrainingJobSpec.model_validate(spec())
    assert (s.launcher, s.rendezvous.port, s.network.socket_ifname, s.probe.keep_pods) == (
        "torchrun", 29500, "auto", "OnFailure")
    assert s.num_proc_per_node == "auto"


@pytest.mark.parametrize("data,field", [
    ({"numNodes": 0, "template": TEMPLATE}, "spec.numNodes"),
    ({"numNodes": 2}, "spec.template"),
    (spec(template={"spec": {"containers": []}}), "containers"),
    (spec(launcher="mpirun"), "spec.launcher"),
    (spec(network={"portRange": "61000-60000"}), "portRange"),
    (spec(network={"portRange": "abc"}), "spec.network.portRange"),
    (spec(numProcPerNode=0), "numProcPerNode"),
    (spec(launcher="env", numProcPerNode=4), "numProcPerNode"),
    (spec(template={"spec": {"containers": [{"name": "t", "env": [{"name": "RANK", "value": "0"}]}]}}), "RANK"),
    (spec(template={"spec": {"containers": [{"name": "t", "env": [{"name": "PET_NNODES", "value": "2"}]}]}}), "PET_NNODES"),
    (spec(template={"spec": {"hostNetwork": True, "containers": [{"name": "t"}]}}), "spec.network.hostNetwork"),
    (spec(template={"spec": {"containers": [{"name": "t", "env": [{"name": None}]}]}}), "env[0].name"),
    (spec(template={"spec": {"containers": [{"name": "t", "env": "RANK"}]}}), "spec.template.spec.containers[0].env: Input should be a valid list"),
])
def test_bad_input_names_the_field(data, field):
    assert field in err(data)


@pytest.mark.parametrize("data,field", [
    (spec(numProcPerNode=257), "spec.numProcPerNode: numProcPerNode must be an integer from 1 to 256"),
    (spec(numProcPerNode=2**40), "spec.numProcPerNode: numProcPerNode must be an integer from 1 to 256"),
    (spec(numNodes=4097), "spec.numNodes"),
    (spec(runPolicy={"activeDeadlineSeconds": 2**31}), "spec.runPolicy.activeDeadlineSeconds"),
    (spec(runPolicy={"ttlSecondsAfterFinished": 2**31}), "spec.runPolicy.ttlSecondsAfterFinished"),
    (spec(runPolicy={"schedulingPolicy": {"scheduleTimeoutSeconds": 2**31}}),
     "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds"),
])
def test_integers_that_drive_work_or_reach_int32_fields_have_a_maximum(data, field):
    assert field in err(data)


def test_the_largest_integers_a_node_and_kubernetes_take_are_accepted():
    s = DistTrainingJobSpec.model_validate(spec(numProcPerNode=256, runPolicy={
        "activeDeadlineSeconds": 2**31 - 1, "ttlSecondsAfterFinished": 2**31 - 1,
        "schedulingPolicy": {"scheduleTimeoutSeconds": 2**31 - 1}}))
    assert s.num_proc_per_node == 256


def test_the_most_processes_per_node_is_the_most_local_ranks_the_probe_starts():
    from disttrain.api.types import MAX_PROC_PER_NODE
    from disttrain_probe.ground.roles import MAX_NPROC
    assert MAX_PROC_PER_NODE == MAX_NPROC


def ctr_spec(**container):
    return spec(template={"spec": {"containers": [{"name": "t", **container}]}})


def pod_spec(**fields):
    return spec(template={"spec": {"containers": [{"name": "t"}], **fields}})


@pytest.mark.parametrize("data,expect", [
    (pod_spec(hostname=True), "spec.template.spec.hostname: Input should be a valid string"),
    (pod_spec(hostname="Bad_Host"), "spec.template.spec.hostname: String should match pattern"),
    (pod_spec(subdomain=1), "spec.template.spec.subdomain: Input should be a valid string"),
    (pod_spec(serviceAccountName=["sa"]), "spec.template.spec.serviceAccountName: Input should be a valid string"),
    (pod_spec(hostPID="true"), "spec.template.spec.hostPID: Input should be a valid boolean"),
    (pod_spec(terminationGracePeriodSeconds="30"), "spec.template.spec.terminationGracePeriodSeconds: Input should be a valid integer"),
    (pod_spec(terminationGracePeriodSeconds=2**63), "spec.template.spec.terminationGracePeriodSeconds: Input should be less than or equal to 9223372036854775807"),
    (pod_spec(activeDeadlineSeconds=0), "spec.template.spec.activeDeadlineSeconds: Input should be greater than or equal to 1"),
    (pod_spec(priority=2**31), "spec.template.spec.priority: Input should be less than or equal to 2147483647"),
    (pod_spec(dnsPolicy="Sometimes"), "spec.template.spec.dnsPolicy"),
    (pod_spec(securityContext={"runAsUser": -1}), "spec.template.spec.securityContext.runAsUser: Input should be greater than or equal to 0"),
    (pod_spec(securityContext={"fsGroup": 2**31}), "spec.template.spec.securityContext.fsGroup"),
    (pod_spec(securityContext={"supplementalGroups": [1, "2"]}), "spec.template.spec.securityContext.supplementalGroups[1]"),
    (pod_spec(tolerations=[{"key": "gpu", "tolerationSeconds": 2**63}]), "spec.template.spec.tolerations[0].tolerationSeconds"),
    (ctr_spec(securityContext={"runAsUser": 2**31}), "spec.template.spec.containers[0].securityContext.runAsUser"),
    (ctr_spec(ports=[{"containerPort": 0}]), "spec.template.spec.containers[0].ports[0].containerPort: Input should be greater than or equal to 1"),
    (ctr_spec(ports=[{"containerPort": 8080, "hostPort": 70000}]), "spec.template.spec.containers[0].ports[0].hostPort"),
    (ctr_spec(ports=[{"containerPort": "8080"}]), "spec.template.spec.containers[0].ports[0].containerPort: Input should be a valid integer"),
    (ctr_spec(tty="yes"), "spec.template.spec.containers[0].tty: Input should be a valid boolean"),
])
def test_pod_api_scalars_are_typed_and_bounded_as_the_pod_api_does(data, expect):
    assert expect in err(data)


def test_pod_api_scalars_that_the_pod_api_takes_pass_through():
    s = DistTrainingJobSpec.model_validate(pod_spec(
        hostname="h-1", subdomain="svc", hostPID=False, terminationGracePeriodSeconds=-1,
        priority=-5, securityContext={"runAsUser": 0, "fsGroup": 2**31 - 1}, schedulerName="x",
        tolerations=[{"key": "g", "tolerationSeconds": -(2**63)}]))
    assert s.template.spec["terminationGracePeriodSeconds"] == -1 and s.template.spec["hostname"] == "h-1"


def test_gpus_requested():
    assert gpus_requested({"resources": {"limits": {"nvidia.com/gpu": "8"}}}) == 8
    assert gpus_requested({"resources": {"requests": {"nvidia.com/gpu": 2}}}) == 2
    assert gpus_requested({}) == 0


@pytest.mark.parametrize("data,expect", [
    (ctr_spec(command="python train.py"), "spec.template.spec.containers[0].command: Input should be a valid list"),
    (ctr_spec(args="--epochs 3"), "spec.template.spec.containers[0].args: Input should be a valid list"),
    (ctr_spec(command=["python", 3]), "spec.template.spec.containers[0].command[1]: Input should be a valid string"),
    (ctr_spec(resources={"limits": {"cpu": "two"}}), "spec.template.spec.containers[0].resources.limits.cpu: 'two' is not a quantity"),
    (ctr_spec(resources={"limits": {"cpu": 0.5}}), "resources.limits.cpu"),
    (ctr_spec(resources={"requests": {"memory": "-1Gi"}}), "resources.requests.memory"),
    (ctr_spec(resources=["cpu"]), "spec.template.spec.containers[0].resources: Input should be"),
    (ctr_spec(env=[{"name": "A", "value": 1}]), "spec.template.spec.containers[0].env[0].value: Input should be a valid string"),
    (ctr_spec(env=[{"name": "A", "value": "x", "valueFrom": {}}]), "set value or valueFrom, not both"),
    (ctr_spec(volumeMounts=[{"name": "v"}]), "volumeMounts[0].mountPath: Field required"),
    (ctr_spec(securityContext={"privileged": "yes"}), "securityContext.privileged: Input should be a valid boolean"),
    (spec(template={"metadata": {"labels": {"team": 7}}, "spec": {"containers": [{"name": "t"}]}}), "spec.template.metadata.labels.team"),
    (spec(template={"metadata": {"labels": {"team": "-x"}}, "spec": {"containers": [{"name": "t"}]}}), "spec.template.metadata.labels.team"),
    (spec(template={"metadata": {"labels": {"bad key": "x"}}, "spec": {"containers": [{"name": "t"}]}}), "labels key 'bad key' is not a qualified name"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "affinity": [{"nodeAffinity": {}}]}}), "spec.template.spec.affinity: Input should be"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {"a": 1}}}}}}), "nodeSelectorTerms: Input should be a valid list"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "tolerations": {"key": "gpu"}}}), "spec.template.spec.tolerations: Input should be a valid list"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "nodeSelector": {"pool": True}}}), "spec.template.spec.nodeSelector.pool"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "securityContext": {"sysctls": [{"name": "a", "value": 1}]}}}), "securityContext.sysctls[0].value"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "volumes": [{"configMap": {}}]}}), "spec.template.spec.volumes[0].name: Field required"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "volumes": [{"name": "disttrain-probe"}]}}), "the operator's"),
    (spec(template={"spec": {"containers": [{"name": "t"}, {"name": "t"}]}}), "used twice"),
    (spec(template={"spec": {"containers": [{"name": "t"}], "initContainers": [{"name": "t"}]}}), "names must be unique"),
    (spec(template={"spec": {"containers": [{"name": "Trainer"}]}}), "spec.template.spec.containers[0].name"),
])
def test_template_shapes_are_typed_and_errors_name_the_path(data, expect):
    assert expect in err(data)


def test_template_keeps_unknown_fields_and_nulls_are_absent():
    tmpl = {"metadata": {"labels": {"app": "x"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "net1"}},
            "spec": {"containers": [{"name": "t", "command": ["python", "t.py"], "ports": [{"containerPort": 1}],
                                     "resources": {"limits": {"cpu": 2, "memory": "1Gi"}, "claims": [{"name": "c"}]}}],
                     "tolerations": None, "affinity": None, "serviceAccountName": "sa", "priorityClassName": "high"}}
    s = DistTrainingJobSpec.model_validate(spec(template=tmpl))
    assert s.template.spec == tmpl["spec"] and s.template.metadata == tmpl["metadata"]  # the plain dicts


def test_torchrun_command_is_accepted_and_contradicting_options_are_refused():
    ok = ctr_spec(command=["torchrun", "--nproc-per-node=1", "--nnodes=2", "--node-rank=$(PET_NODE_RANK)",
                           "/w/train.py", "--nnodes", "9"])
    assert DistTrainingJobSpec.model_validate(ok)
    msg = err(ctr_spec(command=["torchrun", "--nnodes=4", "train.py"]))
    assert msg.startswith("spec.template.spec.containers[0].command: torchrun option --nnodes=4") and "spec.numNodes is 2" in msg
    msg = err(ctr_spec(command=["bash", "-c"], args=["torchrun --master-addr=10.0.0.1 t.py"]))
    assert "containers[0].args: torchrun option --master-addr=10.0.0.1" in msg and "PET_MASTER_ADDR" in msg
    msg = err({**ctr_spec(command=["python", "-m", "torch.distributed.run", "--nproc_per_node", "8", "t.py"]), "numProcPerNode": 2})
    assert "--nproc_per_node 8" in msg and "numProcPerNode makes it 2" in msg
    assert "--standalone" in err(ctr_spec(command=["torchrun", "--standalone", "t.py"]))


@pytest.mark.parametrize("name,net,nodes,problem", [
    ("ddp-digits", {}, 2, None),
    ("my.job", {}, 2, "no dots"),
    ("x" * 64, {"hostNetwork": True}, 2, "longer than 63"),
    ("x" * 61, {}, 2, None),
    ("x" * 62, {}, 2, "at most 61 characters"),
    ("x" * 61, {}, 11, "pod hostname <name>-10 would exceed 63"),
    ("x" * 63, {"hostNetwork": True}, 11, None),
    ("7up", {}, 2, "must start with a letter"),
    ("7up", {"subdomain": "svc"}, 2, None),
    ("7up", {"hostNetwork": True}, 2, None),
    ("Job", {}, 2, "DNS label"),
])
def test_job_name_rule(name, net, nodes, problem):
    s = DistTrainingJobSpec.model_validate({"numNodes": nodes, "template": TEMPLATE, "network": net})
    got = job_name_problem(name, s)
    assert (got is None) if problem is None else (problem in got), got
    if got:
        assert got.startswith("metadata.name"), got


def test_job_name_rule_without_spec_checks_what_needs_no_spec():
    assert job_name_problem("my.job") and job_name_problem("x" * 64)
    assert job_name_problem("7up") is None and job_name_problem("x" * 63) is None  # decided by the spec
    assert job_name_problem(None) == "metadata.name is missing"


@pytest.mark.parametrize("value,gpus", [
    ("8", 8), (8, 8), ("1k", 1000), ("500m", 0), ("1.5", 0), ("2e0", 2), ("1e999999999", 0), ("x", 0),
    (True, 0), (None, 0), ([1], 0), ("-1", 0),
])
def test_gpus_requested_never_raises(value, gpus):
    assert gpus_requested({"resources": {"limits": {"nvidia.com/gpu": value}}}) == gpus


@pytest.mark.parametrize("container", [None, [], "x", {"resources": []}, {"resources": {"limits": ["a"]}}])
def test_gpus_requested_takes_any_shape(container):
    assert gpus_requested(container) == 0


def test_training_is_watched_only_when_asked_and_a_stall_is_then_handled_as_a_failed_rank():
    s = DistTrainingJobSpec.model_validate(spec())
    assert (s.run_policy.stall_timeout_seconds, s.run_policy.on_stall) == (None, "Restart")
    s = DistTrainingJobSpec.model_validate(spec(runPolicy={"stallTimeoutSeconds": 30, "onStall": "Wait"}))
    assert (s.run_policy.stall_timeout_seconds, s.run_policy.on_stall) == (30, "Wait")


@pytest.mark.parametrize("run_policy, expect", [
    ({"stallTimeoutSeconds": 29}, "spec.runPolicy.stallTimeoutSeconds: Input should be greater than or equal to 30"),
    ({"stallTimeoutSeconds": 86401}, "spec.runPolicy.stallTimeoutSeconds: Input should be less than or equal to 86400"),
    ({"stallTimeoutSeconds": "300"}, "spec.runPolicy.stallTimeoutSeconds: Input should be a valid integer"),
    ({"stallTimeoutSeconds": 300.5}, "spec.runPolicy.stallTimeoutSeconds: Input should be a valid integer"),
    ({"stallTimeoutSeconds": True}, "spec.runPolicy.stallTimeoutSeconds: Input should be a valid integer"),
    ({"onStall": "restart"}, "spec.runPolicy.onStall"),
    ({"onStall": "Never"}, "spec.runPolicy.onStall"),
])
def test_stall_settings_outside_their_bounds_are_refused_naming_the_field(run_policy, expect):
    assert expect in err(spec(runPolicy=run_policy))


@given(st.integers(-2**40, 2**40))
def test_the_stall_timeout_model_and_crd_agree_on_every_integer(n):
    ok = 30 <= n <= 86400
    obj = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob", "metadata": {"name": "j"},
           "spec": spec(runPolicy={"stallTimeoutSeconds": n})}
    stored, errors = admit(obj)
    assert (not errors) == ok, errors
    try:
        DistTrainingJobSpec.model_validate(spec(runPolicy={"stallTimeoutSeconds": n}))
        assert ok
    except ValidationError as e:
        assert not ok and "spec.runPolicy.stallTimeoutSeconds" in spec_error_message(e)
