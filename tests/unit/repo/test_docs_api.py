"""docs/api.md against the models: generated, complete, described.

The page is rendered from the CRD (which crdgen builds from the pydantic models); these
tests fail when the checked-in page is stale, when a model field or a CEL rule is missing
from it, or when a field has no description to show (`kubectl explain` shows the same).
"""
from __future__ import annotations

import sys
import typing
from pathlib import Path

from pydantic import BaseModel

from disttrain.api.crdgen import build_crd
from disttrain.api.types import DistTrainingJobSpec, DistTrainingJobStatus

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs"))
import generate_api  # noqa: E402


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (Optional[M], list[M], M | None ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def model_paths(model: type[BaseModel], prefix: str) -> list[str]:
    """Every field path of ``model`` under ``prefix`` by wire name, lists as ``name[]``."""
    out = []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        path = f"{prefix}.{wire}"
        out.append(path)
        is_list = typing.get_origin(info.annotation) is list or any(
            typing.get_origin(a) is list for a in typing.get_args(info.annotation))
        for sub in _models_in(info.annotation):
            out += model_paths(sub, path + "[]" if is_list else path)
    return out


def _all_rules(node, acc):
    """Every x-kubernetes-validations entry anywhere in a schema (independent walk)."""
    if isinstance(node, dict):
        acc.extend(node.get("x-kubernetes-validations") or [])
        for v in node.values():
            _all_rules(v, acc)
    elif isinstance(node, list):
        for v in node:
            _all_rules(v, acc)
    return acc


def test_checked_in_page_is_current():
    assert (ROOT / "docs" / "api.md").read_text() == generate_api.render(), "run make api-docs"


def test_every_model_field_has_a_row():
    page = generate_api.render()
    paths = model_paths(DistTrainingJobSpec, "spec") + model_paths(DistTrainingJobStatus, "status")
    assert len(paths) > 40
    missing = [p for p in paths if f"| `{p}` |" not in page]
    assert not missing, missing


def test_every_admission_rule_is_listed():
    page = generate_api.render()
    crd_rules = _all_rules(build_crd(), [])
    assert len(crd_rules) >= 5
    for r in crd_rules:
        assert r["rule"] in page
        assert (r.get("message") or r["messageExpression"]) in page


def test_every_field_outside_the_pod_template_is_described():
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    bare = [p for top in ("spec", "status")
            for p, node, _ in generate_api.fields(schema[top], top)
            if not node.get("description") and not p.startswith("spec.template.")]
    assert not bare, f"add a description in operator/disttrain/api/types.py: {bare}"


def test_row_cells_escape_pipes_and_join_lines():
    assert generate_api._cell("a|b\n  c") == "a\\|b c"
