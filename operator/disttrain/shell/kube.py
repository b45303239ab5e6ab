"""Kubernetes I/O for the operator (the thin shell around :mod:`disttrain.reconcile.loop`).

Reads the job, its pods and its Service fresh from the apiserver (read-your-writes, so a
step never acts on a stale cache) and applies a :class:`~disttrain.reconcile.step.Plan` in the
order the plan documents: the status first (a JSON merge patch from the status that was
read, with explicit nulls for removed fields, guarded by the job's resourceVersion), then
pod deletes, Service and pod creates, then Events (only after the status write succeeded),
then the job's own deletion after its TTL (guarded by its UID).

Pods and Services are sent as JSON exactly as built (:meth:`Kube.create_pod`,
:meth:`Kube.create_service`), past the kubernetes client's argument models: they type
quantities as strings, forbid fields the client's release does not know and check enums
and int-or-string fields by their own rules, while the template passes through whatever
the apiserver accepts. The apiserver judges the body; quantities are first written as it
would store them (:func:`disttrain.children.wire.pod_body`).

:meth:`Kube.apply` never raises for an API error: every failed call is returned as an
:class:`~disttrain.reconcile.step.ApiFailure` for the next step to act on (404 on a delete and 409 on
a create are not failures: the next step sees who holds the name). A failed status write
stops the plan there, so children never run ahead of the recorded decision.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any, Optional, cast

from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from disttrain.api import constants
from disttrain.children import wire
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.step import ApiFailure, Plan

log = logging.getLogger("disttrain.kube")


def merge_patch(old: Any, new: Any) -> Any:
    """The RFC 7386 JSON merge patch that turns ``old`` into ``new``: objects are patched
    key by key (a key absent from ``new`` becomes null, i.e. removed), anything else
    (lists, scalars) is replaced whole. ``merge_patch(x, x)`` is ``{}`` for objects."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value) if isinstance(value, dict) and\
                isinstance(old[key], dict) else value
    return patch


def failure_from(exc: BaseException, verb: str, kind: str, name: str) -> ApiFailure:
    """An ApiFailure from an ApiException (code and the apiserver's message), from the
    client's refusal of a request body (``client=True``: the fields it refused, one line),
    or from any other error (code 0: no answer)."""
    if isinstance(exc, ApiException):
        message = exc.reason or ""
        try:
            body = json.loads(exc.body or "{}")
            message = body.get("message") or message
        except (TypeError, ValueError, AttributeError):
            pass
        return ApiFailure(verb, kind, name, int(exc.status or 0), str(message)[:1000])
    if isinstance(exc, ValidationError):
        return ApiFailure(verb, kind, name, 0, client_refusal(exc)[:1000], client=True)
    return ApiFailure(verb, kind, name, 0, f"{type(exc).__name__}: {exc}"[:1000])


def _field_path(loc: tuple[Any, ...]) -> str:
    """``(2, 'spec', 'containers', 0, 'resources', 'requests', 'cpu')`` (a validated
    call's argument index or name, then the body's path) -> ``spec.containers[0].resources.requests.cpu``."""
    parts = list(loc)
    while parts and (isinstance(parts[0], int) or parts[0] == "body"):
        parts.pop(0)  # the argument the error is in
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def client_refusal(exc: ValidationError, most: int = 3) -> str:
    """The fields the client's models refused, one line: ``spec.containers[0].resources.requests.cpu:
    Input should be a valid string (got 2)``; at most ``most`` of them, then how many more."""
    errors = exc.errors(include_url=False)
    parts = []
    for e in errors[:most]:
        got = repr(e.get("input"))
        got = got if len(got) <= 40 else got[:37] + "..."
        parts.append(f"{_field_path(tuple(e.get('loc') or ()))}: {e.get('msg', 'invalid')} (got {got})")
    more = f" (and {len(errors) - most} more)" if len(errors) > most else ""
    return ("; ".join(parts) + more).replace("\n", " ")


