"""The `DistTrainingJob` API (disttrain.dev/v1alpha1) as pydantic v2 models.

These models are the single source of truth: the CRD in ``crds/`` is generated from them
(:mod:`disttrain.api.crdgen`), the operator validates every object it reads with them, and
``kubectl explain dtj.spec`` shows their field descriptions. Field names follow Kubeflow
Trainer / PyTorchJob where one exists (``numNodes``, ``numProcPerNode``, ``runPolicy``).

Validation happens at the earliest point: the CRD schema and its CEL rules
(``x-kubernetes-validations``, written here in ``json_schema_extra``) reject bad manifests at
``kubectl apply``; the pydantic validators below repeat the same rules so the operator
never acts on an object that slipped past an older CRD. The pod template's typed fields are
in :mod:`disttrain.api.podtemplate`; the job-name rules (:data:`NAME_RULES`, CEL at the CRD's
root) are :func:`job_name_problem` in Python. One rule is the operator's only: torchrun
options in the user's command that contradict the spec (:func:`torchrun_option_problem`),
since telling them from the script's own options needs torchrun's parser. See
docs/admission.md.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator
from pydantic.alias_generators import to_camel

from disttrain.api import constants
from disttrain.api import torchrun
# PodTemplate and its message are part of this API (crdgen and tests import them from here).
from disttrain.api.podtemplate import HOST_NETWORK_IN_TEMPLATE, QUANTITY_PATTERN, PodTemplate  # noqa: F401

PORT_RANGE_PATTERN = r"^[0-9]{1,5}-[0-9]{1,5}$"
# The most processes one node runs (numProcPerNode): the most local ranks the probe starts
# (disttrain_probe.localranks.roles.MAX_NPROC, a unit test keeps them equal), so a job the probe
# would refuse is refused at apply. Far above any node's GPUs (8, 16 on the largest), and
# bounding what the probe and the operator do per local rank.
MAX_PROC_PER_NODE = 256
NPROC_MESSAGE = (f"numProcPerNode must be an integer from 1 to {MAX_PROC_PER_NODE} (processes "
                 'on one node) or "auto"')
# Seconds fields copied into Kubernetes' own int32 fields (PodGroup scheduleTimeoutSeconds,
# as batch/v1 Job's ttlSecondsAfterFinished) are at most this: 68 years.
MAX_INT32 = 2**31 - 1
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


class RendezvousSpec(_Model):
    """Where ranks meet before training (torch.distributed's TCPStore)."""

    backend: RendezvousBackend = Field(
        RendezvousBackend.static,
        description="static: fixed node ranks and an explicit master address (torchrun "
        "--master-addr/--master-port); c10d: torchrun's c10d rendezvous at the same endpoint.",
    )
    port: int = Field(
        29500, strict=True, ge=1, le=65535, description="MASTER_PORT: the TCP port of the rendezvous store."
    )


class NetworkSpec(_Model):
    """How pods reach each other."""

    host_network: bool = Field(
        False, strict=True, description="Run probe and training pods in the node's network namespace."
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
        max_length=11,
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
        None, strict=True,
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

    enabled: bool = Field(True, strict=True, description="Run the probe before creating training pods.")
    image: Optional[str] = Field(
        None,
        description="Probe image. With useTrainingImage it only supplies the probe program "
        "(copied in by an init container); otherwise the probe runs in it. Defaults to the "
        "operator's configured probe image.",
    )
    use_training_image: bool = Field(
        True, strict=True,
        description="Run the probe inside the training image, so the NCCL and torch that are "
        "checked are the ones that will train.",
    )
    backend: ProbeBackend = Field(
        ProbeBackend.auto, description="auto: nccl when the pod requests GPUs, else gloo."
    )
    message_size_bytes: int = Field(
        4 * 1024 * 1024, strict=True,
        ge=4,
        le=1 << 30,
        description="All-reduce message size in bytes (float32 elements x 4).",
    )
    iterations: int = Field(10, strict=True, ge=1, le=1000, description="Timed all-reduce iterations.")
    min_bus_bandwidth_gbps: float = Field(
        0.0, strict=True,
        alias="minBusBandwidthGBps",
        ge=0,
        description="Fail when the measured all-reduce busbw is below this many GB/s "
        "(gigabytes, 1e9 bytes, per second; not gigabits). 0 disables the threshold.",
    )
    timeout_seconds: int = Field(
        60, strict=True, ge=5, le=3600, description="Budget for the whole probe, in seconds."
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


class GangScheduler(str, Enum):
    """Who schedules the job's pods all or nothing (see docs/scheduling.md)."""

    auto = "auto"
    workload = "workload"
    coscheduling = "coscheduling"
    volcano = "volcano"
    none = "none"


class SchedulingPolicy(_Model):
    """All-or-nothing scheduling of the probe pods and of the training pods (each a gang of
    numNodes pods), so a job never holds some nodes while it waits for the rest."""

    gang: GangScheduler = Field(
        GangScheduler.auto,
        description="auto: Kubernetes' workload scheduling API (Workload and PodGroup in "
        "scheduling.k8s.io/v1beta1, GenericWorkload feature gate) when the apiserver serves it, "
        "else none. workload: that API, required. coscheduling: a PodGroup of "
        "scheduler-plugins (scheduling.x-k8s.io/v1alpha1) and its scheduler. volcano: a "
        "Volcano PodGroup (scheduling.volcano.sh/v1beta1) and the volcano scheduler. none: "
        "pods are scheduled one by one (a job may hold some nodes while it waits for others).",
    )
    scheduler_name: Optional[str] = Field(
        None,
        max_length=253,
        description="schedulerName for the pods; default: scheduler-plugins-scheduler with "
        "coscheduling, volcano with volcano, the template's (or the default scheduler) else.",
    )
    schedule_timeout_seconds: Optional[int] = Field(
        None, strict=True, ge=1, le=MAX_INT32,
        description="coscheduling: the PodGroup's scheduleTimeoutSeconds, in seconds (at most "
        "2147483647, the PodGroup field's int32)."
    )


class RunPolicy(_Model):
    """What happens when training fails or ends (Kubeflow's RunPolicy)."""

    scheduling_policy: SchedulingPolicy = Field(default_factory=SchedulingPolicy)

    backoff_limit: int = Field(
        0, strict=True, ge=0, le=100, description="Gang restarts of all ranks before the job is Failed."
    )
    active_deadline_seconds: Optional[int] = Field(
        None, strict=True, ge=1, le=MAX_INT32,
        description="Seconds from the start of training until the job is Failed (at most "
        "2147483647, 68 years)."
    )
    ttl_seconds_after_finished: Optional[int] = Field(
        None, strict=True, ge=0, le=MAX_INT32,
        description="Seconds after the job finished (Succeeded or Failed) until the "
        "operator deletes it, and with it its pods and Service (as batch/v1 Job and Kubeflow do; "
        "at most 2147483647, Job's int32). Unset: the job is kept."
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.Running,
        description="Pods deleted when the job finishes: Running (still running), All, None.",
    )
    reprobe_on_failure: bool = Field(
        False, strict=True,
        description="After a rank fails, probe again before restarting, to tell an "
        "infrastructure fault from a code fault.",
    )


class DistTrainingJobSpec(_Model):
    """Desired state of a multi-node PyTorch training job."""

    num_nodes: int = Field(strict=True, ge=1, le=4096, description="Number of nodes (one pod per node).")
    num_proc_per_node: Union[StrictInt, Literal["auto"]] = Field(
        "auto",
        description='Processes per node (torchrun --nproc-per-node), 1 to 256. "auto": the '
        "GPUs the pod requests (nvidia.com/gpu), or 1 without GPUs. 256 is the most local "
        "ranks the probe starts on a node, far above any node's GPUs (8, or 16 on the "
        "largest).",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": f"type(self) == int ? self >= 1 && self <= {MAX_PROC_PER_NODE} "
                    ": self == 'auto'",
                    "message": NPROC_MESSAGE,
                }
            ]
        },
    )
    template: PodTemplate = Field(description="PodTemplateSpec for one node's pod.")
    launcher: Launcher = Field(
        Launcher.torchrun,
        description="torchrun: the operator wraps the container command in torchrun with the "
        "validated rendezvous; a command that already runs torchrun is left as written and "
        "gets the rendezvous in PET_* variables (an option contradicting the spec is "
        "refused). env: it only sets MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, PET_* and "
        "NCCL/GLOO variables and runs the command as given.",
    )
    rendezvous: RendezvousSpec = Field(default_factory=RendezvousSpec)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    suspend: bool = Field(
        False, strict=True,
        description="Suspend the job (as batch/v1 Job, JobSet and Kubeflow Trainer): created "
        "suspended, nothing runs; suspended while probing or training, its pods are deleted; "
        "resumed, the probes run again (the nodes may differ), then training. "
        "runPolicy.activeDeadlineSeconds counts from the last resume.",
    )

    @field_validator("num_proc_per_node")
    @classmethod
    def _nproc(cls, v: Union[int, str]) -> Union[int, str]:
        if isinstance(v, int) and not 1 <= v <= MAX_PROC_PER_NODE:
            raise ValueError(NPROC_MESSAGE)
        return v

    @model_validator(mode="after")
    def _cross_field(self) -> "DistTrainingJobSpec":
        for rule in SPEC_RULES:
            if not rule["check"](self):
                raise ValueError(rule["message"])
        problem = torchrun_option_problem(self)
        if problem:
            raise ValueError(problem)
        return self


