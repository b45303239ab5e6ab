"""The `DistTrainingJob` API (disttrain.dev/v1alpha1) as pydantic v2 models.

These models are the single source of truth: the CRD in ``crds/`` is generated from them
(:mod:`disttrain.api.crdgen`), the operator validates every object it reads with them, and
``kubectl explain dtj.spec`` shows their field descriptions. Field names follow Kubeflow
Trainer / PyTorchJob where one exists (``numNodes``, ``numProcPerNode``, ``runPolicy``).

Validation happens at the earliest point: the CRD schema and its CEL rules
(``x-kubernetes-validations``, written here in ``json_schema_extra``) reject bad manifests at
``kubectl apply``; the pydantic validators below repeat the same rules so the operator
never acts on an object that slipped past an older CRD. The pod template's typed fields are
in :mod:`disttrain.api.podtemplate`, the status in :mod:`disttrain.api.status`; the job-name
rules (:data:`NAME_RULES`, CEL at the CRD's root) are :func:`job_name_problem` in
:mod:`disttrain.api.jobname`. One rule is the operator's only: torchrun
options in the user's command that contradict the spec (:func:`torchrun_option_problem`),
since telling them from the script's own options needs torchrun's parser. See
docs/admission.md.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import Field, JsonValue, StrictInt, field_validator, model_validator

from disttrain.api import constants, torchrun
from disttrain.api import trainer as trainer_rule
from disttrain.api.common import (
    CamelModel,
    KeepPods,
    Launcher,
    ProbeBackend,
    ProbePlacement,
    RendezvousBackend,
)
from disttrain.api.hostnet import HOST_NETWORK_RULES
from disttrain.api.jobname import CEL_EXPLICIT_GANG, explicit_gang
from disttrain.api.podtemplate import PodTemplate
from disttrain.api.quantity import gpus_requested
from disttrain.api.runpolicy import RunPolicy
from disttrain.api.shellwords import unknown
from disttrain.api.status import DistTrainingJobStatus

PORT_RANGE_PATTERN = r"^[0-9]{1,5}-[0-9]{1,5}$"
# The most processes one node runs (numProcPerNode): the most local ranks the probe starts
# (disttrain_probe.ground.roles.MAX_NPROC, a unit test keeps them equal), so a job the probe
# would refuse is refused at apply. Far above any node's GPUs (8, 16 on the largest), and
# bounding what the probe and the operator do per local rank.
MAX_PROC_PER_NODE = 256
NPROC_MESSAGE = (f"numProcPerNode must be an integer from 1 to {MAX_PROC_PER_NODE} (processes "
                 'on one node) or "auto"')
IFNAME_PATTERN = r"^(auto|\^?[A-Za-z0-9_.:=-]+(,\^?[A-Za-z0-9_.:=-]+)*)$"


class RendezvousSpec(CamelModel):
    """Where ranks meet before training (torch.distributed's TCPStore)."""

    backend: RendezvousBackend = Field(
        RendezvousBackend.static,
        description="static: fixed node ranks and an explicit master address (torchrun "
        "--master-addr/--master-port); c10d: torchrun's c10d rendezvous at the same endpoint.",
    )
    port: int = Field(
        29500, strict=True, ge=1, le=65535, description="MASTER_PORT: the TCP port of the rendezvous store."
    )


class NetworkSpec(CamelModel):
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


class ProbeSpec(CamelModel):
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
        None, strict=True, ge=1, le=1000,
        description="Fail when a node's measured link throughput on the chosen network is "
        "more than this many times below the job's median (a straggler: every collective "
        "runs at its pace). Unset: a node below half the median is only a SlowLink warning.",
    )
    keep_pods: KeepPods = Field(
        KeepPods.OnFailure, description="Keep probe pods (for their logs) after the probe. Placement InPlace "
        "has no probe pods, so this field has no effect there: after a failed preflight the training "
        "pods still running are deleted and the ended ones follow runPolicy.cleanPodPolicy."
    )
    placement: ProbePlacement = Field(
        ProbePlacement.Pods,
        description="Pods: probe pods of their own, then the training pods on the nodes they "
        "validated. InPlace: the training pods are created at once and their trainer runs "
        "the probe first (same checks, report and verdict), then hands over to its command "
        "in the same Python process (torch imported once) only when every rank passed; "
        "needs the trainer's command (not the image's entrypoint) and useTrainingImage.",
    )

