"""Which container is the trainer (:mod:`disttrain.api.trainer`), refused at admission when
it cannot be told (the models and the CRD's CEL rules), and what the builders do with the
trainer and its sidecars; the probe pod's resources (:mod:`disttrain.api.podresources`)."""

import copy
from decimal import Decimal

import pytest
from pydantic import ValidationError

from disttrain.api import podresources as pr
from disttrain.api import trainer as tr
from disttrain.api.fieldpath import spec_error_message
from disttrain.api.types import DistTrainingJobSpec, nproc_for, trainer_index
from disttrain.children.names import JobRef
from disttrain.children.podbase import probe_backend
from disttrain.children.pods import DEFAULT_CONTAINER, Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from tests.fuzz.crd_admission import admit
from tests.support.fixtures import TEMPLATE

REF = JobRef("j", "ns", "uid-1")
TRAINER = TEMPLATE["spec"]["containers"][0]
GPU_TRAINER = {**TRAINER, "resources": {"limits": {"nvidia.com/gpu": 4, "cpu": "8"}}}
PROXY = {"name": "istio-proxy", "image": "proxy:1", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
         "ports": [{"containerPort": 15090}]}
LOGS = {"name": "logs", "image": "example/train:1", "command": ["sh", "-c", "while true; do sleep 1; done"]}


def c(name, **fields):
    return {"name": name, "image": "i:1", **fields}


@pytest.mark.parametrize("names,chosen,want", [
    (["x"], None, "x"),                          # the only container, whatever its name
    (["logs", "trainer"], None, "trainer"),
    (["pytorch", "istio-proxy"], None, "pytorch"),  # Kubeflow PyTorchJob's name
    (["logs", "node"], None, "node"),               # Kubeflow Trainer v2's name
    (["logs", "main"], None, None),                 # none of the names
    (["trainer", "pytorch"], None, None),           # two of them
    (["logs", "main"], "main", "main"),
    (["trainer", "pytorch"], "pytorch", "pytorch"),
    (["x"], "y", None),                             # trainerContainer names no container
    ([], None, None),
])
def test_trainer_name(names, chosen, want):
    assert tr.trainer_name([{"name": n} for n in names], chosen) == want


def _spec(containers, **spec):
    return {"numNodes": 2, "template": {"spec": {"containers": containers}}, **spec}


def _job(containers, **spec):
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
            "metadata": {"name": "ddp", "namespace": "ns"}, "spec": _spec(containers, **spec)}


@pytest.mark.parametrize("containers,spec,want", [
    ([c("logs"), c("main")], {}, tr.AMBIGUOUS_MESSAGE),
    ([c("trainer"), c("node")], {}, tr.AMBIGUOUS_MESSAGE),
    ([c("logs"), c("main")], {"trainerContainer": "mian"},
     "spec.trainerContainer: no container is named mian; name the trainer container"),
])
def test_a_trainer_that_cannot_be_told_is_refused_by_the_models_and_the_crd(containers, spec, want):
    with pytest.raises(ValidationError) as e:
        DistTrainingJobSpec.model_validate(_spec(containers, **spec))
    assert want in spec_error_message(e.value)
    stored, errors = admit(_job(containers, **spec))
    assert stored is None and any(want in x for x in errors), errors
    assert "set spec.trainerContainer" in tr.AMBIGUOUS_MESSAGE


@pytest.mark.parametrize("containers,spec,index", [
    ([c("logs"), c("main")], {"trainerContainer": "main"}, 1),
    ([c("logs"), c("istio-proxy"), c("pytorch")], {}, 2),
    ([c("anything")], {}, 0),
])
def test_a_trainer_that_can_be_told_is_admitted(containers, spec, index):
    assert trainer_index(DistTrainingJobSpec.model_validate(_spec(containers, **spec))) == index
    assert admit(_job(containers, **spec))[1] == []


def _spec_with(containers, inits=(), **spec):
    containers, inits = copy.deepcopy(containers), copy.deepcopy(inits)
    tmpl = {"spec": {"containers": containers, **({"initContainers": list(inits)} if inits else {})}}
    return DistTrainingJobSpec.model_validate({"numNodes": 2, "template": tmpl,
                                               "network": {"hostNetwork": True}, **spec})


def _env(ctr):
    return {e["name"]: e.get("value") for e in ctr.get("env") or []}