# An explicit gang provider (workload, coscheduling, volcano; not auto or none) creates a
# gang's pods together, so it gives them DNS names (policies/gang.py effective_spec): CEL on
# the spec (self) and the same in Python.
_CEL_EXPLICIT_GANG = ("(has(self.runPolicy) && has(self.runPolicy.schedulingPolicy) && "
                      "has(self.runPolicy.schedulingPolicy.gang) && "
                      "!(self.runPolicy.schedulingPolicy.gang in ['auto', 'none']))")


def _explicit_gang(spec: "DistTrainingJobSpec") -> bool:
    v = spec.run_policy.scheduling_policy.gang
    return str(getattr(v, "value", v)) not in ("auto", "none")


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
        "rule": f"!{_CEL_EXPLICIT_GANG} || !has(self.network) || "
        "!has(self.network.enableDNSHostnames) || self.network.enableDNSHostnames",
        "message": "runPolicy.schedulingPolicy.gang creates a gang's pods together, before rank 0 "
        "has an address: it needs DNS hostnames; unset network.enableDNSHostnames (or set it "
        "true), or set gang to auto or none",
        "check": lambda s: not _explicit_gang(s) or s.network.enable_dns_hostnames is not False,
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


def nproc_for(spec: DistTrainingJobSpec) -> int:
    """Processes per node: the explicit number, or for ``auto`` the GPUs the trainer
    container requests (``nvidia.com/gpu``), or 1 without GPUs."""
    if spec.num_proc_per_node != "auto":
        return int(spec.num_proc_per_node)
    return max(1, gpus_requested(spec.template.spec["containers"][0]))


