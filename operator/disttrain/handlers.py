"""kopf wiring: watch events only trigger the level-based reconcile; no logic lives here.

Why event handlers and not ``@kopf.timer``: kopf puts a finalizer on every object that has
timers or daemons, so deleting a job while the operator is down would hang. Events plus a
sweep task (for deadlines and as a safety net) need no finalizer: ownerReferences and the
garbage collector remove the children.

Each trigger runs :func:`step` for one job in a worker thread; triggers for a job that is
already being reconciled are coalesced into one more run afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import datetime, timezone

import kopf
from kubernetes import config as kube_config

from . import conditions as cond
from . import constants as c
from . import metrics
from .kube import Kube
from .reconcile import reconcile
from .report import parse_report as _parse_report_model

log = logging.getLogger("disttrain.handlers")

SWEEP_SECONDS = float(os.environ.get("DISTTRAIN_SWEEP_SECONDS", "2"))

_kube: Kube | None = None
_running: set[tuple[str, str]] = set()
_dirty: set[tuple[str, str]] = set()
_active: set[tuple[str, str]] = set()  # known, non-terminal jobs (swept periodically)


def parse_report(raw: str) -> dict:
    """Termination message -> the report's camelCase dict; ValueError when invalid."""
    return _parse_report_model(raw).model_dump(by_alias=True, mode="json")


def step(namespace: str, name: str) -> None:
    """One reconcile of one job: read fresh, compute the plan, apply it."""
    assert _kube is not None
    job = _kube.get_job(namespace, name)
    if job is None or job["metadata"].get("deletionTimestamp"):
        _active.discard((namespace, name))
        metrics.forget(namespace, name)
        return
    pods = _kube.list_pods(namespace, name)
    plan = reconcile(
        job,
        pods,
        datetime.now(timezone.utc),
        parse_report,
        probe_image=os.environ.get("DISTTRAIN_PROBE_IMAGE", c.DEFAULT_PROBE_IMAGE),
    )
    _kube.apply(job, plan)
    metrics.observe(namespace, name, job.get("status"), plan.status)
    conds = plan.status.get("conditions") or []
    terminal = cond.is_true(conds, c.SUCCEEDED) or cond.is_true(conds, c.FAILED)
    # Terminal jobs are still visited by events (cleanup), not by the sweep.
    if terminal and not plan.deletes:
        _active.discard((namespace, name))
    else:
        _active.add((namespace, name))


async def trigger(namespace: str, name: str) -> None:
    """Reconcile a job now, or once more right after the run in progress."""
    key = (namespace, name)
    if key in _running:
        _dirty.add(key)
        return
    _running.add(key)
    try:
        while True:
            _dirty.discard(key)
            try:
                await asyncio.to_thread(step, namespace, name)
            except Exception:  # the sweep retries; never kill the event loop
                log.exception("reconcile of %s/%s failed; will retry", namespace, name)
                _active.add(key)
            if key not in _dirty:
                break
    finally:
        _running.discard(key)


async def _sweep() -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        for ns, name in list(_active):
            asyncio.create_task(trigger(ns, name))


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_) -> None:
    global _kube
    # kopf's own progress goes to annotations under our prefix; .status is for users.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.disttrain.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.disttrain.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config()
    _kube = Kube()
    asyncio.create_task(_sweep())


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def job_event(event, name, namespace, **_) -> None:
    if event.get("type") == "DELETED":
        _active.discard((namespace, name))
        return
    await trigger(namespace, name)


@kopf.on.event("", "v1", "pods", labels={c.LABEL_JOB: kopf.PRESENT})
async def pod_event(labels, namespace, **_) -> None:
    await trigger(namespace, labels[c.LABEL_JOB])
