"""The checked-in CRD is generated from the models and is a structural schema."""

from pathlib import Path

import yaml

from disttrain.api import crdgen

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "crds" / "disttrain.dev_disttrainingjobs.yaml"


def test_checked_in_crd_matches_models():
    assert CRD.read_text() == crdgen.render(), (
        "crds/ is stale: run `make crds` (python -m disttrain.crdgen) and commit the result"
    )


def _walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for k, v in node.get("properties", {}).items():
            yield from _walk(v, f"{path}.{k}")
        if "items" in node:
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"


def test_every_spec_field_has_a_description():
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    missing = [p for p, n in _walk(spec) if p.count(".") <= 2 and p != "$" and not n.get("description")]
    assert not missing, f"fields without description (kubectl explain shows nothing): {missing}"


def test_printer_columns_and_names():
    crd = yaml.safe_load(CRD.read_text())
    v = crd["spec"]["versions"][0]
    assert [col["name"] for col in v["additionalPrinterColumns"]] == ["Phase", "Nodes", "Interface", "NCCL", "Bus BW", "Progress", "Age"]
    assert crd["spec"]["names"]["shortNames"] == ["dtj"]
    assert v["subresources"] == {"status": {}}


def test_cel_rules_present_for_cross_field_checks():
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("numProcPerNode" in r and "launcher" in r for r in rules)
    assert any("oldSelf" in r for r in rules)
    pr = spec["properties"]["network"]["properties"]["portRange"]
    assert pr["pattern"] and pr["x-kubernetes-validations"]


def test_chart_ships_the_same_crd():
    chart_crd = ROOT / "charts" / "disttrain-operator" / "crds" / CRD.name
    assert chart_crd.read_text() == CRD.read_text(), (
        "charts/disttrain-operator/crds/ drifted from crds/: copy crds/*.yaml into the chart"
    )


def _template():
    crd = yaml.safe_load(CRD.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"]


def test_template_fields_the_operator_reads_are_typed_and_the_rest_preserved():
    t = _template()
    pod = t["properties"]["spec"]
    ctr = pod["properties"]["containers"]["items"]
    assert ctr["properties"]["command"] == {"type": "array", "items": {"type": "string"},
                                            "description": ctr["properties"]["command"]["description"]}
    cpu = ctr["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert cpu["x-kubernetes-int-or-string"] and cpu["pattern"].startswith("^") and cpu["minimum"] == 0
    assert pod["properties"]["affinity"]["type"] == "object" and pod["properties"]["tolerations"]["type"] == "array"
    assert pod["properties"]["containers"]["x-kubernetes-list-map-keys"] == ["name"]
    assert t["properties"]["metadata"]["properties"]["labels"]["additionalProperties"]["maxLength"] == 63
    # Kubernetes shapes: no defaults or nulls injected; unknown fields kept at every level.
    for path, node in _walk(t):
        assert "default" not in node and "nullable" not in node, path
        if node.get("type") == "object" and "properties" in node:
            assert node.get("x-kubernetes-preserve-unknown-fields"), path


def test_job_name_rules_sit_at_the_root_and_point_at_metadata_name():
    crd = yaml.safe_load(CRD.read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = root["x-kubernetes-validations"]
    assert all(r["fieldPath"] == ".metadata.name" and "self.metadata.name" in r["rule"] for r in rules)
    assert root["properties"]["metadata"]["properties"] == {"name": {"type": "string", "maxLength": 253}}


def test_no_spec_field_is_nullable_so_a_null_is_unset_to_the_cel_rules_too():
    """With nullable the apiserver keeps a null, has() is true for it and the CEL rules read
    it as set while the operator reads it as unset; without, the apiserver drops it."""
    crd = yaml.safe_load(CRD.read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    nullable = [p for p, node in _walk(root["spec"], "spec") if node.get("nullable")]
    assert nullable == []
    assert any(node.get("nullable") for _, node in _walk(root["status"])), "status keeps its nulls"


def test_no_schema_bound_the_apiserver_would_round():
    """The apiserver reads minimum/maximum as float64: a bound beyond 2**53 is rounded to a
    non-integer and refuses every value of its field (terminationGracePeriodSeconds: 30 was
    refused while the CRD carried 2**63-1)."""
    from disttrain.api.crdgen import build_crd

    def walk(node):
        if isinstance(node, dict):
            for k in ("minimum", "maximum"):
                if k in node:
                    assert abs(node[k]) <= 2**53, (k, node[k])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(build_crd())
