"""The pod template's typed parts: the fields of a core/v1 PodTemplateSpec the operator
reads or extends, as pydantic models.

One source of truth, two uses: :mod:`disttrain.api.crdgen` turns these models into the CRD's
schema for ``spec.template`` (so ``kubectl apply`` refuses a string ``command``, a list
``affinity`` or a malformed quantity, naming the field), and :class:`PodTemplate`
validates the same shapes in Python, with errors that name the full field path
(``spec.template.spec.containers[0].command``, see :func:`disttrain.api.types.spec_error_message`).

Every object keeps its other fields (``extra="allow"`` here,
``x-kubernetes-preserve-unknown-fields`` in the CRD), so the rest of a PodTemplateSpec
passes through to the pods untouched. Validation is strict (JSON types must match:
``"true"`` is not a boolean, ``1`` is not a string), as the apiserver's is. A null is
treated as absent, as the apiserver drops it before validating. After validation the
template is kept as the plain dict that was given: the builders copy it into pods.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StrictInt,
    StringConstraints,
    WithJsonSchema,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonDict

from disttrain.api import constants

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
MAX_MAP_ENTRIES = 64  # labels, annotations, nodeSelector (bounds the CEL rule's cost)
MAX_CONTAINERS = 16

LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]
# Integers as the Pod API types them: int64 and int32 fields, user and group IDs (0 to
# 2**31-1, apimachinery's IsValidUserID/IsValidGroupID), ports.
INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX = -(2**63), 2**63 - 1, -(2**31), 2**31 - 1
Int64 = Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)]
Int32 = Annotated[StrictInt, Field(ge=INT32_MIN, le=INT32_MAX)]
LinuxID = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]


def _quantity(value: Any) -> Union[int, str]:
    if type(value) is int:
        if value < 0:
            raise ValueError("a quantity must not be negative")
        return value
    if isinstance(value, str) and re.fullmatch(QUANTITY_PATTERN, value):
        return value
    raise ValueError(f"{str(value)[:40]!r} is not a quantity: write an integer or a string such as "
                     '"2", "500m", "4Gi" (a fraction as a string: "0.5")')


Quantity = Annotated[
    Union[int, str],
    PlainValidator(_quantity),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0},
                              {"type": "string", "pattern": QUANTITY_PATTERN}]}),
]
DnsLabel = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)]


def _qualified_keys_rule(what: str) -> dict[str, Any]:
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


def _check_keys(value: Optional[dict[str, Any]], what: str) -> Optional[dict[str, Any]]:
    for k in value or {}:
        if not qualified_name_ok(k):
            raise ValueError(f"{what} key {k[:80]!r} is not a qualified name ([prefix/]name: name "
                             "at most 63 characters of letters, digits, '-', '_', '.', starting "
                             "and ending with a letter or digit; prefix a lowercase DNS "
                             "subdomain of at most 253)")
    return value


class _K8s(BaseModel):
    """A Kubernetes object shape: camelCase only, strict JSON types, other fields kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, extra="allow",
                              strict=True)


def _unique(items: Optional[list[Any]], key: str, what: str) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items or []):
        value = getattr(item, key)
        if value in seen:
            raise ValueError(f"{what}[{i}].{key} {value!r} is used twice; names must be unique")
        seen.add(value)


_LIST_MAP_BY_NAME: JsonDict = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}


class EnvVar(_K8s):
    """One environment variable: a literal ``value`` or a ``valueFrom`` source."""

    name: str = Field(min_length=1, max_length=256)
    value: Optional[str] = None
    value_from: Optional[dict[str, Any]] = None

    @model_validator(mode="after")
    def _one_source(self) -> "EnvVar":
        if self.value and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


_ONE_SOURCE_RULE: JsonDict = {"rule": "!has(self.valueFrom) || !has(self.value) || self.value == ''",
                    "messageExpression": "'env ' + self.name + ': set value or valueFrom, not both'"}
EnvVar.model_config["json_schema_extra"] = {"x-kubernetes-validations": [_ONE_SOURCE_RULE]}
EnvVar.model_rebuild(force=True)


def _reserved_env_message(name: str) -> str:
    return f"env {name} is set by the operator (it owns rank and rendezvous variables); remove it"


class TrainerEnvVar(EnvVar):
    """An environment variable of a container the operator starts: rank and rendezvous
    variables (``RANK``, ``MASTER_ADDR``, ``PET_*``, ...) are the operator's."""

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name in constants.RESERVED_ENV or name.startswith(constants.RESERVED_ENV_PREFIX):
            raise ValueError(_reserved_env_message(name))
        return name


