"""The Kueue admission check controller's I/O (issue 35; docs/admission-check.md): for one
Workload, read what :func:`disttrain.admissioncheck.decide.decide` needs, call it, apply the
:class:`~disttrain.admissioncheck.decide.Decision`. Off unless :data:`ENV` is ``1`` (the
chart's ``kueue.admissionCheck.enabled``): the handlers are not even registered.

Order of the writes: the shadow DistTrainingJob's delete or create (404 and 409 are not
failures: a deterministic name makes both idempotent), the node labels, the nodes a Retry
names added to the Workload's avoid annotation (a JSON merge patch), then the check's
answer (a server-side apply of our one ``status.admissionChecks[]`` entry, so Ready is
written only after its nodes carry the label it selects on), then the Event on the job.
:meth:`AdmissionController.step` never raises: a failed read or write is logged, counted in
``disttrain_api_errors_total``, and the step runs again after a backoff.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timezone
from typing import Any, Optional, cast

from kubernetes import client
from kubernetes.client.rest import ApiException

from disttrain.admissioncheck import decide as D
from disttrain.admissioncheck.probespec import Flavor
from disttrain.admissioncheck.shadow import ANN_AVOID, ANN_AVOID_WHY
from disttrain.admissioncheck.status import FIELD_MANAGER, active_body
from disttrain.admissioncheck.workload import CONTROLLER_NAME, WORKLOAD_API_VERSION
from disttrain.api import constants
from disttrain.reconcile.policies.apierrors import backoff_seconds
from disttrain.shell import metrics
from disttrain.shell.kube import Kube, failure_from
from disttrain.shell.runner import Key, StepResult

log = logging.getLogger("disttrain.admission")

__all__ = ["CONTROLLER_NAME", "ENV", "AdmissionController", "enabled"]

ENV = "DISTTRAIN_ADMISSION_CHECK"
GROUP, _, VERSION = WORKLOAD_API_VERSION.rpartition("/")
CHECKS_TTL_SECONDS = 30.0  # the AdmissionChecks are listed at most this often
APPLY = "application/apply-patch+yaml"


def enabled(environ: Optional[dict[str, str]] = None) -> bool:
    """Whether the admission check controller runs (:data:`ENV` is 1 or true)."""
    return (environ if environ is not None else os.environ).get(ENV, "").strip().lower() in ("1", "true", "yes")


def _resource(kind: str) -> str:
    return kind.lower() + "s"


class AdmissionController:
    """Steps for Workloads against one API handle (the real :class:`Kube`, or a fake in
    the unit tests)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.clock = time.monotonic
        self.errors: dict[Key, int] = {}
        self._checks: Optional[tuple[float, frozenset[str]]] = None
        self.label_keys: dict[Key, str] = {}  # a Workload's label key, to clean up after it vanished

    # ---- reads -------------------------------------------------------------------------
    def ours(self) -> frozenset[str]:
        """The names of the AdmissionChecks whose controllerName is ours (cached), each
        marked Active once (:func:`~disttrain.admissioncheck.status.active_body`)."""
        now = self.clock()
        if self._checks is not None and now < self._checks[0]:
            return self._checks[1]
        raw = cast(dict[str, Any], self.kube.custom.list_cluster_custom_object(GROUP, VERSION, "admissionchecks"))
        mine = [i for i in raw.get("items") or []
                if isinstance(i, dict) and (i.get("spec") or {}).get("controllerName") == CONTROLLER_NAME]
        for check in mine:
            self.activate(check)
        names = frozenset(str(i["metadata"]["name"]) for i in mine)
        self._checks = (now + CHECKS_TTL_SECONDS, names)
        return names

    def activate(self, check: Any) -> None:
        """Mark the AdmissionCheck ``check`` (as the API returns it) Active when its
        controllerName is ours and it is not yet: Kueue holds every ClusterQueue that lists
        it inactive until then. Called for each watch event of an AdmissionCheck, so a
        check is Active within a second of its creation, before any Workload arrives.
        Raises the client's ApiException on a failed call."""
        if not isinstance(check, dict) or (check.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
            return
        body = active_body(check, datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
        if body is None:
            return
        self.kube.custom.patch_cluster_custom_object_status(
            GROUP, VERSION, "admissionchecks", body["metadata"]["name"], body,
            field_manager=FIELD_MANAGER, force=True, _content_type=APPLY)
        self._checks = None  # a new check of ours: list them again at the next step
        log.info("marked AdmissionCheck %s Active", body["metadata"]["name"])

    def _flavor(self, name: str) -> Optional[Flavor]:
        rf = self.kube.get_object(WORKLOAD_API_VERSION, "ResourceFlavor", None, name)
        spec = rf.get("spec") if isinstance(rf, dict) else None
        if not isinstance(spec, dict):
            return None
        labels: dict[str, Any] = spec["nodeLabels"] if isinstance(spec.get("nodeLabels"), dict) else {}
        tol: list[Any] = spec["tolerations"] if isinstance(spec.get("tolerations"), list) else []
        return Flavor({str(k): str(v) for k, v in labels.items()}, [t for t in tol if isinstance(t, dict)])

    def _labelled(self, key: Optional[str]) -> tuple[str, ...]:
        if not key:
            return ()
        nodes = self.kube.core.list_node(label_selector=key, limit=500)
        return tuple(sorted(str(n.metadata.name) for n in nodes.items or [] if n.metadata and n.metadata.name))

    def read(self, namespace: str, name: str, now: datetime) -> D.Seen:
        """What :func:`~disttrain.admissioncheck.decide.decide` needs of Workload ``name``."""
        wl = self.kube.get_object(WORKLOAD_API_VERSION, "Workload", namespace, name)
        key = D.label_key(wl) if wl is not None else self.label_keys.get((namespace, name))
        if wl is None:
            return D.Seen(None, frozenset(), now, labelled=self._labelled(key), key=key)
        ours = self.ours()
        if not D.concerned(wl, ours):  # most Workloads: none of our checks, nothing to read
            return D.Seen(wl, ours, now)
        sname = D.shadow_name(wl)
        job = self.kube.get_job(namespace, sname) if sname else None
        pods = tuple(self.kube.list_pods(namespace, sname)) if job is not None and sname else ()
        flavors = {n: f for n in D.flavor_names(wl) if (f := self._flavor(n)) is not None}
        return D.Seen(wl, ours, now, job, pods, self._labelled(key), flavors)

    # ---- writes --------------------------------------------------------------------------
    def _delete_job(self, namespace: str, name: str) -> None:
        try:
            self.kube.custom.delete_namespaced_custom_object(
                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name,
                body=client.V1DeleteOptions(propagation_policy="Background"))
            log.info("deleted preflight-only DistTrainingJob %s/%s", namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _create_job(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.kube.custom.create_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace,
                                                             constants.PLURAL, body)
            log.info("created preflight-only DistTrainingJob %s/%s", namespace, body["metadata"]["name"])
        except ApiException as exc:
            if exc.status != 409:  # already there: the next step reads whose it is
                raise

    def _label(self, key: str, nodes: tuple[str, ...], value: Optional[str]) -> None:
        for node in nodes:
            try:
                self.kube.core.patch_node(node, {"metadata": {"labels": {key: value}}})
            except ApiException as exc:
                if exc.status != 404 or value is not None:  # a node gone needs no unlabel
                    raise

    def _event(self, on: dict[str, str], namespace: str, event: tuple[str, str, str]) -> None:
        etype, reason, message = event
        now = datetime.now(timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{on['name']}.", namespace=namespace),
            involved_object=client.V1ObjectReference(api_version=on["apiVersion"], kind=on["kind"], name=on["name"],
                                                     namespace=namespace, uid=on["uid"]),
            reason=reason, message=message[:1024], type=etype, first_timestamp=now, last_timestamp=now, count=1,
            source=client.V1EventSource(component=constants.COMPONENT),
            reporting_component=constants.COMPONENT, reporting_instance=constants.COMPONENT)
        try:
            self.kube.core.create_namespaced_event(namespace, body)
        except Exception as exc:  # noqa: BLE001 - events are informational
            log.warning("event %s on %s %s not recorded: %s", reason, on["kind"], on["name"], exc)

    def apply(self, namespace: str, name: str, d: D.Decision) -> None:
        """Apply ``d`` in the module docstring's order (raises on a failed call: the step
        backs off and decides again from what is there)."""
        if d.delete:
            self._delete_job(namespace, d.delete)
        if d.create is not None:
            self._create_job(namespace, d.create)
        if d.label_key:
            self._label(d.label_key, d.unlabel, None)
            self._label(d.label_key, d.label, "true")
        if d.avoid is not None:  # before the Retry: the next round reads it
            ann = {ANN_AVOID: d.avoid, **({ANN_AVOID_WHY: d.avoid_why} if d.avoid_why is not None else {})}
            self.kube.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "workloads", name, {"metadata": {"annotations": ann}},
                _content_type="application/merge-patch+json")
        for body in d.answers:
            self.kube.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "workloads", name, body, field_manager=FIELD_MANAGER, force=True,
                _content_type=APPLY)
        if d.event is not None and d.state is not None:  # the answer's state changed
            metrics.check_answer(d.state)
            if d.event_on is not None:
                self._event(d.event_on, namespace, d.event)

    # ---- the orphan-label sweep --------------------------------------------------------------
    def _all(self, list_page: Any) -> list[Any]:
        """Every item of a paginated list call (``list_page(_continue=token)``), 500 a page."""
        items: list[Any] = []
        token: Optional[str] = None
        while True:
            page = list_page(limit=500, **({"_continue": token} if token else {}))
            if isinstance(page, dict):
                items += page.get("items") or []
                token = (page.get("metadata") or {}).get("continue")
            else:
                items += page.items or []
                token = page.metadata._continue if page.metadata else None
            if not token:
                return items

    def sweep_labels(self) -> int:
        """Take our validated-node labels off every node where no Workload selects them any
        more (a Workload deleted while the operator was down leaves them; a running operator
        takes them off when the Workload goes). Nodes are listed before Workloads
        (:func:`~disttrain.admissioncheck.decide.orphan_labels`). Returns how many labels it
        took off. Raises the client's ApiException on a failed call."""
        nodes = self._all(self.kube.core.list_node)
        labels = {str(n.metadata.name): dict(n.metadata.labels or {}) for n in nodes if n.metadata and n.metadata.name}
        workloads = self._all(lambda **kw: self.kube.custom.list_cluster_custom_object(GROUP, VERSION, "workloads", **kw))
        live = frozenset(k for wl in workloads if (k := D.label_key(wl))) | frozenset(self.label_keys.values())
        taken = 0
        for node, keys in D.orphan_labels(labels, live).items():
            try:
                self.kube.core.patch_node(node, {"metadata": {"labels": {k: None for k in keys}}})
                taken += len(keys)
                log.info("took orphan label(s) %s off node %s", ", ".join(keys), node)
            except ApiException as exc:
                if exc.status != 404:  # a node gone needs no unlabel
                    raise
        return taken

    # ---- the step ----------------------------------------------------------------------
    def step(self, namespace: str, name: str, now: Optional[datetime] = None) -> StepResult:
        """One read-decide-apply of Workload ``name``. Never raises."""
        key = (namespace, name)
        try:
            seen = self.read(namespace, name, now or datetime.now(timezone.utc))
            d = D.decide(seen)
            self.apply(namespace, name, d)
        except Exception as exc:  # noqa: BLE001 - the apiserver may be down: back off, retry
            n = self.errors[key] = self.errors.get(key, 0) + 1
            f = failure_from(exc, "step", "Workload", name)
            metrics.api_error(f.verb, f.kind, f.code)
            log.warning("admission check of Workload %s/%s failed %d time(s) (%s): %s",
                        namespace, name, n, f.code, f.message[:300])
            return StepResult(delay=backoff_seconds(n), backoff=True)
        self.errors.pop(key, None)
        if seen.workload is None:
            self.label_keys.pop(key, None)
            return StepResult(gone=True)
        if d.label_key:
            self.label_keys[key] = d.label_key
        if d.state is not None and d.state != "Pending":
            log.info("admission check of Workload %s/%s: %s", namespace, name, d.state)
        return StepResult(delay=d.requeue, settled=d.requeue is None and not d.create and not d.delete)

    def forget(self, key: Key) -> None:
        self.errors.pop(key, None)
