"""The `DistTrainingJob` API (disttrain.dev/v1alpha1) as pydantic v2 models.

These models are the single source of truth: the CRD in ``crds/`` is generated from them
(:mod:`disttrain.crdgen`), the operator validates every object it reads with them, and
``kubectl explain dtj.spec`` shows their field descriptions. Field names follow Kubeflow
Trainer / PyTorchJob where one exists (``numNodes``, ``numProcPerNode``, ``runPolicy``).

Validation happens at the earliest point: the CRD schema and its CEL rules
(``x-kubernetes-validations``, written here in ``json_schema_extra``) reject bad manifests at
``kubectl apply``; the pydantic validators below repeat the same rules so the operator
never acts on an object that slipped past an older CRD.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from . import constants as c

PORT_RANGE_PATTERN = r"^[0-9]{1,5}-[0-9]{1,5}$"
IFNAME_PATTERN = r"^(auto|\^?[A-Za-z0-9_.:=-]+(,\^?[A-Za-z0-9_.:=-]+)*)$"


class _Model(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=True
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


class KeepPods(str, Enum):
    Never = "Never"
    OnFailure = "OnFailure"
    Always = "Always"


class CleanPodPolicy(str, Enum):
    # Kubeflow's values; "None" is a string here, never Python's None.
    All = "All"
    Running = "Running"
    None_ = "None"


class PodTemplate(_Model):
    """A PodTemplateSpec for one node's pod (metadata + spec); only ``spec.containers`` is
    required. The first container is the trainer; the operator injects rendezvous
    environment into it. Everything else (resources, nodeSelector, tolerations, volumes,
    serviceAccountName, annotations such as Multus networks) is passed through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Labels and annotations copied to every pod."
    )
    spec: dict[str, Any] = Field(
        description="A core/v1 PodSpec. spec.containers[0] runs the training command."
    )

    @field_validator("spec")
    @classmethod
    def _containers_present(cls, spec: dict[str, Any]) -> dict[str, Any]:
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError(
                "spec.template.spec.containers must list at least one container "
                "(the first one runs training)"
            )
        for i, ctr in enumerate(containers):
            if not isinstance(ctr, dict) or not ctr.get("name"):
                raise ValueError(f"spec.template.spec.containers[{i}].name is required")
            envs = ctr.get("env") or []
            if not isinstance(envs, list):
                raise ValueError(f"spec.template.spec.containers[{i}].env must be a list of "
                                 "{name, value} entries")
            for j, env in enumerate(envs):
                name = env.get("name") if isinstance(env, dict) else None
                if not isinstance(name, str) or not name:
                    raise ValueError(f"spec.template.spec.containers[{i}].env[{j}].name must be "
                                     "a non-empty string")
                if name in c.RESERVED_ENV or name.startswith(c.RESERVED_ENV_PREFIX):
                    raise ValueError(
                        f"spec.template.spec.containers[{i}].env: {name} is set by the operator "
                        "(it owns rank and rendezvous variables); remove it"
                    )
        if "hostNetwork" in spec:
            raise ValueError(HOST_NETWORK_IN_TEMPLATE)
        return spec


HOST_NETWORK_IN_TEMPLATE = (
    "spec.template.spec.hostNetwork is set by the operator from spec.network.hostNetwork "
    "(probe and training pods must share one network mode); remove it and set "
    "spec.network.hostNetwork instead"
)


class RendezvousSpec(_Model):
    """Where ranks meet before training (torch.distributed's TCPStore)."""

    backend: RendezvousBackend = Field(
        RendezvousBackend.static,
        description="static: fixed node ranks and an explicit master address (torchrun "
        "--master-addr/--master-port); c10d: torchrun's c10d rendezvous at the same endpoint.",
    )
    port: int = Field(
        29500, ge=1, le=65535, description="MASTER_PORT: the TCP port of the rendezvous store."
    )


