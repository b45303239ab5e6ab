"""The proving ground's service mesh (localcluster/cluster/mesh.py, localcluster/images/mesh): the
injection policy's shape and image, and the capture rules istio-init writes."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from localcluster.cluster import mesh

ROOT = Path(__file__).resolve().parents[4]


def _sidecar():
    spec = importlib.util.spec_from_file_location(
        "mesh_sidecar", ROOT / "localcluster" / "images" / "mesh" / "mesh_sidecar.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_policy_injects_only_pods_of_labelled_namespaces_not_host_network_nor_opted_out():
    policy, binding = mesh.policy_documents()
    assert (policy["kind"], binding["kind"]) == ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": {"istio-injection": "enabled"}}
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    conditions = " ".join(c["expression"] for c in policy["spec"]["matchConditions"])
    assert "hostNetwork" in conditions and "'sidecar.istio.io/inject'" in conditions
    expr = policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    # Istio's names, which the operator's diagnosis recognises (disttrain/diagnosis/mesh.py)
    for needle in ('name: "istio-init"', 'name: "istio-proxy"', 'restartPolicy: "Always"',
                   '"sidecar.istio.io/status"', "traffic.sidecar.istio.io/excludeOutboundIPRanges"):
        assert needle in expr, needle
    assert expr.count("{") == expr.count("}") and expr.count("[") == expr.count("]")


def test_the_policy_names_the_image_build_images_archives():
    script = (ROOT / "localcluster" / "build" / "build-images.sh").read_text()
    archived = re.search(r'"mesh-sidecar (\S+)"', script)
    assert archived and archived.group(1) == mesh.IMAGE
    assert mesh.IMAGE in mesh.policy_documents()[0]["spec"]["mutations"][0]["jsonPatch"]["expression"]


def test_istio_init_returns_lo_and_exclusions_before_the_redirect():
    rules = [" ".join(r[4:]) for r in _sidecar().rules(["10.244.0.0/16"], ["29500"])]
    assert rules[:4] == ["-N ISTIO_REDIRECT", "-N ISTIO_OUTPUT",
                         "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
                         "-A OUTPUT -p tcp -j ISTIO_OUTPUT"]
    body = rules[4:]
    assert body[-1] == "-A ISTIO_OUTPUT -j ISTIO_REDIRECT"
    for rule in ("-A ISTIO_OUTPUT -o lo -j RETURN", "-A ISTIO_OUTPUT -d 10.244.0.0/16 -j RETURN",
                 "-A ISTIO_OUTPUT -p tcp --dport 29500 -j RETURN"):
        assert body.index(rule) < len(body) - 1, rule
    assert _sidecar().split(" 10.0.0.0/8, ,") == ["10.0.0.0/8"]
