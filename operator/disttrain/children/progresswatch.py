"""The stall watch on a training pod (pure): the recorder in the trainer, a native sidecar
whose readiness reports the ranks' progress.

What it adds to a training pod (``spec.runPolicy.stallTimeoutSeconds``, issue 33):

- an init container from the probe image that copies the probe package into an emptyDir
  (the same one probe pods use with ``probe.useTrainingImage``);
- the trainer's command wrapped by ``/bin/sh`` so that the package's ``sitecustomize``
  directory comes first on the trainer's PYTHONPATH, after whatever the image or the
  template set (a ``PYTHONPATH`` in the pod spec would hide the image's own), and
  ``DISTTRAIN_PROGRESS_DIR`` on an emptyDir shared with the sidecar: every Python process
  of the trainer (plain ``python train.py``, torchrun's workers) starts the recorder;
- a native sidecar (an init container with ``restartPolicy: Always``) from the probe image,
  idle but for its readinessProbe, ``python -m disttrain_probe.progress.ready``: Ready while
  every rank of the pod advances, not Ready (with its one-line summary in the kubelet's
  Event) when one has not for ``stall_after_s`` seconds. The operator reads both without
  new rights: pod status and Events it already watches and lists.

A trainer without a ``command`` (the image's entrypoint runs) cannot be wrapped: the pod
is left without the watch, and :func:`watch_problem` says why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants
from disttrain.children.podbase import env_var, list_of, merge_env
from disttrain_probe.contract import progress

PROGRESS_VOLUME = "disttrain-progress"
PROGRESS_MOUNT = "/var/run/disttrain/progress"
SIDECAR_NAME = "disttrain-progress"
INSTALL_NAME = "install-probe"
SITE_DIR = constants.PROBE_INSTALL_DIR + "/site"  # holds sitecustomize.py (disttrain_probe.install)
# torch's Flight Recorder, so a rank's record names the collective it waits in (DDP's and
# NCCL's waits otherwise read as Python at backward()); set only where the template has not
# (TORCH_NCCL_TRACE_BUFFER_SIZE: its name in torch 2.2-2.6); a few us per collective
FLIGHT_RECORDER_ENV = {"TORCH_FR_BUFFER_SIZE": "200", "TORCH_NCCL_TRACE_BUFFER_SIZE": "200"}
READY_PERIOD_S = 5  # the readinessProbe's periodSeconds: the detection delay's grain
# failures in a row before not Ready: a straggler's sidecar fails one check now and then to
# say so in the Event (every failure is one, whatever the threshold) and stays Ready
READY_FAILURES = 2
# the sidecar's own needs: an idle Python plus a short Python run every READY_PERIOD_S
SIDECAR_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}}
# prepends SITE_DIR to PYTHONPATH as the container starts, then runs the trainer's argv
WRAP = ('PYTHONPATH="' + SITE_DIR + '${PYTHONPATH:+:$PYTHONPATH}" exec "$@"')


@dataclass(frozen=True)
class ProgressWatch:
    """What the watch needs: the probe image (the package and the sidecar's Python) and
    the seconds without progress after which the sidecar turns not Ready (>= 1)."""
    image: str
    stall_after_s: int


def watch_problem(trainer: dict[str, Any]) -> Optional[str]:
    """Why the watch cannot be added to this trainer container, or None."""
    if not [c for c in list_of(trainer.get("command")) if isinstance(c, str)]:
        return ("the trainer container has no command (the image's entrypoint runs), so the "
                "progress recorder cannot be started in it; set command in the template to "
                "watch training for stalls")
    return None


def wrapped_command(command: list[str], args: list[str]) -> list[str]:
    """``command + args`` run by ``/bin/sh -c WRAP``: the same argv, SITE_DIR first on
    PYTHONPATH. Shell-safe: the argv is passed as positional parameters, never parsed."""
    return ["/bin/sh", "-c", WRAP, "disttrain-progress", *command, *args]


def _install_container(image: str) -> dict[str, Any]:
    return {
        "name": INSTALL_NAME,
        "image": image,
        "command": ["python", "-m", "disttrain_probe.install", constants.PROBE_INSTALL_DIR],
        "volumeMounts": [{"name": constants.PROBE_VOLUME, "mountPath": constants.PROBE_INSTALL_DIR}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def sidecar_container(watch: ProgressWatch) -> dict[str, Any]:
    """The native sidecar: idle, Ready while the pod's ranks advance."""
    return {
        "name": SIDECAR_NAME,
        "image": watch.image,
        "restartPolicy": "Always",
        "command": ["python", "-c", "import signal; signal.pause()"],
        "env": [env_var(progress.PROGRESS_DIR_ENV, PROGRESS_MOUNT)],
        "volumeMounts": [{"name": PROGRESS_VOLUME, "mountPath": PROGRESS_MOUNT, "readOnly": True}],
        "readinessProbe": {
            "exec": {"command": ["python", "-m", "disttrain_probe.progress.ready",
                                 "--stall-after", str(max(1, watch.stall_after_s))]},
            "periodSeconds": READY_PERIOD_S, "timeoutSeconds": READY_PERIOD_S,
            "successThreshold": 1, "failureThreshold": READY_FAILURES,
        },
        "resources": SIDECAR_RESOURCES,
    }


def add_watch(pod_spec: dict[str, Any], trainer: dict[str, Any], watch: ProgressWatch) -> bool:
    """Add the watch to ``pod_spec`` and ``trainer`` in place (before the trainer is put back
    into the pod spec); False, changing nothing, when :func:`watch_problem` refuses it.
    The install container and the sidecar come first among the init containers, so the
    package is there before any of the template's own run."""
    if watch_problem(trainer) is not None:
        return False
    ours = {constants.PROBE_VOLUME, PROGRESS_VOLUME}
    pod_spec["volumes"] = [v for v in list_of(pod_spec.get("volumes"))
                           if not (isinstance(v, dict) and v.get("name") in ours)] + [
        {"name": constants.PROBE_VOLUME, "emptyDir": {}}, {"name": PROGRESS_VOLUME, "emptyDir": {}}]
    inits = [c for c in list_of(pod_spec.get("initContainers"))
             if not (isinstance(c, dict) and c.get("name") in (INSTALL_NAME, SIDECAR_NAME))]
    pod_spec["initContainers"] = [_install_container(watch.image), sidecar_container(watch), *inits]
    command = [c for c in list_of(trainer.get("command")) if isinstance(c, str)]
    args = [a for a in list_of(trainer.get("args")) if isinstance(a, str)]
    trainer["command"], trainer["args"] = wrapped_command(command, args), []
    have = {e.get("name") for e in list_of(trainer.get("env")) if isinstance(e, dict)}
    trainer["env"] = merge_env(trainer.get("env"), [env_var(progress.PROGRESS_DIR_ENV, PROGRESS_MOUNT)] + [
        env_var(k, v) for k, v in FLIGHT_RECORDER_ENV.items() if k not in have])
    mounts = [m for m in list_of(trainer.get("volumeMounts"))
              if not (isinstance(m, dict) and m.get("name") in ours)]
    trainer["volumeMounts"] = mounts + [
        {"name": constants.PROBE_VOLUME, "mountPath": constants.PROBE_INSTALL_DIR, "readOnly": True},
        {"name": PROGRESS_VOLUME, "mountPath": PROGRESS_MOUNT}]
    return True


@dataclass(frozen=True)
class ProgressEvent:
    """The latest word of one pod's progress sidecar: the readiness probe's output (the
    one-line summary, ``Readiness probe failed: `` removed) and when the kubelet last said it
    (RFC 3339, as the Event has it; "" when unknown)."""
    pod: str
    summary: str
    at: str


def sidecar_status(pod: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The pod's status of its progress sidecar (initContainerStatuses), None when absent."""
    for cs in list_of((pod.get("status") or {}).get("initContainerStatuses")):
        if isinstance(cs, dict) and cs.get("name") == SIDECAR_NAME:
            return cs
    return None


def sidecar_started(pods: list[dict[str, Any]]) -> list[str]:
    """The names of the pods whose progress sidecar has started, Ready or not (a not Ready one's
    word says where its ranks wait; a Ready one's can only say a straggler)."""
    out = []
    for p in pods:
        cs = sidecar_status(p)
        name = (p.get("metadata") or {}).get("name")
        if cs is not None and cs.get("started") is True and isinstance(name, str):
            out.append(name)
    return out


READINESS_PREFIX = "Readiness probe failed: "
FIELD_PATH = f"spec.initContainers{{{SIDECAR_NAME}}}"


def latest_words(events: list[dict[str, Any]], pods: list[str],
                 uids: Optional[dict[str, str]] = None) -> tuple[ProgressEvent, ...]:
    """Of ``Unhealthy`` Events (as the API returns them, any order), the latest readiness
    failure of each of ``pods``' progress sidecars. ``uids``: pod name -> metadata.uid; an
    Event of an earlier pod of that name (a restarted attempt's ranks keep their names) is
    skipped. Events of other pods or containers, and ones without a readiness message, are
    skipped; never raises."""
    wanted, best, uids = set(pods), dict[str, ProgressEvent](), uids or {}
    for e in events:
        if not isinstance(e, dict):
            continue
        obj = e.get("involvedObject") or e.get("involved_object")
        obj = obj if isinstance(obj, dict) else {}
        pod, path = obj.get("name"), obj.get("fieldPath") or obj.get("field_path")
        msg = e.get("message")
        if pod not in wanted or path != FIELD_PATH or not isinstance(msg, str):
            continue
        if uids.get(pod) and obj.get("uid") != uids[pod]:
            continue
        msg = msg.rpartition(READINESS_PREFIX)[2] if READINESS_PREFIX in msg else ""
        at = e.get("lastTimestamp") or e.get("last_timestamp") or e.get("eventTime") or e.get("event_time") or ""
        at = at if isinstance(at, str) else str(at)
        if msg and (pod not in best or at >= best[pod].at):
            best[pod] = ProgressEvent(pod, msg.strip()[:1024], at)
    return tuple(best[p] for p in pods if p in best)
