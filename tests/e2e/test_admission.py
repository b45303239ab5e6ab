"""End to end: the real kube-apiserver refuses manifests the operator could not act on,
at `kubectl apply`, with a message naming the field (the CRD's typed pod template and its
CEL rules on metadata.name; see docs/admission.md). No operator needed: the CRD decides."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from localcluster.cluster import operator_install

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp-digits.yaml"


@pytest.fixture(scope="module")
def crd(cluster):
    operator_install.apply_crds()
    return cluster


def _job() -> dict:
    return copy.deepcopy(next(d for d in yaml.safe_load_all(EXAMPLE.read_text())
                              if d["kind"] == "DistTrainingJob"))


def _trainer(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


CASES = [
    ("string-command", lambda j: _trainer(j).update(command="python /workspace/train_digits.py"),
     ["spec.template.spec.containers[0].command", "must be of type array"]),
    ("dotted-name", lambda j: j["metadata"].update(name="ddp.digits"),
     ["metadata.name", "no dots"]),
    ("malformed-quantity", lambda j: _trainer(j)["resources"]["limits"].update(memory="2 GB"),
     ["spec.template.spec.containers[0].resources.limits.memory", "should match"]),
    ("fractional-number-quantity", lambda j: _trainer(j)["resources"]["requests"].update(cpu=0.5),
     ["spec.template.spec.containers[0].resources.requests.cpu", "integer,string"]),
    ("leading-digit-name-with-service", lambda j: (j["metadata"].update(name="2-digits"),
                                                   j["spec"]["network"].update(hostNetwork=False)),
     ["metadata.name", "must start with a letter", "headless Service"]),
    # a null subdomain is no subdomain: the operator would create the Service
    ("leading-digit-name-null-subdomain", lambda j: (j["metadata"].update(name="2-digits"),
                                                     j["spec"]["network"].update(hostNetwork=False,
                                                                                 subdomain=None)),
     ["metadata.name", "must start with a letter"]),
    ("boolean-hostname", lambda j: j["spec"]["template"]["spec"].update(hostname=True),
     ["spec.template.spec.hostname", "must be of type string"]),
    ("too-many-processes-per-node", lambda j: j["spec"].update(numProcPerNode=257),
     ["spec.numProcPerNode", "from 1 to 256"]),
    # which container trains cannot be told: refused by the CEL rules at the spec
    ("no-trainer-among-two", lambda j: (_trainer(j).update(name="main"),
                                        j["spec"]["template"]["spec"]["containers"].insert(0, {"name": "logs"})),
     ["spec.template.spec.containers: with more than one container", "set spec.trainerContainer"]),
    ("trainer-container-names-none", lambda j: j["spec"].update(trainerContainer="main"),
     ["spec.trainerContainer: no container is named main"]),
]


@pytest.mark.parametrize("mutate,expect", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_apply_refuses_naming_the_field(crd, ns, mutate, expect):
    job = _job()
    mutate(job)
    p = crd.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job), check=False)
    assert p.returncode != 0, p.stdout
    for text in expect:
        assert text in p.stderr, p.stderr
    assert crd.kubectl("get", "dtj", "-n", ns, "-o", "name").stdout.strip() == ""


def test_a_null_network_field_is_unset_and_admitted(crd, ns):
    """enableDNSHostnames: null with hostNetwork is DNS hostnames off (the operator reads it
    so): a name starting with a digit is fine, and the null is not stored."""
    job = _job()
    job["metadata"]["name"] = "2-digits"
    job["spec"]["network"].update(hostNetwork=True, enableDNSHostnames=None)
    crd.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))
    got = yaml.safe_load(crd.kubectl("get", "dtj", "2-digits", "-n", ns, "-o", "yaml").stdout)
    assert "enableDNSHostnames" not in got["spec"]["network"]


def test_the_example_is_admitted_with_its_template_as_written(crd, ns):
    job = _job()
    _trainer(job)["ports"] = [{"containerPort": 8080}]  # a field the CRD does not type: kept
    crd.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))
    got = yaml.safe_load(crd.kubectl("get", "dtj", "ddp-digits", "-n", ns, "-o", "yaml").stdout)
    assert got["spec"]["template"]["spec"] == job["spec"]["template"]["spec"]