class DistTrainingJobSpec(CamelModel):
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
    trainer_container: Optional[str] = Field(
        None, min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="The name of the template's container that runs training (gets the "
        "rendezvous environment, the torchrun wrapping and the GPUs counted). Unset: the only "
        "container, else the one named trainer, pytorch (Kubeflow PyTorchJob) or node "
        "(Kubeflow Trainer v2). The other containers, and initContainers with restartPolicy "
        "Always, are sidecars: passed through untouched, and their exit never ends a rank.",
    )
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
        problem = trainer_rule.trainer_problem(self.template.spec.get("containers"), self.trainer_container)
        if problem:
            raise ValueError(problem)
        problem = torchrun_option_problem(self) or in_place_problem(self)
        if problem:
            raise ValueError(problem)
        return self

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
        "rule": f"!{CEL_EXPLICIT_GANG} || !has(self.network) || "
        "!has(self.network.enableDNSHostnames) || self.network.enableDNSHostnames",
        "message": "runPolicy.schedulingPolicy.gang creates a gang's pods together, before rank 0 "
        "has an address: it needs DNS hostnames; unset network.enableDNSHostnames (or set it "
        "true), or set gang to auto or none",
        "check": lambda s: not explicit_gang(s) or s.network.enable_dns_hostnames is not False,
    },
    {
        "rule": "!has(self.rendezvous) || !has(self.rendezvous.backend) || "
        "self.rendezvous.backend == 'static' || !has(self.launcher) || self.launcher == 'torchrun'",
        "message": "rendezvous.backend c10d needs launcher torchrun (env launcher only sets "
        "static MASTER_ADDR/MASTER_PORT)",
        "check": lambda s: s.rendezvous.backend == RendezvousBackend.static.value
        or s.launcher == Launcher.torchrun.value,
    },
    {
        "rule": "!has(self.probe) || !has(self.probe.placement) || self.probe.placement == 'Pods' || "
        "((!has(self.probe.enabled) || self.probe.enabled) && "
        "(!has(self.probe.useTrainingImage) || self.probe.useTrainingImage))",
        "message": "probe.placement InPlace runs the probe in the training pods' trainer: it "
        "needs probe.enabled and probe.useTrainingImage (true, the defaults)",
        "check": lambda s: s.probe.placement == ProbePlacement.Pods.value
        or (s.probe.enabled and s.probe.use_training_image),
    },
    *HOST_NETWORK_RULES,
]
SPEC_TRANSITION_RULES: list[dict[str, str]] = [
    {
        "rule": "self.numNodes == oldSelf.numNodes",
        "message": "numNodes is immutable: delete the job and create it again",
    }
]
_SPEC_CEL: list[JsonValue] = [{"rule": r["rule"], "message": r["message"]}
                               for r in SPEC_RULES + SPEC_TRANSITION_RULES]
_SPEC_CEL += [dict(r) for r in trainer_rule.TRAINER_RULES]  # the trainer's choice (api/trainer.py)
DistTrainingJobSpec.model_config["json_schema_extra"] = {"x-kubernetes-validations": _SPEC_CEL}
DistTrainingJobSpec.model_rebuild(force=True)


def trainer_index(spec: DistTrainingJobSpec) -> int:
    """The trainer's position in ``spec.template.spec.containers``
    (:func:`disttrain.api.trainer.trainer_name` decides it); 0 for a spec whose trainer
    cannot be told (never validated: the model refuses it)."""
    index = trainer_rule.trainer_index(spec.template.spec.get("containers"), spec.trainer_container)
    return 0 if index is None else index


def trainer_of(spec: DistTrainingJobSpec) -> dict[str, Any]:
    """The trainer container as written in the template (not a copy; {} when absent)."""
    containers = spec.template.spec.get("containers")
    containers = containers if isinstance(containers, list) else []
    i = trainer_index(spec)
    return containers[i] if i < len(containers) and isinstance(containers[i], dict) else {}


def nproc_for(spec: DistTrainingJobSpec) -> int:
    """Processes per node: the explicit number, or for ``auto`` the GPUs the trainer
    container requests (``nvidia.com/gpu``; sidecars' GPUs do not count), or 1 without GPUs."""
    if spec.num_proc_per_node != "auto":
        return int(spec.num_proc_per_node)
    return max(1, gpus_requested(trainer_of(spec)))


