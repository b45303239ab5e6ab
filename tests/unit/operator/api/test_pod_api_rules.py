"""Templates the Pod API refuses are refused when the job is applied, naming the field: by
the CRD's rules (evaluated here with cel-python, :mod:`tests.fuzz.crd_admission`) and by the
operator's models alike. Each was admitted before and failed only when the operator
created the pods (InvalidPodTemplate), some only at rank 0's training pod, after the probe."""

from __future__ import annotations

import copy
from typing import Any, Optional

import pytest
from pydantic import ValidationError

from disttrain.api.fieldpath import spec_error_message
from disttrain.api.types import DistTrainingJobSpec
from tests.fuzz.crd_admission import admit
from tests.support.fixtures import TEMPLATE


def manifest(trainer: Optional[dict] = None, sidecar: Optional[dict] = None, host_network: bool = False,
             sysctls: Optional[list] = None, **spec: Any) -> dict:
    template = copy.deepcopy(TEMPLATE)
    ctr = template["spec"]["containers"][0]
    ctr.update(trainer or {})
    if sidecar is not None:
        template["spec"]["containers"].append({"name": "sidecar", "image": "s", **sidecar})
    if sysctls is not None:
        template["spec"]["securityContext"] = {"sysctls": sysctls}
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
            "metadata": {"name": "ddp", "namespace": "ns"},
            "spec": {"numNodes": 2, "template": template, "network": {"hostNetwork": host_network}, **spec}}


def gpus(limits: Any = None, requests: Any = None) -> dict:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = {"cpu": "2", "nvidia.com/gpu": limits}
    if requests is not None:
        res["requests"] = {"nvidia.com/gpu": requests}
    return {"resources": res}


def verdicts(m: dict) -> tuple[list[str], Optional[str]]:
    """(the CRD's errors, the operator's message or None)."""
    _, crd = admit(m)
    try:
        DistTrainingJobSpec.model_validate(m["spec"])
        mine = None
    except ValidationError as exc:
        mine = spec_error_message(exc)
    return crd, mine


REFUSED = [
    ("a net.* sysctl with hostNetwork", manifest(host_network=True, sysctls=[{"name": "net.core.somaxconn", "value": "1024"}]),
     "spec.template.spec.securityContext.sysctls"),
    ("a GPU requested without a limit", manifest(gpus(requests=1)), "requests.nvidia.com/gpu"),
    ("a fractional GPU limit", manifest(gpus(limits="0.5")), "nvidia.com/gpu"),
    ("a GPU in milli-units not whole", manifest(gpus(limits="1500m", requests="1500m")), "nvidia.com/gpu"),
    ("a GPU request unlike its limit", manifest(gpus(limits=2, requests=1)), "nvidia.com/gpu"),
    ("a GPU request unlike its limit, as strings", manifest(gpus(limits="2", requests="1")), "nvidia.com/gpu"),
    ("another extended resource requested without a limit",
     manifest({"resources": {"requests": {"example.com/fpga": 1}}}), "example.com/fpga"),
    ("a port name with capitals", manifest({"ports": [{"containerPort": 80, "name": "Http"}]}), "name"),
    ("a port name of digits only", manifest({"ports": [{"containerPort": 80, "name": "8080"}]}), "name"),
    ("a port name with --", manifest({"ports": [{"containerPort": 80, "name": "a--b"}]}), "name"),
    ("a port name ending in -", manifest({"ports": [{"containerPort": 80, "name": "http-"}]}), "name"),
    ("a port name of 16 characters", manifest({"ports": [{"containerPort": 80, "name": "a" * 16}]}), "name"),
    ("a port name used twice", manifest({"ports": [{"containerPort": 80, "name": "http"},
                                                   {"containerPort": 81, "name": "http"}]}), "ports"),
    ("a sidecar on the rendezvous port with hostNetwork",
     manifest(sidecar={"ports": [{"containerPort": 29500}]}, host_network=True), "spec.template.spec.containers"),
    ("a sidecar's hostPort on the rendezvous port with hostNetwork",
     manifest(sidecar={"ports": [{"containerPort": 7000, "hostPort": 7000}, {"containerPort": 29400, "hostPort": 29400}]},
              host_network=True, rendezvous={"port": 29400}), "spec.rendezvous.port"),
]


@pytest.mark.parametrize("name,m,field", REFUSED, ids=[r[0] for r in REFUSED])
def test_templates_the_pod_api_refuses_are_refused_at_apply_naming_the_field(name, m, field):
    crd, mine = verdicts(m)
    assert crd, f"the CRD admitted {name}"
    assert mine is not None, f"the operator accepted {name}"
    assert field in mine and "\n" not in mine, mine