def torchrun_option_problem(spec: DistTrainingJobSpec) -> Optional[str]:
    """When the trainer's command runs torchrun itself (see :mod:`disttrain.api.torchrun`), the
    first option that contradicts the rendezvous the operator passes in ``PET_*``, as one
    message naming the field, the option, why and the fix; else None. Checked by the
    operator (an InvalidSpec condition within a second of apply), not by the CRD: telling
    torchrun's options from the training script's needs torchrun's parser."""
    trainer = spec.template.spec["containers"][0]
    command = list(trainer.get("command") or [])
    argv = command + list(trainer.get("args") or [])
    problems = torchrun.conflicting_options(
        argv, num_nodes=spec.num_nodes, nproc=nproc_for(spec),
        backend=str(spec.rendezvous.backend), port=spec.rendezvous.port)
    if not problems:
        return None
    opt, why = problems[0]
    assert opt.dest is not None  # conflicting_options returns only options torchrun knows
    field = "command" if opt.index < len(command) else "args"
    var = f"PET_{opt.dest.upper()}"
    fix = ("remove it" if opt.dest == "standalone"
           else f"remove it (torchrun reads {var}) or write $({var})")
    more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
    return (f"spec.template.spec.containers[0].{field}: torchrun option {opt.text[:60]} "
            f"contradicts the validated rendezvous ({why}){more}; {fix}")


