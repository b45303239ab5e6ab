"""kopf wiring: watch events only trigger the level-based reconcile; no logic lives here.

Why event handlers and not ``@kopf.timer``: kopf puts a finalizer on every object that has
timers or daemons, so deleting a job while the operator is down would hang. Events, the
plan's own ``requeue_after`` (the next time-based decision: a probe budget, a deadline, a
TTL) and a slow sweep as a safety net need no finalizer: ownerReferences and the garbage
collector remove the children.

Each trigger runs :func:`step` for one job in a worker thread; triggers for a job that is
already being reconciled are coalesced into one more run afterwards. A step never raises
into kopf: a failed read is retried with exponential backoff, and failed writes are fed to
the next step (:mod:`disttrain.policies.apierrors`), which shows them on the job.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import replace
from datetime import datetime, timezone
from typing import Optional

import kopf
from kubernetes import config as kube_config

from . import conditions as cond
from . import constants as c
from . import metrics
from .api import DistTrainingJobSpec
from .builders import JobRef, service_name, uses_dns_hostnames
from .kube import Kube, failure_from
from .policies.apierrors import SHOW_AFTER, backoff_seconds
from .reconcile import reconcile
from .report import parse_report as _parse_report_model
from .step import ApiFailure

log = logging.getLogger("disttrain.handlers")

# Safety net only: precise wake-ups come from each plan's requeue_after.
SWEEP_SECONDS = float(os.environ.get("DISTTRAIN_SWEEP_SECONDS", "10"))

Key = tuple[str, str]
_kube: Kube | None = None
_running: set[Key] = set()
_dirty: set[Key] = set()
_active: set[Key] = set()  # known, non-terminal jobs (swept periodically)
_timers: dict[Key, asyncio.TimerHandle] = {}
_due: dict[Key, float] = {}  # loop time at which the pending timer fires
# Calls that failed in the job's last steps, by (verb, kind, name), for the job's UID.
_failures: dict[Key, tuple[str, dict[tuple[str, str, str], ApiFailure]]] = {}
_read_errors: dict[Key, int] = {}


def parse_report(raw: str) -> dict:
    """Termination message -> the report's camelCase dict; ValueError when invalid."""
    return _parse_report_model(raw).model_dump(by_alias=True, mode="json")


def _services(namespace: str, job: dict) -> list[dict]:
    """The Service the job may own (named after it), observed only when it uses one."""
    assert _kube is not None
    try:
        spec = DistTrainingJobSpec.model_validate(job.get("spec") or {})
        ref = JobRef.from_body(job)
    except Exception:  # noqa: BLE001 - an invalid spec is reconcile's to report
        return []
    if not uses_dns_hostnames(spec) or spec.network.subdomain:
        return []
    return _kube.get_services(namespace, service_name(ref, spec))


def _failures_for(key: Key, uid: str) -> list[ApiFailure]:
    """The job's calls that failed in its last steps (none after the job was re-created)."""
    owner, failures = _failures.get(key, ("", {}))
    return list(failures.values()) if owner == uid else []


def _remember(key: Key, uid: str, failures: list[ApiFailure]) -> None:
    """Count consecutive failures per call; a step without failures clears them."""
    prev_uid, prev = _failures.get(key, ("", {}))
    if prev_uid != uid:
        prev = {}
    now: dict[tuple[str, str, str], ApiFailure] = {}
    for f in failures:
        k = (f.verb, f.kind, f.name)
        before = prev.get(k)
        now[k] = replace(f, attempts=(before.attempts + 1) if before else 1)
    if now:
        _failures[key] = (uid, now)
    else:
        _failures.pop(key, None)


def step(namespace: str, name: str) -> Optional[float]:
    """One reconcile of one job: read fresh, compute the plan, apply it. Returns the delay
    (seconds) after which the job wants another step, or None."""
    assert _kube is not None
    key = (namespace, name)
    try:
        job = _kube.get_job(namespace, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            _forget(key)
            return None
        pods = _kube.list_pods(namespace, name)
        services = _services(namespace, job)
    except Exception as exc:  # noqa: BLE001 - the apiserver may be down: back off, retry
        n = _read_errors[key] = _read_errors.get(key, 0) + 1
        f = failure_from(exc, "get", "DistTrainingJob", name)
        metrics.api_error(f.verb, f.kind, f.code)
        log.warning("reading %s/%s failed %d time(s) (%s): %s", namespace, name, n, f.code, f.message)
        return backoff_seconds(n)
    _read_errors.pop(key, None)
    uid = job["metadata"].get("uid", "")
    plan = reconcile(
        job, pods, datetime.now(timezone.utc), parse_report,
        probe_image=os.environ.get("DISTTRAIN_PROBE_IMAGE", c.DEFAULT_PROBE_IMAGE),
        services=services, api_failures=_failures_for(key, uid),
    )
    new_failures = _kube.apply(job, plan)
    _remember(key, uid, new_failures)
    for f in _failures_for(key, uid):
        metrics.api_error(f.verb, f.kind, f.code)
        if f.attempts == SHOW_AFTER and f.kind == "status":  # the status cannot say it
            _kube.event(job, "Warning", c.REASON_API_ERROR,
                        f"writing the job's status failed {f.attempts} times (HTTP {f.code}): {f.message}")
    if not any(f.kind == "status" for f in new_failures):
        metrics.observe(namespace, name, job.get("status"), plan.status)
    conds = plan.status.get("conditions") or []
    terminal = cond.is_true(conds, c.SUCCEEDED) or cond.is_true(conds, c.FAILED)
    if terminal and not plan.deletes and not new_failures:
        _active.discard(key)  # terminal jobs are still visited by events and their TTL timer
    else:
        _active.add(key)
    if new_failures:
        return backoff_seconds(max(f.attempts for f in _failures_for(key, uid)))
    return plan.requeue_after


def _forget(key: Key) -> None:
    _active.discard(key)
    _failures.pop(key, None)
    _read_errors.pop(key, None)
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
        _forget((namespace, name))
        return
    await trigger(namespace, name)


@kopf.on.event("", "v1", "pods", labels={c.LABEL_JOB: kopf.PRESENT})
async def pod_event(labels, namespace, **_) -> None:
    await trigger(namespace, labels[c.LABEL_JOB])
