"""The pod template's container-level models: containers and init containers with their
env, resources, mounts, ports and security context, and the pod's volumes. The trainer's
env may not set the operator's variables (``RANK``, ``PET_*``), and no volume may take the
probe program's name."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import Field, StrictInt, field_validator, model_validator
from pydantic.json_schema import JsonDict

from disttrain.api import constants
from disttrain.api.k8sbase import (
    MAX_MAP_ENTRIES,
    DnsLabel,
    K8sModel,
    LinuxID,
    Port,
    Quantity,
    require_unique,
)
from disttrain.api.quantity import (
    cel_extended,
    cel_fractional,
    cel_plain,
    is_extended_resource,
    plain_amount,
    visibly_fractional,
)


class EnvVar(K8sModel):
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


class ResourceRequirements(K8sModel):
    """Compute resources; quantities as Kubernetes writes them (2, "500m", "4Gi"; a plain
    number must be an integer: write 0.5 as "0.5" or "500m"). An extended resource
    (``nvidia.com/gpu``: a domain other than kubernetes.io) is never overcommitted by the
    Pod API: it must be set in limits, a request must equal its limit, and the amount must
    be whole; refused here as the Pod API would refuse the pods."""

    limits: Optional[dict[str, Quantity]] = Field(None, max_length=MAX_MAP_ENTRIES)
    requests: Optional[dict[str, Quantity]] = Field(None, max_length=MAX_MAP_ENTRIES)

    @model_validator(mode="after")
    def _extended_resources(self) -> "ResourceRequirements":
        limits, requests = self.limits or {}, self.requests or {}
        for name, value in requests.items():
            if is_extended_resource(name) and name not in limits:
                raise ValueError(_NO_LIMIT.format(name))
        for section, values in (("limits", limits), ("requests", requests)):
            for name, value in values.items():
                if is_extended_resource(name) and visibly_fractional(value):
                    raise ValueError(_FRACTION.format(section, name))
        for name, value in requests.items():
            req, lim = plain_amount(value), plain_amount(limits.get(name))
            if is_extended_resource(name) and req is not None and lim is not None and req != lim:
                raise ValueError(_UNEQUAL.format(name))
        return self


_NO_LIMIT = ("requests.{0}: {0} is an extended resource, which Kubernetes does not overcommit: "
             "set limits.{0} too, equal to the request")
_FRACTION = ("{0}.{1}: {1} is an extended resource, counted in whole units: write an integer "
             "(e.g. 1)")
_UNEQUAL = ("requests.{0}: {0} is an extended resource, which Kubernetes does not overcommit: "
            "the request must equal limits.{0} (or leave the request out: it defaults to the limit)")


def _cel_each(section: str, test: str) -> str:
    return f"!has(self.{section}) || self.{section}.all(k, !{cel_extended('k')} || {test})"


ResourceRequirements.model_config["json_schema_extra"] = {"x-kubernetes-validations": [
    {"rule": _cel_each("requests", "(has(self.limits) && k in self.limits)"),
     "messageExpression": "'requests.' + self.requests.filter(k, " + cel_extended("k")
     + " && !(has(self.limits) && k in self.limits))[0] + ': it is an extended resource, which "
     "Kubernetes does not overcommit: set it in limits too, equal to the request'"},
    {"rule": " && ".join(f"({_cel_each(sec, '!' + cel_fractional(f'self.{sec}[k]'))})"
                         for sec in ("limits", "requests")),
     "message": "an extended resource (such as nvidia.com/gpu) is counted in whole units: write "
     "an integer (e.g. 1) in limits and requests"},
    {"rule": "!has(self.limits) || " + _cel_each(
        "requests", "!(k in self.limits) || !" + cel_plain("self.requests[k]") + " || !"
        + cel_plain("self.limits[k]") + " || int(string(self.requests[k])) == "
        "int(string(self.limits[k]))"),
     "message": "an extended resource (such as nvidia.com/gpu) is not overcommitted by "
     "Kubernetes: its request must equal its limit (or leave the request out: it defaults "
     "to the limit)"},
]}
ResourceRequirements.model_rebuild(force=True)


class VolumeMount(K8sModel):
    """A volume mounted into a container."""

    name: str = Field(min_length=1)
    mount_path: str = Field(min_length=1)
    read_only: Optional[bool] = None
    sub_path: Optional[str] = None


class Capabilities(K8sModel):
    """Linux capabilities added to or dropped from a container."""

    add: Optional[list[str]] = None
    drop: Optional[list[str]] = None


class SecurityContext(K8sModel):
    """A container's security context (the probe copies the trainer's); user and group IDs
    0 to 2147483647, as the Pod API takes them."""

    privileged: Optional[bool] = None
    run_as_user: Optional[LinuxID] = None
    run_as_group: Optional[LinuxID] = None
    run_as_non_root: Optional[bool] = None
    read_only_root_filesystem: Optional[bool] = None
    allow_privilege_escalation: Optional[bool] = None
    capabilities: Optional[Capabilities] = None


# A port name is an IANA service name, as the Pod API checks it (apimachinery's
# IsValidPortName): at most 15 characters of a-z, 0-9 and '-', at least one letter, no
# '-' at either end and no '--'. Names are unique among a container's ports.
PORT_NAME_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$"
PORT_NAME_MESSAGE = ("a port name is an IANA service name: at most 15 characters of a-z, 0-9 "
                     "and '-', with at least one letter, no '-' at either end and no '--'")
MAX_PORTS = 128  # per container (bounds the CEL rule's cost; the Pod API sets no limit)


class ContainerPort(K8sModel):
    """A port of a container: ``containerPort`` 1-65535, ``hostPort`` 0 (none) to 65535,
    an optional ``name`` (an IANA service name, unique in the container)."""

    container_port: Port
    host_port: Optional[Annotated[StrictInt, Field(ge=0, le=65535)]] = None
    protocol: Optional[Literal["TCP", "UDP", "SCTP"]] = None
    name: Optional[str] = Field(None, max_length=15, pattern=PORT_NAME_PATTERN, json_schema_extra={
        "x-kubernetes-validations": [{"rule": "self == '' || (self.matches('[a-z]') && !self.contains('--'))",
                                      "message": PORT_NAME_MESSAGE}]})
    host_ip: Optional[str] = Field(None, alias="hostIP")

    @field_validator("name")
    @classmethod
    def _iana_name(cls, name: Optional[str]) -> Optional[str]:
        if name and (not any("a" <= c <= "z" for c in name) or "--" in name):
            raise ValueError(PORT_NAME_MESSAGE)
        return name


UNIQUE_PORT_NAMES = "port names must be unique in a container"


class InitContainer(K8sModel):
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
    ports: Optional[list[ContainerPort]] = Field(None, max_length=MAX_PORTS, json_schema_extra={
        "x-kubernetes-validations": [{
            "rule": "self.all(p, has(p.name) ? p.name == '' || "
                    "self.filter(q, has(q.name) && q.name == p.name).size() == 1 : true)",
            "message": UNIQUE_PORT_NAMES}]})
    stdin: Optional[bool] = None
    stdin_once: Optional[bool] = None
    tty: Optional[bool] = None
    termination_message_path: Optional[str] = None
    termination_message_policy: Optional[Literal["File", "FallbackToLogsOnError"]] = None
    restart_policy: Optional[Literal["Always"]] = Field(
        None, description="Always on an init container: a native sidecar (runs beside the "
        "containers; Kubernetes 1.29+).")

    @model_validator(mode="after")
    def _unique_mounts(self) -> "InitContainer":
        require_unique(self.volume_mounts, "mount_path", "volumeMounts")
        named = [p.name for p in self.ports or [] if p.name]
        if len(set(named)) != len(named):
            raise ValueError(f"ports: {UNIQUE_PORT_NAMES}")
        return self


class Container(InitContainer):
    """A container: the trainer (it runs training and gets the rendezvous environment) or a
    sidecar (passed through)."""

    # a narrower item type than InitContainer's (a list is invariant to mypy; pydantic
    # validates this field on its own)
    env: Optional[list[TrainerEnvVar]] = Field(None, max_length=256)  # type: ignore[assignment]


class Volume(K8sModel):
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