# ---- the job's name -----------------------------------------------------------------------
# Children: pods <job>-probe-<rank> and <job>-worker-<rank> (DNS subdomains, always short
# enough when the name is a label), pod hostnames <job>-<rank> (DNS labels, with DNS
# hostnames), the headless Service <job> (a DNS-1035 label, when the operator creates it)
# and the label disttrain.dev/job-name=<job> (a label value, at most 63 characters).
# CEL at the CRD's root (where self.metadata.name is visible) and the same checks in Python.
# DNS hostnames: enableDNSHostnames when set, else on with an explicit gang or without
# hostNetwork (_dns below). A null is never seen here: the spec's schema has no nullable
# field, so the apiserver drops a null (unset) before the rules run, as the models read it.
_CEL_DNS = ("(has(self.spec.network) && has(self.spec.network.enableDNSHostnames) ? "
            "self.spec.network.enableDNSHostnames : ("
            + _CEL_EXPLICIT_GANG.replace("self.", "self.spec.") + " || !(has(self.spec.network) && "
            "has(self.spec.network.hostNetwork) && self.spec.network.hostNetwork)))")
_CEL_OWN_SERVICE = (f"({_CEL_DNS} && !(has(self.spec.network) && "
                    "has(self.spec.network.subdomain)))")
NAME_RULES: list[dict[str, Any]] = [
    {
        "rule": "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "message": "must be a DNS label (lowercase letters, digits and '-', no "
        "dots): it names the job's pods' hostnames <name>-<rank>, its headless Service and "
        "the disttrain.dev/job-name label",
        "check": lambda name, spec: bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)),
    },
    {
        "rule": "size(self.metadata.name) <= 63",
        "message": "is longer than 63 characters, the limit of a label value "
        "(every pod carries disttrain.dev/job-name=<name>); shorten it",
        "check": lambda name, spec: len(name) <= 63,
    },
    {
        "needs_spec": True,
        "rule": f"!{_CEL_DNS} || size(self.metadata.name) + "
        "size(string(self.spec.numNodes - 1)) <= 62",
        # A static message at admission: the apiserver refuses string concatenation here (its
        # cost estimate); the operator's message (message_of) gives the numbers.
        "message": "is too long: the pod hostname <name>-<last rank> would exceed 63 "
        "characters; shorten the name (at most 62 minus the digits of numNodes - 1) or set "
        "spec.network.enableDNSHostnames: false",
        "check": lambda name, spec: not _dns(spec) or len(name) + len(str(spec.num_nodes - 1)) <= 62,
        "message_of": lambda name, spec: (
            f"is too long: the pod hostname <name>-{spec.num_nodes - 1} would exceed 63 characters; "
            f"shorten the name to at most {62 - len(str(spec.num_nodes - 1))} characters or set "
            "spec.network.enableDNSHostnames: false"),
    },
    {
        "needs_spec": True,
        "rule": f"!{_CEL_OWN_SERVICE} || self.metadata.name.matches('^[a-z]')",
        "message": "must start with a letter: it names the job's headless "
        "Service (a DNS-1035 label); rename the job, or set spec.network.subdomain to a "
        "Service you manage",
        "check": lambda name, spec: not (_dns(spec) and not spec.network.subdomain)
        or bool(re.match(r"[a-z]", name)),
    },
]


def _dns(spec: DistTrainingJobSpec) -> bool:
    """Whether the job's pods get DNS hostnames: network.enableDNSHostnames when set, else
    with an explicit gang (it turns them on) or without hostNetwork. As _CEL_DNS."""
    v = spec.network.enable_dns_hostnames
    if v is not None:
        return bool(v)
    return _explicit_gang(spec) or not spec.network.host_network


