"""The shared vocabulary of the pod template's models (:mod:`disttrain.api.podtemplate`,
:mod:`disttrain.api.containers`): Kubernetes' name, label and quantity patterns, the
integer ranges of the Pod API, the strict camelCase base model, and the checks of map keys
and of unique names the models share."""
from __future__ import annotations

import re
from typing import Annotated, Any, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictInt,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict

# Kubernetes' own patterns (apimachinery validation), anchored.
DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A qualified name (label and annotation keys): an optional DNS-subdomain prefix and "/",
# then a name of at most 63 characters; the prefix is at most 253 (QUALIFIED_PREFIX_PATTERN).
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
QUALIFIED_PREFIX_PATTERN = r"^[^/]{1,253}/"
# resource.Quantity as controller-gen writes it, without the sign: a pod's resources
# must not be negative.
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
MAX_MAP_ENTRIES = 64  # labels, annotations, nodeSelector, resources (bounds the CEL rules' cost)
MAX_QUANTITY_LENGTH = 64  # characters of a quantity string (bounds the CEL rules' cost)
MAX_CONTAINERS = 16

LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]
# Integers as the Pod API types them: int64 and int32 fields, user and group IDs (0 to
# 2**31-1, apimachinery's IsValidUserID/IsValidGroupID), ports.
INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX = -(2**63), 2**63 - 1, -(2**31), 2**31 - 1
Int64 = Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)]
Int32 = Annotated[StrictInt, Field(ge=INT32_MIN, le=INT32_MAX)]
LinuxID = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]


def quantity_value(value: Any) -> Union[int, str]:
    if type(value) is int:
        if value < 0:
            raise ValueError("a quantity must not be negative")
        return value
    if isinstance(value, str) and len(value) <= MAX_QUANTITY_LENGTH and re.fullmatch(QUANTITY_PATTERN, value):
        return value
    raise ValueError(f"{str(value)[:40]!r} is not a quantity: write an integer or a string such as "
                     '"2", "500m", "4Gi" (a fraction as a string: "0.5")')


Quantity = Annotated[
    Union[int, str],
    PlainValidator(quantity_value),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0},
                              {"type": "string", "pattern": QUANTITY_PATTERN,
                               "maxLength": MAX_QUANTITY_LENGTH}]}),
]
DnsLabel = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)]


def qualified_keys_rule(what: str) -> dict[str, Any]:
    """The CEL rule that checks every key of a map is a qualified name."""
    return {
        "rule": f"self.all(k, k.matches('{QUALIFIED_NAME_PATTERN}') && "
        f"(!k.contains('/') || k.matches('{QUALIFIED_PREFIX_PATTERN}')))",
        "message": f"{what} keys must be qualified names ([prefix/]name: name at most 63 "
        "characters of letters, digits, '-', '_', '.', starting and ending with a letter or "
        "digit; prefix a lowercase DNS subdomain of at most 253)",
    }


def qualified_name_ok(key: str) -> bool:
    """Whether ``key`` is a Kubernetes qualified name (a valid label or annotation key)."""
    return bool(re.fullmatch(QUALIFIED_NAME_PATTERN, key)) and (
        "/" not in key or bool(re.match(QUALIFIED_PREFIX_PATTERN, key))
    )


def check_keys(value: Optional[dict[str, Any]], what: str) -> Optional[dict[str, Any]]:
    for k in value or {}:
        if not qualified_name_ok(k):
            raise ValueError(f"{what} key {k[:80]!r} is not a qualified name ([prefix/]name: name "
                             "at most 63 characters of letters, digits, '-', '_', '.', starting "
                             "and ending with a letter or digit; prefix a lowercase DNS "
                             "subdomain of at most 253)")
    return value


class K8sModel(BaseModel):
    """A Kubernetes object shape: camelCase only, strict JSON types, other fields kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, extra="allow",
                              strict=True)


def require_unique(items: Optional[list[Any]], key: str, what: str) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items or []):
        value = getattr(item, key)
        if value in seen:
            raise ValueError(f"{what}[{i}].{key} {value!r} is used twice; names must be unique")
        seen.add(value)


LIST_MAP_BY_NAME: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