class Kube:
    """A handle on the API: core/v1 for pods, Services and events, custom objects for jobs."""

    def __init__(self, api_client: Optional[client.ApiClient] = None) -> None:
        self.api = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.networking = client.NetworkingV1Api(self.api)

    def _plain(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    # ---- reads (they raise: the caller retries the whole step with backoff) ------------
    def get_job(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        """The job as a camelCase dict, or None when it is gone."""
        try:
            return cast(dict[str, Any], self.custom.get_namespaced_custom_object(  # the JSON object
                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name
            ))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """Every pod labelled with the job's name (any owner, any attempt, any role)."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"{constants.LABEL_JOB}={job}")
        return [self._plain(p) for p in pods.items]

    def list_network_policies(self, namespace: str, limit: int = 256) -> list[dict[str, Any]]:
        """The NetworkPolicies of ``namespace`` as dicts (at most ``limit``: one page)."""
        pols = self.networking.list_namespaced_network_policy(namespace, limit=limit)
        return [self._plain(p) for p in pols.items]

    def get_namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of namespace ``name`` (``get namespaces``); raises ApiException."""
        ns = self._plain(self.core.read_namespace(name))
        labels = (ns.get("metadata") or {}).get("labels") if isinstance(ns, dict) else None
        return {k: v for k, v in (labels or {}).items() if isinstance(k, str) and isinstance(v, str)}

    def list_node_allocatable(self, limit: int = 500, max_pages: int = 10
                              ) -> tuple[list[tuple[str, dict[str, Any], dict[str, Any], list[Any]]], bool]:
        """Every node's ``(name, status.allocatable, metadata.labels, spec.taints)``, read in pages of ``limit`` nodes and
        at most ``max_pages`` pages (5000 nodes by default), each page's JSON parsed
        without building the client's models (a node's image list is large). Returns the
        nodes and whether the list is complete (False: stopped at the page bound). Raises
        ApiException (403 without RBAC for nodes)."""
        out: list[tuple[str, dict[str, Any], dict[str, Any], list[Any]]] = []
        token: Optional[str] = None
        for _ in range(max_pages):
            kwargs: dict[str, Any] = {"limit": limit, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            resp: Any = self.core.list_node(**kwargs)  # an HTTP response: _preload_content=False
            page = json.loads(resp.data)
            for node in page.get("items") or []:
                meta, st = node.get("metadata") or {}, node.get("status") or {}
                alloc, labels = st.get("allocatable"), meta.get("labels")
                taints = (node.get("spec") or {}).get("taints")
                out.append((str(meta.get("name") or "?"), alloc if isinstance(alloc, dict) else {},
                            labels if isinstance(labels, dict) else {}, taints if isinstance(taints, list) else []))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return out, True
        return out, False

    def list_pod_events(self, namespace: str, pod: str, limit: int = 50) -> list[dict[str, Any]]:
        """The Events on pod ``pod`` of ``namespace`` as dicts (at most ``limit``: one page)."""
        events = self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}",
                                                 limit=limit)
        return [self._plain(e) for e in events.items]

    def list_unhealthy_events(self, namespace: str, limit: int = 500) -> list[dict[str, Any]]:
        """The ``Unhealthy`` Events (failed probes) on pods of ``namespace`` as dicts, at most
        ``limit`` (one page): one call whatever the number of pods."""
        events = self.core.list_namespaced_event(
            namespace, field_selector="reason=Unhealthy,involvedObject.kind=Pod", limit=limit)
        return [self._plain(e) for e in events.items]

    def get_object(self, api_version: str, kind: str, namespace: Optional[str],
                   name: str) -> Optional[dict[str, Any]]:
        """A custom object (namespaced, or cluster-scoped when ``namespace`` is None) as a
        dict, or None when it does not exist or its API is not served."""
        group, _, version = api_version.rpartition("/")
        plural = kind.lower() + "s"
        try:
            if namespace is None:  # both return the object's JSON as a dict
                return cast(dict[str, Any], self.custom.get_cluster_custom_object(group, version, plural, name))
            return cast(dict[str, Any],
                        self.custom.get_namespaced_custom_object(group, version, namespace, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_services(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The Service named ``name`` as a one-element list, or [] when there is none."""
        try:
            return [self._plain(self.core.read_namespaced_service(name, namespace))]
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise

    # ---- writes --------------------------------------------------------------------------
    def apply(self, job: dict[str, Any], plan: Plan) -> list[ApiFailure]:
        """Carry out ``plan`` for ``job`` (as read at the start of the step); returns the
        calls that failed (empty on success). Never raises for an API error."""
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if plan.status_changed:
            patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                     "status": merge_patch(job.get("status") or {}, plan.status)}
            if not patch["metadata"]["resourceVersion"]:
                patch.pop("metadata")
            try:
                self.custom.patch_namespaced_custom_object_status(
                    constants.GROUP, constants.VERSION, ns, constants.PLURAL, name, patch)
            except Exception as exc:  # noqa: BLE001 - every failure is returned, never raised
                f = failure_from(exc, "patch", "status", name)
                log.warning("status of %s/%s not written (%s): %s", ns, name, f.code, f.message)
                return [f]
        failures: list[ApiFailure] = []
        for pod_name in plan.deletes:
            try:
                self.core.delete_namespaced_pod(pod_name, ns, propagation_policy="Background")
                log.info("deleted pod %s/%s", ns, pod_name)
            except Exception as exc:  # noqa: BLE001
                if not (isinstance(exc, ApiException) and exc.status == 404):
                    failures.append(failure_from(exc, "delete", "Pod", pod_name))
        refused = self._dry_runs(ns, plan.dry_runs)
        if refused:  # the Pod API refuses the training pods: create nothing, the job ends
            return failures + refused
        for svc in plan.services:
            failures += self._create(ns, "Service", svc, self.create_service)
        for obj in plan.objects:  # PodGroups, Workloads: before the pods that point at them
            failures += self._create(ns, obj["kind"], obj, self._custom_create(obj))
        for pod in plan.creates:
            failures += self._create(ns, "Pod", wire.pod_body(pod), self.create_pod)
        for api_version, kind, obj_name, patch in plan.status_patches:  # Kueue's Workload
            group, _, version = api_version.rpartition("/")
            try:
                self.custom.patch_namespaced_custom_object_status(
                    group, version, ns, kind.lower() + "s", obj_name, patch)
            except Exception as exc:  # noqa: BLE001
                failures.append(failure_from(exc, "patch", f"{kind} status", obj_name))
        for etype, reason, message in plan.events:
            self.event(job, etype, reason, message)
        if plan.delete_job:
            try:
                self.custom.delete_namespaced_custom_object(
                    constants.GROUP, constants.VERSION, ns, constants.PLURAL, name,
                    body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"]),
                                                propagation_policy="Background"))
                log.info("deleted job %s/%s (ttlSecondsAfterFinished)", ns, name)
            except Exception as exc:  # noqa: BLE001
                if not (isinstance(exc, ApiException) and exc.status in (404, 409)):
                    failures.append(failure_from(exc, "delete", "DistTrainingJob", name))
        for f in failures:
            log.warning("%s %s %s/%s failed (%s): %s", f.verb, f.kind, ns, f.name, f.code, f.message)
        return failures

    def create_pod(self, namespace: str, body: dict[str, Any], dry_run: Optional[str] = None) -> None:
        """Create a pod from ``body`` (a dict) as written; raises ApiException when the
        apiserver refuses it (see the module docstring). ``dry_run="All"``: the apiserver
        validates and admits it without storing it."""
        self._post("/api/v1/namespaces/{namespace}/pods", namespace, body, dry_run)

    def create_service(self, namespace: str, body: dict[str, Any], dry_run: Optional[str] = None) -> None:
        """Create a Service from ``body`` (a dict) as written, as :meth:`create_pod`."""
        self._post("/api/v1/namespaces/{namespace}/services", namespace, body, dry_run)

    def _post(self, path: str, namespace: str, body: dict[str, Any], dry_run: Optional[str]) -> None:
        """POST ``body`` as JSON to ``path`` through the ApiClient (its configuration,
        authentication and TLS), as the generated create methods do, but without their
        pydantic argument models. Raises ApiException for any status but 2xx."""
        method, url, headers, data, post_params = self.api.param_serialize(
            method="POST", resource_path=path, path_params={"namespace": namespace},
            query_params=[("dryRun", dry_run)] if dry_run else [],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=data,
                                     post_params=post_params)
        response.read()
        self.api.response_deserialize(response, {"2XX": "object"})

    def _dry_runs(self, ns: str, pods: list[dict[str, Any]]) -> list[ApiFailure]:
        """Send ``pods`` with server-side dry run; the refusals (none: every one admitted, or
        its name already held, 409). Other failures (no answer, 5xx) are returned too: the
        plan's creates wait for the next step."""
        failures: list[ApiFailure] = []
        for pod in pods:
            failures += self._create(ns, "Pod", wire.pod_body(pod),
                                     lambda n, body: self.create_pod(n, body, dry_run="All"),
                                     done="admitted (dry run)")
        return failures

    def _custom_create(self, obj: dict[str, Any]):
        """A create call for a namespaced object of any API group (plural: lower-case kind + s)."""
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = obj["kind"].lower() + "s"
        return lambda ns, body: self.custom.create_namespaced_custom_object(group, version, ns, plural, body)

    def served(self, group_version: str) -> set[str]:
        """The resources (plurals) the apiserver serves in ``group_version`` (e.g.
        ``scheduling.k8s.io/v1beta1``); empty when it does not serve that version."""
        group, _, version = group_version.rpartition("/")
        try:
            found = self.custom.get_api_resources(group, version)
        except ApiException as exc:
            if exc.status == 404:
                return set()
            raise
        plain = self._plain(found) or {}
        return {n for r in plain.get("resources") or [] if isinstance(r, dict) and isinstance(n := r.get("name"), str)}

    def _create(self, ns: str, kind: str, obj: dict[str, Any], call, done: str = "created") -> list[ApiFailure]:
        name = obj["metadata"]["name"]
        try:
            call(ns, obj)
            log.info("%s %s %s/%s", done, kind, ns, name)
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, ApiException) and exc.status == 409:
                return []  # the name is held: the next step sees by whom
            return [failure_from(exc, "create", kind, name)]
        return []

    def event(self, job: dict[str, Any], etype: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the job (best effort: failures are logged)."""
        meta = job["metadata"]
        now = datetime.now(timezone.utc)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=constants.API_VERSION,
                kind=constants.KIND,
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta["uid"],
            ),
            reason=reason,
            message=cond.clip(message, 1024),  # Events hold at most 1 KiB of message
            type=etype,
            source=client.V1EventSource(component=constants.COMPONENT),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            reporting_component=constants.COMPONENT,
            reporting_instance=constants.COMPONENT,
        )
        try:
            self.core.create_namespaced_event(meta["namespace"], body)
        except Exception as exc:  # noqa: BLE001 - events are informational
            log.warning("event %s on %s not recorded: %s", reason, meta["name"], exc)

