"""Running reconcile steps against an API handle (the I/O shell's driver, no kopf here).

:class:`Reconciler` reads a job and its children, calls the pure
:func:`disttrain.reconcile.loop.reconcile`, applies the plan with :meth:`Kube.apply
<disttrain.shell.kube.Kube.apply>` and remembers, per job, which calls failed in a row, so the
next step can act on them (:mod:`disttrain.reconcile.policies.apierrors`) and the caller can back off.
The kopf handlers (:mod:`disttrain.shell.handlers`) use it with the real API; the generated
reconcile tests use it with a simulated apiserver behind the same interface.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Optional

from kubernetes.client.rest import ApiException

from disttrain.api import constants
from disttrain.children import kueue, observe, progresswatch
from disttrain.children.names import JobRef
from disttrain.diagnosis.report import parse_report
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.loop import owned_service_name, reconcile
from disttrain.reconcile.policies import offers
from disttrain.reconcile.policies.apierrors import SHOW_AFTER, backoff_seconds
from disttrain.reconcile.policies.gang import CAP_WORKLOAD_API
from disttrain.reconcile.step import ApiFailure, NodeOffers, Observed
from disttrain.shell import metrics
from disttrain.shell.kube import Kube, failure_from
from disttrain_probe.contract import vocabulary

log = logging.getLogger("disttrain.runner")

Key = tuple[str, str]  # (namespace, name)
NodeRead = tuple[str, dict, dict, list]  # a node: name, allocatable, labels, taints
NODES_TTL_SECONDS = 30.0  # the nodes' allocatable is read at most this often (all jobs together)
NODES_RETRY_SECONDS = 600.0  # after a refused or failed read of the nodes
EVENTS_TTL_SECONDS = 15.0  # a pod's autoscaler Events are read at most this often
EVENT_PODS = 3  # pods whose Events are read per step (the autoscaler speaks on each)


@dataclass(frozen=True)
class StepResult:
    """``delay``: run again after so many seconds (None: only on events); ``backoff``: the
    delay is the retry of failed calls (the queue holds the job until then, see
    :mod:`disttrain.shell.workqueue`); ``settled``: a finished job with nothing left to do
    (the sweep leaves it alone); ``gone``: deleted."""

    delay: Optional[float] = None
    settled: bool = False
    gone: bool = False
    backoff: bool = False


class Reconciler:
    """Runs steps for jobs against one API handle, remembering each job's failed calls.

    Used by the kopf handlers below with the real :class:`~disttrain.shell.kube.Kube`, and by the
    generated reconcile tests with a simulated apiserver behind the same interface."""

    def __init__(self, kube: Kube, probe_image: str = constants.DEFAULT_PROBE_IMAGE) -> None:
        self.kube = kube
        self.probe_image = probe_image
        # calls that failed in the job's last steps, by (verb, kind, name), for the job's UID
        self.failures: dict[Key, tuple[str, dict[tuple[str, str, str], ApiFailure]]] = {}
        self.read_errors: dict[Key, int] = {}
        self._capabilities: Optional[frozenset[str]] = None
        self._netpol_warned = False
        self._ns_warned = False
        self.clock = time.monotonic
        self._nodes: Optional[tuple[float, Optional[tuple[tuple[NodeRead, ...], bool]]]] = None
        self._nodes_warned = False
        self._events_warned = False
        self._events: dict[tuple[str, str], tuple[float, Optional[tuple[str, str]]]] = {}

    def capabilities(self) -> frozenset[str]:
        """What the cluster serves that changes the plan (discovered once; a failed
        discovery is retried at the next step): ``workload-api`` when scheduling.k8s.io/v1beta1
        serves podgroups (:mod:`disttrain.reconcile.policies.gang`)."""
        if self._capabilities is None:
            caps = set()
            if "podgroups" in self.kube.served("scheduling.k8s.io/v1beta1"):
                caps.add(CAP_WORKLOAD_API)
            self._capabilities = frozenset(caps)
            log.info("cluster capabilities: %s", ", ".join(sorted(caps)) or "none")
        return self._capabilities

    def failures_for(self, key: Key, uid: str) -> list[ApiFailure]:
        """The job's calls that failed in its last steps (none after it was re-created)."""
        owner, failures = self.failures.get(key, ("", {}))
        return list(failures.values()) if owner == uid else []

    def remember(self, key: Key, uid: str, failures: list[ApiFailure]) -> None:
        """Count consecutive failures per call; a step without failures clears them."""
        owner, prev = self.failures.get(key, ("", {}))
        if owner != uid:
            prev = {}
        now: dict[tuple[str, str, str], ApiFailure] = {}
        for f in failures:
            k = (f.verb, f.kind, f.name)
            before = prev.get(k)
            now[k] = replace(f, attempts=(before.attempts + 1) if before else 1)
        if now:
            self.failures[key] = (uid, now)
        else:
            self.failures.pop(key, None)

    def forget(self, key: Key) -> None:
        self.failures.pop(key, None)
        self.read_errors.pop(key, None)

    def services(self, namespace: str, job: dict) -> list[dict]:
        """The Service the job may own (named after it), observed only when the spec the
        step acts on uses one (:func:`disttrain.reconcile.loop.owned_service_name`: with a
        gang, DNS hostnames are on although the spec leaves them unset)."""
        name = owned_service_name(job, self.capabilities())
        return self.kube.get_services(namespace, name) if name else []

    def network_policies(self, namespace: str, job: dict, pods: list[dict]) -> tuple[dict, ...]:
        """The NetworkPolicies of the job's namespace while its preflight is undecided and
        the pods that probe exist (the verdict names one that drops the job's traffic:
        :mod:`disttrain.diagnosis.networkpolicy`); () otherwise. A list the operator may not
        make (no RBAC for networkpolicies, or the API not served) is (): the verdict is then
        the probes' own, and the log says why once."""
        status = job.get("status")
        conds = status.get("conditions") if isinstance(status, dict) else None
        decided = any(isinstance(c, dict) and c.get("type") == constants.VALIDATED
                      and c.get("status") in (constants.TRUE, constants.FALSE)
                      for c in (conds if isinstance(conds, list) else []))
        # the pods that probe: probe pods, or in place (probe.placement InPlace) the training pods
        if decided or not any(observe.role(p) in (constants.ROLE_PROBE, constants.ROLE_WORKER) for p in pods):
            return ()
        try:
            return tuple(self.kube.list_network_policies(namespace))
        except ApiException as exc:
            if exc.status not in (401, 403, 404):
                raise
            if not self._netpol_warned:
                self._netpol_warned = True
                log.warning("cannot list NetworkPolicies (HTTP %s): verdicts will not name a policy "
                            "that drops a job's traffic; grant list on networking.k8s.io "
                            "networkpolicies (the chart does)", exc.status)
            return ()

    def namespace_labels(self, namespace: str, policies: tuple[dict, ...]) -> Optional[dict[str, str]]:
        """The labels of the job's namespace when it has NetworkPolicies to judge (read only
        then: :meth:`network_policies` is () unless the preflight is undecided), for their
        ``namespaceSelector`` s; None otherwise. Never raises: a read the operator may not
        make (no RBAC for namespaces) or that fails gives None (a selector on a label is then
        named as undecided), said once in the log."""
        if not policies:
            return None
        try:
            return self.kube.get_namespace_labels(namespace)
        except Exception as exc:  # noqa: BLE001 - optional evidence: never fails a step
            if not self._ns_warned:
                self._ns_warned = True
                f = failure_from(exc, "get", "Namespace", namespace)
                log.warning("cannot read namespace %s (HTTP %s): a NetworkPolicy's namespaceSelector "
                            "on its labels is named as undecided; grant get on namespaces (the "
                            "chart does)", namespace, f.code)
            return None

    def nodes(self, namespace: str, pods: list[dict]) -> Optional[NodeOffers]:
        """The nodes' allocatable, and a node autoscaler's word on the pods, while a pod of
        the job waits for an ``Insufficient`` resource, or is held by its gang
        (:func:`disttrain.reconcile.policies.offers.considered`);
        None otherwise. The nodes are read at most every :data:`NODES_TTL_SECONDS` for all
        jobs, bounded by pages (:meth:`Kube.list_node_allocatable`); the Events of at most
        :data:`EVENT_PODS` pods whose resource no node offers, each at most every
        :data:`EVENTS_TTL_SECONDS`. Never raises: a read the operator may not make (no RBAC
        for nodes) or that fails gives None (the job waits as before), said once in the log."""
        waiting = [(p, m) for p in pods if (m := observe.unschedulable(p)) and offers.considered(p, m)]
        read = self._node_allocatable() if waiting else None
        if read is None:
            return None
        items, complete = read
        found = NodeOffers(tuple((n, a) for n, a, _, _ in items), complete,
                           placement={n: (labels, taints) for n, _, labels, taints in items})
        unoffered = [p for p, m in waiting if offers.shortages(p, m, found)]
        words = {}
        for p in unoffered[:EVENT_PODS]:
            word = self._autoscaler_word(namespace, observe.name(p))
            if word is not None:
                words[observe.name(p)] = word
        return replace(found, autoscaler=words)

    def _node_allocatable(self) -> Optional[tuple[tuple[NodeRead, ...], bool]]:
        now = self.clock()
        if self._nodes is not None and now < self._nodes[0]:
            return self._nodes[1]
        try:
            items, complete = self.kube.list_node_allocatable()
            self._nodes = (now + NODES_TTL_SECONDS, (tuple(items), complete))
        except Exception as exc:  # noqa: BLE001 - optional evidence: never fails a step
            self._nodes = (now + NODES_RETRY_SECONDS, None)
            if not self._nodes_warned:
                self._nodes_warned = True
                f = failure_from(exc, "list", "Node", "")
                log.warning("cannot list nodes (HTTP %s: %s): a job whose pods request a resource no "
                            "node offers will wait as if the nodes were busy; grant list on nodes "
                            "(the chart does)", f.code, f.message[:200])
        return self._nodes[1]

    def _autoscaler_word(self, namespace: str, pod: str) -> Optional[tuple[str, str]]:
        now, key = self.clock(), (namespace, pod)
        cached = self._events.get(key)
        if cached is not None and now < cached[0]:
            return cached[1]
        if len(self._events) > 1024:  # forget pods long gone
            self._events = {k: v for k, v in self._events.items() if now < v[0]}
        try:
            word = offers.autoscaler_word(self.kube.list_pod_events(namespace, pod))
            self._events[key] = (now + EVENTS_TTL_SECONDS, word)
        except Exception as exc:  # noqa: BLE001 - optional evidence: never fails a step
            self._events[key] = (now + NODES_RETRY_SECONDS, None)
            if not self._events_warned:
                self._events_warned = True
                f = failure_from(exc, "list", "Event", pod)
                log.warning("cannot list the Events of pod %s/%s (HTTP %s): a node autoscaler's "
                            "scale-up for it is not seen; grant list on events", namespace, pod, f.code)
            return None
        return word

    def progress_words(self, namespace: str, pods: list[dict]) -> tuple[progresswatch.ProgressEvent, ...]:
        """The latest readiness word of each training pod whose progress sidecar runs
        (:mod:`disttrain.children.progresswatch`; a Ready one's only says a straggler): one
        list of the namespace's ``Unhealthy`` Events, made only when such a pod exists.
        Never raises: a read the operator may not make gives ``()`` (the stall verdict then
        says less)."""
        workers = [p for p in pods if observe.role(p) == constants.ROLE_WORKER]
        stalled = progresswatch.sidecar_started(workers)
        if not stalled:
            return ()
        uids = {observe.name(p): str((p.get("metadata") or {}).get("uid") or "") for p in workers}
        try:
            return progresswatch.latest_words(self.kube.list_unhealthy_events(namespace), stalled, uids)
        except Exception as exc:  # noqa: BLE001 - optional evidence: never fails a step
            if not self._events_warned:
                self._events_warned = True
                f = failure_from(exc, "list", "Event", "")
                log.warning("cannot list the Events of namespace %s (HTTP %s): the stall verdict "
                            "cannot say where each rank waits; grant list on events", namespace, f.code)
            return ()

    def kueue(self, namespace: str, job: dict) -> Optional[kueue.KueueRead]:
        """For a job queued in Kueue: its Workload and the ResourceFlavors it was admitted
        with, or why they cannot be read (:mod:`disttrain.reconcile.policies.admission`); None when the
        job is not queued."""
        if kueue.queue_name((job.get("metadata") or {}).get("labels")) is None:
            return None
        try:
            ref = JobRef.from_body(job)
        except Exception:  # noqa: BLE001 - a malformed object is reconcile's to report
            return None
        if "workloads" not in self.kube.served(kueue.KUEUE_API):  # asked each time: Kueue may come later
            return kueue.KueueRead(problem=f"the apiserver does not serve Kueue's {kueue.KUEUE_API} Workloads "
                                       "(is Kueue v0.15 or later installed?)")
        try:
            wl = self.kube.get_object(kueue.KUEUE_API, "Workload", namespace, kueue.workload_name(ref))
            adm = kueue.read(wl) if wl else None
            names = sorted(set(adm.flavors.values())) if adm and adm.state == "admitted" else []
            flavors = [rf for rf in (self.kube.get_object(kueue.KUEUE_API, "ResourceFlavor", None, n)
                                     for n in names) if rf is not None]
        except ApiException as exc:
            if exc.status not in (401, 403):
                raise
            f = failure_from(exc, "get", "Workload", kueue.workload_name(ref))
            return kueue.KueueRead(problem=f"the operator may not read Kueue's objects (HTTP {f.code}: "
                                       f"{f.message[:200]})")
        return kueue.KueueRead(wl, tuple(flavors))

    def step(self, namespace: str, name: str, now: Optional[datetime] = None) -> StepResult:
        """One reconcile of one job: read fresh, compute the plan, apply it. Never raises
        for an API error: a failed read is retried after a backoff, failed writes are fed
        to the next step."""
        key = (namespace, name)
        try:
            job = self.kube.get_job(namespace, name)
            if job is None or job["metadata"].get("deletionTimestamp"):
                self.forget(key)
                return StepResult(gone=True)
            pods = self.kube.list_pods(namespace, name)
            services = self.services(namespace, job)
            capabilities = self.capabilities()
            queued = self.kueue(namespace, job)
            policies = self.network_policies(namespace, job, pods)
            ns_labels = self.namespace_labels(namespace, policies)
            nodes = self.nodes(namespace, pods)
            progress = self.progress_words(namespace, pods)
        except Exception as exc:  # noqa: BLE001 - the apiserver may be down: back off, retry
            n = self.read_errors[key] = self.read_errors.get(key, 0) + 1
            f = failure_from(exc, "get", "DistTrainingJob", name)
            metrics.api_error(f.verb, f.kind, f.code)
            log.warning("reading %s/%s failed %d time(s) (%s): %s", namespace, name, n, f.code, f.message)
            return StepResult(delay=backoff_seconds(n), backoff=True)
        self.read_errors.pop(key, None)
        uid = job["metadata"].get("uid", "")
        seen = Observed.of(job, pods, now or datetime.now(timezone.utc), services=services,
                           api_failures=self.failures_for(key, uid), capabilities=capabilities,
                           kueue=queued, network_policies=policies, nodes=nodes,
                           namespace_labels=ns_labels, progress=progress)
        plan = reconcile(seen, parse_report, probe_image=self.probe_image)
        new_failures = self.kube.apply(job, plan)
        self.remember(key, uid, new_failures)
        for f in self.failures_for(key, uid):
            metrics.api_error(f.verb, f.kind, f.code)
            if f.attempts == SHOW_AFTER and f.kind == "status":  # the status cannot say it
                self.kube.event(job, "Warning", vocabulary.API_ERROR, f"writing the job's status "
                                f"failed {f.attempts} times (HTTP {f.code}): {f.message}")
        if not any(f.kind == "status" for f in new_failures):
            try:  # the plan is applied: a metric must not turn the step into an error
                metrics.observe(namespace, name, job.get("status"), plan.status)
            except Exception:  # noqa: BLE001 - logged; the next transition counts again
                log.exception("updating the metrics of %s/%s failed", namespace, name)
        conds = plan.status.get("conditions") or []
        terminal = cond.is_true(conds, constants.SUCCEEDED) or cond.is_true(conds, constants.FAILED)
        if new_failures:
            delay: Optional[float] = backoff_seconds(max(f.attempts for f in self.failures_for(key, uid)))
        else:
            delay = plan.requeue_after
        return StepResult(delay=delay, settled=terminal and not plan.deletes and not new_failures,
                          backoff=bool(new_failures))

