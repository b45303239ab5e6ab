"""End to end: the pods the operator builds from a template the CRD admits are pods the real
apiserver accepts, sent through the operator's own shell (:meth:`Kube.create_pod
<disttrain.shell.kube.Kube.create_pod>`: JSON past the kubernetes client's models) with
server-side dry run (``dryRun=All``: validated and admitted, never stored, nothing runs).

Generated templates carry what users write and the client's models refuse: integer
quantities (``cpu: 1``, ``nvidia.com/gpu: 1``), int-or-string probe ports, named ports,
sidecars, init containers, emptyDir size limits. Each job is applied with server-side dry
run first: the CRD admits it exactly when the operator's models do; then rank 0's and rank
1's probe and training pods are created (dry run). A template the Pod API refuses after
the CRD admitted it (requests above limits) ends as InvalidPodTemplate naming the field.
The Pod API's rules the CRD now checks (docs/admission.md) are refused at apply by the real
apiserver, naming the field: this also proves the CRD's CEL rules fit its cost budget
(the CRD would not be established otherwise). No operator is needed: the shell is called
directly; the cluster only has to be up (tests/e2e/conftest.py)."""
from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import wire
from disttrain.children.names import JobRef
from disttrain.children.pods import Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.reconcile.policies import apierrors
from disttrain.shell.kube import Kube, failure_from
from localcluster.cluster import operator_install

pytestmark = pytest.mark.e2e

TRAINER = {"name": "trainer", "image": "example/train:1", "command": ["python", "/workspace/train.py"]}


@pytest.fixture(scope="module")
def crd(cluster):
    operator_install.apply_crds()  # fails when a CEL rule is over the apiserver's cost budget
    return cluster


@pytest.fixture(scope="module")
def kube(crd) -> Kube:
    cfg = client.Configuration()
    kube_config.load_kube_config(config_file=str(crd.kubeconfig), client_configuration=cfg)
    return Kube(client.ApiClient(cfg))


def manifest(template: dict, name: str = "boundary", **spec: Any) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
            "metadata": {"name": name}, "spec": {"numNodes": 2, "template": template, **spec}}


def crd_admits(cluster, ns: str, m: dict) -> tuple[bool, str]:
    p = cluster.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", input=yaml.safe_dump(m), check=False)
    return p.returncode == 0, p.stderr


def pods_of(m: dict, ns: str) -> list[dict]:
    spec = DistTrainingJobSpec.model_validate(m["spec"])
    ref = JobRef(m["metadata"]["name"], ns, "00000000-0000-0000-0000-000000000001")
    pods = [build_probe_pod(ref, spec, r, ProbeMaster(None if r == 0 else "10.0.0.1"), attempt=1)
            for r in (0, 1)]
    pods += [build_worker_pod(ref, spec, r, "node-a", Rendezvous("10.0.0.1", spec.rendezvous.port, "eth0"),
                              attempt=0) for r in (0, 1)]
    return pods


# ---- generated templates ------------------------------------------------------------------
quantity = st.one_of(st.integers(1, 64), st.sampled_from(["1", "500m", "2Gi", "1.5", "1e3", "0.5", "1Ki", "128Mi"]))
port = st.one_of(st.integers(1, 65535), st.sampled_from(["http", "metrics"]))
probe = st.one_of(st.builds(lambda p: {"httpGet": {"port": p, "path": "/healthz"}, "periodSeconds": 30}, port),
                  st.builds(lambda p: {"tcpSocket": {"port": p}}, port))


