"""A simulated apiserver for generated reconcile tests.

It answers the calls :class:`disttrain.shell.kube.Kube` makes (the kubernetes client's
``CoreV1Api`` and ``CustomObjectsApi`` methods, same names and arguments) from plain dicts,
with the apiserver's semantics that matter to the operator: names are unique (409), a
deleted pod keeps existing with a deletionTimestamp until its "kubelet" removes it, the
status subresource takes a JSON merge patch guarded by resourceVersion (409 on a stale
one), objects get UIDs, creationTimestamps and resourceVersions. Faults can be injected per
call kind (an HTTP status code, or 0 for no answer).

Pod creates are validated with the real kubernetes client's models (``V1Pod``: the types
the apiserver's schema gives each field; fields the client does not know pass, as the
apiserver drops them with a warning): a body they refuse is answered 422, as the apiserver
would, and recorded as a violation, since the generated templates are valid.

It also watches the invariants the operator promises, at the moment they could be broken
(a pod is created, a status is written), and records each violation in ``violations``:
- no training pod is created while the job's stored status does not say Validated=True
  (with probes enabled), and no pod at all while the job is suspended;
- no pod of an attempt below one that still exists, nor (unless the status lost its
  attempt numbers to a hand edit) below one already created;
- never two live pods for one (role, rank) of one job, and no pod of an attempt older than
  one already created; no training pod of attempt N while a pod of another attempt exists;
- Validated=True is only written when every probe report of the validating attempt was one
  the simulation marked good (right identity, correct all-reduce, finite bandwidth over
  the threshold, no contradiction).
"""

from __future__ import annotations

import copy
import itertools
import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any, Optional

from kubernetes import client
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from disttrain.api import constants
from disttrain.shell.kube import Kube

