"""Reconcile steps for the unit tests: one pure step of a job at a fixed time, the plan's
status fed back, and the pods of finished probes and of workers (see
:mod:`tests.support.fixtures` for the single objects)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

from disttrain.reconcile.loop import Observed, reconcile

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