def job_name_problem(name: Any, spec: Optional[DistTrainingJobSpec] = None) -> Optional[str]:
    """Why a job named ``name`` cannot name its children, or None when it can.

    The same rules as the CRD's CEL rules on ``metadata.name`` (NAME_RULES): a DNS label
    (no dots) of at most 63 characters; with DNS hostnames, ``<name>-<rank>`` within 63
    characters for the last rank; with an operator-created headless Service, a leading
    letter. ``spec`` is the validated spec (its numNodes and network decide the last two);
    without it only the first two are checked, so pass it once the spec is valid.
    Pure; never raises. The message names metadata.name, why and the fix."""
    if not isinstance(name, str) or not name:
        return "metadata.name is missing"
    for rule in NAME_RULES:
        if spec is None and rule.get("needs_spec"):
            continue
        if not rule["check"](name, spec):
            why = rule["message_of"](name, spec) if "message_of" in rule else rule["message"]
            return f"metadata.name {name[:80]!r} {why}"
    return None


def name_rules_cel() -> list[dict[str, str]]:
    """NAME_RULES as the CRD writes them (x-kubernetes-validations at the root)."""
    keep = ("rule", "message", "messageExpression")
    return [{k: r[k] for k in keep if k in r} | {"fieldPath": ".metadata.name"} for r in NAME_RULES]


# ---- status ----------------------------------------------------------------------------


class Condition(_Model):
    """metav1.Condition."""

    type: str = Field(description="Condition type, e.g. Validated (docs/conditions.md).")
    status: Literal["True", "False", "Unknown"] = Field(
        description="True is good (positive polarity); Unknown: not decided yet.")
    reason: str = Field(description="CamelCase reason constant (docs/conditions.md).")
    message: str = Field("", description="At most 400 characters: cause, node(s), fix.")
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: Optional[int] = Field(
        None, description="metadata.generation of the spec this condition was computed from.")


class NodeResult(_Model):
    """What the probe found on one node."""

    rank: int = Field(description="Node rank (the probe's rank on this node).")
    name: str = Field(description="Kubernetes node name.")
    address: Optional[str] = Field(None, description="Address on the chosen interface.")
    interface: Optional[str] = Field(None, description="Chosen NCCL_SOCKET_IFNAME on this node.")
    torch: Optional[str] = Field(None, description="torch version the probe ran with.")
    cuda: Optional[str] = Field(None, description="CUDA version torch was built with.")
    nccl: Optional[str] = Field(
        None, description="Version of the libnccl loaded in the probe's process.")
    paths: dict[str, str] = Field(
        default_factory=dict,
        description="Per network (subnet, or ifname:<name> for a routed pod network), what "
        "this node's dial to each peer rank did, one character per rank: o connected, t timed "
        "out, r refused, u unreachable, w wrong host answered, e error, m mixed, - not "
        "dialled, . itself; upper case: sent from another NIC's address.")
    throughput_mbps: Optional[float] = Field(
        None, alias="throughputMbps",
        description="Mb/s this node moved on the chosen network (its best measured pair).")
    local_ranks: Optional[int] = Field(
        None, description="Processes the probe ran on this node, one per training process "
        "(numProcPerNode; set only when more than one), each checked in the all-reduce among "
        "the node's local ranks and in the one over every rank.")
    intra_node_bus_bandwidth_gbps: Optional[float] = Field(
        None, alias="intraNodeBusBandwidthGBps",
        description="busbw of the all-reduce among this node's local ranks (the intra-node "
        "path), GB/s (1e9 B/s); set only with more than one process per node.")


class RendezvousStatus(_Model):
    """The rendezvous settings the probes validated and training uses."""

    master_addr: Optional[str] = Field(
        None, description="MASTER_ADDR: rank 0's DNS name (<job>-0.<subdomain>) with DNS "
        "hostnames, else rank 0's pod address (its node's with hostNetwork).")
    master_port: Optional[int] = Field(None, description="MASTER_PORT (spec.rendezvous.port).")
    socket_ifname: Optional[str] = Field(
        None, description="NCCL_SOCKET_IFNAME: one name, or a comma list when names differ."
    )


