"""What kube-apiserver does with a new custom resource, for generated tests: a small
model of its admission, driven by the CRD in crds/.

In the apiserver's order (apiextensions-apiserver): the object name is checked (a
DNS-1123 subdomain); unknown fields outside ``x-kubernetes-preserve-unknown-fields`` are
pruned; a null in a field (or a map value) that is not ``nullable`` is dropped (or replaced
by its default);
defaults are applied; the OpenAPI schema is checked (with the ``jsonschema`` library, after
turning ``nullable`` and ``x-kubernetes-int-or-string`` into plain JSON Schema, and with
``pattern`` matched by RE2, Go's semantics);
``x-kubernetes-list-type: map`` keys must be unique; then every ``x-kubernetes-validations``
rule is evaluated with cel-python (the Kubernetes string extension ``split`` is added, the
only one the CRD uses). Transition rules (``oldSelf``) are skipped: these are creates.
The stored object then goes through a JSON round trip as Go would write it (an integral
float such as 2.0 comes back as 2).

It is a model, not the apiserver: the e2e tests (tests/e2e/test_admission.py) check the
real one on the cases that matter.
"""
from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any, Optional

import celpy
import jsonschema
import re2  # google-re2, installed with cel-python: the apiserver's regex semantics
import yaml
from celpy import celtypes

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "disttrain.dev_disttrainingjobs.yaml"
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@functools.lru_cache(maxsize=1)
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _to_jsonschema(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_jsonschema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k.startswith("x-kubernetes-") or k in ("nullable", "default", "description", "format"):
            continue
        if k == "properties":
            out[k] = {p: _to_jsonschema(s) for p, s in v.items()}
        elif k in ("items", "additionalProperties"):
            out[k] = _to_jsonschema(v)
        else:
            out[k] = v
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        t = out["type"]
        out["type"] = (t if isinstance(t, list) else [t]) + ["null"]
    return out


def _go_pattern(validator, pattern, instance, schema):
    """``pattern`` as the apiserver applies it: Go's RE2, where ``$`` is the end of the text
    (Python's ``re`` also lets it match before a final newline: "1\\n" would pass)."""
    if isinstance(instance, str) and not re2.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} should match {pattern!r}")


_GoDraft7 = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _go_pattern})


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft7Validator:
    return _GoDraft7(_to_jsonschema(crd_schema()))


def _prune_and_default(obj: Any, schema: dict[str, Any], at_root: bool = False) -> Any:
    """Pruning of unknown fields, dropping of non-nullable nulls, defaulting."""
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [_prune_and_default(x, schema["items"]) for x in obj]
    if not isinstance(obj, dict) or schema.get("type") != "object":
        return obj
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields")
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if k in props:
            sub = props[k]
            if v is None and not sub.get("nullable"):
                if "default" in sub:
                    out[k] = _prune_and_default(copy.deepcopy(sub["default"]), sub)
                continue
            if at_root and k == "metadata":
                out[k] = v  # ObjectMeta is the apiserver's own, never pruned here
                continue
            out[k] = _prune_and_default(v, sub)
        elif isinstance(extra, dict):
            if v is None and not extra.get("nullable") and "default" not in extra:
                continue  # a map value's null goes too (defaulting.PruneNonNullableNullsWithoutDefaults)
            out[k] = _prune_and_default(v, extra)
        elif keep_unknown:
            out[k] = v
    for k, sub in props.items():
        if k not in out and "default" in sub:
            out[k] = _prune_and_default(copy.deepcopy(sub["default"]), sub)
    return out


def _path(parts) -> str:
    s = ""
    for p in parts:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s


def _nodes(obj: Any, schema: dict[str, Any], path: str = ""):
    """Every (value, its schema, its path) in ``obj``, depth first, nulls skipped."""
    yield obj, schema, path
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, x in enumerate(obj):
            yield from _nodes(x, schema["items"], f"{path}[{i}]")
    elif isinstance(obj, dict) and schema.get("type") == "object":
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            sub = props.get(k) or (extra if isinstance(extra, dict) else None)
            if sub and v is not None:
                yield from _nodes(v, sub, f"{path}.{k}")


def _list_map_errors(obj: Any, schema: dict[str, Any]) -> list[str]:
    errs: list[str] = []
    for value, node, path in _nodes(obj, schema):
        if isinstance(value, list) and node.get("x-kubernetes-list-type") == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            seen = set()
            for i, x in enumerate(value):
                if isinstance(x, dict):
                    key = tuple(repr(x.get(k)) for k in keys)
                    if key in seen:
                        errs.append(f"{path}[{i}]: Duplicate value: {dict(zip(keys, key))}")
                    seen.add(key)
    return errs


def _split(s: Any, sep: Any) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(x) for x in str(s).split(str(sep))])


_CEL = celpy.Environment()


@functools.lru_cache(maxsize=None)
def _program(expr: str):
    return _CEL.program(_CEL.compile(expr), functions={"split": _split})


def _cel_true(expr: str, value: Any) -> Optional[bool]:
    """True/False, or None when evaluation errs (the apiserver refuses the object then)."""
    try:
        out = _program(expr).evaluate({"self": celpy.json_to_cel(value)})
    except Exception:  # noqa: BLE001 - any evaluation error is a refusal, as in the apiserver
        return None
    return bool(out) if isinstance(out, celtypes.BoolType) else None


def _cel_message(rule: dict[str, Any], value: Any) -> str:
    if "messageExpression" in rule:
        try:
            return str(_program(rule["messageExpression"]).evaluate({"self": celpy.json_to_cel(value)}))
        except Exception:  # noqa: BLE001
            return rule.get("message", rule["rule"])
    return rule.get("message", rule["rule"])


def _cel_errors(obj: Any, schema: dict[str, Any]) -> list[str]:
    errs: list[str] = []
    for value, node, path in _nodes(obj, schema):
        for rule in node.get("x-kubernetes-validations") or []:
            if "oldSelf" not in rule["rule"] and _cel_true(rule["rule"], value) is not True:
                errs.append(f"{path}: Invalid value: {_cel_message(rule, value)}")
    return errs


def _go_roundtrip(obj: Any) -> Any:
    if isinstance(obj, float) and obj.is_integer() and abs(obj) < 2**63:
        return int(obj)
    if isinstance(obj, list):
        return [_go_roundtrip(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _go_roundtrip(v) for k, v in obj.items()}
    return obj


def stored_form(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the apiserver turns it into what it stores, before it validates: a Go
    JSON round trip, unknown fields pruned, nulls in fields that are not ``nullable``
    dropped (or replaced by the default), defaults applied. What the operator would read
    if the CRD's rules let ``obj`` through (an older CRD, or none)."""
    return _prune_and_default(_go_roundtrip(copy.deepcopy(obj)), crd_schema(), at_root=True)


def admit(obj: dict[str, Any]) -> tuple[Optional[dict[str, Any]], list[str]]:
    """Create ``obj`` (a DistTrainingJob as kubectl would send it). Returns the object as
    stored (:func:`stored_form`) and no errors, or None and the apiserver-style errors."""
    name = (obj.get("metadata") or {}).get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        return None, [f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain"]
    schema = crd_schema()
    stored = stored_form(obj)
    errs = [f"{_path(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(stored)]
    if errs:  # the apiserver runs CEL only on a schema-valid object
        return None, errs
    errs = _list_map_errors(stored, schema) + _cel_errors(stored, schema)
    return (None, errs) if errs else (stored, [])
