"""Pure builders: DistTrainingJob spec -> desired training pod manifests (the probe pod is
:mod:`disttrain.children.probepod`, the shared parts :mod:`disttrain.children.podbase`).

No I/O here. Each builder returns a plain dict (a core/v1 Pod) with labels and an
ownerReference to the job, so deleting the job garbage-collects its children.

Builders never raise for a spec that :class:`disttrain.api.types.DistTrainingJobSpec` accepted:
the template is typed at admission (:mod:`disttrain.api.podtemplate`), and the code that reads
it still takes a null or an odd shape as absent (:func:`~disttrain.children.podbase.dict_of`/``list_of``), so a job that
slipped past an older CRD cannot crash a reconcile step. Children are validly named when
:func:`disttrain.api.jobname.job_name_problem` accepts the job's name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants, torchrun
from disttrain.api.types import DistTrainingJobSpec, Launcher, nproc_for
from disttrain.children.names import JobRef, worker_pod_name
from disttrain.children.podbase import (
    base_pod,
    declare_rendezvous_port,
    env_var,
    list_of,
    merge_env,
    pod_labels,
    require_node_affinity,
    template_labels,
    trainer_container,
    with_trainer,
)

# kubectl's annotation naming the container `kubectl logs` and `exec` use by default
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


@dataclass(frozen=True)
class Rendezvous:
    """Validated rendezvous for one pod: where the master is and which NIC to use."""

    master_addr: str
    master_port: int
    socket_ifname: Optional[str] = None  # None: leave NCCL/GLOO to their defaults
    # True when socket_ifname is one interface the probe chose: NCCL then gets "=name",
    # its exact-match syntax (a plain "eth1" is a prefix and would also match eth10).
    exact: bool = False


@dataclass(frozen=True)
class TorchrunOptions:
    """What torchrun is told besides the rendezvous address: ``num_nodes`` (--nnodes),
    ``nproc`` (--nproc-per-node), ``node_rank`` (--node-rank, static backend), ``backend``
    (``static`` or ``c10d``) and ``run_id`` (--rdzv-id with c10d: the job's uid)."""

    num_nodes: int
    nproc: int
    node_rank: int
    backend: str
    run_id: str


def torchrun_command(
    command: list[str],
    args: list[str],
    options: TorchrunOptions,
    rdzv: Rendezvous,
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
    A command that already runs torchrun (:func:`disttrain.api.torchrun.runs_torchrun`) is returned
    as written (command + args): torchrun then reads the rendezvous from PET_* (see
    :func:`build_worker_pod`). Never raises.
    """
    full = [a for a in list(command) + list(args) if isinstance(a, str)]
    if torchrun.runs_torchrun(full):
        return full
    opts = ["torchrun", f"--nnodes={options.num_nodes}", f"--nproc-per-node={options.nproc}"]
    if options.backend == "c10d":
        opts += [
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rdzv.master_addr}:{rdzv.master_port}",
            f"--rdzv-id={options.run_id}",
        ]
    else:
        opts += [
            f"--node-rank={options.node_rank}",
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
    nodeAffinity, so the scheduler still checks resources and taints. The trainer container
    (:func:`disttrain.api.types.trainer_of`; sidecars, plain or native, are left as written) gets MASTER_ADDR/MASTER_PORT, WORLD_SIZE/RANK/LOCAL_RANK (env launcher), PET_* (read by
    torchrun and Kubeflow tooling: PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE,
    PET_MASTER_ADDR, PET_MASTER_PORT, and for rendezvous.backend c10d PET_RDZV_BACKEND,
    PET_RDZV_ENDPOINT, PET_RDZV_ID), NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME. With the
    torchrun launcher its command is wrapped by :func:`torchrun_command`, unless it runs
    torchrun itself: then it is left as written and torchrun reads the PET_* variables.
    With sidecars, the pod's kubectl.kubernetes.io/default-container annotation names the
    trainer (unless the template sets it). Never raises for a validated spec.
    """
    labels = pod_labels(job, constants.ROLE_WORKER, rank, attempt, template_labels(spec))
    pod = base_pod(job, spec, worker_pod_name(job.name, rank), labels, rank)
    pod_spec = pod["spec"]
    if node:
        require_node_affinity(pod_spec, node)
    nproc = nproc_for(spec)
    world = spec.num_nodes * nproc
    env = [
        env_var("MASTER_ADDR", rdzv.master_addr),
        env_var("MASTER_PORT", rdzv.master_port),
        env_var("PET_MASTER_ADDR", rdzv.master_addr),
        env_var("PET_MASTER_PORT", rdzv.master_port),
        env_var("PET_NNODES", spec.num_nodes),
        env_var("PET_NPROC_PER_NODE", nproc),
        env_var("PET_NODE_RANK", rank),
        env_var("NODE_RANK", rank),
    ]
    if str(spec.rendezvous.backend) == "c10d":
        env += [
            env_var("PET_RDZV_BACKEND", "c10d"),
            env_var("PET_RDZV_ENDPOINT", f"{rdzv.master_addr}:{rdzv.master_port}"),
            env_var("PET_RDZV_ID", job.uid),
        ]
    if spec.launcher == Launcher.env.value:
        env += [
            env_var("WORLD_SIZE", world),
            env_var("RANK", rank * nproc),
            env_var("LOCAL_RANK", 0),
            env_var("LOCAL_WORLD_SIZE", nproc),
        ]
    if rdzv.socket_ifname:
        nccl = f"={rdzv.socket_ifname}" if rdzv.exact else rdzv.socket_ifname
        env += [
            env_var("NCCL_SOCKET_IFNAME", nccl),
            env_var("GLOO_SOCKET_IFNAME", rdzv.socket_ifname),
        ]
    trainer = trainer_container(spec)
    trainer["env"] = merge_env(trainer.get("env"), env)
    command, args = list_of(trainer.get("command")), list_of(trainer.get("args"))
    if spec.launcher == Launcher.torchrun.value and not torchrun.runs_torchrun(command + args):
        options = TorchrunOptions(spec.num_nodes, nproc, rank, str(spec.rendezvous.backend), job.uid)
        trainer["command"] = torchrun_command(command, args, options, rdzv)
        trainer["args"] = []
    trainer.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    declare_rendezvous_port(trainer, spec, rank)
    with_trainer(spec, pod_spec, trainer)
    if len(list_of(pod_spec.get("containers"))) > 1 and isinstance(trainer.get("name"), str):
        # `kubectl logs <pod>` (and exec) then show the trainer, not the first sidecar
        pod["metadata"]["annotations"].setdefault(DEFAULT_CONTAINER, trainer["name"])
    return pod
