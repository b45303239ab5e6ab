"""Generate the DistTrainingJob CRD from the pydantic models.

No mature library turns pydantic v2 models into a *structural* OpenAPI v3 schema, so this
is a small post-processor over ``Model.model_json_schema(by_alias=True)`` in the manner of
kube-rs's ``StructuralSchemaRewriter``:

- every ``$ref``/``$defs`` is inlined and ``title`` stripped;
- ``Optional[T]`` (anyOf with null) becomes ``T`` with ``nullable: true``; null defaults go;
- ``Literal``/``const`` becomes a one-value ``enum``; ``int | "auto"`` becomes
  ``x-kubernetes-int-or-string: true``;
- free-form dicts (the pod template's metadata and spec) keep ``type: object`` with
  ``x-kubernetes-preserve-unknown-fields: true``;
- optional nested objects get ``default: {}`` so the apiserver fills their defaults too;
- CEL rules given in ``json_schema_extra`` ride along as ``x-kubernetes-validations``.

Run ``python -m disttrain.crdgen > crds/disttrain.dev_disttrainingjobs.yaml``; a unit test
fails when the checked-in file and the models disagree.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml

from . import constants as c
from .api import HOST_NETWORK_IN_TEMPLATE, DistTrainingJobSpec, DistTrainingJobStatus

_DROP_KEYS = {"title", "$defs", "discriminator"}


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
            elif types <= {"integer", "string"} and types == {"integer", "string"}:
                node["x-kubernetes-int-or-string"] = True
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
    extra = node.pop("additionalProperties", None)
    if node.get("type") == "object" and isinstance(extra, dict) and not node.get("properties"):
        node["additionalProperties"] = _structural(extra)  # a map, e.g. phase -> seconds
        return node
    if node.get("type") == "object":
        props = node.get("properties")
        if props:
            node["properties"] = {k: _structural(v) for k, v in props.items()}
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


def model_schema(model: type) -> dict[str, Any]:
    """Structural OpenAPI v3 schema of a pydantic model (see the module docstring)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    return _structural(_resolve(raw, defs))


def _template_schema() -> dict[str, Any]:
    # The pod template is free-form (a core/v1 PodTemplateSpec) except for the parts the
    # operator needs: spec.containers with at least one named container.
    return {
        "type": "object",
        "description": "PodTemplateSpec for one node's pod. spec.containers[0] runs training.",
        "required": ["spec"],
        "properties": {
            "metadata": {
                "type": "object",
                "description": "Labels and annotations copied to every pod.",
                "x-kubernetes-preserve-unknown-fields": True,
            },
            "spec": {
                "type": "object",
                "description": "A core/v1 PodSpec.",
                "required": ["containers"],
                "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-validations": [
                    {"rule": "!has(self.hostNetwork)", "message": HOST_NETWORK_IN_TEMPLATE},
                ],
                "properties": {
                    "hostNetwork": {"type": "boolean"},
                    "containers": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 16,
                        "description": "Containers; the first one runs the training command.",
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "x-kubernetes-preserve-unknown-fields": True,
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "env": {
                                    "type": "array",
                                    "maxItems": 256,
                                    "items": {
                                        "type": "object",
                                        "required": ["name"],
                                        "x-kubernetes-preserve-unknown-fields": True,
                                        "properties": {"name": {"type": "string", "maxLength": 256}},
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "!(self.name in "
                                                + "["
                                                + ", ".join(f"'{n}'" for n in c.RESERVED_ENV)
                                                + "]) && !self.name.startsWith('"
                                                + c.RESERVED_ENV_PREFIX
                                                + "')",
                                                "messageExpression": "'env ' + self.name + "
                                                "' is set by the operator (it owns rank and "
                                                "rendezvous variables); remove it'",
                                            }
                                        ],
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    }


def build_crd() -> dict[str, Any]:
    """The CustomResourceDefinition as a dict (apiextensions.k8s.io/v1)."""
    spec_schema = model_schema(DistTrainingJobSpec)
    spec_schema["properties"]["template"] = _template_schema()
    spec_schema["description"] = DistTrainingJobSpec.__doc__.strip()
    status_schema = model_schema(DistTrainingJobStatus)
    status_schema["description"] = DistTrainingJobStatus.__doc__.strip()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{c.PLURAL}.{c.GROUP}"},
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
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
                            "name": "Age",
                            "type": "date",
                            "jsonPath": ".metadata.creationTimestamp",
                        },
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A multi-node PyTorch training job that runs only "
                            "after a preflight probe proves the nodes can train together.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
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
    header = "# Generated by `python -m disttrain.crdgen` from operator/disttrain/api.py. Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
