"""The API's shared pieces: the camelCase base model of every spec and status model, and the
enums of the spec's fields (their values are the strings written in manifests)."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CamelModel(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=True,
        validate_default=True,  # a defaulted enum field holds its value too, as a given one does
    )

class Launcher(str, Enum):
    """How the training command is started in each node's pod."""

    torchrun = "torchrun"
    env = "env"


class RendezvousBackend(str, Enum):
    static = "static"
    c10d = "c10d"


class ProbeBackend(str, Enum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


class ProbePlacement(str, Enum):
    """Where the probe runs: ``Pods``, probe pods of their own before the training pods;
    ``InPlace``, the training pods' trainer runs it before the user's command."""

    Pods = "Pods"
    InPlace = "InPlace"


class KeepPods(str, Enum):
    Never = "Never"
    OnFailure = "OnFailure"
    Always = "Always"


class CleanPodPolicy(str, Enum):
    # Kubeflow's values; "None" is a string here, never Python's None.
    All = "All"
    Running = "Running"
    None_ = "None"

class OnStall(str, Enum):
    """What a stalled job does (runPolicy.onStall)."""

    Restart = "Restart"
    Fail = "Fail"
    Wait = "Wait"


class GangScheduler(str, Enum):
    """Who schedules the job's pods all or nothing (see docs/scheduling.md)."""

    auto = "auto"
    workload = "workload"
    coscheduling = "coscheduling"
    volcano = "volcano"
    none = "none"
