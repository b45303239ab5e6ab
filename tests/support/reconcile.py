"""Reconcile steps for the unit tests: one pure step of a job at a fixed time, the plan's
status fed back, and the pods of finished probes and of workers (see
:mod:`tests.support.fixtures` for the single objects)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from disttrain.reconcile.loop import reconcile
from disttrain.reconcile.step import Observed

from .fixtures import job, json_parser, node_name, pod, report

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)


def step(body, pods, now=NOW, **observed):
    """One reconcile step of ``body`` with ``pods`` at ``now``; ``observed``: the rest of
    :class:`~disttrain.reconcile.step.Observed` (services, api_failures, capabilities, kueue)."""
    return reconcile(Observed.of(body, pods, now, **observed), json_parser, probe_image="probe:1")


def advance(body, plan):
    body = dict(body)
    body["status"] = plan.status
    return body


def names(plan):
    return [p["metadata"]["name"] for p in plan.creates]


def finished_probes(r0=None, r1=None):
    r0 = r0 or report(0, "node-a")
    r1 = r1 or report(1, "node-b")
    return [pod("j-probe-0", "probe", 0, phase="Succeeded", node="node-a", host_ip="10.100.0.10",
                message=json.dumps(r0), exit_code=0),
            pod("j-probe-1", "probe", 1, phase="Succeeded", node="node-b", host_ip="10.100.0.11",
                message=json.dumps(r1), exit_code=0)]


def validated_body():
    body = advance(job(), step(job(), []))
    return advance(body, step(body, finished_probes()))


def workers(*phases, attempt=0, exit_code=1):
    """One training pod per rank of ``attempt`` in these phases, rank r on node r; a failed
    one exited ``exit_code`` with a traceback."""
    return [pod(f"j-worker-{r}", "worker", r, attempt=attempt, phase=ph, node=node_name(r),
                container="trainer", exit_code=exit_code if ph == "Failed" else None,
                message="Traceback: boom" if ph == "Failed" else None) for r, ph in enumerate(phases)]


def _state(state, message=None):
    """A container status' ``state``: "running", or an exit code (terminated)."""
    if state == "running":
        return {"running": {"startedAt": "2026-11-30T11:59:30Z"}}
    return {"terminated": {"exitCode": state, "message": message}}


def sidecar_worker(rank, trainer="running", sidecar="running", *, phase="Running", attempt=0,
                   sidecar_first=True, init=None, host_port=False):
    """Rank ``rank``'s training pod with a plain sidecar ``logs`` (listed before the trainer
    unless ``sidecar_first`` is False) and the trainer ``trainer``, on node r; each
    container's state "running" or its exit code; a failed trainer's message says
    "Traceback: boom", a sidecar's "proxy: all good". ``init``: (name, exit code) of a
    plain init container; ``host_port``: the trainer declares hostPort 29500."""
    p = pod(f"j-worker-{rank}", "worker", rank, attempt=attempt, phase=phase, node=node_name(rank),
            container="trainer")
    ctrs = [{"name": "logs"}, {"name": "trainer"}]
    if host_port:
        ctrs[1]["ports"] = [{"containerPort": 29500, "hostPort": 29500}]
    p["spec"]["containers"] = ctrs if sidecar_first else ctrs[::-1]
    p["status"]["containerStatuses"] = [
        {"name": "logs", "state": _state(sidecar, "proxy: all good")},
        {"name": "trainer", "state": _state(trainer, "Traceback: boom" if trainer not in ("running", 0) else None)}]
    if init:
        p["spec"]["initContainers"] = [{"name": init[0]}, {"name": "shipper", "restartPolicy": "Always"}]
        p["status"]["initContainerStatuses"] = [
            {"name": init[0], "state": _state(init[1], "pip: no such package")},
            {"name": "shipper", "state": _state("running")}]
    return p