class NetworkSpec(_Model):
    """How pods reach each other."""

    host_network: bool = Field(
        False, description="Run probe and training pods in the node's network namespace."
    )
    socket_ifname: str = Field(
        "auto",
        pattern=IFNAME_PATTERN,
        description="NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME. auto: the probe chooses the "
        "interface every node can reach every other node on. Otherwise a name, a comma "
        "list or ^exclusions, exactly as NCCL reads it; the probe checks it.",
    )
    port_range: Optional[str] = Field(
        None,
        pattern=PORT_RANGE_PATTERN,
        description='Ephemeral ports the cluster firewall admits, "lo-hi" (e.g. 60000-61000). '
        "NCCL and gloo listen on ports from net.ipv4.ip_local_port_range: on the pod network "
        "the operator sets that sysctl on probe and training pods to this range; with "
        "hostNetwork it cannot (the node's own setting), and the probe warns when the node's "
        "range is not inside this one.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "int(self.split('-')[0]) >= 1 && int(self.split('-')[1]) <= 65535 "
                    "&& int(self.split('-')[0]) < int(self.split('-')[1])",
                    "message": "network.portRange must be lo-hi with 1 <= lo < hi <= 65535, "
                    "e.g. 60000-61000",
                }
            ]
        },
    )

    enable_dns_hostnames: Optional[bool] = Field(
        None,
        alias="enableDNSHostnames",
        description="Give each pod a DNS name, <job>-<rank>.<subdomain>, through a headless "
        "Service (as JobSet does) and use rank 0's name as MASTER_ADDR, so every rank resolves "
        "it before training starts. Default: true without hostNetwork, false with it (rank "
        "0's node IP is used).",
    )
    subdomain: Optional[str] = Field(
        None,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="With DNS hostnames: the headless Service that names the pods. Unset: "
        "the operator creates one named after the job (owned by it, deleted with it). Set: "
        "a Service you manage (headless, selecting the job's pods, publishNotReadyAddresses); "
        "the operator does not create it, and the probe reports MasterAddrUnresolvable if "
        "names under it do not resolve.",
    )

    @field_validator("port_range")
    @classmethod
    def _range_ordered(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        lo, hi = (int(x) for x in v.split("-"))
        if not (1 <= lo < hi <= 65535):
            raise ValueError(
                "network.portRange must be lo-hi with 1 <= lo < hi <= 65535, e.g. 60000-61000"
            )
        return v


class ProbeSpec(_Model):
    """The preflight probe run on every node before training."""

    enabled: bool = Field(True, description="Run the probe before creating training pods.")
    image: Optional[str] = Field(
        None,
        description="Probe image. With useTrainingImage it only supplies the probe program "
        "(copied in by an init container); otherwise the probe runs in it. Defaults to the "
        "operator's configured probe image.",
    )
    use_training_image: bool = Field(
        True,
        description="Run the probe inside the training image, so the NCCL and torch that are "
        "checked are the ones that will train.",
    )
    backend: ProbeBackend = Field(
        ProbeBackend.auto, description="auto: nccl when the pod requests GPUs, else gloo."
    )
    message_size_bytes: int = Field(
        4 * 1024 * 1024,
        ge=4,
        le=1 << 30,
        description="All-reduce message size in bytes (float32 elements x 4).",
    )
    iterations: int = Field(10, ge=1, le=1000, description="Timed all-reduce iterations.")
    min_bus_bandwidth_gbps: float = Field(
        0.0,
        alias="minBusBandwidthGBps",
        ge=0,
        description="Fail when the measured all-reduce busbw is below this many GB/s "
        "(gigabytes, 1e9 bytes, per second; not gigabits). 0 disables the threshold.",
    )
    timeout_seconds: int = Field(
        60, ge=5, le=3600, description="Budget for the whole probe, in seconds."
    )
    max_link_imbalance: Optional[float] = Field(
        None, ge=1, le=1000,
        description="Fail when a node's measured link throughput on the chosen network is "
        "more than this many times below the job's median (a straggler: every collective "
        "runs at its pace). Unset: a node below half the median is only a SlowLink warning.",
    )
    keep_pods: KeepPods = Field(
        KeepPods.OnFailure, description="Keep probe pods (for their logs) after the probe."
    )


class RunPolicy(_Model):
    """What happens when training fails or ends (Kubeflow's RunPolicy)."""

    backoff_limit: int = Field(
        0, ge=0, le=100, description="Gang restarts of all ranks before the job is Failed."
    )
    active_deadline_seconds: Optional[int] = Field(
        None, ge=1, description="Seconds from the start of training until the job is Failed."
    )
    ttl_seconds_after_finished: Optional[int] = Field(
        None, ge=0, description="Reserved: seconds after finishing before the job is deleted."
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.Running,
        description="Pods deleted when the job finishes: Running (still running), All, None.",
    )
    reprobe_on_failure: bool = Field(
        False,
        description="After a rank fails, probe again before restarting, to tell an "
        "infrastructure fault from a code fault.",
    )


class DistTrainingJobSpec(_Model):
    """Desired state of a multi-node PyTorch training job."""

    num_nodes: int = Field(ge=1, le=4096, description="Number of nodes (one pod per node).")
    num_proc_per_node: Union[int, Literal["auto"]] = Field(
        "auto",
        description='Processes per node (torchrun --nproc-per-node). "auto": the GPUs the '
        "pod requests (nvidia.com/gpu), or 1 without GPUs.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "type(self) == int ? self >= 1 : self == 'auto'",
                    "message": "numProcPerNode must be an integer >= 1 or \"auto\"",
                }
            ]
        },
    )
    template: PodTemplate = Field(description="PodTemplateSpec for one node's pod.")
    launcher: Launcher = Field(
        Launcher.torchrun,
        description="torchrun: the operator wraps the container command in torchrun with the "
        "validated rendezvous. env: it only sets MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, "
        "PET_* and NCCL/GLOO variables and runs the command as given.",
    )
    rendezvous: RendezvousSpec = Field(default_factory=RendezvousSpec)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    run_policy: RunPolicy = Field(default_factory=RunPolicy)

    @field_validator("num_proc_per_node")
    @classmethod
    def _nproc(cls, v: Union[int, str]) -> Union[int, str]:
        if isinstance(v, int) and v < 1:
            raise ValueError('numProcPerNode must be an integer >= 1 or "auto"')
        return v

    @model_validator(mode="after")
    def _cross_field(self) -> "DistTrainingJobSpec":
        for rule in SPEC_RULES:
            if not rule["check"](self):
                raise ValueError(rule["message"])
        return self


