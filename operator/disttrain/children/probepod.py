"""The probe pod of one node rank (:func:`build_probe_pod`): the template's scheduling and
resources, the probe program (installed into the training image or run in its own), and the
``DISTTRAIN_PROBE_*`` environment that configures it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.podresources import pod_resources
from disttrain.api.types import DistTrainingJobSpec, gpus_requested, nproc_for
from disttrain.children.names import (
    JobRef,
    job_selector,
    master_dns_name,
    pod_dns_name,
    probe_pod_name,
    uses_dns_hostnames,
)
from disttrain.children.podbase import (
    base_pod,
    beacon_port,
    declare_beacon_port,
    declare_rendezvous_port,
    env_var,
    field_env,
    list_of,
    merge_env,
    one_per_node,
    own_address_field,
    pod_labels,
    probe_backend,
    report_budget_env,
    template_labels,
    trainer_container,
)
from disttrain_probe.contract import probe_env


@dataclass(frozen=True)
class ProbeMaster:
    """Node rank 0 as a probe pod is told of it: ``addr``, its address (None for rank 0
    itself, which uses its own status.hostIP), and ``started_at``, when its probe container
    started (RFC 3339; None when not known yet)."""

    addr: Optional[str] = None
    started_at: Optional[str] = None


def probe_env_vars(job: JobRef, spec: DistTrainingJobSpec, rank: int, master: ProbeMaster,
               attempt: int) -> list[dict[str, Any]]:
    """The probe's own environment (the trainer's is merged under it): the rendezvous
    variables and every ``DISTTRAIN_PROBE_*`` setting (see :func:`build_probe_pod`); also
    the in-place training pod's (:mod:`disttrain.children.inplace`)."""
    env = [
        env_var("RANK", rank),
        env_var("WORLD_SIZE", spec.num_nodes),
        # Rank 0 hosts the store: its master address is its own DNS name or address.
        env_var("MASTER_ADDR", master.addr)
        if master.addr
        else env_var("MASTER_ADDR", master_dns_name(job, spec))
        if uses_dns_hostnames(spec)
        else field_env("MASTER_ADDR", own_address_field(spec)),
        env_var("MASTER_PORT", spec.rendezvous.port),
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("POD_NAME", "metadata.name"),
        # The address this rank is known by: the node's, or the pod's on the pod network.
        field_env("HOST_IP", own_address_field(spec)),
        env_var(probe_env.BACKEND, probe_backend(spec)),
        # the GPUs the probe container asks for (the training pod's: the trainer's, and a
        # sidecar's if one wants any): the probe checks that it sees as many (GPUCountMismatch)
        env_var(probe_env.GPUS, gpus_requested({"resources": pod_resources(spec.template.spec)})),
        env_var(probe_env.SOCKET_IFNAME, spec.network.socket_ifname),
        env_var(probe_env.MESSAGE_SIZE_BYTES, spec.probe.message_size_bytes),
        env_var(probe_env.ITERATIONS, spec.probe.iterations),
        env_var(probe_env.TIMEOUT_SECONDS, spec.probe.timeout_seconds),
        env_var(probe_env.MIN_BUSBW_GBPS, spec.probe.min_bus_bandwidth_gbps),
        env_var(probe_env.REPORT_PATH, constants.TERMINATION_MESSAGE_PATH),
        # Echoed in the report: the operator trusts a report only from this job's attempt.
        env_var(probe_env.JOB_UID, job.uid),
        env_var(probe_env.ATTEMPT, attempt),
        env_var("PYTHONUNBUFFERED", "1"),
    ]
    if spec.network.port_range:
        env.append(env_var(probe_env.PORT_RANGE, spec.network.port_range))
    if master.started_at:
        env.append(env_var(probe_env.MASTER_STARTED_AT, master.started_at))
    env.append(env_var(probe_env.BEACON_PORT, beacon_port(spec)))
    if uses_dns_hostnames(spec) and spec.num_nodes > 1:
        # a name of this job that resolves tells "rank 0's record not there yet" from a
        # Service or DNS path that does not work: this rank's own, rank 1's for rank 0
        env.append(env_var(probe_env.PEER_DNS_NAME,
                            pod_dns_name(job, spec, rank if rank != 0 else 1)))
    if nproc_for(spec) > 1:  # one probe process per training process (localranks.py)
        env.append(env_var(probe_env.NPROC_PER_NODE, nproc_for(spec)))
    return env


