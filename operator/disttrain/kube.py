"""Kubernetes I/O for the operator (the thin shell around :mod:`disttrain.reconcile`).

Reads the job and its pods fresh from the apiserver (read-your-writes, so a step never
acts on a stale cache), applies a :class:`~disttrain.reconcile.Plan`: creates and deletes
pods (409/404 are success: the step is idempotent), writes status once through the status
subresource, and records Events only after the status write succeeded.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Optional

from kubernetes import client
from kubernetes.client.rest import ApiException

from . import constants as c
from .reconcile import Plan

log = logging.getLogger("disttrain.kube")


class Kube:
    """A handle on the API: core/v1 for pods and events, custom objects for jobs."""

    def __init__(self, api_client: Optional[client.ApiClient] = None) -> None:
        self.api = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _plain(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def get_job(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        """The job as a camelCase dict, or None when it is gone."""
        try:
            return self.custom.get_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """Every pod labelled with the job's name (probe and worker pods, any attempt)."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{c.LABEL_JOB}={job}")
        return [self._plain(p) for p in pods.items]

    def apply(self, job: dict[str, Any], plan: Plan) -> None:
        """Carry out ``plan`` for ``job``: deletes, creates, status write, then events."""
        ns = job["metadata"]["namespace"]
        for name in plan.deletes:
            try:
                self.core.delete_namespaced_pod(name, ns, propagation_policy="Background")
                log.info("deleted pod %s/%s", ns, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for svc in plan.services:
            try:
                self.core.create_namespaced_service(ns, svc)
                log.info("created service %s/%s", ns, svc["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 409:
                    raise
        for pod in plan.creates:
            try:
                self.core.create_namespaced_pod(ns, pod)
                log.info("created pod %s/%s", ns, pod["metadata"]["name"])
            except ApiException as exc:
                if exc.status != 409:  # already exists: an earlier step made it
                    raise
        if plan.status_changed:
            self.custom.patch_namespaced_custom_object_status(
                c.GROUP, c.VERSION, ns, c.PLURAL, job["metadata"]["name"], {"status": plan.status}
            )
        for etype, reason, message in plan.events:
            self.event(job, etype, reason, message)

    def event(self, job: dict[str, Any], etype: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job (best effort: failures are logged)."""
        meta = job["metadata"]
        now = datetime.now(timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=c.API_VERSION,
                kind=c.KIND,
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta["uid"],
            ),
            reason=reason,
            message=message[:1024],
            type=etype,
            source=client.V1EventSource(component=c.COMPONENT),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            reporting_component=c.COMPONENT,
            reporting_instance=c.COMPONENT,
        )
        try:
            self.core.create_namespaced_event(meta["namespace"], body)
        except ApiException as exc:  # events are informational
            log.warning("event %s on %s not recorded: %s", reason, meta["name"], exc.reason)