# Cross-field rules: CEL for the apiserver (admission) and the same check in Python.
SPEC_RULES: list[dict[str, Any]] = [
    {
        "rule": "!has(self.launcher) || self.launcher == 'torchrun' || "
        "!has(self.numProcPerNode) || self.numProcPerNode == 'auto' || self.numProcPerNode == 1",
        "message": "launcher env starts one process per pod: set numProcPerNode to 1 (or "
        "auto) or use launcher torchrun",
        "check": lambda s: s.launcher == Launcher.torchrun.value
        or s.num_proc_per_node in ("auto", 1),
    },
    {
        "rule": "!has(self.rendezvous) || !has(self.rendezvous.backend) || "
        "self.rendezvous.backend == 'static' || !has(self.launcher) || self.launcher == 'torchrun'",
        "message": "rendezvous.backend c10d needs launcher torchrun (env launcher only sets "
        "static MASTER_ADDR/MASTER_PORT)",
        "check": lambda s: s.rendezvous.backend == RendezvousBackend.static.value
        or s.launcher == Launcher.torchrun.value,
    },
]
SPEC_TRANSITION_RULES: list[dict[str, str]] = [
    {
        "rule": "self.numNodes == oldSelf.numNodes",
        "message": "numNodes is immutable: delete the job and create it again",
    }
]
DistTrainingJobSpec.model_config["json_schema_extra"] = {
    "x-kubernetes-validations": [
        {"rule": r["rule"], "message": r["message"]} for r in SPEC_RULES + SPEC_TRANSITION_RULES
    ]
}
DistTrainingJobSpec.model_rebuild(force=True)


# ---- status ----------------------------------------------------------------------------