def _install_probe(pod_spec: dict[str, Any], probe: dict[str, Any], spec: DistTrainingJobSpec,
                   image: str) -> None:
    """With ``probe.useTrainingImage``: an init container copies the probe from ``image``
    into an emptyDir, and the probe container (in the training image) runs it from there.
    Changes ``pod_spec`` and ``probe`` in place."""
    pod_spec["initContainers"] = []
    if spec.probe.use_training_image:
        volumes = [v for v in list_of(pod_spec.get("volumes"))
                   if isinstance(v, dict) and v.get("name") != constants.PROBE_VOLUME]
        volumes.append({"name": constants.PROBE_VOLUME, "emptyDir": {}})
        pod_spec["volumes"] = volumes
        pod_spec["initContainers"] = [
            {
                "name": "install-probe",
                "image": image,
                "command": ["python", "-m", "disttrain_probe.install", constants.PROBE_INSTALL_DIR],
                "volumeMounts": [{"name": constants.PROBE_VOLUME, "mountPath": constants.PROBE_INSTALL_DIR}],
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ]
        probe["volumeMounts"].append({"name": constants.PROBE_VOLUME, "mountPath": constants.PROBE_INSTALL_DIR})
        # The launcher the init container wrote: no PYTHONPATH of the probe's own, so the
        # trainer's (from its image's ENV, the pod spec or the node) stays as it is.
        probe["command"] = ["python", constants.PROBE_LAUNCHER]


def build_probe_pod(
    job: JobRef,
    spec: DistTrainingJobSpec,
    rank: int,
    master: ProbeMaster,
    attempt: int,
    probe_image: str = constants.DEFAULT_PROBE_IMAGE,
) -> dict[str, Any]:
    """The probe pod for node rank ``rank``.

    Same scheduling constraints as training (the template's pod spec), the trainer's image,
    env and mounts, and resources that reserve what the whole training pod will need on its
    node (:func:`disttrain.api.podresources.pod_resources`: its containers, native sidecars
    and init containers, as the scheduler sums them), one probe pod per node (required pod
    anti-affinity on kubernetes.io/hostname), ``restartPolicy: Never``. With
    ``probe.useTrainingImage`` an init container copies the probe program from the probe
    image into an emptyDir and the probe runs inside the training image; otherwise it runs
    in the probe image. ``master.addr`` is rank 0's address (its pod's hostIP); for rank 0
    itself (None) it is its own status.hostIP, as it hosts the TCPStore on
    ``rendezvous.port``. RANK and WORLD_SIZE are the node rank and numNodes (one probe pod,
    one report per node); DISTTRAIN_PROBE_NPROC_PER_NODE is numProcPerNode (``auto``: the
    GPUs requested): the probe runs that many processes, world size numNodes x it, as
    training will. ``master.started_at`` (RFC 3339) is when rank 0's probe container
    started, passed as DISTTRAIN_PROBE_MASTER_STARTED_AT: the evidence that lets a dialling
    rank call the master port blocked after a short grace instead of its whole rendezvous
    deadline (rank 0 listens within moments of starting, see docs/probe-report.md).
    """
    labels = pod_labels(job, constants.ROLE_PROBE, rank, attempt, template_labels(spec))
    pod = base_pod(job, spec, probe_pod_name(job.name, rank), labels, rank)
    pod_spec = pod["spec"]
    trainer = trainer_container(spec)
    image = spec.probe.image or probe_image
    env = probe_env_vars(job, spec, rank, master, attempt)
    probe: dict[str, Any] = {
        "name": "probe",
        "image": (trainer.get("image") or image) if spec.probe.use_training_image else image,
        "command": ["python", "-m", "disttrain_probe"],
        "args": [],
        "env": merge_env(trainer.get("env"), env),
        # what the training pod (trainer, sidecars, init containers) will need on this node
        "resources": pod_resources(spec.template.spec),
        # The probe program's own mount wins over one of the trainer's at the same path.
        "volumeMounts": [m for m in list_of(trainer.get("volumeMounts")) if isinstance(m, dict)
                         and m.get("mountPath") != constants.PROBE_INSTALL_DIR
                         and m.get("name") != constants.PROBE_VOLUME],
        "terminationMessagePath": constants.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    for key in ("securityContext", "imagePullPolicy", "envFrom"):
        if trainer.get(key) is not None:
            probe[key] = trainer[key]
    _install_probe(pod_spec, probe, spec, image)
    declare_rendezvous_port(probe, spec, rank)
    declare_beacon_port(probe, spec, rank)
    pod_spec["containers"] = [probe]
    probe["env"] = merge_env(probe["env"], [report_budget_env(pod_spec)])
    # The probe must end on its own; this is the kubelet-enforced backstop.
    pod_spec["activeDeadlineSeconds"] = spec.probe.timeout_seconds + 60
    one_per_node(
        pod_spec,
        {**job_selector(job), constants.LABEL_ROLE: constants.ROLE_PROBE, constants.LABEL_ATTEMPT: str(attempt)},
    )
    return pod
