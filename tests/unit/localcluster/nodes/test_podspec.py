"""Pure parts of the local cluster's node agent: env expansion, quantities, image map."""
from __future__ import annotations

import base64
from decimal import Decimal

import pytest

from localcluster.nodes import podspec

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"a": "b"}},
       "spec": {"nodeName": "node-a", "serviceAccountName": "sa",
                "containers": [{"name": "c"}]}}


@pytest.mark.parametrize("s,want", [
    ("$(A)", "1"), ("x$(A)y", "x1y"), ("$$(A)", "$(A)"), ("$(MISSING)", "$(MISSING)"),
    ("$(A", "$(A"), ("$", "$"), ("a$b", "a$b"), ("$(A)$(B)", "12"),
])
def test_expand_like_kubelet(s, want):
    assert podspec.expand(s, {"A": "1", "B": "2"}) == want


@pytest.mark.parametrize("q,want", [
    ("500m", Decimal("0.5")), ("16Gi", Decimal(16 * 2**30)), ("2", Decimal(2)),
    ("1k", Decimal(1000)), ("1e3", Decimal(1000)),
])
def test_parse_quantity(q, want):
    assert podspec.parse_quantity(q) == want


def test_build_env_order_refs_and_sources():
    cms = {"configmaps/cm": {"data": {"K": "from-cm", "X": "x"}},
           "secrets/s": {"data": {"PW": base64.b64encode(b"hunter2").decode()}}}
    container = {"name": "c", "resources": {"limits": {"memory": "1Gi"}},
                 "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
                 "env": [
                     {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                     {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                     {"name": "LBL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
                     {"name": "MEM", "valueFrom": {"resourceFieldRef": {
                         "resource": "limits.memory", "divisor": "1Mi"}}},
                     {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                     {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "PW"}}},
                     {"name": "OPT", "valueFrom": {"configMapKeyRef": {
                         "name": "nope", "key": "k", "optional": True}}},
                     {"name": "MSG", "value": "$(NAME)@$(IP) $(CM_K)"},
                 ]}
    env = podspec.build_env(POD, container, "10.100.0.11", {"cpu": "8"},
                            lambda kind, name: cms.get(f"{kind}/{name}"))
    assert env["CM_K"] == "from-cm" and env["NAME"] == "p" and env["IP"] == "10.100.0.11"
    assert env["LBL"] == "b" and env["MEM"] == "1024" and env["CPU"] == "8"
    assert env["PW"] == "hunter2" and "OPT" not in env
    assert env["MSG"] == "p@10.100.0.11 from-cm"


def test_build_env_missing_required_ref_raises():
    c = {"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "n", "key": "k"}}}]}
    with pytest.raises(LookupError):
        podspec.build_env(POD, c, "1.2.3.4", {}, lambda kind, name: None)


def test_image_map_and_process_env():
    entries = [{"pattern": "disttrain.dev/test/garbage-probe:*", "pythonpath": ["tests/x"],
                "env": {"IMG": "1", "OVERRIDE": "image"}}]
    ent = podspec.image_entry("disttrain.dev/test/garbage-probe:v1", entries)
    assert ent["pythonpath"][0].endswith("/tests/x")
    assert podspec.image_entry("busybox", entries) == {}
    env = podspec.container_process_env({"OVERRIDE": "container", "PYTHONPATH": "/a"}, ent,
                                        "/venv/bin", "node-a")
    assert env["PATH"].startswith("/venv/bin:") and env["HOSTNAME"] == "node-a"
    assert env["IMG"] == "1" and env["OVERRIDE"] == "container"
    assert env["PYTHONPATH"].split(":")[0] == "/a" and env["PYTHONPATH"].endswith("/tests/x")


def test_checked_in_image_map_loads():
    pats = [e["pattern"] for e in podspec.load_image_map()]
    assert "disttrain.dev/test/garbage-probe:*" in pats
