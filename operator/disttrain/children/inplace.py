"""The preflight in place (``spec.probe.placement: InPlace``): the training pods run the
probe as their trainer's first step, then the user's command. Pure.

What a training pod gets (:func:`build_pod`, on top of
:func:`disttrain.children.pods.build_worker_pod`):

- the trainer's command ``python -c <bootstrap> -- <command> <args>``, which waits for the
  probe program and runs it as ``python /opt/disttrain-probe/run_probe.py -- <command>``:
  the probe runs every phase with its peers exactly as in a probe pod, and only when every
  rank passed hands over to the user's command, in the same interpreter for a Python script
  or module (torch is imported once) or by exec, with the interface it chose in
  ``NCCL_SOCKET_IFNAME``/``GLOO_SOCKET_IFNAME``; a failed preflight runs no command;
- the probe's environment (:func:`disttrain.children.probepod.probe_env_vars`: RANK,
  WORLD_SIZE and MASTER_ADDR as a probe pod's, the ``DISTTRAIN_PROBE_*`` settings), its
  report written to :data:`REPORT_PATH` on an emptyDir shared with
- the relay container :data:`RELAY` (the probe image, ``python -m disttrain_probe.install
  /opt/disttrain-probe --then-relay ...``): it copies the probe program into an emptyDir
  shared with the trainer (no init container: both start together, about a second sooner),
  then copies the final report to its own termination message and ends as soon as the
  report is there, and the kubelet hands it to the operator while
  training runs on (a pod tells the operator nothing else without new rights);
- one pod per node (required pod anti-affinity). With the stall watch its init container
  installs the probe before the trainer starts (its ``sitecustomize`` must be there when
  Python starts); the relay then finds it there.

:func:`probe_view` shows such a pod as the probe run reads a probe pod (a ``probe``
container whose termination message is the report), so the scheduling verdict, the
kubelet's word, node loss and the verdict's rules are the same code for both placements.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants, torchrun
from disttrain.api.common import Launcher, RendezvousBackend
from disttrain.api.types import DistTrainingJobSpec, nproc_for, trainer_index, trainer_of
from disttrain.children.names import JobRef, master_dns_name, uses_dns_hostnames
from disttrain.children.podbase import declare_beacon_port, env_var, list_of, merge_env, one_per_node, report_budget_env
from disttrain.children.pods import DEFAULT_CONTAINER, Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, probe_env_vars
from disttrain_probe.contract import probe_env, vocabulary
from disttrain_probe.contract.install import install_bootstrap

RELAY = "preflight"  # the relay container's name
PROBE = "probe"  # the container a probe pod runs the probe in (what probe_view shows)
REPORT_VOLUME = "disttrain-preflight"
REPORT_DIR = "/var/run/disttrain/preflight"
REPORT_PATH = REPORT_DIR + "/report.json"
# The relay only waits for a file: a Python interpreter without torch, about 10 MiB.
RELAY_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
RELAY_GRACE_SECONDS = 60  # the relay gives up this long after the probe's own budget
# The kubelet's reasons for ending a trainer that are never the probe's own exit: after the
# relay holds the final report they are training's (:func:`_probe_status`).
KILLED_AFTER_REPORT = (vocabulary.OOM_KILLED,)


def _volumes(pod_spec: dict[str, Any], trainer: dict[str, Any]) -> None:
    """The probe program's emptyDir (the relay copies the probe into it) and the report's,
    both mounted in the trainer."""
    ours = {constants.PROBE_VOLUME, REPORT_VOLUME}
    pod_spec["volumes"] = [v for v in list_of(pod_spec.get("volumes"))
                           if not (isinstance(v, dict) and v.get("name") in ours)] + [
        {"name": constants.PROBE_VOLUME, "emptyDir": {}}, {"name": REPORT_VOLUME, "emptyDir": {}}]
    mounts = [m for m in list_of(trainer.get("volumeMounts"))
              if not (isinstance(m, dict) and (m.get("name") in ours or m.get("mountPath") in
                                               (constants.PROBE_INSTALL_DIR, REPORT_DIR)))]
    trainer["volumeMounts"] = mounts + [
        {"name": constants.PROBE_VOLUME, "mountPath": constants.PROBE_INSTALL_DIR},
        {"name": REPORT_VOLUME, "mountPath": REPORT_DIR}]


def relay_container(spec: DistTrainingJobSpec, image: str) -> dict[str, Any]:
    """The container that ends once the report is written, so the kubelet hands it over."""
    return {
        "name": RELAY,
        "image": image,
        # copied to the kubelet's own file: the kubelet mounts that file at the path, so a
        # path on the shared emptyDir would hide the trainer's report from the relay
        "command": ["python", "-m", "disttrain_probe.install", constants.PROBE_INSTALL_DIR, "--then-relay",
                    REPORT_PATH, str(spec.probe.timeout_seconds + RELAY_GRACE_SECONDS),
                    "--to", constants.TERMINATION_MESSAGE_PATH],
        "resources": copy.deepcopy(RELAY_RESOURCES),
        "volumeMounts": [{"name": constants.PROBE_VOLUME, "mountPath": constants.PROBE_INSTALL_DIR},
                         {"name": REPORT_VOLUME, "mountPath": REPORT_DIR, "readOnly": True}],
        "terminationMessagePath": constants.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
    }


def _launched(spec: DistTrainingJobSpec) -> DistTrainingJobSpec:
    """The spec the pod is built from: one process per node under the operator's torchrun
    (static rendezvous, a command that does not run torchrun itself) runs the command
    directly with the variables torchrun would give its one worker (the env launcher's:
    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), so the probe hands over in its own
    interpreter and torch is imported once; any other spec as it is."""
    trainer = trainer_of(spec)
    argv = [a for a in list_of(trainer.get("command")) + list_of(trainer.get("args")) if isinstance(a, str)]
    if (spec.launcher == Launcher.torchrun.value and nproc_for(spec) == 1 and not torchrun.runs_torchrun(argv)
            and str(spec.rendezvous.backend) == RendezvousBackend.static.value):
        return spec.model_copy(update={"launcher": Launcher.env.value})
    return spec


@dataclass(frozen=True)
class Attempts:
    """``probe``: status.probe.attempt (1-based), which the report echoes; ``training``:
    status.restarts, the training pods' attempt label."""

    probe: int
    training: int


