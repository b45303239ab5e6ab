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
    DnsLabel,
    K8sModel,
    LinuxID,
    Port,
    Quantity,
    require_unique,
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
    number must be an integer: write 0.5 as "0.5" or "500m")."""

    limits: Optional[dict[str, Quantity]] = None
    requests: Optional[dict[str, Quantity]] = None


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


class ContainerPort(K8sModel):
    """A port of a container: ``containerPort`` 1-65535, ``hostPort`` 0 (none) to 65535."""

    container_port: Port
    host_port: Optional[Annotated[StrictInt, Field(ge=0, le=65535)]] = None
    protocol: Optional[Literal["TCP", "UDP", "SCTP"]] = None
    name: Optional[str] = Field(None, max_length=15)
    host_ip: Optional[str] = Field(None, alias="hostIP")


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
    ports: Optional[list[ContainerPort]] = None
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