TrainerEnvVar.model_config["json_schema_extra"] = {"x-kubernetes-validations": [
    _ONE_SOURCE_RULE,
    {
        "rule": "!(self.name in [" + ", ".join(f"'{n}'" for n in constants.RESERVED_ENV) + "]) && "
        f"!self.name.startsWith('{constants.RESERVED_ENV_PREFIX}')",
        "messageExpression": "'env ' + self.name + ' is set by the operator (it owns rank and "
        "rendezvous variables); remove it'",
    },
]}
TrainerEnvVar.model_rebuild(force=True)


class ResourceRequirements(_K8s):
    """Compute resources; quantities as Kubernetes writes them (2, "500m", "4Gi"; a plain
    number must be an integer: write 0.5 as "0.5" or "500m")."""

    limits: Optional[dict[str, Quantity]] = None
    requests: Optional[dict[str, Quantity]] = None


class VolumeMount(_K8s):
    """A volume mounted into a container."""

    name: str = Field(min_length=1)
    mount_path: str = Field(min_length=1)
    read_only: Optional[bool] = None
    sub_path: Optional[str] = None


class Capabilities(_K8s):
    """Linux capabilities added to or dropped from a container."""

    add: Optional[list[str]] = None
    drop: Optional[list[str]] = None


class SecurityContext(_K8s):
    """A container's security context (the probe copies the trainer's); user and group IDs
    0 to 2147483647, as the Pod API takes them."""

    privileged: Optional[bool] = None
    run_as_user: Optional[LinuxID] = None
    run_as_group: Optional[LinuxID] = None
    run_as_non_root: Optional[bool] = None
    read_only_root_filesystem: Optional[bool] = None
    allow_privilege_escalation: Optional[bool] = None
    capabilities: Optional[Capabilities] = None


class ContainerPort(_K8s):
    """A port of a container: ``containerPort`` 1-65535, ``hostPort`` 0 (none) to 65535."""

    container_port: Port
    host_port: Optional[Annotated[StrictInt, Field(ge=0, le=65535)]] = None
    protocol: Optional[Literal["TCP", "UDP", "SCTP"]] = None
    name: Optional[str] = Field(None, max_length=15)
    host_ip: Optional[str] = Field(None, alias="hostIP")


class InitContainer(_K8s):
    """A container of the pod (the shape the operator reads and copies); its scalar fields
    typed as the Pod API types them, so a wrong type is refused at apply."""

    name: DnsLabel
    image: Optional[str] = None
    command: Optional[list[str]] = Field(
        None, description="The entrypoint, one argument per item (a list, not a shell string).")
    args: Optional[list[str]] = Field(None, description="Arguments, one per item.")
    working_dir: Optional[str] = None
    env: Optional[list[EnvVar]] = Field(None, max_length=256)
    env_from: Optional[list[dict[str, Any]]] = None
    resources: Optional[ResourceRequirements] = None
    volume_mounts: Optional[list[VolumeMount]] = Field(
        None, json_schema_extra={"x-kubernetes-list-type": "map",
                                 "x-kubernetes-list-map-keys": ["mountPath"]})
    security_context: Optional[SecurityContext] = None
    image_pull_policy: Optional[Literal["Always", "IfNotPresent", "Never"]] = None
    ports: Optional[list[ContainerPort]] = None
    stdin: Optional[bool] = None
    stdin_once: Optional[bool] = None
    tty: Optional[bool] = None
    termination_message_path: Optional[str] = None
    termination_message_policy: Optional[Literal["File", "FallbackToLogsOnError"]] = None

    @model_validator(mode="after")
    def _unique_mounts(self) -> "InitContainer":
        _unique(self.volume_mounts, "mount_path", "volumeMounts")
        return self


class Container(InitContainer):
    """A container; the first one runs training and gets the rendezvous environment."""

    # a narrower item type than InitContainer's (a list is invariant to mypy; pydantic
    # validates this field on its own)
    env: Optional[list[TrainerEnvVar]] = Field(None, max_length=256)  # type: ignore[assignment]


class Volume(_K8s):
    """A pod volume (its source is passed through as written)."""

    name: DnsLabel

    @field_validator("name")
    @classmethod
    def _not_probe_volume(cls, name: str) -> str:
        if name == constants.PROBE_VOLUME:
            raise ValueError(f"volume name {name} is the operator's (the probe program's volume); rename it")
        return name