def build_pod(job: JobRef, spec: DistTrainingJobSpec, rank: int, master: ProbeMaster, attempts: Attempts,
              probe_image: str) -> dict[str, Any]:
    """The training pod of node rank ``rank`` that runs the probe first (see the module).

    ``master``: rank 0's address (None for rank 0 itself, as for a probe pod). The spec refuses a trainer without
    a command (:func:`disttrain.api.types.in_place_problem`)."""
    own = master_dns_name(job, spec) if uses_dns_hostnames(spec) else "$(HOST_IP)"
    rdzv = Rendezvous(master.addr or own, spec.rendezvous.port,
                      None if spec.network.socket_ifname == "auto" else spec.network.socket_ifname)
    pod = build_worker_pod(job, _launched(spec), rank, None, rdzv, attempts.training)
    pod_spec = pod["spec"]
    containers = list_of(pod_spec.get("containers"))
    i = trainer_index(spec)
    if not (0 <= i < len(containers) and isinstance(containers[i], dict)):
        return pod
    trainer = containers[i]
    image = spec.probe.image or probe_image
    env = probe_env_vars(job, spec, rank, master, attempts.probe)
    env = [e for e in env if e.get("name") != probe_env.REPORT_PATH] + [env_var(probe_env.REPORT_PATH, REPORT_PATH)]
    # the probe's names (RANK, WORLD_SIZE, MASTER_ADDR as a probe pod has them) win, and
    # HOST_IP first: rank 0's MASTER_ADDR refers to it
    trainer["env"] = merge_env(trainer.get("env"), env)
    trainer["env"] = sorted(trainer["env"], key=lambda e: e.get("name") != "HOST_IP")
    command = [c for c in list_of(trainer.get("command")) if isinstance(c, str)]
    args = [a for a in list_of(trainer.get("args")) if isinstance(a, str)]
    # no init container (one more container start, about a second, before the trainer's):
    # the relay copies the probe in as both start, the trainer waits for it
    trainer["command"] = ["python", "-c", install_bootstrap(constants.PROBE_INSTALL_DIR), "--", *command, *args]
    trainer["args"] = []
    declare_beacon_port(trainer, spec, rank)
    _volumes(pod_spec, trainer)
    containers.append(relay_container(spec, image))
    pod_spec["containers"] = containers
    # the relay's termination message carries the report: its share of the pod's 12 KiB
    trainer["env"] = merge_env(trainer["env"], [report_budget_env(pod_spec)])
    if isinstance(trainer.get("name"), str):  # kubectl logs <pod> shows the trainer, not the relay
        pod["metadata"]["annotations"].setdefault(DEFAULT_CONTAINER, trainer["name"])
    one_per_node(pod_spec, {k: v for k, v in pod["metadata"]["labels"].items()
                            if k in (constants.LABEL_JOB, constants.LABEL_ROLE, constants.LABEL_ATTEMPT)})
    return pod