@st.composite
def templates(draw) -> dict:
    trainer: dict[str, Any] = copy.deepcopy(TRAINER)
    res: dict[str, Any] = {}
    cpu = draw(st.one_of(st.none(), st.integers(1, 4), st.sampled_from(["1", "500m", "2"])))
    if cpu is not None:
        res["limits"] = {"cpu": cpu, "memory": draw(st.sampled_from([1073741824, "1Gi", "512Mi"]))}
        if draw(st.booleans()):
            res["requests"] = {"cpu": cpu}
    gpus = draw(st.integers(0, 2))
    if gpus:
        res.setdefault("limits", {})["nvidia.com/gpu"] = draw(st.sampled_from([gpus, str(gpus)]))
        if draw(st.booleans()):
            res.setdefault("requests", {})["nvidia.com/gpu"] = gpus
    if res:
        trainer["resources"] = res
    if draw(st.booleans()):
        trainer["ports"] = [{"containerPort": 8080, "name": "http"}, {"containerPort": 9090, "name": "metrics"}]
        trainer["livenessProbe"] = draw(probe)
    containers = [trainer]
    if draw(st.booleans()):
        containers.append({"name": "sidecar", "image": "example/sidecar:1",
                           "resources": {"limits": {"cpu": draw(quantity), "memory": draw(quantity)}},
                           "ports": [{"containerPort": 7070, "name": "side"}]})
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init", "image": "example/init:1",
                                   "resources": {"requests": {"cpu": draw(st.integers(1, 2))}}}]
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": draw(st.sampled_from([1073741824, "1Gi"]))}}]
        trainer["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return {"spec": spec}


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(template=templates(), host_network=st.booleans())
def test_generated_templates_the_crd_admits_make_pods_the_apiserver_accepts(crd, kube, ns, template, host_network):
    m = manifest(template, network={"hostNetwork": host_network})
    admitted, why = crd_admits(crd, ns, m)
    try:
        DistTrainingJobSpec.model_validate(m["spec"])
        mine = True
    except ValidationError:
        mine = False
    assert admitted == mine, f"CRD: {why or 'admitted'}; operator models: {'accept' if mine else 'refuse'}"
    if not admitted:
        return
    for pod in pods_of(m, ns):
        try:
            kube.create_pod(ns, wire.pod_body(pod), dry_run="All")
        except ApiException as exc:
            f = failure_from(exc, "create", "Pod", pod["metadata"]["name"])
            raise AssertionError(f"the apiserver refused {pod['metadata']['name']} built from an admitted "
                                 f"template: {f.code} {f.message}") from exc


def test_a_template_the_pod_api_refuses_after_admission_names_the_field(crd, kube, ns):
    """requests above limits: admitted by the CRD (not checked there) and by the probe pod
    (it reserves the pod's effective resources, a valid pair), refused by the Pod API for
    the training pod, which the operator sends with dry run before the first probe
    (policies.probelaunch.check_training_pods); the failure is terminal and names
    spec.template's field."""
    trainer = {**TRAINER, "resources": {"requests": {"cpu": 4}, "limits": {"cpu": 2}}}
    m = manifest({"spec": {"containers": [trainer]}})
    assert crd_admits(crd, ns, m)[0]
    pod = pods_of(m, ns)[2]  # rank 0's training pod
    with pytest.raises(ApiException) as info:
        kube.create_pod(ns, wire.pod_body(pod), dry_run="All")
    f = failure_from(info.value, "create", "Pod", pod["metadata"]["name"])
    assert f.code == 422 and apierrors.is_terminal(f)
    assert "spec.template.spec.containers[0].resources.requests" in apierrors.terminal_message(f)


REFUSED_AT_APPLY = [
    ("gpu-without-limit", {"resources": {"requests": {"nvidia.com/gpu": 1}}}, {}, "nvidia.com/gpu"),
    ("fractional-gpu", {"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}, {}, "whole units"),
    ("gpu-request-unlike-limit", {"resources": {"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 1}}},
     {}, "must equal its limit"),
    ("bad-port-name", {"ports": [{"containerPort": 80, "name": "a--b"}]}, {}, "IANA service name"),
    ("repeated-port-name", {"ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81, "name": "http"}]},
     {}, "unique"),
]


@pytest.mark.parametrize("trainer,spec,expect", [c[1:] for c in REFUSED_AT_APPLY], ids=[c[0] for c in REFUSED_AT_APPLY])
def test_the_pod_api_rules_are_refused_at_apply(crd, ns, trainer, spec, expect):
    m = manifest({"spec": {"containers": [{**TRAINER, **trainer}]}}, **spec)
    admitted, why = crd_admits(crd, ns, m)
    assert not admitted and expect in why and "spec.template.spec.containers[0]" in why, why


def test_host_network_rules_are_refused_at_apply(crd, ns):
    sysctl = manifest({"spec": {"containers": [TRAINER], "securityContext": {
        "sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}}}, network={"hostNetwork": True})
    admitted, why = crd_admits(crd, ns, sysctl)
    assert not admitted and "net.* sysctl" in why, why
    sidecar = manifest({"spec": {"containers": [TRAINER, {"name": "side", "image": "s",
                                                          "ports": [{"containerPort": 29500}]}]}},
                       network={"hostNetwork": True})
    admitted, why = crd_admits(crd, ns, sidecar)
    assert not admitted and "rendezvous.port" in why, why
