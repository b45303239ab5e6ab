"""Kueue (sigs.k8s.io/kueue, built from its Go module) as a host process of the local cluster.

What ``ensure_kueue`` sets up (instance 0 ports; instance N adds N*1000)::

    kube-apiserver --(webhooks, CRD conversion)--> https://127.0.0.1:16471  (Kueue's webhook server)
    kueue --(client cert CN=system:kueue)--> https://127.0.0.1:16443   (ClusterRole system:kueue)
    kueue healthz/readyz on http://127.0.0.1:16472

- The binary and its manifests come from the same module version (``build-k8s.sh kueue``):
  the CRDs (``config/components/crd/bases``), the manager's ClusterRole
  (``config/components/rbac/role.yaml``), the webhooks
  (``config/components/webhook/manifests.yaml``). The webhooks are installed with
  ``clientConfig.url`` = ``https://127.0.0.1:<port><path>`` instead of a Service (there is no
  kube-proxy and the apiserver runs on the host), and ``caBundle`` = the cluster CA, which
  signed Kueue's serving certificate (``pki.py``, SANs 127.0.0.1 and localhost). Only the
  webhooks of Kueue's own kinds and of the enabled integrations are installed: a webhook
  with ``failurePolicy: Fail`` for a kind nobody manages would only add a way to fail. The
  five CRDs upstream converts by webhook (v1beta1 <-> v1beta2) get the same conversion
  webhook at ``/convert``.
- Kueue's configuration (``<state>/kueue/config.yaml``, :func:`render_config`): no
  internal certificate management, no leader election, metrics off, webhook and health
  servers on 127.0.0.1, ``manageJobsWithoutQueueName: false`` (only objects labelled
  ``kueue.x-k8s.io/queue-name`` are queued), integrations ``batch/job`` by default,
  feature gates VisibilityOnDemand (an aggregated API server we do not register) and
  MultiKueue (it watches Secrets holding other clusters' kubeconfigs) off.
- With its internal certificate management off, cmd/kueue loads a metrics certificate
  from the fixed path ``/etc/kueue/metrics/certs/tls.{crt,key}`` (even with metrics
  off). Nothing is written to the host's /etc: Kueue runs in its own mount namespace
  (``unshare --mount``) where /etc is a read-only overlay of ``<state>/kueue/etc`` over
  the host's /etc.
- Queues (:func:`queue_objects`): ResourceFlavor ``default-flavor``, ClusterQueue
  ``cluster-queue`` (every namespace; nominal quota on cpu, memory and nvidia.com/gpu)
  and a LocalQueue ``user-queue`` in each namespace asked for.

``python -m localcluster up --kueue`` calls :func:`ensure_kueue`; ``down`` stops it (etcd,
and with it every Kueue object, is wiped). Log: ``<state>/logs/kueue.log``.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Iterable, Optional

import yaml

from localcluster.cluster.kueue_objects import (
    API,
    CLUSTER_QUEUE,
    DEFAULT_INTEGRATIONS,
    MANAGED_BY,
    NAMESPACE,
    USER,
    Options,
    object_path,
    queue_objects,
    rbac_objects,
    render_config,
    webhook_configurations,
    with_conversion,
)
from localcluster.common import pki, procs
from localcluster.common.config import KUEUE_HEALTH_PORT, kueue_dir
from localcluster.common.kubeconfig import write_kubeconfig

KUEUE = "kueue"  # tracked process name: <state>/run/kueue.pid, <state>/logs/kueue.log


class KueueError(RuntimeError):
    """Kueue could not be built, configured or started, or did not become ready."""


# -- files --------------------------------------------------------------------------------
def kueue_bin() -> Path:
    """The Kueue manager binary (``build-k8s.sh kueue``); it may not exist."""
    return kueue_dir() / "bin" / "kueue"


def manifests_dir() -> Path:
    """``<cache>/kueue-<version>/config``: crd/*.yaml, rbac/role.yaml, webhook/manifests.yaml."""
    return kueue_dir() / "config"


def check_built() -> None:
    """Raise KueueError naming what is missing (run ``make build-cluster``)."""
    m = manifests_dir()
    need = [kueue_bin(), m / "rbac" / "role.yaml", m / "webhook" / "manifests.yaml"]
    missing = [str(p) for p in need if not p.exists()]
    if not list((m / "crd").glob("*.yaml")):
        missing.append(str(m / "crd" / "*.yaml"))
    if missing:
        raise KueueError("Kueue not built (run `make build-cluster` or "
                         "`bash localcluster/build/build-k8s.sh kueue`): missing "
                         + ", ".join(missing))


def _load_yaml_docs(path: Path) -> list[dict]:
    # libyaml's loader: the workloads CRD (1.6 MB of YAML) takes ~7 s with the pure-Python one
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=loader) if d]


def kueue_state(state: Path) -> Path:
    """``<state>/kueue``: config.yaml, kueue.kubeconfig, certs/, etc/ (the /etc overlay)."""
    return state / "kueue"


def ensure_files(state: Path, integrations: Iterable[str] = DEFAULT_INTEGRATIONS,
                 wait_for_pods_ready: str = "") -> bool:
    """Write Kueue's client and serving certificates (cluster CA), kubeconfig, the
    metrics certificate under the /etc overlay and config.yaml. Returns True if
    config.yaml changed (a running Kueue must restart). Raises FileNotFoundError if the
    cluster CA does not exist yet, ValueError for an unknown integration."""
    p = state / "pki"
    d = kueue_state(state)
    crt, key = pki.ensure_cert(p, "kueue", USER)
    write_kubeconfig(d / "kueue.kubeconfig", USER, p / "ca.crt", crt, key)
    scrt, skey = pki.ensure_cert(p, "kueue-serving", "kueue-webhook", serving=["localhost", "127.0.0.1"])
    for target in (d / "certs", d / "etc" / "kueue" / "metrics" / "certs"):
        pki.install_pair(scrt, skey, target)
    text = yaml.safe_dump(render_config(d / "certs", integrations=integrations,
                                        wait_for_pods_ready=wait_for_pods_ready), sort_keys=False)
    cfg = d / "config.yaml"
    changed = not cfg.exists() or cfg.read_text() != text
    if changed:
        cfg.write_text(text)
    return changed


def argv(state: Path) -> list[str]:
    """The command that runs Kueue in its own mount namespace with ``<state>/kueue/etc``
    laid over /etc (read-only overlay), so its fixed metrics-certificate path resolves
    there. Its command line names the state dir (``procs.tracked_pid`` relies on it)."""
    d = kueue_state(state)
    script = ('mount -t overlay disttrain-kueue-etc -o "lowerdir=$1:/etc" /etc && shift '
              '&& exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            str(d / "etc"), str(kueue_bin()), f"--config={d / 'config.yaml'}"]


# -- API objects --------------------------------------------------------------------------
def apply(client, obj: dict) -> dict:
    """Server-side apply ``obj`` (field manager ``localcluster``, forced). Returns the
    object as stored. Raises kubeapi.ApiError."""
    return client.request("PATCH", object_path(obj), obj,
                          params={"fieldManager": "localcluster", "force": "true"},
                          content_type="application/apply-patch+yaml")


DIGEST_ANNOTATION = "localcluster.disttrain.dev/applied-digest"


def apply_if_changed(client, obj: dict) -> bool:
    """:func:`apply` ``obj`` unless the stored object carries the digest of this very
    manifest (annotation :data:`DIGEST_ANNOTATION`): re-applying Kueue's big CRDs costs
    seconds on every `up`. Returns True if it applied. Raises kubeapi.ApiError."""
    from localcluster.common.kubeapi import ApiError
    obj = copy.deepcopy(obj)
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]
    obj.setdefault("metadata", {}).setdefault("annotations", {})[DIGEST_ANNOTATION] = digest
    try:
        cur = client.get(object_path(obj))
        if (cur.get("metadata", {}).get("annotations") or {}).get(DIGEST_ANNOTATION) == digest:
            return False
    except ApiError as e:
        if e.status != 404:
            raise
    apply(client, obj)
    return True


def apply_crds(client, crds: list[dict], timeout: float = 60.0) -> Optional[str]:
    """:func:`apply_if_changed` each CRD, then wait until every one is Established.
    Returns None, or the name of the first CRD not Established within ``timeout`` seconds.
    Raises kubeapi.ApiError."""
    for crd in crds:
        apply_if_changed(client, crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while not any(c.get("type") == "Established" and c.get("status") == "True"
                      for c in (client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                                .get("status") or {}).get("conditions") or []):
            if time.monotonic() > deadline:
                return name
            time.sleep(0.2)
    return None


def ensure_base_objects(client, ca_pem: bytes,
                        integrations: Iterable[str] = DEFAULT_INTEGRATIONS,
                        timeout: float = 60.0) -> None:
    """Apply the namespace, RBAC, CRDs (and wait until they are Established) and the
    webhook configurations. Raises kubeapi.ApiError, KueueError (a CRD not Established
    within ``timeout`` seconds)."""
    m = manifests_dir()
    apply(client, {"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": NAMESPACE, "labels": dict(MANAGED_BY)}})
    for obj in rbac_objects(_load_yaml_docs(m / "rbac" / "role.yaml")[0]):
        apply(client, obj)
    crds = [with_conversion(d, ca_pem) for f in sorted((m / "crd").glob("*.yaml"))
            for d in _load_yaml_docs(f)]
    late = apply_crds(client, crds, timeout)
    if late is not None:
        raise KueueError(f"CRD {late} not Established after {timeout:.0f}s")
    for obj in webhook_configurations(_load_yaml_docs(m / "webhook" / "manifests.yaml"), ca_pem,
                                      integrations):
        apply(client, obj)


def ensure_queues(client, quota: dict[str, str], namespaces: Iterable[str] = (),
                  timeout: float = 60.0) -> None:
    """Apply :func:`queue_objects` (creating missing namespaces) through Kueue's webhooks,
    retrying while the webhook server is not reachable yet, then wait until the
    ClusterQueue is Active. ``timeout`` in seconds. Raises KueueError naming the last
    error, kubeapi.ApiError for a refusal that is not about reaching the webhook."""
    from localcluster.common.kubeapi import ApiError
    deadline = time.monotonic() + timeout
    for ns in sorted(set(namespaces)):
        apply(client, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in queue_objects(quota, namespaces):
        while True:
            try:
                apply(client, obj)
                break
            except ApiError as e:  # webhook not served yet: "failed calling webhook"
                if "webhook" not in str(e).lower() or time.monotonic() > deadline:
                    raise KueueError(f"{obj['kind']} {obj['metadata']['name']}: {e}") from e
                time.sleep(0.3)
    last = ""
    while time.monotonic() < deadline:
        cq = client.get(f"{API}/clusterqueues/{CLUSTER_QUEUE}")
        for c in (cq.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Active":
                if c.get("status") == "True":
                    return
                last = f"{c.get('reason')}: {c.get('message')}"
        time.sleep(0.3)
    raise KueueError(f"ClusterQueue {CLUSTER_QUEUE} not Active after {timeout:.0f}s ({last})")


# -- process ------------------------------------------------------------------------------
def ready(port: int = KUEUE_HEALTH_PORT, timeout: float = 2.0) -> bool:
    """True if Kueue's ``/readyz`` on 127.0.0.1:``port`` answers 200 (its webhook server
    runs)."""
    from localcluster.cluster.controlplane import http_ok
    return http_ok(port, "/readyz", timeout=timeout)


def kueue_healthy(state: Path) -> bool:
    """True if the tracked Kueue process runs this build with this state's config (its
    command line after ``exec``) and answers ``/readyz``."""
    pid = procs.tracked_pid(state, KUEUE)
    return pid is not None and procs.cmdline(pid)[-2:] == argv(state)[-2:] and ready()


def _log_tail(state: Path, n: int = 20) -> str:
    try:
        return "\n".join((state / "logs" / f"{KUEUE}.log").read_text(errors="replace")
                         .splitlines()[-n:])
    except OSError:
        return "(no log)"


def ensure_kueue(state: Path, client, options: Optional[Options] = None,
                 timeout: float = 90.0) -> float:
    """Bring Kueue up against the running apiserver (idempotent: a healthy Kueue whose
    config is unchanged keeps running) as ``options`` ask (default :class:`Options`: quota
    :data:`DEFAULT_QUOTA`, LocalQueue ``user-queue`` in ``default``, the default
    integrations, no waitForPodsReady), with the queues of :func:`queue_objects`.
    ``client`` is an admin ``kubeapi.KubeClient``; ``timeout`` in seconds. Returns the
    seconds from starting the process to an Active ClusterQueue (0.0 when a running Kueue
    was kept).

    Raises KueueError (not built, exited, not ready in time), kubeapi.ApiError, OSError.
    """
    options = options or Options()
    quota, namespaces, integrations = dict(options.quota), options.namespaces, options.integrations
    check_built()
    changed = ensure_files(state, integrations, options.wait_for_pods_ready)
    ca_pem = (state / "pki" / "ca.crt").read_bytes()
    ensure_base_objects(client, ca_pem, integrations, timeout=timeout)
    t0: Optional[float] = None
    if changed or not kueue_healthy(state):
        procs.stop_tracked(state, KUEUE, grace=5)
        t0 = time.monotonic()
        env = dict(os.environ, KUBECONFIG=str(kueue_state(state) / "kueue.kubeconfig"))
        pid = procs.start_detached(state, KUEUE, argv(state), env=env)
        deadline = t0 + timeout
        while not ready():
            if not procs.alive(pid):
                raise KueueError(f"kueue exited; {state}/logs/{KUEUE}.log:\n" + _log_tail(state))
            if time.monotonic() > deadline:
                raise KueueError(f"kueue not ready after {timeout:.0f}s; {state}/logs/"
                                 f"{KUEUE}.log:\n" + _log_tail(state))
            time.sleep(0.2)
    ensure_queues(client, quota, namespaces, timeout=timeout)
    return 0.0 if t0 is None else time.monotonic() - t0


def stop_kueue(state: Path) -> bool:
    """Stop the Kueue process (SIGTERM, SIGKILL after 5 s). True if one was running."""
    return procs.stop_tracked(state, KUEUE, grace=5)


def summary(client) -> dict:
    """The ClusterQueue's quota and usage as a JSON-able dict (for `status` and tests):
    ``{"active", "pendingWorkloads", "admittedWorkloads", "flavorsUsage"}``.
    Raises kubeapi.ApiError (e.g. 404 without Kueue)."""
    cq = client.get(f"{API}/clusterqueues/{CLUSTER_QUEUE}")
    st = cq.get("status") or {}
    return {"active": any(c.get("type") == "Active" and c.get("status") == "True"
                          for c in st.get("conditions") or []),
            "pendingWorkloads": st.get("pendingWorkloads", 0),
            "admittedWorkloads": st.get("admittedWorkloads", 0),
            "flavorsUsage": st.get("flavorsUsage") or []}
