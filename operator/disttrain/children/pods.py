"""Pure builders: DistTrainingJob spec -> desired child pod manifests.

No I/O here. Each builder returns a plain dict (a core/v1 Pod) with labels and an
ownerReference to the job, so deleting the job garbage-collects its children.

Builders never raise for a spec that :class:`disttrain.api.types.DistTrainingJobSpec` accepted:
the template is typed at admission (:mod:`disttrain.api.podtemplate`), and the code that reads
it still takes a null or an odd shape as absent (``_dict``/``_list``), so a job that
slipped past an older CRD cannot crash a reconcile step. Children are validly named when
:func:`disttrain.api.types.job_name_problem` accepts the job's name.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api import torchrun
from disttrain.api.types import DistTrainingJobSpec, Launcher, gpus_requested, nproc_for
from disttrain.children.names import (
    JobRef,
    job_selector,
    master_dns_name,
    pod_dns_name,
    pod_hostname,
    probe_pod_name,
    service_name,
    uses_dns_hostnames,
    worker_pod_name,
)

from disttrain_probe.contract import probe_env


def _dict(value: Any) -> dict:
    """``value`` if it is a dict, else a new empty one (null or a wrong shape is absent)."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    """``value`` if it is a list, else a new empty one."""
    return value if isinstance(value, list) else []


@dataclass(frozen=True)
class Rendezvous:
    """Validated rendezvous for one pod: where the master is and which NIC to use."""

    master_addr: str
    master_port: int
    socket_ifname: Optional[str] = None  # None: leave NCCL/GLOO to their defaults
    # True when socket_ifname is one interface the probe chose: NCCL then gets "=name",
    # its exact-match syntax (a plain "eth1" is a prefix and would also match eth10).
    exact: bool = False


def own_address_field(spec: DistTrainingJobSpec) -> str:
    """The downward-API field carrying a pod's own address: status.hostIP with hostNetwork,
    status.podIP otherwise."""
    return "status.hostIP" if spec.network.host_network else "status.podIP"


def nproc_per_node(spec: DistTrainingJobSpec) -> int:
    """Processes per node: the explicit number, or for ``auto`` the GPUs the trainer
    container requests (``nvidia.com/gpu``), or 1 without GPUs."""
    return nproc_for(spec)


def _trainer(spec: DistTrainingJobSpec) -> dict[str, Any]:
    """A deep copy of the template's first container (the trainer)."""
    containers = _list(_dict(spec.template.spec).get("containers"))
    return copy.deepcopy(_dict(containers[0])) if containers else {}


def _template_labels(spec: DistTrainingJobSpec) -> dict[str, str]:
    labels = _dict(_dict(spec.template.metadata).get("labels"))
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def probe_backend(spec: DistTrainingJobSpec) -> str:
    """``nccl`` or ``gloo``; ``auto`` is nccl exactly when the trainer requests GPUs."""
    if spec.probe.backend != "auto":
        return str(spec.probe.backend)
    return "nccl" if gpus_requested(_trainer(spec)) > 0 else "gloo"


def _labels(job: JobRef, role: str, rank: int, attempt: int, extra: dict[str, str]) -> dict:
    labels = {k: v for k, v in _dict(extra).items() if isinstance(k, str) and isinstance(v, str)}
    labels.update(job_selector(job))
    labels.update({constants.LABEL_ROLE: role, constants.LABEL_RANK: str(rank), constants.LABEL_ATTEMPT: str(attempt)})
    return labels


