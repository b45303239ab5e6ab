"""kopf wiring: watch events only trigger the level-based reconcile; no logic lives here.

Why event handlers and not ``@kopf.timer``: kopf puts a finalizer on every object that has
timers or daemons, so deleting a job while the operator is down would hang. Events, the
plan's own ``requeue_after`` (the next time-based decision: a probe budget, a deadline, a
TTL) and a slow sweep as a safety net need no finalizer: ownerReferences and the garbage
collector remove the children.

Each trigger runs :func:`step` for one job in a worker thread; triggers for a job that is
already being reconciled are coalesced into one more run afterwards. A step never raises
into kopf: a failed read is retried with exponential backoff, and failed writes are fed to
the next step (:mod:`disttrain.reconcile.policies.apierrors`), which shows them on the job.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Optional

import kopf
from kubernetes import config as kube_config

from disttrain.api import constants
from disttrain.shell import metrics
from disttrain.shell.kube import Kube
from disttrain.shell.runner import Reconciler
from disttrain_probe.contract import probe_env

log = logging.getLogger("disttrain.handlers")

# Safety net only: precise wake-ups come from each plan's requeue_after.
SWEEP_SECONDS = float(os.environ.get("DISTTRAIN_SWEEP_SECONDS", "10"))

Key = tuple[str, str]
_reconciler: Optional[Reconciler] = None
_running: set[Key] = set()
_dirty: set[Key] = set()
_active: set[Key] = set()  # known, non-terminal jobs (swept periodically)
_timers: dict[Key, asyncio.TimerHandle] = {}
_due: dict[Key, float] = {}  # loop time at which the pending timer fires


def step(namespace: str, name: str) -> Optional[float]:
    """One step of one job with the operator's API handle (see :meth:`Reconciler.step`)."""
    assert _reconciler is not None
    key = (namespace, name)
    result = _reconciler.step(namespace, name)
    if result.gone:
        _forget(key)
        return None
    if result.settled:
        _active.discard(key)  # still visited by events and its TTL timer
    else:
        _active.add(key)
    return result.delay


def _forget(key: Key) -> None:
    _active.discard(key)
    if _reconciler is not None:
        _reconciler.forget(key)
    handle = _timers.pop(key, None)
    _due.pop(key, None)
    if handle is not None:
        handle.cancel()
    metrics.forget(*key)


def _schedule(key: Key, delay: float) -> None:
    """Run the job's step again in ``delay`` seconds (an earlier pending wake-up wins)."""
    loop = asyncio.get_running_loop()
    at = loop.time() + max(0.2, delay)
    if key in _timers and _due.get(key, float("inf")) <= at:
        return
    if key in _timers:
        _timers[key].cancel()

    def fire() -> None:
        _timers.pop(key, None)
        _due.pop(key, None)
        asyncio.ensure_future(trigger(*key))

    _timers[key] = loop.call_at(at, fire)
    _due[key] = at


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
                delay = await asyncio.to_thread(step, namespace, name)
            except Exception:  # noqa: BLE001 - a bug in the shell: never kill the event loop
                log.exception("reconcile of %s/%s failed; retrying", namespace, name)
                delay = 10.0
            if delay is not None:
                _schedule(key, delay)
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
    global _reconciler
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
    _reconciler = Reconciler(Kube(), os.environ.get(probe_env.IMAGE, constants.DEFAULT_PROBE_IMAGE))
    asyncio.create_task(_sweep())


@kopf.on.event(constants.GROUP, constants.VERSION, constants.PLURAL)
async def job_event(event, name, namespace, **_) -> None:
    if event.get("type") == "DELETED":
        _forget((namespace, name))
        return
    await trigger(namespace, name)


@kopf.on.event("", "v1", "pods", labels={constants.LABEL_JOB: kopf.PRESENT})
async def pod_event(labels, namespace, **_) -> None:
    await trigger(namespace, labels[constants.LABEL_JOB])