def in_place_problem(spec: DistTrainingJobSpec) -> Optional[str]:
    """With ``probe.placement: InPlace``, why the trainer cannot run the probe before its
    command: it has none (the image's entrypoint would run, which the operator cannot put
    the probe before); else None. Checked by the operator (InvalidSpec naming the field),
    not by the CRD: which container is the trainer is the operator's decision."""
    if spec.probe.placement != ProbePlacement.InPlace.value:
        return None
    command = trainer_of(spec).get("command")
    if isinstance(command, list) and any(isinstance(c, str) for c in command):
        return None
    name = trainer_rule.trainer_name(spec.template.spec.get("containers"), spec.trainer_container)
    return (f"spec.probe.placement InPlace runs the probe before the trainer's command, but "
            f"spec.template.spec.containers[{trainer_index(spec)}] ({name}) has no command (the "
            "image's entrypoint would run): set its command, or use probe.placement Pods")


def torchrun_option_problem(spec: DistTrainingJobSpec) -> Optional[str]:
    """When the trainer's command runs torchrun itself (see :mod:`disttrain.api.torchrun`), the
    first option that does not say the rendezvous the operator passes in ``PET_*`` (read
    with the container's variables: the operator's, and its own of literal value), as one
    message naming the field, the option, why and the fix; else None. Checked by the
    operator (an InvalidSpec condition within a second of apply), not by the CRD: telling
    torchrun's options from the training script's needs torchrun's parser."""
    trainer = trainer_of(spec)
    command = list(trainer.get("command") or [])
    argv = command + list(trainer.get("args") or [])
    passed = torchrun.Passed(spec.num_nodes, nproc_for(spec), str(spec.rendezvous.backend),
                             spec.rendezvous.port, str(spec.launcher))
    problems = torchrun.conflicting_options(argv, passed, _own_env(trainer))
    if not problems:
        return None
    opt, why = problems[0]
    assert opt.dest is not None  # conflicting_options returns only options torchrun knows
    field = "command" if opt.index < len(command) else "args"
    env = torchrun.operator_env(passed)
    var = f"PET_{opt.dest.upper()}"
    ref = torchrun.own_reference(opt.dest, env)
    fix = "remove it" + (f" (torchrun reads {var})" if var in env else "") + (f" or write {ref}" if ref else "")
    spec_field = _SPEC_FIELD_FOR.get(opt.dest or "")
    if spec_field and opt.value and _valid_for(opt.dest or "", opt.value):
        fix += f", or set {spec_field}: {opt.value}"  # what the command meant, said in the spec
    others = [p.text[:60] for p, _ in problems[1:]]
    more = (f" (also {', '.join(others[:2])}" + (f" and {len(others) - 2} more" if len(others) > 2 else "")
            + ")") if others else ""
    return (f"spec.template.spec.containers[{trainer_index(spec)}].{field}: torchrun option {opt.text[:60]} "
            f"{why}{more}; {fix}")


def _own_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's own variables: name -> value when known at admission (a ``value``
    without a ``$(...)`` reference), else :func:`disttrain.api.shellwords.unknown` (the
    kubelet still expands ``$(NAME)`` of such a variable, to a value the operator cannot
    check)."""
    out: dict[str, str] = {}
    for e in container.get("env") or []:
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            value = e.get("value")
            known = isinstance(value, str) and "$" not in value and not e.get("valueFrom")
            out[e["name"]] = str(value) if known else unknown(e["name"])
    return out


# torchrun option -> the spec field that says the same (offered as the other fix)
_SPEC_FIELD_FOR = {"rdzv_backend": "spec.rendezvous.backend", "master_port": "spec.rendezvous.port",
                   "nnodes": "spec.numNodes", "nproc_per_node": "spec.numProcPerNode"}


def _valid_for(dest: str, value: str) -> bool:
    """Whether ``value`` (a torchrun option's) is one the spec field of ``dest`` accepts."""
    if dest == "rdzv_backend":
        return value in {b.value for b in RendezvousBackend}
    return value.isdigit() and 0 < int(value) <= 65535


class DistTrainingJob(CamelModel):
    """The whole object."""

    api_version: str = constants.API_VERSION
    kind: str = constants.KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: DistTrainingJobSpec
    status: DistTrainingJobStatus = Field(default_factory=DistTrainingJobStatus)