class Condition(_Model):
    """metav1.Condition."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str = ""
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: Optional[int] = None


class NodeResult(_Model):
    """What the probe found on one node."""

    rank: int = Field(description="Node rank (the probe's rank on this node).")
    name: str = Field(description="Kubernetes node name.")
    address: Optional[str] = Field(None, description="Address on the chosen interface.")
    interface: Optional[str] = Field(None, description="Chosen NCCL_SOCKET_IFNAME on this node.")
    torch: Optional[str] = None
    cuda: Optional[str] = None
    nccl: Optional[str] = None
    paths: dict[str, str] = Field(
        default_factory=dict,
        description="Per network (subnet, or ifname:<name> for a routed pod network), what "
        "this node's dial to each peer rank did, one character per rank: o connected, t timed "
        "out, r refused, u unreachable, w wrong host answered, e error, m mixed, - not "
        "dialled, . itself; upper case: sent from another NIC's address.")
    throughput_mbps: Optional[float] = Field(
        None, alias="throughputMbps",
        description="Mb/s this node moved on the chosen network (its best measured pair).")


class RendezvousStatus(_Model):
    """The rendezvous settings the probes validated and training uses."""

    master_addr: Optional[str] = Field(
        None, description="MASTER_ADDR: rank 0's DNS name (<job>-0.<subdomain>) with DNS "
        "hostnames, else rank 0's pod address (its node's with hostNetwork).")
    master_port: Optional[int] = None
    socket_ifname: Optional[str] = Field(
        None, description="NCCL_SOCKET_IFNAME: one name, or a comma list when names differ."
    )


class ProbeStatus(_Model):
    """Summary of the last probe run."""

    attempt: int = Field(0, description="Probe runs started for this job.")
    start_time: Optional[str] = None
    completion_time: Optional[str] = None
    duration_seconds: Optional[float] = None
    backend: Optional[str] = None
    message_size_bytes: Optional[int] = None
    alg_bandwidth_gbps: Optional[float] = Field(
        None, alias="algBandwidthGBps", description="algbw in GB/s (1e9 B/s)."
    )
    bus_bandwidth_gbps: Optional[float] = Field(
        None, alias="busBandwidthGBps", description="busbw = algbw * 2(n-1)/n in GB/s (nccl-tests definition)."
    )
    phase_seconds: dict[str, float] = Field(
        default_factory=dict, description="Slowest rank's seconds per probe phase."
    )
    failures: list[str] = Field(default_factory=list, description="One line per failing rank.")
    warnings: list[str] = Field(default_factory=list, description="Latent faults seen.")


class DistTrainingJobStatus(_Model):
    """Observed state; written by the operator only."""

    phase: Optional[str] = Field(
        None, description="Summary of the conditions: Pending, Probing, Validated, Running, "
        "Succeeded, Failed."
    )
    observed_generation: Optional[int] = None
    conditions: list[Condition] = Field(default_factory=list)
    nodes: list[NodeResult] = Field(default_factory=list)
    rendezvous: RendezvousStatus = Field(default_factory=RendezvousStatus)
    probe: ProbeStatus = Field(default_factory=ProbeStatus)
    restarts: int = Field(0, description="Gang restarts so far.")
    start_time: Optional[str] = None
    completion_time: Optional[str] = None


class DistTrainingJob(_Model):
    """The whole object."""

    api_version: str = c.API_VERSION
    kind: str = c.KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: DistTrainingJobSpec
    status: DistTrainingJobStatus = Field(default_factory=DistTrainingJobStatus)


def spec_error_message(exc: Exception) -> str:
    """One line per pydantic error, each naming the field path under ``spec``."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    lines = []
    for err in errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        lines.append(f"spec.{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    return "; ".join(lines)


def gpus_requested(container: dict[str, Any]) -> int:
    """GPUs (``nvidia.com/gpu``) a container asks for: limits, else requests; 0 if none."""
    res = container.get("resources") or {}
    for key in ("limits", "requests"):
        val = (res.get(key) or {}).get("nvidia.com/gpu")
        if val is not None:
            m = re.fullmatch(r"\s*(\d+)\s*", str(val))
            if m:
                return int(m.group(1))
    return 0
