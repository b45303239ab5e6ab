"""The client boundary (:mod:`disttrain.shell.kube`, :mod:`disttrain.children.wire`): what the
template may carry reaches the apiserver; what the client or the apiserver refuses ends the
job at once, naming the field.

The kubernetes client (37.x) validates every argument of its generated methods with
pydantic models: a quantity must be a string, an unknown field is refused. The pods are
built from a template the apiserver accepted, where ``cpu: 1`` is an integer."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from pydantic import ValidationError

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import wire
from disttrain.children.names import JobRef
from disttrain.children.pods import Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.reconcile.policies import apierrors
from disttrain.reconcile.step import Outcome, Plan
from disttrain.shell.kube import Kube, failure_from
from disttrain_probe.contract import vocabulary
from tests.support.builders import given as step_given
from tests.support.fixtures import job

REF = JobRef("j", "ns", "uid-1")


class Wire:
    """A urllib3 pool manager that records requests and answers ``status`` with ``answer``."""

    def __init__(self, status: int = 201, answer: Any = None) -> None:
        self.status, self.answer = status, answer if answer is not None else {"kind": "Pod"}
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method, url, body=None, **_):
        self.sent.append((method, url, json.loads(body) if body else None))
        return SimpleNamespace(status=self.status, reason="x", data=json.dumps(self.answer).encode(),
                               headers={"content-type": "application/json"})


def api_client(pool: Wire) -> client.ApiClient:
    api = client.ApiClient(client.Configuration(host="http://apiserver.invalid"))
    api.rest_client.pool_manager = pool
    return api


def pod_with(ctr_resources: dict, **spec: Any) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j-probe-0", "namespace": "ns"},
            "spec": {"containers": [{"name": "t", "image": "i", "resources": ctr_resources}], **spec}}


def test_a_template_with_integer_quantities_creates_its_pods():
    """Found on a cluster: ``resources: {requests: {cpu: 1}}`` never created a pod (the
    client refused the int, the operator retried it for ever as "no answer")."""
    pool = Wire()
    kube = Kube(api_client(pool))
    pod = pod_with({"requests": {"cpu": 1}, "limits": {"cpu": 2, "nvidia.com/gpu": 1}})
    assert kube.apply({"metadata": {"namespace": "ns", "name": "j"}}, Plan({}, creates=[pod])) == []
    method, url, body = pool.sent[-1]
    assert (method, url) == ("POST", "http://apiserver.invalid/api/v1/namespaces/ns/pods")
    assert body["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1"}, "limits": {"cpu": "2", "nvidia.com/gpu": "1"}}


def test_fields_the_client_does_not_know_reach_the_apiserver():
    """A field of a newer Pod API (the client forbids unknown fields) and an int-or-string
    port are sent as written: the apiserver judges them."""
    pool = Wire()
    pod = pod_with({}, fieldOfANewerRelease={"x": 1})
    pod["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {"port": "http"}, "newKnob": True}
    Kube(api_client(pool)).create_pod("ns", wire.pod_body(pod))
    assert pool.sent[-1][2] == wire.pod_body(pod)
    with pytest.raises(ValidationError):  # what the generated method would have done
        client.CoreV1Api(api_client(Wire())).create_namespaced_pod("ns", pod)


def test_a_refusal_by_the_apiserver_is_its_message():
    pool = Wire(422, {"kind": "Status", "code": 422, "message": 'Pod "j-probe-0" is invalid: '
                      "spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "
                      '"2": must be equal to nvidia.com/gpu limit of 1'})
    kube = Kube(api_client(pool))
    [f] = kube.apply({"metadata": {"namespace": "ns", "name": "j"}}, Plan({}, creates=[pod_with({})]))
    assert (f.code, f.client) == (422, False) and "must be equal to nvidia.com/gpu limit" in f.message
    assert apierrors.is_terminal(f)


def client_refusal() -> ValidationError:
    pod = pod_with({"requests": {"cpu": 2}}, unknownThing=1)
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": "80"}]
    with pytest.raises(ValidationError) as info:
        client.CoreV1Api(api_client(Wire())).create_namespaced_pod("ns", pod)
    return info.value


def test_a_refusal_by_the_client_is_one_line_naming_the_field():
    f = failure_from(client_refusal(), "create", "Pod", "x-probe-0")
    assert f.client and f.code == 0
    assert "\n" not in f.message and "pydantic.dev" not in f.message and "http" not in f.message
    assert "spec.containers[0].resources.requests.cpu: Input should be a valid string (got 2)" in f.message
    assert "spec.containers[0].ports[0].containerPort" in f.message


def test_a_refusal_by_the_client_fails_the_job_at_once():
    """Retrying cannot change a body built from the spec: InvalidPodTemplate, at once."""
    f = failure_from(client_refusal(), "create", "Pod", "x-probe-0")
    assert apierrors.is_terminal(f)
    msg = apierrors.terminal_message(f)
    assert msg.startswith("the kubernetes client refused pod x-probe-0: spec.template.spec.")
    assert "spec.template.spec.containers[0].resources.requests.cpu: Input should be a valid string" in msg
    s = step_given().observing(api_failures=(f,)).build()
    assert apierrors.apply(s) is Outcome.FINISHED
    failed = [c for c in s.status["conditions"] if c["type"] == constants.FAILED][0]
    assert failed["reason"] == vocabulary.INVALID_POD_TEMPLATE


@pytest.mark.parametrize("value,text", [(1, "1"), (0, "0"), (2.5, "2.5"), (0.1, "0.1"), (3.0, "3"),
                                        (1e-7, "0.0000001"), ("500m", "500m"), (True, True)])
def test_quantities_are_written_as_the_apiserver_stores_them(value, text):
    assert wire.quantity_text(value) == text


def test_every_quantity_field_of_a_pod_is_written_as_a_string():
    pod = pod_with({"limits": {"cpu": 1}}, initContainers=[{"name": "i", "resources": {"requests": {"memory": 2}}}],
                   ephemeralContainers=[{"name": "e", "resources": {"limits": {"cpu": 0.5}}}],
                   overhead={"cpu": 1}, resources={"limits": {"cpu": 4}},
                   volumes=[{"name": "s", "emptyDir": {"sizeLimit": 1024}},
                            {"name": "c", "ephemeral": {"volumeClaimTemplate": {"spec": {
                                "resources": {"requests": {"storage": 10}}}}}}])
    out = wire.pod_body(pod)
    client.V1Pod.model_validate(out)  # the client's own model of a Pod takes it
    assert out["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "1024"
    assert out["spec"]["ephemeralContainers"][0]["resources"]["limits"]["cpu"] == "0.5"
    assert pod["spec"]["overhead"] == {"cpu": 1}  # the plan's pod is left as it was


@pytest.mark.parametrize("junk", [None, [], "x", {"spec": []}, {"spec": {"containers": "x", "volumes": [1, {"ephemeral": []}]}}])
def test_the_wire_form_takes_any_shape(junk):
    wire.pod_body(junk)


# ---- generated: templates as users write them -> bodies the client's models accept ----------
quantity = st.one_of(st.integers(0, 10**6), st.sampled_from(["1", "500m", "2Gi", "1.5", "1e3", "0.5", "1Ki"]))
port = st.one_of(st.integers(1, 65535), st.sampled_from(["http", "metrics", "p-1"]))
resources = st.fixed_dictionaries({}, optional={
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), quantity, max_size=3),
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantity, max_size=2)})
probe = st.one_of(st.builds(lambda p: {"httpGet": {"port": p, "path": "/"}}, port),
                  st.builds(lambda p: {"tcpSocket": {"port": p}}, port))


@st.composite
def templates(draw) -> dict:
    gpus = draw(st.integers(0, 8))
    trainer: dict[str, Any] = {"name": "trainer", "image": "example/train:1", "command": ["python", "t.py"],
                               "resources": draw(resources)}
    if gpus:
        trainer["resources"].setdefault("limits", {})["nvidia.com/gpu"] = draw(st.sampled_from([gpus, str(gpus)]))
        if draw(st.booleans()):
            trainer["resources"].setdefault("requests", {})["nvidia.com/gpu"] = gpus
    if draw(st.booleans()):
        trainer["livenessProbe"] = draw(probe)
    if draw(st.booleans()):
        trainer["ports"] = [{"containerPort": draw(st.integers(1, 20000)), "name": "http"}]
    containers = [trainer]
    if draw(st.booleans()):
        containers.append({"name": "sidecar", "image": "s", "resources": draw(resources),
                           "readinessProbe": draw(probe)})
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": "i", "resources": draw(resources)}]
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": draw(quantity)}}]
    return {"spec": spec}


@settings(max_examples=60, deadline=None)
@given(template=templates(), host_network=st.booleans(), use_training_image=st.booleans())
def test_generated_templates_build_pods_the_client_accepts(template, host_network, use_training_image):
    body = job(network={"hostNetwork": host_network}, probe={"useTrainingImage": use_training_image})["spec"]
    body["template"] = template
    spec = DistTrainingJobSpec.model_validate(body)
    pods = [build_probe_pod(REF, spec, r, ProbeMaster(None if r == 0 else "10.0.0.1"), attempt=1)
            for r in (0, 1)]
    pods += [build_worker_pod(REF, spec, r, "node-a", Rendezvous("10.0.0.1", 29500, "eth0"), attempt=0)
             for r in (0, 1)]
    core = client.CoreV1Api(api_client(Wire()))
    for pod in pods:
        core.create_namespaced_pod("ns", wire.pod_body(pod))  # the client's own validation


def test_dry_run_is_asked_of_the_apiserver():
    pool = Wire()
    Kube(api_client(pool)).create_pod("ns", pod_with({}), dry_run="All")
    assert pool.sent[-1][1] == "http://apiserver.invalid/api/v1/namespaces/ns/pods?dryRun=All"


def test_services_are_sent_as_written_too():
    pool = Wire()
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "j"},
           "spec": {"clusterIP": "None", "ports": [{"port": 29500, "targetPort": "rdzv"}]}}
    assert Kube(api_client(pool)).apply({"metadata": {"namespace": "ns", "name": "j"}},
                                        Plan({}, services=[svc])) == []
    assert pool.sent[-1] == ("POST", "http://apiserver.invalid/api/v1/namespaces/ns/services", svc)
