"""Admission by Kueue (pure): a queued job runs nothing before its Workload is admitted.

For a job labelled ``kueue.x-k8s.io/queue-name`` (see :mod:`disttrain.children.kueue`):

- no Workload yet: it is created; ``Admitted=False`` (WaitingForQuota) names the queue;
- pending: ``Admitted=False`` (WaitingForQuota) with Kueue's own message (e.g. "couldn't
  assign flavors to pod set nodes: insufficient unused quota for cpu in flavor
  default-flavor, 2 more needed"); no pod exists, and no probe budget runs;
- admitted: ``Admitted=True`` (WorkloadAdmitted) naming the ClusterQueue and flavors; the
  probe and training pods get the flavors' node labels and tolerations;
- evicted (preempted, its queue stopped): the job's pods are deleted, ``Admitted=False``
  (WorkloadEvicted) with Kueue's reason and message; once no pod is left, the Workload's
  admission is cleared (the quota goes back) and Kueue requeues it; admitted again, the job
  probes again (the nodes may differ) before it trains;
- deactivated by Kueue: the job fails (WorkloadDeactivated);
- the job finished: its Workload is marked Finished, releasing the quota.
"""

from __future__ import annotations

from disttrain.api import constants
from disttrain.children import kueue, observe
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies.suspend import stop_run
from disttrain.reconcile.step import Outcome, Step
from disttrain_probe.contract import vocabulary


def apply(s: Step) -> Outcome:
    """Gate the job on its Workload; STOP while it must not run pods (also when Kueue
    deactivated it and it failed here: the next step cleans up)."""
    queue = kueue.queue_name(s.labels)
    if queue is None:
        return Outcome.CONTINUE
    if s.kueue.problem:
        s.set(constants.ADMITTED, constants.FALSE, vocabulary.KUEUE_UNAVAILABLE, cond.clip(
            f"queued in LocalQueue {queue} (label {kueue.QUEUE_LABEL}), but {s.kueue.problem}: install "
            "the chart with kueue.enabled=true and Kueue in the cluster, or remove the label"))
        s.plan.requeue(30.0)
        return Outcome.STOP
    wl = s.kueue.workload
    if wl is None or not observe.owned_by(wl, s.job.uid):
        if wl is None:
            s.plan.objects.append(kueue.workload(s.job, s.spec, queue))
        s.set(constants.ADMITTED, constants.FALSE, vocabulary.WAITING_FOR_QUOTA,
              f"queued in LocalQueue {queue}: waiting for Kueue to admit Workload {kueue.workload_name(s.job)}")
        return Outcome.STOP
    adm = kueue.read(wl)
    was_admitted = s.is_true(constants.ADMITTED)
    if adm.state == "admitted":
        flavors = ", ".join(f"{k}={v}" for k, v in sorted(adm.flavors.items()))
        s.set(constants.ADMITTED, constants.TRUE, vocabulary.WORKLOAD_ADMITTED,
              f"admitted by ClusterQueue {adm.cluster_queue} (LocalQueue {queue})"
              + (f"; flavors: {flavors}" if flavors else ""))
        s.placement = kueue.placement(list(s.kueue.flavors))
        return Outcome.CONTINUE
    if adm.state == "inactive":
        s.set(constants.ADMITTED, constants.FALSE, vocabulary.WORKLOAD_DEACTIVATED, cond.clip(adm.message))
        s.finish(False, vocabulary.WORKLOAD_DEACTIVATED, cond.clip(
            f"Kueue deactivated Workload {kueue.workload_name(s.job)} ({adm.reason}): {adm.message}; "
            "delete the job and create it again"), "deactivated by Kueue")
        return Outcome.STOP
    if adm.state == "evicted":
        s.set(constants.ADMITTED, constants.FALSE, vocabulary.WORKLOAD_EVICTED, cond.clip(
            f"evicted by Kueue ({adm.reason}): {adm.message}; the pods are stopped and the job "
            f"waits in LocalQueue {queue} to be admitted again, then probes again"))
        stop_run(s, vocabulary.WORKLOAD_EVICTED, "evicted by Kueue", first=was_admitted)
        if not s.ours:  # every pod is gone: hand the quota back (Kueue requeues the Workload)
            s.plan.status_patches.append((kueue.KUEUE_API, "Workload", observe.name(wl), kueue.release_patch(wl, adm, s.ts)))
        else:
            s.plan.requeue(1.0)
        return Outcome.STOP
    # pending (or finished although the job is not: it cannot run again under this Workload)
    s.set(constants.ADMITTED, constants.FALSE, vocabulary.WAITING_FOR_QUOTA, cond.clip(
        f"queued in LocalQueue {queue}, Workload {observe.name(wl)}: {adm.reason}: {adm.message}"))
    if was_admitted:
        stop_run(s, vocabulary.WAITING_FOR_QUOTA, "no longer admitted", first=True)
    return Outcome.STOP


def finish(s: Step) -> None:
    """The job ended: mark its Workload Finished (once), so Kueue releases the quota."""
    wl = s.kueue.workload
    if kueue.queue_name(s.labels) is None or wl is None or not observe.owned_by(wl, s.job.uid):
        return
    if kueue.read(wl).state == "finished":
        return
    ok = s.is_true(constants.SUCCEEDED)
    msg = (cond.get(s.conds, constants.SUCCEEDED if ok else constants.FAILED) or {}).get("message") or ""
    s.plan.status_patches.append((kueue.KUEUE_API, "Workload", observe.name(wl), kueue.finished_patch(wl, ok, msg, s.ts)))
