"""The job's status (``DistTrainingJobStatus``) and its parts: conditions, per-node probe
results, the validated rendezvous and the last probe run. Written by the operator only."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from disttrain.api.common import CamelModel


class Condition(CamelModel):
    """metav1.Condition."""

    type: str = Field(description="Condition type, e.g. Validated (docs/conditions.md).")
    status: Literal["True", "False", "Unknown"] = Field(
        description="True is good (positive polarity); Unknown: not decided yet.")
    reason: str = Field(description="CamelCase reason constant (docs/conditions.md).")
    message: str = Field("", description="At most 400 characters: cause, node(s), fix.")
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: Optional[int] = Field(
        None, description="metadata.generation of the spec this condition was computed from.")


class NodeResult(CamelModel):
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


class RendezvousStatus(CamelModel):
    """The rendezvous settings the probes validated and training uses."""

    master_addr: Optional[str] = Field(
        None, description="MASTER_ADDR: rank 0's DNS name (<job>-0.<subdomain>) with DNS "
        "hostnames, else rank 0's pod address (its node's with hostNetwork).")
    master_port: Optional[int] = Field(None, description="MASTER_PORT (spec.rendezvous.port).")
    socket_ifname: Optional[str] = Field(
        None, description="NCCL_SOCKET_IFNAME: one name, or a comma list when names differ."
    )


class ProbeStatus(CamelModel):
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
    interfaces_not_chosen: list[str] = Field(
        default_factory=list, description="Every interface the probes did not choose and why, one "
        "line per runner-up (the criterion that ranked it lower), per interface a named node "
        "makes unreachable, then the rest grouped by reason (NetworkValidated names only the "
        "choice).")


class RankProgressStatus(CamelModel):
    """One rank as the last stall verdict saw it (``status.progress.rankDetails``)."""

    rank: int = Field(description="The global rank.")
    node: str = Field(description="Its node (its pod's node, else its pod's name).")
    where: str = Field(description="collective (waits in one), python (runs between "
                       "collectives), not-started (no process group yet), or advancing (its "
                       "pod's progress sidecar is Ready: no detail is read).")
    seq: Optional[int] = Field(
        None, description="Collectives issued on the default process group.")
    op: Optional[str] = Field(None, description="The collective waited in, e.g. all_reduce.")
    waiting_seq: Optional[int] = Field(None, description="That collective's sequence number.")
    idle_seconds: Optional[int] = Field(
        None, description="Seconds since its seq last advanced, when the verdict was made.")
    frame: Optional[str] = Field(
        None, description="Where it is: the innermost frame of the user's code, e.g. "
        "train.py:88 (load_batch).")
    stale: bool = Field(False, description="Its record was not heard for 30 s: its process is "
                        "frozen or its node gone.")


class ProgressStatus(CamelModel):
    """Whether training advances: the stall verdict behind the Progressing condition."""

    seq: Optional[int] = Field(
        None, description="The highest collective sequence number (on the default process "
        "group) a rank reported.")
    summary: Optional[str] = Field(
        None, description="The Progress column: #<seq>, then the reason and the culprit when "
        "the collectives wait or stalled, e.g. #1533 (RankStuckInPython: rank 3).")
    since: Optional[str] = Field(
        None, description="RFC 3339: since when the ranks wait (unset while they advance).")
    ranks: list[int] = Field(
        default_factory=list, description="The ranks the verdict singles out (at most 64).")
    nodes: list[str] = Field(
        default_factory=list, description="Their nodes, or a silent link's (at most 16).")
    rank_details: list[RankProgressStatus] = Field(
        default_factory=list, description="Each rank heard, as the verdict saw it (at most 64: "
        "the culprits first, then ranks not advancing, lowest rank first).")


class ExcludedNode(CamelModel):
    """A node the next attempts avoid: a stall verdict named it (``reason``) and
    ``runPolicy.onStall: Restart`` restarted the job without it."""

    node: str = Field(..., description="The node's name.")
    reason: str = Field(..., description="The Progressing reason that named it, e.g. RankUnresponsive.")
    restart: int = Field(0, description="The gang restart that first avoided it (1 = the first).")


class DistTrainingJobStatus(CamelModel):
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
    progress: Optional[ProgressStatus] = Field(
        None, description="While training runs: whether its collectives advance (the "
        "Progressing condition's verdict).")
    excluded_nodes: list[ExcludedNode] = Field(
        default_factory=list, description="Nodes the job's pods avoid from now on (a required "
        "nodeAffinity NotIn on kubernetes.io/hostname): each was named by a stall verdict that "
        "restarted the job (runPolicy.onStall: Restart). At most 16; remove an entry (kubectl "
        "edit --subresource=status) to allow the node again.")
    name_conflict_since: Optional[str] = Field(
        None, description="RFC 3339: since when a pod name the job must create is held by a "
        "pod that is not the job's (NameConflict); cleared once the name is free.")
