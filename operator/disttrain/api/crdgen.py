"""Generate the DistTrainingJob CRD from the pydantic models.

No mature library turns pydantic v2 models into a *structural* OpenAPI v3 schema, so this
is a small post-processor over ``Model.model_json_schema(by_alias=True)`` in the manner of
kube-rs's ``StructuralSchemaRewriter``:

- every ``$ref``/``$defs`` is inlined and ``title`` stripped;
- ``Optional[T]`` (anyOf with null) becomes ``T`` with ``nullable: true``; null defaults go;
- ``Literal``/``const`` becomes a one-value ``enum``; ``int | "auto"`` and quantities
  (``int | str`` with a pattern) become ``x-kubernetes-int-or-string: true``, keeping the
  variants' constraints;
- free-form dicts keep ``type: object`` with ``x-kubernetes-preserve-unknown-fields: true``,
  and so do models that allow extra fields (the pod template's typed parts, see
  :mod:`disttrain.api.podtemplate`): their other fields are preserved, not pruned;
- optional nested objects get ``default: {}`` so the apiserver fills their defaults too,
  except under the pod template, which has no defaults;
- the spec has no ``nullable``: a null anywhere in it is dropped by the apiserver (or
  replaced by the field's default) before validation, so the CEL rules never see one and
  null means unset, as it does to the operator's models (``None`` is the unset default of
  every ``Optional`` spec field). With ``nullable`` the apiserver kept the null, ``has()``
  was true for it, and a rule and the operator disagreed (``network.subdomain: null``).
  The status keeps ``nullable``: the operator writes nulls there;
- CEL rules given in ``json_schema_extra`` ride along as ``x-kubernetes-validations``, and
  the job-name rules (:data:`disttrain.api.jobname.NAME_RULES`) sit at the root, where
  ``self.metadata.name`` is visible.

Run ``python -m disttrain.crdgen > crds/disttrain.dev_disttrainingjobs.yaml``; a unit test
fails when the checked-in file and the models disagree.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml
from pydantic import BaseModel

from disttrain.api import constants
from disttrain.api.jobname import name_rules_cel
from disttrain.api.types import DistTrainingJobSpec, DistTrainingJobStatus

_DROP_KEYS = {"title", "$defs", "discriminator"}
# Constraints a variant of an int-or-string union may carry (they apply to its own type).
_VARIANT_KEYS = ("pattern", "minimum", "maximum", "minLength", "maxLength")


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
            extra = {k: v for k, v in node.items() if k != "$ref"}
            target.update(extra)
            return _resolve(target, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one (already inlined) JSON-schema node into a structural schema node."""
    node = dict(node)
    # Optional[T] -> T + nullable; int | "auto" -> int-or-string.
    for key in ("anyOf", "oneOf"):
        if key in node:
            variants = node.pop(key)
            non_null = [v for v in variants if v.get("type") != "null"]
            nullable = len(non_null) != len(variants)
            types = {v.get("type") for v in non_null}
            if len(non_null) == 1:
                merged = dict(non_null[0])
                for k, v in node.items():
                    merged.setdefault(k, v)
                node = merged
            elif types == {"integer", "string"}:
                node["x-kubernetes-int-or-string"] = True
                for v in non_null:
                    for k in _VARIANT_KEYS:
                        if k in v:
                            node.setdefault(k, v[k])
            else:  # pragma: no cover - the models use no other unions
                raise ValueError(f"unsupported union in CRD schema: {variants}")
            if nullable:
                node["nullable"] = True
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("default", 0) is None:
        node.pop("default")
    for key in _DROP_KEYS:
        node.pop(key, None)
    # The apiserver reads a schema's bounds as float64: 2**63-1 becomes 9223372036854776000,
    # "not of type integer", and every value of the field is refused. An int64 field needs
    # no bound in the CRD (the apiserver parses integers as int64 already).
    for key, edge in (("maximum", 2**63 - 1), ("minimum", -(2**63))):
        if node.get(key) == edge:
            node.pop(key)
    extra = node.pop("additionalProperties", None)
    if node.get("type") == "object" and isinstance(extra, dict) and extra and not node.get("properties"):
        node["additionalProperties"] = _structural(extra)  # a map, e.g. phase -> seconds
        return node
    if node.get("type") == "object":
        props = node.get("properties")
        if props:
            node["properties"] = {k: _structural(v) for k, v in props.items()}
            if extra is True:  # a model with extra="allow": its other fields are kept
                node["x-kubernetes-preserve-unknown-fields"] = True
            required = set(node.get("required", []))
            for name, prop in node["properties"].items():
                if (
                    name not in required
                    and prop.get("type") == "object"
                    and "properties" in prop
                    and "default" not in prop
                ):
                    prop["default"] = {}
        else:
            node["x-kubernetes-preserve-unknown-fields"] = True
    if node.get("type") == "array" and "items" in node:
        node["items"] = _structural(node["items"])
    return node


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of a pydantic model (see the module docstring)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return _structural(_resolve(raw, defs))


