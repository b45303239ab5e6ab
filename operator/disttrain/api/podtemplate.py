"""The pod template's typed parts: the fields of a core/v1 PodTemplateSpec the operator
reads or extends, as pydantic models. Here the pod spec, its scheduling fields (affinity,
tolerations, security context) and the template; the containers and volumes are
:mod:`disttrain.api.containers`, the shared patterns and base model :mod:`disttrain.api.k8sbase`.

One source of truth, two uses: :mod:`disttrain.api.crdgen` turns these models into the CRD's
schema for ``spec.template`` (so ``kubectl apply`` refuses a string ``command``, a list
``affinity`` or a malformed quantity, naming the field), and :class:`PodTemplate`
validates the same shapes in Python, with errors that name the full field path
(``spec.template.spec.containers[0].command``, see :func:`disttrain.api.fieldpath.spec_error_message`).

Every object keeps its other fields (``extra="allow"`` here,
``x-kubernetes-preserve-unknown-fields`` in the CRD), so the rest of a PodTemplateSpec
passes through to the pods untouched. Validation is strict (JSON types must match:
``"true"`` is not a boolean, ``1`` is not a string), as the apiserver's is. A null is
treated as absent, as the apiserver drops it before validating. After validation the
template is kept as the plain dict that was given: the builders copy it into pods.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictInt,
    WrapValidator,
    field_validator,
    model_validator,
)

from disttrain.api.containers import Container, InitContainer, Volume
from disttrain.api.k8sbase import (
    INT32_MAX,
    LIST_MAP_BY_NAME,
    MAX_CONTAINERS,
    MAX_MAP_ENTRIES,
    DnsLabel,
    Int32,
    Int64,
    K8sModel,
    LabelValue,
    LinuxID,
    check_keys,
    qualified_keys_rule,
    require_unique,
)


class NodeSelectorRequirement(K8sModel):
    """One node requirement: a label ``key``, an ``operator`` and its ``values``."""

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: Optional[list[str]] = None


class NodeSelectorTerm(K8sModel):
    """Requirements ANDed together; terms are ORed."""

    match_expressions: Optional[list[NodeSelectorRequirement]] = None
    match_fields: Optional[list[NodeSelectorRequirement]] = None


class NodeSelector(K8sModel):
    """Required node terms (at least one; ORed)."""

    node_selector_terms: list[NodeSelectorTerm] = Field(min_length=1)


class PreferredSchedulingTerm(K8sModel):
    """A preferred node term with a ``weight`` of 1-100."""

    weight: StrictInt = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(K8sModel):
    """The operator adds a kubernetes.io/hostname requirement to every required term."""

    required_during_scheduling_ignored_during_execution: Optional[NodeSelector] = None
    preferred_during_scheduling_ignored_during_execution: Optional[list[PreferredSchedulingTerm]] = None


class PodAffinityTerm(K8sModel):
    """Pods (``labelSelector``) in a topology domain (``topologyKey``, required)."""

    label_selector: Optional[dict[str, Any]] = None
    namespace_selector: Optional[dict[str, Any]] = None
    namespaces: Optional[list[str]] = None
    topology_key: str = Field(min_length=1)


class WeightedPodAffinityTerm(K8sModel):
    """A preferred pod (anti-)affinity term with a ``weight`` of 1-100."""

    weight: StrictInt = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(K8sModel):
    """Pod (anti-)affinity; the operator appends one-per-node anti-affinity for probes."""

    required_during_scheduling_ignored_during_execution: Optional[list[PodAffinityTerm]] = None
    preferred_during_scheduling_ignored_during_execution: Optional[list[WeightedPodAffinityTerm]] = None


class Affinity(K8sModel):
    """Node affinity and pod (anti-)affinity; the operator extends both."""

    node_affinity: Optional[NodeAffinity] = None
    pod_affinity: Optional[PodAffinity] = None
    pod_anti_affinity: Optional[PodAffinity] = None


class Toleration(K8sModel):
    """A toleration of a node taint."""

    key: Optional[str] = None
    operator: Optional[Literal["Exists", "Equal"]] = None
    value: Optional[str] = None
    effect: Optional[Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"]] = None
    toleration_seconds: Optional[Int64] = None


class Sysctl(K8sModel):
    """A namespaced kernel parameter for the pod, both fields strings."""

    name: str = Field(min_length=1)
    value: str


class PodSecurityContext(K8sModel):
    """The pod's security context; the operator adds net.ipv4.ip_local_port_range to
    ``sysctls`` with network.portRange. User and group IDs 0 to 2147483647."""

    sysctls: Optional[list[Sysctl]] = Field(None, max_length=MAX_MAP_ENTRIES)
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


class PodSpec(K8sModel):
    """A core/v1 PodSpec. One container runs the training command (the trainer, see
    spec.trainerContainer); the others are sidecars."""

    containers: list[Container] = Field(
        min_length=1, max_length=MAX_CONTAINERS,
        description="Containers: the trainer (the only one, the one spec.trainerContainer "
        "names, or the one named trainer, pytorch or node) and sidecars, in any order.",
        json_schema_extra=LIST_MAP_BY_NAME)
    init_containers: Optional[list[InitContainer]] = Field(
        None, max_length=MAX_CONTAINERS, json_schema_extra=LIST_MAP_BY_NAME)
    volumes: Optional[list[Volume]] = Field(None, json_schema_extra=LIST_MAP_BY_NAME)
    node_selector: Optional[dict[str, LabelValue]] = Field(
        None, max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [qualified_keys_rule("nodeSelector")]})
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
        return check_keys(v, "nodeSelector")

    @model_validator(mode="after")
    def _pod_rules(self) -> "PodSpec":
        if self.host_network is not None:
            raise ValueError(HOST_NETWORK_IN_TEMPLATE)
        require_unique(self.containers, "name", "containers")
        require_unique(self.init_containers, "name", "initContainers")
        require_unique(self.volumes, "name", "volumes")
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


class TemplateMetadata(K8sModel):
    """Labels and annotations copied to every pod."""

    labels: Optional[dict[str, LabelValue]] = Field(
        None, max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [qualified_keys_rule("labels")]})
    annotations: Optional[dict[str, str]] = Field(
        None, max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [qualified_keys_rule("annotations")]})

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, v):
        return check_keys(v, "labels")

    @field_validator("annotations")
    @classmethod
    def _annotation_keys(cls, v):
        return check_keys(v, "annotations")


def _keep_input(value: Any, handler: Any) -> Any:
    """Validate with the typed model, then keep the plain dict that was given."""
    handler(value)
    return value


_AS_GIVEN = PlainSerializer(lambda v: v, return_type=dict)


class PodTemplate(BaseModel):
    """A PodTemplateSpec for one node's pod (metadata + spec); only ``spec.containers`` is
    required. One container is the trainer (see :mod:`disttrain.api.trainer`); the operator
    injects the rendezvous environment into it alone. The fields the operator reads are typed (see this module); all
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
            description="A core/v1 PodSpec. The trainer container (see spec.trainerContainer) "
            "runs the training command; the other containers and initContainers with "
            "restartPolicy Always are sidecars, passed through.")

    @field_validator("metadata", mode="before")
    @classmethod
    def _null_metadata(cls, v: Any) -> Any:
        return {} if v is None else v
