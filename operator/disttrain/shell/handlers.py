"""kopf wiring: watch events only trigger the level-based reconcile; no logic lives here.

Why event handlers and not ``@kopf.timer``: kopf puts a finalizer on every object that has
timers or daemons, so deleting a job while the operator is down would hang. Events, the
plan's own ``requeue_after`` (the next time-based decision: a probe budget, a deadline, a
TTL) and a slow sweep as a safety net need no finalizer: ownerReferences and the garbage
collector remove the children.

Each trigger runs the reconciler's step for one job through the work queue
(:mod:`disttrain.shell.workqueue`: a worker thread per run, triggers for a job being
reconciled coalesced into one more run afterwards). A step never raises into kopf: a failed read is retried with exponential backoff, and failed writes are fed to
the next step (:mod:`disttrain.reconcile.policies.apierrors`), which shows them on the job.

With ``DISTTRAIN_ADMISSION_CHECK=1`` (the chart's ``kueue.admissionCheck.enabled``), Kueue
Workloads are watched too, each run through :class:`disttrain.shell.admission.AdmissionController`
in a queue of its own; a preflight-only DistTrainingJob's events also wake its Workload.
Without it, nothing of the admission check is registered.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Optional

import kopf
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException

from disttrain.admissioncheck.shadow import workload_of
from disttrain.api import constants
from disttrain.shell import admission, metrics
from disttrain.shell.kube import Kube
from disttrain.shell.runner import Key, Reconciler
from disttrain.shell.workqueue import WorkQueue
from disttrain_probe.contract import probe_env

log = logging.getLogger("disttrain.handlers")

# Safety net only: precise wake-ups come from each plan's requeue_after.
SWEEP_SECONDS = float(os.environ.get("DISTTRAIN_SWEEP_SECONDS", "10"))

_reconciler: Optional[Reconciler] = None
_queue: Optional[WorkQueue] = None
_admission: Optional[WorkQueue] = None  # Workloads, when the admission check is enabled
_checker: Optional[admission.AdmissionController] = None  # its controller


def _forget(key: Key) -> None:
    if _reconciler is not None:
        _reconciler.forget(key)
    metrics.forget(*key)


LABEL_SWEEP_SECONDS = 300.0  # orphan validated-node labels are looked for at start and this often


async def _sweep_labels(checker: "admission.AdmissionController") -> None:
    """At start and every :data:`LABEL_SWEEP_SECONDS`: take off the validated-node labels of
    Workloads that went while the operator was down (a failed sweep is logged and retried
    at the next turn). Refused (403: the chart's ``watchNamespaces`` grants Workloads per
    namespace, not the cluster-wide list the sweep needs), it says so once and stops."""
    while True:
        try:
            n = await asyncio.to_thread(checker.sweep_labels)
            if n:
                log.info("took %d orphan validated-node label(s) off", n)
        except ApiException as exc:
            if exc.status == 403:
                log.info("orphan-label sweep off: no cluster-wide list of Workloads or nodes (%s)", exc.reason)
                return
            log.warning("orphan-label sweep failed: %s", exc)
        except Exception as exc:  # noqa: BLE001 - the apiserver may be down: next turn
            log.warning("orphan-label sweep failed: %s", exc)
        await asyncio.sleep(LABEL_SWEEP_SECONDS)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_) -> None:
    global _reconciler, _queue, _admission, _checker
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
    _queue = WorkQueue(_reconciler.step, on_forget=_forget)
    asyncio.create_task(_queue.sweep(SWEEP_SECONDS))
    if admission.enabled():
        checker = _checker = admission.AdmissionController(_reconciler.kube)
        _admission = WorkQueue(checker.step, on_forget=checker.forget)
        asyncio.create_task(_admission.sweep(SWEEP_SECONDS))
        asyncio.create_task(_sweep_labels(checker))
        log.info("Kueue admission check controller on (controllerName %s)", admission.CONTROLLER_NAME)


@kopf.on.event(constants.GROUP, constants.VERSION, constants.PLURAL)
async def job_event(event, name, namespace, meta, body, **_) -> None:
    assert _queue is not None  # configure() ran at startup
    checked = workload_of(body) if _admission is not None else None
    if checked is not None and _admission is not None:  # a preflight-only job: its verdict is the check's
        await _admission.trigger(namespace, checked)
    if event.get("type") == "DELETED":
        _queue.forget((namespace, name))
        return
    # the generation tells a spec change from the status the last step wrote (the queue
    # holds a job backing off from failed calls until its retry is due)
    await _queue.job_changed(namespace, name, meta.get("generation"))


@kopf.on.event("", "v1", "pods", labels={constants.LABEL_JOB: kopf.PRESENT})
async def pod_event(labels, namespace, **_) -> None:
    assert _queue is not None  # configure() ran at startup
    await _queue.trigger(namespace, labels[constants.LABEL_JOB])


if admission.enabled():
    @kopf.on.event(admission.GROUP, admission.VERSION, "admissionchecks")
    async def admission_check_event(event, body, **_) -> None:
        # a check of ours goes Active at once (a ClusterQueue listing it admits nothing before)
        if _checker is not None and event.get("type") != "DELETED":
            try:
                await asyncio.to_thread(_checker.activate, dict(body))
            except Exception as exc:  # the next Workload step lists and marks the checks again
                log.warning("AdmissionCheck %s not marked Active: %s", body.get("metadata", {}).get("name"), exc)

    @kopf.on.event(admission.GROUP, admission.VERSION, "workloads")
    async def workload_event(name, namespace, **_) -> None:
        # DELETED too: the step finds it gone, removes its nodes' label and forgets it
        if _admission is not None:
            await _admission.trigger(namespace, name)