def _without(node: Any, keys: tuple[str, ...]) -> Any:
    """The schema ``node`` with the keywords ``keys`` removed at every level (a property
    that happens to be named like one is kept)."""
    if isinstance(node, list):
        return [_without(v, keys) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "properties":
            out[k] = {name: _without(sub, keys) for name, sub in v.items()}
        elif k not in keys:
            out[k] = _without(v, keys)
    return out


def _description(model: type[BaseModel]) -> str:
    """The model's docstring, stripped: the CRD's description of it."""
    if model.__doc__ is None:  # python -OO drops docstrings; the CRD would lose its descriptions
        raise RuntimeError(f"{model.__name__} has no docstring (python -OO?)")
    return model.__doc__.strip()


# The columns of ``kubectl get dtj``.
PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.numNodes"},
    {
        "name": "Interface",
        "type": "string",
        "jsonPath": ".status.rendezvous.socketIfname",
    },
    {"name": "NCCL", "type": "string", "jsonPath": ".status.nodes[0].nccl"},
    {
        "name": "Bus BW",
        "type": "number",
        "format": "float",
        "description": "all-reduce busbw in GB/s",
        "jsonPath": ".status.probe.busBandwidthGBps",
    },
    {
        "name": "Progress",
        "type": "string",
        "description": "collective #seq; the stall's reason and culprit",
        "jsonPath": ".status.progress.summary",
    },
    {
        "name": "Age",
        "type": "date",
        "jsonPath": ".metadata.creationTimestamp",
    },
]


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition as a dict (apiextensions.k8s.io/v1)."""
    # No null is kept in the spec (the apiserver drops it: unset), and Kubernetes' own shapes
    # in the pod template have no defaults.
    spec_schema = _without(model_schema(DistTrainingJobSpec), ("nullable",))
    spec_schema["properties"]["template"] = _without(spec_schema["properties"]["template"], ("default",))
    spec_schema["description"] = _description(DistTrainingJobSpec)
    status_schema = model_schema(DistTrainingJobStatus)
    status_schema["description"] = _description(DistTrainingJobStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{constants.PLURAL}.{constants.GROUP}"},
        "spec": {
            "group": constants.GROUP,
            "names": {
                "kind": constants.KIND,
                "listKind": f"{constants.KIND}List",
                "plural": constants.PLURAL,
                "singular": constants.SINGULAR,
                "shortNames": list(constants.SHORT_NAMES),
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": constants.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A multi-node PyTorch training job that runs only "
                            "after a preflight probe proves the nodes can train together.",
                            "required": ["spec"],
                            "x-kubernetes-validations": name_rules_cel(),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                # name is declared so the name rules can point at it
                                # (fieldPath); only name/generateName may be.
                                "metadata": {"type": "object",
                                             "properties": {"name": {"type": "string",
                                                                     "maxLength": 253}}},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def render() -> str:
    """The CRD as YAML text, with a header saying it is generated."""
    header = ("# Generated by `python -m disttrain.crdgen` from the models in operator/disttrain/api/\n"
              "# (types.py, status.py, common.py, jobname.py, podtemplate.py, containers.py, k8sbase.py).\n"
              "# Do not edit.\n")
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