def _env_var(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _merge_env(existing: Any, add: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {e["name"] for e in add}
    return [e for e in _list(existing) if isinstance(e, dict) and e.get("name") not in names] + add


def _base_pod(
    job: JobRef, spec: DistTrainingJobSpec, name: str, labels: dict[str, str], rank: int
) -> dict[str, Any]:
    tmpl_meta = _dict(spec.template.metadata)
    pod_spec = copy.deepcopy(_dict(spec.template.spec))
    pod_spec["restartPolicy"] = "Never"
    if spec.network.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if uses_dns_hostnames(spec):
        pod_spec["hostname"] = pod_hostname(job.name, rank)
        pod_spec["subdomain"] = service_name(job, spec)
    if spec.network.port_range and not spec.network.host_network:
        # NCCL and gloo take their listening ports from the kernel's ephemeral range; the
        # sysctl is namespaced and on Kubernetes' safe list, so a pod may set its own.
        sc = pod_spec["securityContext"] = _dict(pod_spec.get("securityContext"))
        lo, hi = spec.network.port_range.split("-")
        sc["sysctls"] = [x for x in _list(sc.get("sysctls"))
                         if isinstance(x, dict) and x.get("name") != "net.ipv4.ip_local_port_range"]
        sc["sysctls"].append({"name": "net.ipv4.ip_local_port_range", "value": f"{lo} {hi}"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": {k: v for k, v in _dict(tmpl_meta.get("annotations")).items()
                            if isinstance(k, str) and isinstance(v, str)},
            "ownerReferences": [job.owner_reference()],
        },
        "spec": pod_spec,
    }


def _declare_rendezvous_port(ctr: dict[str, Any], spec: DistTrainingJobSpec, rank: int) -> None:
    """With hostNetwork, node rank 0's pod binds the rendezvous port on its node: declare it
    as a hostPort (equal to containerPort, as hostNetwork requires), so the scheduler never
    puts two jobs' rank 0 on one node (their stores would collide: Address already in use);
    it places the second elsewhere, or it waits. Other ranks bind no fixed port."""
    if not spec.network.host_network or rank != 0:
        return
    _declare_host_port(ctr, "rendezvous", spec.rendezvous.port)


def _declare_host_port(ctr: dict[str, Any], name: str, port: int) -> None:
    """Add TCP ``port`` to ``ctr``'s ports as containerPort and hostPort ``name``, replacing
    an entry of the container's that already names that port."""
    ports = [p for p in _list(ctr.get("ports")) if isinstance(p, dict)
             and p.get("containerPort") != port and p.get("hostPort") != port]
    ports.append({"name": name, "containerPort": port, "hostPort": port, "protocol": "TCP"})
    ctr["ports"] = ports


def _require_node_affinity(pod_spec: dict[str, Any], node: str) -> None:
    """Pin to one node through the scheduler (nodeAffinity on kubernetes.io/hostname)."""
    affinity = pod_spec["affinity"] = _dict(pod_spec.get("affinity"))
    na = affinity["nodeAffinity"] = _dict(affinity.get("nodeAffinity"))
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    req = na[key] = _dict(na.get(key))
    term = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    terms = [t for t in _list(req.get("nodeSelectorTerms")) if isinstance(t, dict)] or [{}]
    # Terms are ORed: add the pin to every term so each still requires the node.
    req["nodeSelectorTerms"] = [
        {**t, "matchExpressions": _list(t.get("matchExpressions")) + [term]} for t in terms
    ]


def _one_per_node(pod_spec: dict[str, Any], match_labels: dict[str, str]) -> None:
    affinity = pod_spec["affinity"] = _dict(pod_spec.get("affinity"))
    pa = affinity["podAntiAffinity"] = _dict(affinity.get("podAntiAffinity"))
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    req = pa[key] = _list(pa.get(key))
    req.append(
        {"labelSelector": {"matchLabels": match_labels}, "topologyKey": "kubernetes.io/hostname"}
    )


def beacon_port(spec: DistTrainingJobSpec) -> int:
    """The TCP port rank 0's probe also listens on, right after rendezvous.port (the next
    port, or the one before 65535), so a rank refused on the rendezvous port can tell "rank
    0 not listening yet" from "a rule rejects it" without evidence of rank 0's start (gang
    probes start together). With hostNetwork rank 0's probe declares it as a hostPort
    (:func:`_declare_beacon_port`), so the scheduler keeps it off a node where another pod
    (another job's rank 0) declares that port."""
    port = spec.rendezvous.port
    return port + 1 if port < 65535 else port - 1


def _declare_beacon_port(ctr: dict[str, Any], spec: DistTrainingJobSpec, rank: int) -> None:
    """With hostNetwork, node rank 0's probe binds :func:`beacon_port` on its node: declare
    it as a hostPort, as the rendezvous port is (:func:`_declare_rendezvous_port`)."""
    if not spec.network.host_network or rank != 0:
        return
    _declare_host_port(ctr, "probe-beacon", beacon_port(spec))


def _probe_env(job: JobRef, spec: DistTrainingJobSpec, rank: int, master_addr: Optional[str],
               attempt: int, master_started_at: Optional[str]) -> list[dict[str, Any]]:
    """The probe container's own environment (the trainer's is merged under it): the
    rendezvous variables and every ``DISTTRAIN_PROBE_*`` setting (see :func:`build_probe_pod`)."""
    env = [
        _env_var("RANK", rank),
        _env_var("WORLD_SIZE", spec.num_nodes),
        # Rank 0 hosts the store: its master address is its own DNS name or address.
        _env_var("MASTER_ADDR", master_addr)
        if master_addr
        else _env_var("MASTER_ADDR", master_dns_name(job, spec))
        if uses_dns_hostnames(spec)
        else _field_env("MASTER_ADDR", own_address_field(spec)),
        _env_var("MASTER_PORT", spec.rendezvous.port),
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_NAME", "metadata.name"),
        # The address this rank is known by: the node's, or the pod's on the pod network.
        _field_env("HOST_IP", own_address_field(spec)),
        _env_var(probe_env.BACKEND, probe_backend(spec)),
        # the GPUs the pod asked for: the probe checks that it sees as many (GPUCountMismatch)
        _env_var(probe_env.GPUS, gpus_requested(_trainer(spec))),
        _env_var(probe_env.SOCKET_IFNAME, spec.network.socket_ifname),
        _env_var(probe_env.MESSAGE_SIZE_BYTES, spec.probe.message_size_bytes),
        _env_var(probe_env.ITERATIONS, spec.probe.iterations),
        _env_var(probe_env.TIMEOUT_SECONDS, spec.probe.timeout_seconds),
        _env_var(probe_env.MIN_BUSBW_GBPS, spec.probe.min_bus_bandwidth_gbps),
        _env_var(probe_env.REPORT_PATH, constants.TERMINATION_MESSAGE_PATH),
        # Echoed in the report: the operator trusts a report only from this job's attempt.
        _env_var(probe_env.JOB_UID, job.uid),
        _env_var(probe_env.ATTEMPT, attempt),
        _env_var("PYTHONUNBUFFERED", "1"),
    ]
    if spec.network.port_range:
        env.append(_env_var(probe_env.PORT_RANGE, spec.network.port_range))
    if master_started_at:
        env.append(_env_var(probe_env.MASTER_STARTED_AT, master_started_at))
    env.append(_env_var(probe_env.BEACON_PORT, beacon_port(spec)))
    if uses_dns_hostnames(spec) and spec.num_nodes > 1:
        # a name of this job that resolves tells "rank 0's record not there yet" from a
        # Service or DNS path that does not work: this rank's own, rank 1's for rank 0
        env.append(_env_var(probe_env.PEER_DNS_NAME,
                            pod_dns_name(job, spec, rank if rank != 0 else 1)))
    if nproc_per_node(spec) > 1:  # one probe process per training process (localranks.py)
        env.append(_env_var(probe_env.NPROC_PER_NODE, nproc_per_node(spec)))
    return env


def _install_probe(pod_spec: dict[str, Any], probe: dict[str, Any], spec: DistTrainingJobSpec,
                   image: str) -> None:
    """With ``probe.useTrainingImage``: an init container copies the probe from ``image``
    into an emptyDir, and the probe container (in the training image) runs it from there.
    Changes ``pod_spec`` and ``probe`` in place."""
    pod_spec["initContainers"] = []
    if spec.probe.use_training_image:
        volumes = [v for v in _list(pod_spec.get("volumes"))
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
    master_addr: Optional[str],
    attempt: int,
    probe_image: str = constants.DEFAULT_PROBE_IMAGE,
    master_started_at: Optional[str] = None,
) -> dict[str, Any]:
    """The probe pod for node rank ``rank``.

    Same scheduling constraints and resources as training (the template's pod spec, its
    first container's image, resources and mounts), one probe pod per node (required pod
    anti-affinity on kubernetes.io/hostname), ``restartPolicy: Never``. With
    ``probe.useTrainingImage`` an init container copies the probe program from the probe
    image into an emptyDir and the probe runs inside the training image; otherwise it runs
    in the probe image. ``master_addr`` is rank 0's address (its pod's hostIP); for rank 0
    itself (None) it is its own status.hostIP, as it hosts the TCPStore on
    ``rendezvous.port``. RANK and WORLD_SIZE are the node rank and numNodes (one probe pod,
    one report per node); DISTTRAIN_PROBE_NPROC_PER_NODE is numProcPerNode (``auto``: the
    GPUs requested): the probe runs that many processes, world size numNodes x it, as
    training will. ``master_started_at`` (RFC 3339) is when rank 0's probe container
    started, passed as DISTTRAIN_PROBE_MASTER_STARTED_AT: the evidence that lets a dialling
    rank call the master port blocked after a short grace instead of its whole rendezvous
    deadline (rank 0 listens within moments of starting, see docs/probe-report.md).
    """
    labels = _labels(job, constants.ROLE_PROBE, rank, attempt, _template_labels(spec))
    pod = _base_pod(job, spec, probe_pod_name(job.name, rank), labels, rank)
    pod_spec = pod["spec"]
    trainer = _trainer(spec)
    image = spec.probe.image or probe_image
    env = _probe_env(job, spec, rank, master_addr, attempt, master_started_at)
    probe: dict[str, Any] = {
        "name": "probe",
        "image": (trainer.get("image") or image) if spec.probe.use_training_image else image,
        "command": ["python", "-m", "disttrain_probe"],
        "args": [],
        "env": _merge_env(trainer.get("env"), env),
        "resources": _dict(trainer.get("resources")),
        # The probe program's own mount wins over one of the trainer's at the same path.
        "volumeMounts": [m for m in _list(trainer.get("volumeMounts")) if isinstance(m, dict)
                         and m.get("mountPath") != constants.PROBE_INSTALL_DIR
                         and m.get("name") != constants.PROBE_VOLUME],
        "terminationMessagePath": constants.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    for key in ("securityContext", "imagePullPolicy", "envFrom"):
        if trainer.get(key) is not None:
            probe[key] = trainer[key]
    _install_probe(pod_spec, probe, spec, image)
    _declare_rendezvous_port(probe, spec, rank)
    _declare_beacon_port(probe, spec, rank)
    pod_spec["containers"] = [probe]
    # The probe must end on its own; this is the kubelet-enforced backstop.
    pod_spec["activeDeadlineSeconds"] = spec.probe.timeout_seconds + 60
    _one_per_node(
        pod_spec,
        {**job_selector(job), constants.LABEL_ROLE: constants.ROLE_PROBE, constants.LABEL_ATTEMPT: str(attempt)},
    )
    return pod


def torchrun_command(
    command: list[str],
    args: list[str],
    num_nodes: int,
    nproc: int,
    node_rank: int,
    rdzv: Rendezvous,
    backend: str,
    run_id: str,
) -> list[str]:
    """Wrap a container command in torchrun with the validated rendezvous.

    ``python train.py a`` -> ``python -m torch.distributed.run <opts> train.py a`` (the
    user's own interpreter runs torchrun's module: an image need not have the ``torchrun``
    console script on PATH, which a torch on PYTHONPATH or ``pip --target`` lacks; found on
    real nodes); ``python -m pkg a`` -> ``python -m torch.distributed.run <opts> -m pkg a``;
    anything else -> ``torchrun <opts> --no-python cmd ...``.
    Options: ``--nnodes``, ``--nproc-per-node``, and for the static backend ``--node-rank``
    ``--master-addr`` ``--master-port``; for c10d ``--rdzv-backend=c10d``
    ``--rdzv-endpoint=addr:port`` ``--rdzv-id=<job uid>``.
    A command that already runs torchrun (:func:`disttrain.api.torchrun.launches`) is returned
    as written (command + args): torchrun then reads the rendezvous from PET_* (see
    :func:`build_worker_pod`). Never raises.
    """
    full = [a for a in list(command) + list(args) if isinstance(a, str)]
    if torchrun.launches(full):
        return full
    opts = ["torchrun", f"--nnodes={num_nodes}", f"--nproc-per-node={nproc}"]
    if backend == "c10d":
        opts += [
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv.master_addr}:{rdzv.master_port}",
            f"--rdzv-id={run_id}",
        ]
    else:
        opts += [
            f"--node-rank={node_rank}",
            f"--master-addr={rdzv.master_addr}",
            f"--master-port={rdzv.master_port}",
        ]
    if full and os.path.basename(full[0]).startswith("python") and len(full) > 1:
        rest = full[1:]
        module = [full[0], "-m", "torch.distributed.run"] + opts[1:]
        if rest[0] == "-m" and len(rest) > 1:
            return module + rest
        if not rest[0].startswith("-"):
            return module + rest
    return opts + ["--no-python"] + full


def build_worker_pod(
    job: JobRef,
    spec: DistTrainingJobSpec,
    rank: int,
    node: Optional[str],
    rdzv: Rendezvous,
    attempt: int,
) -> dict[str, Any]:
    """The training pod for node rank ``rank``.

    Pinned to ``node`` (the node whose probe validated rank ``rank``) by a required
    nodeAffinity, so the scheduler still checks resources and taints. The first container
    gets MASTER_ADDR/MASTER_PORT, WORLD_SIZE/RANK/LOCAL_RANK (env launcher), PET_* (read by
    torchrun and Kubeflow tooling: PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
    PET_MASTER_ADDR, PET_MASTER_PORT, and for rendezvous.backend c10d PET_RDZV_BACKEND,
    PET_RDZV_ENDPOINT, PET_RDZV_ID), NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME. With the
    torchrun launcher its command is wrapped by :func:`torchrun_command`, unless it runs
    torchrun itself: then it is left as written and torchrun reads the PET_* variables.
    Never raises for a validated spec.
    """
    labels = _labels(job, constants.ROLE_WORKER, rank, attempt, _template_labels(spec))
    pod = _base_pod(job, spec, worker_pod_name(job.name, rank), labels, rank)
    pod_spec = pod["spec"]
    if node:
        _require_node_affinity(pod_spec, node)
    nproc = nproc_per_node(spec)
    world = spec.num_nodes * nproc
    env = [
        _env_var("MASTER_ADDR", rdzv.master_addr),
        _env_var("MASTER_PORT", rdzv.master_port),
        _env_var("PET_MASTER_ADDR", rdzv.master_addr),
        _env_var("PET_MASTER_PORT", rdzv.master_port),
        _env_var("PET_NNODES", spec.num_nodes),
        _env_var("PET_NPROC_PER_NODE", nproc),
        _env_var("PET_NODE_RANK", rank),
        _env_var("NODE_RANK", rank),
    ]
    if str(spec.rendezvous.backend) == "c10d":
        env += [
            _env_var("PET_RDZV_BACKEND", "c10d"),
            _env_var("PET_RDZV_ENDPOINT", f"{rdzv.master_addr}:{rdzv.master_port}"),
            _env_var("PET_RDZV_ID", job.uid),
        ]
    if spec.launcher == Launcher.env.value:
        env += [
            _env_var("WORLD_SIZE", world),
            _env_var("RANK", rank * nproc),
            _env_var("LOCAL_RANK", 0),
            _env_var("LOCAL_WORLD_SIZE", nproc),
        ]
    if rdzv.socket_ifname:
        nccl = f"={rdzv.socket_ifname}" if rdzv.exact else rdzv.socket_ifname
        env += [
            _env_var("NCCL_SOCKET_IFNAME", nccl),
            _env_var("GLOO_SOCKET_IFNAME", rdzv.socket_ifname),
        ]
    trainer = _trainer(spec)
    trainer["env"] = _merge_env(trainer.get("env"), env)
    command, args = _list(trainer.get("command")), _list(trainer.get("args"))
    if spec.launcher == Launcher.torchrun.value and not torchrun.launches(command + args):
        trainer["command"] = torchrun_command(
            command,
            args,
            spec.num_nodes,
            nproc,
            rank,
            rdzv,
            str(spec.rendezvous.backend),
            job.uid,
        )
        trainer["args"] = []
    trainer.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    _declare_rendezvous_port(trainer, spec, rank)
    pod_spec["containers"] = [trainer] + _list(pod_spec.get("containers"))[1:]
    return pod