@pytest.mark.parametrize("containers,inits", [
    ([LOGS, GPU_TRAINER], ()),
    ([PROXY, GPU_TRAINER, LOGS], ()),
    ([GPU_TRAINER], ({**LOGS, "restartPolicy": "Always"},)),
])
def test_sidecars_pass_through_and_the_trainer_alone_is_read(containers, inits):
    s = _spec_with(containers, inits)
    assert nproc_for(s) == 4 and probe_backend(s) == "nccl"  # the trainer's GPUs, not the first container's
    pod = build_worker_pod(REF, s, 0, "node-a", Rendezvous("10.0.0.1", 29500, "eth1"), 0)["spec"]
    i = trainer_index(s)
    trainer = pod["containers"][i]
    assert trainer["command"][:3] == ["python", "-m", "torch.distributed.run"]
    assert _env(trainer)["MASTER_ADDR"] == "10.0.0.1" and _env(trainer)["PET_NPROC_PER_NODE"] == "4"
    assert {"name": "rendezvous", "containerPort": 29500, "hostPort": 29500, "protocol": "TCP"} in trainer["ports"]
    assert [x for j, x in enumerate(pod["containers"]) if j != i] == [x for x in containers if x["name"] != "trainer"]
    assert pod.get("initContainers", []) == list(inits)
    annotations = build_worker_pod(REF, s, 1, "node-b", Rendezvous("10.0.0.1", 29500), 0)["metadata"]["annotations"]
    assert annotations.get(DEFAULT_CONTAINER) == ("trainer" if len(containers) > 1 else None)  # kubectl logs
    probe = build_probe_pod(REF, s, 0, ProbeMaster(), 1, "probe:1")["spec"]["containers"][0]
    assert probe["image"] == "example/train:1" and _env(probe)["DISTTRAIN_PROBE_GPUS"] == "4"
    assert _env(probe)["DISTTRAIN_PROBE_NPROC_PER_NODE"] == "4"


@pytest.mark.parametrize("pod_spec,want", [
    # only limits: requested at the limit
    ({"containers": [c("t", resources={"limits": {"cpu": "2"}})]},
     {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}),
    # a sidecar adds to the trainer; a number written as YAML reads it (1, 0.5)
    ({"containers": [c("logs", resources={"requests": {"cpu": 0.5, "memory": "64Mi"}}),
                     c("t", resources={"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"memory": "2Gi"}})]},
     {"requests": {"cpu": "1500m", "memory": "1088Mi"}}),  # the sidecar's memory is unbounded
    # a native sidecar adds too; a plain init container counts beside the sidecars before it
    ({"containers": [c("t", resources={"requests": {"cpu": "1"}})],
      "initContainers": [c("a", restartPolicy="Always", resources={"requests": {"cpu": "1"}}),
                         c("fetch", resources={"requests": {"cpu": "5", "memory": "1Gi"}})]},
     {"requests": {"cpu": "6", "memory": "1Gi"}}),
    ({"containers": [c("t", resources={"requests": {"cpu": "4"}})],
      "initContainers": [c("fetch", resources={"requests": {"cpu": "3"}}),
                         c("a", restartPolicy="Always", resources={"requests": {"cpu": "1"}})]},
     {"requests": {"cpu": "5"}}),
    # GPUs: the request equals the limit, summed over the containers
    ({"containers": [c("t", resources={"limits": {"nvidia.com/gpu": 8, "cpu": "4"}, "requests": {"cpu": "2"}}),
                     c("logs", resources={"limits": {"cpu": "500m"}})]},
     {"requests": {"cpu": "2500m", "nvidia.com/gpu": "8"}, "limits": {"cpu": "4500m", "nvidia.com/gpu": "8"}}),
    ({"containers": [c("t")]}, {}),
])
def test_pod_resources_are_what_the_scheduler_reserves(pod_spec, want):
    assert pr.pod_resources(pod_spec) == want


@pytest.mark.parametrize("q,binary,want", [
    (Decimal("2"), False, "2"), (Decimal("0.5"), False, "500m"), (Decimal("0.0000005"), False, "500n"),
    (Decimal(2**30 * 3), True, "3Gi"), (Decimal(1500), True, "1500"), (Decimal("1e-10"), False, "1n"),
    (Decimal("0.0015"), False, "1500u"),
])
def test_format_quantity(q, binary, want):
    assert pr.format_quantity(q, binary) == want
    assert pr.quantity(want) >= q


def test_a_sidecars_gpus_are_reserved_by_the_probe_but_never_start_a_process():
    gpu_sidecar = {**LOGS, "resources": {"limits": {"nvidia.com/gpu": 1}}}
    s = _spec_with([gpu_sidecar, GPU_TRAINER])
    assert nproc_for(s) == 4
    probe = build_probe_pod(REF, s, 1, ProbeMaster("10.0.0.1"), 1, "probe:1")["spec"]["containers"][0]
    assert probe["resources"]["limits"]["nvidia.com/gpu"] == "5"
    assert _env(probe)["DISTTRAIN_PROBE_GPUS"] == "5"  # what the probe container will see
    assert _env(probe)["DISTTRAIN_PROBE_NPROC_PER_NODE"] == "4"


def test_the_probe_reserves_the_whole_training_pod():
    s = _spec_with([PROXY, {**TRAINER, "resources": {"requests": {"cpu": "2", "memory": "1Gi"},
                                                     "limits": {"cpu": "2", "memory": "1Gi"}}}])
    probe = build_probe_pod(REF, s, 1, ProbeMaster("10.0.0.1"), 1, "probe:1")["spec"]["containers"][0]
    # the proxy has no limits: neither has the probe (the pod is not bounded)
    assert probe["resources"] == {"requests": {"cpu": "2100m", "memory": "1152Mi"}}
    s.template.spec["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "256Mi"}
    probe = build_probe_pod(REF, s, 1, ProbeMaster("10.0.0.1"), 1, "probe:1")["spec"]["containers"][0]
    assert probe["resources"] == {"requests": {"cpu": "2100m", "memory": "1152Mi"},
                                  "limits": {"cpu": "3", "memory": "1280Mi"}}