class ProbeStatus(_Model):
    """Summary of the last probe run."""

    attempt: int = Field(0, description="Probe runs started for this job.")
    start_time: Optional[str] = Field(
        None, description="RFC 3339: the attempt's first probe pod was created.")
    completion_time: Optional[str] = Field(None, description="RFC 3339: the verdict was written.")
    duration_seconds: Optional[float] = Field(
        None, description="Seconds from startTime to the verdict.")
    backend: Optional[str] = Field(None, description="Backend of the all-reduce: nccl or gloo.")
    message_size_bytes: Optional[int] = Field(
        None, description="All-reduce message size in bytes.")
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
    observed_generation: Optional[int] = Field(
        None, description="metadata.generation of the spec last acted on.")
    conditions: list[Condition] = Field(
        default_factory=list, description="metav1.Conditions, one per type (docs/conditions.md).")
    nodes: list[NodeResult] = Field(
        default_factory=list, description="Per node rank: what its probe validated.")
    rendezvous: RendezvousStatus = Field(default_factory=RendezvousStatus)
    probe: ProbeStatus = Field(default_factory=ProbeStatus)
    restarts: int = Field(0, description="Gang restarts so far.")
    suspensions: int = Field(0, description="Times the job was stopped without failing: "
                             "suspended (spec.suspend) or evicted by Kueue.")
    start_time: Optional[str] = Field(
        None, description="RFC 3339: the first training pod was created.")
    completion_time: Optional[str] = Field(
        None, description="RFC 3339: the job finished (Succeeded or Failed).")
    name_conflict_since: Optional[str] = Field(
        None, description="RFC 3339: since when a pod name the job must create is held by a "
        "pod that is not the job's (NameConflict); cleared once the name is free.")


class DistTrainingJob(_Model):
    """The whole object."""

    api_version: str = constants.API_VERSION
    kind: str = constants.KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: DistTrainingJobSpec
    status: DistTrainingJobStatus = Field(default_factory=DistTrainingJobStatus)


def field_path(loc: tuple[Any, ...], root: str = "spec") -> str:
    """A pydantic error location as Kubernetes writes field paths:
    ``("template", "spec", "containers", 0, "command")`` ->
    ``spec.template.spec.containers[0].command``; a map key that is not a plain name is
    bracketed (``labels[example.com/tier]``)."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{part}]"
    return out


def spec_error_message(exc: Exception) -> str:
    """One line per pydantic error, each naming the field path under ``spec``
    (``spec.template.spec.containers[0].command: Input should be a valid list``)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    lines = []
    for err in errors():
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        loc = tuple(err.get("loc", ()))
        lines.append(f"{field_path(loc)}: {msg}" if loc and not msg.startswith("spec.") else msg)
    return "; ".join(dict.fromkeys(lines))


_QUANTITY_SUFFIX: dict[str, Union[int, Decimal]] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(value: Any) -> Optional[Decimal]:
    """A Kubernetes quantity (``2``, ``"500m"``, ``"4Gi"``, ``"1e3"``) as a Decimal; None
    when ``value`` is not one (wrong type, bad text, exponent beyond 1e±30). Never raises."""
    if type(value) is int:
        return Decimal(value)
    if not isinstance(value, str) or not re.fullmatch(QUANTITY_PATTERN, value):
        return None
    m = re.fullmatch(r"\+?([0-9.]+)(?:([KMGTPE]i|[numkMGTPE])|[eE]([-+]?[0-9.]+))?", value)
    if not m:
        return None
    try:
        number = Decimal(m.group(1))
        if m.group(3) is not None:
            exponent = Decimal(m.group(3))
            if abs(exponent) > 30 or exponent != exponent.to_integral_value():
                return None
            return number.scaleb(int(exponent))
        return number * _QUANTITY_SUFFIX[m.group(2) or ""]
    except (InvalidOperation, ValueError):
        return None


def gpus_requested(container: Any) -> int:
    """GPUs (``nvidia.com/gpu``) a container asks for: limits, else requests; 0 if none, or
    if the value is not a whole number below 2**31 (Kubernetes refuses fractional GPUs).
    Takes any value (a container dict as written); never raises."""
    res = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(res, dict):
        return 0
    for key in ("limits", "requests"):
        section = res.get(key)
        if not isinstance(section, dict) or section.get("nvidia.com/gpu") is None:
            continue
        q = parse_quantity(section["nvidia.com/gpu"])
        if q is not None and q == q.to_integral_value() and 0 <= q < 2**31:
            return int(q)
    return 0