ADMITTED = [
    ("a net.* sysctl on the pod network", manifest(sysctls=[{"name": "net.core.somaxconn", "value": "1024"}])),
    ("a kernel sysctl with hostNetwork", manifest(host_network=True, sysctls=[{"name": "kernel.shm_rmid_forced", "value": "1"}])),
    ("a GPU limit alone", manifest(gpus(limits=1))),
    ("a GPU limit and an equal request", manifest(gpus(limits=2, requests=2))),
    ("equal as quantities, written differently", manifest(gpus(limits="1", requests=1))),
    ("whole milli-units", manifest(gpus(limits="2000m"))),
    ("a whole decimal", manifest(gpus(limits="1.0"))),
    ("a fractional cpu", manifest({"resources": {"requests": {"cpu": "0.5"}, "limits": {"cpu": 1}}})),
    ("hugepages and ephemeral storage are no extended resources",
     manifest({"resources": {"requests": {"ephemeral-storage": "1Gi", "kubernetes.io/x": 1}}})),
    ("port names", manifest({"ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81, "name": "h-2"},
                                       {"containerPort": 82, "name": ""}, {"containerPort": 83}]})),
    ("the trainer on the rendezvous port with hostNetwork",
     manifest({"ports": [{"containerPort": 29500, "name": "rdzv"}]}, host_network=True)),
    ("a sidecar on the rendezvous port on the pod network", manifest(sidecar={"ports": [{"containerPort": 29500}]})),
    ("a sidecar on another port with hostNetwork",
     manifest(sidecar={"ports": [{"containerPort": 9090, "name": "metrics"}]}, host_network=True)),
]


@pytest.mark.parametrize("name,m", ADMITTED, ids=[r[0] for r in ADMITTED])
def test_templates_the_pod_api_takes_are_admitted(name, m):
    crd, mine = verdicts(m)
    assert (crd, mine) == ([], None)


@pytest.mark.parametrize("value", ["2", True, "true", "1.5"])
def test_max_link_imbalance_is_a_number_to_the_operator_as_to_the_crd(value):
    """``"2"`` and ``true`` passed the operator's model (lax) where the CRD refuses them."""
    m = manifest(probe={"maxLinkImbalance": value})
    crd, mine = verdicts(m)
    assert crd and mine is not None and "maxLinkImbalance" in mine


def test_max_link_imbalance_takes_integers_and_floats():
    for value in (2, 2.5, 1000):
        assert verdicts(manifest(probe={"maxLinkImbalance": value})) == ([], None)


# ---- generated: near-valid templates around these rules; the CRD and the models agree ------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

amounts = st.one_of(st.integers(0, 4), st.sampled_from(["1", "2", "0.5", "1.0", "1500m", "2000m", "0m", "1k",
                                                        "1.5k", "500u", "01", "+1", "1e3"]))
ext_names = st.sampled_from(["nvidia.com/gpu", "example.com/fpga", "cpu", "memory", "kubernetes.io/x",
                             "hugepages-2Mi"])
sections = st.dictionaries(ext_names, amounts, max_size=3)
port_names = st.sampled_from(["http", "metrics", "h-2", "", "Http", "a--b", "8080", "-a", "a-", "a" * 15, "a" * 16])
ports = st.lists(st.fixed_dictionaries({"containerPort": st.sampled_from([80, 29500, 29400, 8080])},
                                       optional={"name": port_names, "hostPort": st.sampled_from([0, 29500, 29400])}),
                 max_size=3)


@st.composite
def near_valid(draw) -> dict:
    trainer = {"resources": draw(st.fixed_dictionaries({}, optional={"limits": sections, "requests": sections})),
               "ports": draw(ports)}
    sidecar = draw(st.one_of(st.none(), st.fixed_dictionaries({"ports": ports})))
    sysctls = draw(st.one_of(st.none(), st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["net.core.somaxconn", "kernel.shm_rmid_forced", "net.ipv4.tcp_syncookies"]),
        "value": st.just("1")}), max_size=2)))
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["rendezvous"] = {"port": draw(st.sampled_from([29500, 29400, 8080]))}
    return manifest(trainer, sidecar, draw(st.booleans()), sysctls, **spec)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=near_valid())
def test_generated_templates_the_crd_and_the_operator_agree_on(m):
    crd, mine = verdicts(m)
    assert bool(crd) == (mine is not None), f"CRD: {crd or 'admitted'}; operator: {mine or 'accepted'}"


def two_containers(first: dict, second: dict, **spec: Any) -> dict:
    m = manifest(host_network=True, **spec)
    m["spec"]["template"]["spec"]["containers"] = [{"image": "i", **first}, {"image": "i", **second}]
    return m


@pytest.mark.parametrize("m,refused", [
    # the trainer is the one named trainer, second here: the first container is the sidecar
    (two_containers({"name": "proxy", "ports": [{"containerPort": 29500}]}, {"name": "trainer"}), True),
    (two_containers({"name": "proxy"}, {"name": "trainer", "ports": [{"containerPort": 29500}]}), False),
    # spec.trainerContainer names it
    (two_containers({"name": "helper", "ports": [{"containerPort": 29500}]}, {"name": "main"},
                    trainerContainer="main"), True),
    (two_containers({"name": "helper"}, {"name": "main", "ports": [{"containerPort": 29500}]},
                    trainerContainer="main"), False),
], ids=["sidecar-first-on-the-port", "trainer-second-on-the-port", "chosen-trainer-sidecar-on-the-port",
        "chosen-trainer-on-the-port"])
def test_the_rendezvous_port_is_the_trainers_whichever_container_it_is(m, refused):
    crd, mine = verdicts(m)
    assert bool(crd) == refused and (mine is not None) == refused, (crd, mine)