def _status_named(statuses: list, name: str) -> Optional[dict]:
    return next((cs for cs in statuses if isinstance(cs, dict) and cs.get("name") == name), None)


def _terminated(cs: Optional[dict]) -> Optional[dict]:
    t = ((cs or {}).get("state") or {}).get("terminated")
    return t if isinstance(t, dict) else None


def _probe_status(relay: Optional[dict], main: Optional[dict]) -> Optional[dict]:
    """The ``probe`` container's status a probe pod would show: the relay's end with the
    report (and the trainer's exit code when it ended too), else the trainer's own state
    (running the probe, or ended before the report: killed, out of memory, crashed)."""
    relay_end, main_end = _terminated(relay), _terminated(main)
    if relay_end is not None and relay_end.get("exitCode") == 0:
        # the relay ends 0 only with the probe's final report: the probe was done, so a kill
        # of the trainer after that (out of memory right after the hand-over) is training's
        # (the training phase reads it from the pod), not the probe's end
        end = dict(relay_end)
        own = main_end if main_end is not None and main_end.get("reason") not in KILLED_AFTER_REPORT else None
        end["exitCode"] = own.get("exitCode", 0) if own is not None else 0
        end["reason"] = own.get("reason", "Completed") if own is not None else "Completed"
        return {**(main or relay or {}), "name": PROBE, "state": {"terminated": end}}
    if main is None:
        return None
    return {**main, "name": PROBE}


def probe_view(pod: dict[str, Any], trainer: str) -> dict[str, Any]:
    """``pod`` (an in-place training pod as observed) as a probe pod: a ``probe`` container
    in place of the trainer and the relay (the trainer's resources; its status from
    :func:`_probe_status`; the relay's own status kept while it waits to start, so an image
    it cannot pull fails the preflight at once), the pod Succeeded or Failed once that container ended (by its
    exit code), else the pod's own phase. Other containers (sidecars) and everything else
    are the pod's. A copy; never raises for any pod."""
    view: dict[str, Any] = copy.deepcopy(pod) if isinstance(pod, dict) else {}
    spec: dict[str, Any] = view["spec"] if isinstance(view.get("spec"), dict) else {}
    status: dict[str, Any] = view["status"] if isinstance(view.get("status"), dict) else {}
    containers = [c for c in list_of(spec.get("containers")) if isinstance(c, dict)]
    main_spec = next((c for c in containers if c.get("name") == trainer), {})
    spec["containers"] = [{**main_spec, "name": PROBE}] + [c for c in containers
                                                             if c.get("name") not in (trainer, RELAY)]
    statuses = [cs for cs in list_of(status.get("containerStatuses")) if isinstance(cs, dict)]
    relay = _status_named(statuses, RELAY)
    probe = _probe_status(relay, _status_named(statuses, trainer))
    others = [cs for cs in statuses if cs.get("name") not in (trainer, RELAY)]
    if relay is not None and isinstance((relay.get("state") or {}).get("waiting"), dict):
        others.append(relay)  # it cannot start (its image, its config): the scheduling verdict's
    if statuses:
        status["containerStatuses"] = ([probe] if probe is not None else []) + others
    end = _terminated(probe)
    if end is not None and status.get("phase") not in ("Failed",):
        status["phase"] = "Succeeded" if end.get("exitCode") == 0 else "Failed"
    view["spec"], view["status"] = spec, status
    return view