Volume.model_config["json_schema_extra"] = {"x-kubernetes-validations": [{
    "rule": f"self.name != '{constants.PROBE_VOLUME}'",
    "message": f"volume name {constants.PROBE_VOLUME} is the operator's (the probe program's volume); rename it",
}]}
Volume.model_rebuild(force=True)


class NodeSelectorRequirement(_K8s):
    """One node requirement: a label ``key``, an ``operator`` and its ``values``."""

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: Optional[list[str]] = None


class NodeSelectorTerm(_K8s):
    """Requirements ANDed together; terms are ORed."""

    match_expressions: Optional[list[NodeSelectorRequirement]] = None
    match_fields: Optional[list[NodeSelectorRequirement]] = None


class NodeSelector(_K8s):
    """Required node terms (at least one; ORed)."""

    node_selector_terms: list[NodeSelectorTerm] = Field(min_length=1)


class PreferredSchedulingTerm(_K8s):
    """A preferred node term with a ``weight`` of 1-100."""

    weight: StrictInt = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(_K8s):
    """The operator adds a kubernetes.io/hostname requirement to every required term."""

    required_during_scheduling_ignored_during_execution: Optional[NodeSelector] = None
    preferred_during_scheduling_ignored_during_execution: Optional[list[PreferredSchedulingTerm]] = None


class PodAffinityTerm(_K8s):
    """Pods (``labelSelector``) in a topology domain (``topologyKey``, required)."""

    label_selector: Optional[dict[str, Any]] = None
    namespace_selector: Optional[dict[str, Any]] = None
    namespaces: Optional[list[str]] = None
    topology_key: str = Field(min_length=1)


class WeightedPodAffinityTerm(_K8s):
    """A preferred pod (anti-)affinity term with a ``weight`` of 1-100."""

    weight: StrictInt = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(_K8s):
    """Pod (anti-)affinity; the operator appends one-per-node anti-affinity for probes."""

    required_during_scheduling_ignored_during_execution: Optional[list[PodAffinityTerm]] = None
    preferred_during_scheduling_ignored_during_execution: Optional[list[WeightedPodAffinityTerm]] = None


class Affinity(_K8s):
    """Node affinity and pod (anti-)affinity; the operator extends both."""

    node_affinity: Optional[NodeAffinity] = None
    pod_affinity: Optional[PodAffinity] = None
    pod_anti_affinity: Optional[PodAffinity] = None


