"""pydantic validation repeats the admission rules and names the field."""

import pytest
from pydantic import ValidationError

from disttrain.api import DistTrainingJobSpec, gpus_requested, spec_error_message

from .fixtures import TEMPLATE


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
    (spec(template={"spec": {"containers": [{"name": "t", "env": "RANK"}]}}), "containers[0].env must be a list"),
])
def test_bad_input_names_the_field(data, field):
    assert field in err(data)


def test_gpus_requested():
    assert gpus_requested({"resources": {"limits": {"nvidia.com/gpu": "8"}}}) == 8
    assert gpus_requested({"resources": {"requests": {"nvidia.com/gpu": 2}}}) == 2
    assert gpus_requested({}) == 0