NS = "ns"
START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=timezone.utc)


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (null removes a key; non-objects replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = apply_merge_patch(out.get(k), v)
    return out


def _error(code: int, message: str) -> Exception:
    if code == 0:
        return ConnectionRefusedError(message)
    e = ApiException(status=code, reason=message)
    e.body = json.dumps({"kind": "Status", "message": message, "code": code})
    return e


def _controller_uid(obj: dict) -> Optional[str]:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def env_of(pod: dict) -> dict[str, str]:
    """The first container's plain env values (valueFrom entries are resolved by the kubelet)."""
    ctr = pod["spec"]["containers"][0]
    out = {}
    for e in ctr.get("env") or []:
        if "value" in e:
            out[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") in ("status.hostIP", "status.podIP"):
            out[e["name"]] = pod["status"].get("hostIP") or ""
    return out


class SimApi:
    """The simulated apiserver (see the module docstring). ``now`` is the simulated clock."""

    def __init__(self) -> None:
        self.now = START
        self.jobs: dict[str, dict] = {}
        self.pods: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.events: list[Any] = []
        self.faults: dict[str, int] = {}  # call kind -> HTTP code (0: no answer)
        self.violations: list[str] = []
        self.dry_runs: list[str] = []  # pod names sent with dryRun=All
        self.good_reports: dict[str, bool] = {}  # probe pod uid -> its report was good
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self.max_attempt: dict[tuple[str, str], int] = {}  # (job uid, role) -> highest created
        self.unlisted: set[str] = set()  # pods left out of the next list only (they still exist)
        self.network_policies: list[Any] = []  # of the namespace, as written (any shape)

    # ---- helpers --------------------------------------------------------------------------
    def _fault(self, kind: str) -> None:
        code = self.faults.get(kind)
        if code is not None:
            raise _error(code, f"injected {kind} fault")

    def _stamp(self, obj: dict) -> dict:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"u{next(self._uid)}")
        meta.setdefault("creationTimestamp", rfc3339(self.now))
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("namespace", NS)
        return obj

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return copy.deepcopy(obj)

    def job(self) -> Optional[dict]:
        return self.jobs.get("j")

    def add_job(self, spec: dict) -> dict:
        body = {"apiVersion": constants.API_VERSION, "kind": constants.KIND,
                "metadata": {"name": "j", "namespace": NS, "generation": 1}, "spec": copy.deepcopy(spec)}
        self.jobs["j"] = self._stamp(body)
        return body

    # ---- CustomObjectsApi ----------------------------------------------------------------
    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self._fault("read")
        if name not in self.jobs:
            raise _error(404, f"{plural} {name!r} not found")
        return copy.deepcopy(self.jobs[name])

    def patch_namespaced_custom_object_status(self, group, version, namespace, plural, name, body):
        self._fault("status")
        job = self.jobs.get(name)
        if job is None:
            raise _error(404, "not found")
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != job["metadata"]["resourceVersion"]:
            raise _error(409, "the object has been modified; please apply your changes to the latest version")
        new = apply_merge_patch(job.get("status") or {}, body.get("status") or {})
        json.dumps(new, allow_nan=False)  # the apiserver refuses NaN: let it raise ValueError here
        self._check_validation(job, new)
        job["status"] = new
        job["metadata"]["resourceVersion"] = str(next(self._rv))
        return copy.deepcopy(job)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body=None):
        self._fault("delete_job")
        job = self.jobs.get(name)
        if job is None:
            raise _error(404, "not found")
        pre = getattr(getattr(body, "preconditions", None), "uid", None)
        if pre and pre != job["metadata"]["uid"]:
            raise _error(409, "precondition failed: UID")
        del self.jobs[name]

    def get_api_resources(self, group, version):
        raise _error(404, "the server could not find the requested resource")

    # ---- CoreV1Api ----------------------------------------------------------------------
    def list_namespaced_pod(self, namespace, label_selector=""):
        self._fault("read")
        key, _, value = label_selector.partition("=")
        items = [copy.deepcopy(p) for n, p in self.pods.items()
                 if (p["metadata"].get("labels") or {}).get(key) == value and n not in self.unlisted]
        self.unlisted.clear()
        return SimpleNamespace(items=items)

    # ---- NetworkingV1Api ------------------------------------------------------------------
    def list_namespaced_network_policy(self, namespace, limit=None):
        self._fault("read")
        return SimpleNamespace(items=copy.deepcopy(self.network_policies[:limit]))

    def read_namespace(self, name):
        self._fault("read")
        return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}

    def read_namespaced_service(self, name, namespace):
        self._fault("read")
        if name not in self.services:
            raise _error(404, "not found")
        return copy.deepcopy(self.services[name])

    def create_namespaced_service(self, namespace, body):
        self._fault("create_service")
        name = body["metadata"]["name"]
        if name in self.services:
            raise _error(409, "already exists")
        self.services[name] = self._stamp(copy.deepcopy(body))

    def create_namespaced_pod(self, namespace, body, dry_run=None):
        """``dry_run="All"``: validated and checked for its name, never stored."""
        self._fault("create_pod")
        name = body["metadata"]["name"]
        refused = pod_type_errors(body)
        if refused:
            self.violations.append(f"pod {name} sent with fields the Pod API's types refuse: {refused}")
            raise _error(422, f'Pod "{name}" is invalid: {refused}')
        if name in self.pods:
            raise _error(409, f'pods "{name}" already exists')
        if dry_run:
            self.dry_runs.append(name)
            return
        pod = self._stamp(copy.deepcopy(body))
        pod.setdefault("status", {})["phase"] = "Pending"
        self._check_create(pod)
        self.pods[name] = pod

    def delete_namespaced_pod(self, name, namespace, propagation_policy=None):
        self._fault("delete_pod")
        pod = self.pods.get(name)
        if pod is None:
            raise _error(404, "not found")
        pod["metadata"].setdefault("deletionTimestamp", rfc3339(self.now))

    def create_namespaced_event(self, namespace, body):
        self.events.append(body)

    # ---- invariants ---------------------------------------------------------------------
    def _check_create(self, pod: dict) -> None:
        job = self.job()
        labels = pod["metadata"]["labels"]
        role, rank, attempt = labels[constants.LABEL_ROLE], labels[constants.LABEL_RANK], int(labels[constants.LABEL_ATTEMPT])
        owner = _controller_uid(pod)
        if job is None or owner != job["metadata"]["uid"]:
            self.violations.append(f"created {pod['metadata']['name']} for a job that is not the live one")
            return
        if job["spec"].get("suspend"):
            self.violations.append(f"{pod['metadata']['name']} created while the job is suspended")
        probes_on = (job["spec"].get("probe") or {}).get("enabled", True)
        conds = {x.get("type"): x.get("status") for x in (job.get("status") or {}).get("conditions") or []}
        if role == constants.ROLE_WORKER and probes_on and conds.get(constants.VALIDATED) != "True":
            self.violations.append(f"training pod {pod['metadata']['name']} created while the stored "
                                   f"status says Validated={conds.get(constants.VALIDATED)}")
        stored = job.get("status") or {}
        recorded = stored.get("restarts") if role == constants.ROLE_WORKER else (stored.get("probe") or {}).get("attempt")
        if isinstance(recorded, int) and not isinstance(recorded, bool) and attempt != recorded:
            self.violations.append(f"{pod['metadata']['name']} of attempt {attempt} created while the stored "
                                   f"status records attempt {recorded}")
        same = [p for p in self.pods.values() if _controller_uid(p) == owner
                and p["metadata"]["labels"][constants.LABEL_ROLE] == role]
        if any(p["metadata"]["labels"][constants.LABEL_RANK] == rank and not p["metadata"].get("deletionTimestamp")
               for p in same):
            self.violations.append(f"two live {role} pods for rank {rank}")
        if role == constants.ROLE_WORKER and any(int(p["metadata"]["labels"][constants.LABEL_ATTEMPT]) != attempt for p in same):
            self.violations.append(f"worker of attempt {attempt} created while another attempt's pod exists")
        live_top = max((int(p["metadata"]["labels"][constants.LABEL_ATTEMPT]) for p in same), default=attempt)
        if attempt < live_top:
            self.violations.append(f"{role} pod of attempt {attempt} created while one of attempt "
                                   f"{live_top} exists")
        top = self.max_attempt.get((owner, role), attempt)
        if attempt < top:
            self.violations.append(f"{role} pod of old attempt {attempt} created after attempt {top}")
        self.max_attempt[(owner, role)] = max(top, attempt)

    def _check_validation(self, job: dict, new: dict) -> None:
        old = {x.get("type"): x.get("status") for x in (job.get("status") or {}).get("conditions") or []}
        now = {x.get("type"): x.get("status") for x in new.get("conditions") or []}
        if now.get(constants.VALIDATED) != "True" or old.get(constants.VALIDATED) == "True":
            return
        if (job["spec"].get("probe") or {}).get("enabled", True) and\
                not (new.get("rendezvous") or {}).get("masterAddr"):
            self.violations.append("validated without status.rendezvous.masterAddr")
        attempt = str((new.get("probe") or {}).get("attempt"))
        probes = [p for p in self.pods.values() if _controller_uid(p) == job["metadata"]["uid"]
                  and p["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_PROBE
                  and p["metadata"]["labels"][constants.LABEL_ATTEMPT] == attempt]
        n = job["spec"]["numNodes"]
        bad = [p["metadata"]["name"] for p in probes if not self.good_reports.get(p["metadata"]["uid"])]
        if len(probes) != n or bad:
            self.violations.append(f"validated attempt {attempt} on {len(probes)}/{n} probes, "
                                   f"untrusted: {bad}")


def pod_type_errors(body: dict) -> str:
    """What the real client's ``V1Pod`` model refuses in ``body`` (a Pod as sent), one line;
    "" when it takes it. Unknown fields are not refused (the apiserver drops them)."""
    try:
        client.V1Pod.model_validate(body)
    except ValidationError as exc:
        errors = [e for e in exc.errors(include_url=False) if e["type"] != "extra_forbidden"]
        return "; ".join(".".join(str(x) for x in e["loc"]) + f": {e['msg']} (got {e.get('input')!r:.40})"
                         for e in errors[:3])
    return ""


def kube_for(sim: SimApi) -> Kube:
    """A :class:`Kube` whose API objects are the simulation (its pods and Services, which
    Kube sends as JSON through the ApiClient, go to the simulation's create methods)."""
    k = Kube.__new__(Kube)
    k.api = sim
    k.core = sim
    k.custom = sim
    k.networking = sim
    k.create_pod = sim.create_namespaced_pod  # type: ignore[method-assign]
    k.create_service = sim.create_namespaced_service  # type: ignore[method-assign]
    return k


def later(t: datetime, seconds: float) -> datetime:
    return t + timedelta(seconds=seconds)