class Toleration(_K8s):
    """A toleration of a node taint."""

    key: Optional[str] = None
    operator: Optional[Literal["Exists", "Equal"]] = None
    value: Optional[str] = None
    effect: Optional[Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"]] = None
    toleration_seconds: Optional[Int64] = None


class Sysctl(_K8s):
    """A namespaced kernel parameter for the pod, both fields strings."""

    name: str = Field(min_length=1)
    value: str


class PodSecurityContext(_K8s):
    """The pod's security context; the operator adds net.ipv4.ip_local_port_range to
    ``sysctls`` with network.portRange. User and group IDs 0 to 2147483647."""

    sysctls: Optional[list[Sysctl]] = None
    run_as_user: Optional[LinuxID] = None
    run_as_group: Optional[LinuxID] = None
    run_as_non_root: Optional[bool] = None
    fs_group: Optional[LinuxID] = None
    supplemental_groups: Optional[list[LinuxID]] = None


HOST_NETWORK_IN_TEMPLATE = (
    "spec.template.spec.hostNetwork is set by the operator from spec.network.hostNetwork "
    "(probe and training pods must share one network mode); remove it and set "
    "spec.network.hostNetwork instead"
)
INIT_NAME_CLASH = "an initContainer has the name of a container; names must be unique in a pod"


class PodSpec(_K8s):
    """A core/v1 PodSpec. containers[0] runs the training command."""

    containers: list[Container] = Field(
        min_length=1, max_length=MAX_CONTAINERS,
        description="Containers; the first one runs the training command.",
        json_schema_extra=_LIST_MAP_BY_NAME)
    init_containers: Optional[list[InitContainer]] = Field(
        None, max_length=MAX_CONTAINERS, json_schema_extra=_LIST_MAP_BY_NAME)
    volumes: Optional[list[Volume]] = Field(None, json_schema_extra=_LIST_MAP_BY_NAME)
    node_selector: Optional[dict[str, LabelValue]] = Field(
        None, max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [_qualified_keys_rule("nodeSelector")]})
    tolerations: Optional[list[Toleration]] = None
    affinity: Optional[Affinity] = None
    security_context: Optional[PodSecurityContext] = None
    host_network: Optional[bool] = None
    # Scalars of the Pod API, typed so that a wrong type (hostname: true) or an integer the
    # Pod API refuses is refused at apply, not when the operator creates the pods
    # (InvalidPodTemplate). restartPolicy and dnsPolicy may be replaced by the operator.
    hostname: Optional[DnsLabel] = None
    subdomain: Optional[DnsLabel] = None
    node_name: Optional[str] = None
    service_account_name: Optional[str] = None
    service_account: Optional[str] = None
    automount_service_account_token: Optional[bool] = None
    scheduler_name: Optional[str] = None
    priority_class_name: Optional[str] = None
    priority: Optional[Int32] = None
    preemption_policy: Optional[Literal["PreemptLowerPriority", "Never"]] = None
    runtime_class_name: Optional[str] = None
    restart_policy: Optional[Literal["Always", "OnFailure", "Never"]] = None
    dns_policy: Optional[Literal["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]] = None
    termination_grace_period_seconds: Optional[Int64] = Field(None, description="seconds")
    active_deadline_seconds: Optional[Annotated[StrictInt, Field(ge=1, le=INT32_MAX)]] = Field(
        None, description="seconds, 1 to 2147483647 as the Pod API takes them")
    host_pid: Optional[bool] = Field(None, alias="hostPID")
    host_ipc: Optional[bool] = Field(None, alias="hostIPC")
    share_process_namespace: Optional[bool] = None
    enable_service_links: Optional[bool] = None
    set_hostname_as_fqdn: Optional[bool] = Field(None, alias="setHostnameAsFQDN")
    host_users: Optional[bool] = None

    @field_validator("node_selector")
    @classmethod
    def _selector_keys(cls, v):
        return _check_keys(v, "nodeSelector")

    @model_validator(mode="after")
    def _pod_rules(self) -> "PodSpec":
        if self.host_network is not None:
            raise ValueError(HOST_NETWORK_IN_TEMPLATE)
        _unique(self.containers, "name", "containers")
        _unique(self.init_containers, "name", "initContainers")
        _unique(self.volumes, "name", "volumes")
        names = {x.name for x in self.containers}
        if any(x.name in names for x in self.init_containers or []):
            raise ValueError(INIT_NAME_CLASH)
        return self


PodSpec.model_config["json_schema_extra"] = {"x-kubernetes-validations": [
    {"rule": "!has(self.hostNetwork)", "message": HOST_NETWORK_IN_TEMPLATE},
    {"rule": "!has(self.initContainers) || "
             "self.initContainers.all(i, self.containers.all(x, x.name != i.name))",
     "message": INIT_NAME_CLASH},
]}
PodSpec.model_rebuild(force=True)


class TemplateMetadata(_K8s):
    """Labels and annotations copied to every pod."""

    labels: Optional[dict[str, LabelValue]] = Field(
        None, max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [_qualified_keys_rule("labels")]})
    annotations: Optional[dict[str, str]] = Field(
        None, max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [_qualified_keys_rule("annotations")]})

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, v):
        return _check_keys(v, "labels")

    @field_validator("annotations")
    @classmethod
    def _annotation_keys(cls, v):
        return _check_keys(v, "annotations")


def _keep_input(value: Any, handler: Any) -> Any:
    """Validate with the typed model, then keep the plain dict that was given."""
    handler(value)
    return value


_AS_GIVEN = PlainSerializer(lambda v: v, return_type=dict)


class PodTemplate(BaseModel):
    """A PodTemplateSpec for one node's pod (metadata + spec); only ``spec.containers`` is
    required. The first container is the trainer; the operator injects rendezvous
    environment into it. The fields the operator reads are typed (see this module); all
    others (serviceAccountName, annotations such as Multus networks, ...) pass through.
    ``metadata`` and ``spec`` are the plain dicts given, after validation."""

    model_config = ConfigDict(extra="allow", strict=True)

    if TYPE_CHECKING:  # what the fields hold: the plain dicts given (see _keep_input)
        metadata: dict[str, Any]
        spec: dict[str, Any]
    else:  # what pydantic validates them as (and the CRD's schema describes)
        metadata: Annotated[TemplateMetadata, WrapValidator(_keep_input), _AS_GIVEN] = Field(
            default_factory=dict, description="Labels and annotations copied to every pod.")
        spec: Annotated[PodSpec, WrapValidator(_keep_input), _AS_GIVEN] = Field(
            description="A core/v1 PodSpec. spec.containers[0] runs the training command.")

    @field_validator("metadata", mode="before")
    @classmethod
    def _null_metadata(cls, v: Any) -> Any:
        return {} if v is None else v
