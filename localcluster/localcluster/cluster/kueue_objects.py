"""Kueue's objects on the local cluster, pure: its names, the options of `up --kueue`
(quota, namespaces, integrations), its config file, its webhook configurations and CRD
conversion pointed at the host process, its RBAC and queues. ``kueue.py`` runs and
applies them."""
from __future__ import annotations

import base64
import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from localcluster.common.config import KUEUE_HEALTH_PORT, KUEUE_WEBHOOK_PORT

USER = "system:kueue"  # the client certificate's CN; the ClusterRole(Binding) name
NAMESPACE = "kueue-system"
GROUP = "kueue.x-k8s.io"
API = f"/apis/{GROUP}/v1beta2"
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "cluster-queue"
LOCAL_QUEUE = "user-queue"
QUEUE_LABEL = f"{GROUP}/queue-name"
DEFAULT_QUOTA = {"cpu": "16", "memory": "32Gi", "nvidia.com/gpu": "0"}
DEFAULT_INTEGRATIONS = ("batch/job",)
MANAGED_BY = {"app.kubernetes.io/managed-by": "localcluster"}
# Kueue integration -> the (API group, resource) its webhooks act on.
INTEGRATION_RESOURCES = {
    "batch/job": ("batch", "jobs"),
    "pod": ("", "pods"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
    "kubeflow.org/pytorchjob": ("kubeflow.org", "pytorchjobs"),
    "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs"),
}


# The CRDs upstream serves through the conversion webhook (config/components/crd/kustomization.yaml).
CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")  # Go's time.ParseDuration, positive
RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")


@dataclass(frozen=True)
class Options:
    """What `up --kueue` (or a scenario's ``kueue`` key) asks for: the ClusterQueue's
    nominal quota (resource -> quantity), the namespaces that get the LocalQueue
    ``user-queue``, Kueue's integrations (see :data:`INTEGRATION_RESOURCES`), and
    ``wait_for_pods_ready``: Kueue's ``waitForPodsReady`` timeout (a duration such as
    ``"10s"``; with ``blockAdmission: true``), empty for off."""

    quota: tuple[tuple[str, str], ...] = tuple(sorted(DEFAULT_QUOTA.items()))
    namespaces: tuple[str, ...] = ("default",)
    integrations: tuple[str, ...] = DEFAULT_INTEGRATIONS
    wait_for_pods_ready: str = ""

    def to_json(self) -> dict:
        """A JSON-able dict (what `up` keeps in ``<state>/cluster.json``)."""
        return {"quota": dict(self.quota), "namespaces": list(self.namespaces),
                "integrations": list(self.integrations),
                "waitForPodsReady": self.wait_for_pods_ready}

    @classmethod
    def from_json(cls, d: dict) -> "Options":
        """Inverse of :meth:`to_json` (a dict of an older `up` without
        ``waitForPodsReady`` reads as off). Raises KeyError/TypeError/AttributeError for a
        malformed dict."""
        return cls(tuple(sorted(d["quota"].items())), tuple(d["namespaces"]),
                   tuple(d["integrations"]), str(d.get("waitForPodsReady") or ""))


# -- pure parts -------------------------------------------------------------------------
def parse_quota(text: str) -> dict[str, str]:
    """``"cpu=4,memory=8Gi,nvidia.com/gpu=0"`` -> ``{"cpu": "4", ...}`` merged over
    :data:`DEFAULT_QUOTA` (a resource not named keeps its default). Quantities are
    Kubernetes quantities (``500m``, ``8Gi``). Raises ValueError naming the bad item."""
    out = dict(DEFAULT_QUOTA)
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, qty = item.partition("=")
        name, qty = name.strip(), qty.strip()
        if not sep or not RESOURCE_NAME.match(name):
            raise ValueError(f"{item!r}: give resource=quantity, e.g. cpu=4")
        if not QUANTITY.match(qty):
            raise ValueError(f"{item!r}: {qty!r} is not a quantity (like 4, 500m, 8Gi)")
        out[name] = qty
    return out


def render_config(cert_dir: Path | str, *, webhook_port: int = KUEUE_WEBHOOK_PORT,
                  health_port: int = KUEUE_HEALTH_PORT,
                  integrations: Iterable[str] = DEFAULT_INTEGRATIONS,
                  wait_for_pods_ready: str = "") -> dict:
    """Kueue's Configuration (``config.kueue.x-k8s.io/v1beta2``) for a host process:
    everything on 127.0.0.1, our own certificates in ``cert_dir`` (``tls.crt``,
    ``tls.key``), one replica (no leader election), metrics off, only labelled jobs
    queued; with ``wait_for_pods_ready`` (a duration, e.g. ``"10s"``) Kueue's
    ``waitForPodsReady`` with that timeout and ``blockAdmission: true``. Ports are TCP
    ports. Raises ValueError for an integration this module does not know (see
    :data:`INTEGRATION_RESOURCES`) or a timeout that is no duration."""
    integrations = list(integrations)
    if wait_for_pods_ready and not DURATION.match(wait_for_pods_ready):
        raise ValueError(f"waitForPodsReady timeout {wait_for_pods_ready!r} is no duration "
                         "(e.g. 10s, 5m, 1h30m)")
    unknown = [i for i in integrations if i not in INTEGRATION_RESOURCES]
    if unknown:
        raise ValueError(f"unknown Kueue integration(s) {unknown}; known: "
                         f"{sorted(INTEGRATION_RESOURCES)}")
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": integrations},
        # Off: VisibilityOnDemand is an aggregated API server we do not register; MultiKueue
        # watches Secrets in its namespace (kubeconfigs of worker clusters) we do not have.
        "featureGates": {"VisibilityOnDemand": False, "MultiKueue": False},
        **({"waitForPodsReady": {"timeout": wait_for_pods_ready, "blockAdmission": True}}
           if wait_for_pods_ready else {}),
    }


def webhook_url(path: str, port: int = KUEUE_WEBHOOK_PORT) -> str:
    """``https://127.0.0.1:<port><path>``: where the apiserver reaches Kueue's webhooks."""
    return f"https://127.0.0.1:{port}{path}"


def _wanted(webhook: dict, resources: set[tuple[str, str]]) -> bool:
    for rule in webhook.get("rules") or []:
        for g in rule.get("apiGroups") or []:
            if g == GROUP:
                return True
            for r in rule.get("resources") or []:
                if (g, r.split("/")[0]) in resources:
                    return True
    return False


def webhook_configurations(docs: list[dict], ca_pem: bytes,
                           integrations: Iterable[str] = DEFAULT_INTEGRATIONS,
                           port: int = KUEUE_WEBHOOK_PORT) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations (``docs``, as in its
    ``webhook/manifests.yaml``) renamed ``kueue-<name>``, each webhook pointed at
    :func:`webhook_url` of its service path with ``caBundle`` = ``ca_pem`` (PEM bytes).
    Kept: webhooks on Kueue's own kinds and on the ``integrations``' kinds; a kept pod
    webhook skips kube-system and kueue-system, as upstream's kustomization does. Pure.
    Raises KeyError for an unknown integration or a webhook without a service path."""
    resources = {INTEGRATION_RESOURCES[i] for i in integrations}
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for d in docs:
        d = copy.deepcopy(d)
        hooks = []
        for w in d.get("webhooks") or []:
            if not _wanted(w, resources):
                continue
            path = w["clientConfig"]["service"]["path"]
            w["clientConfig"] = {"url": webhook_url(path, port), "caBundle": ca}
            if any("pods" in (r.get("resources") or []) for r in w.get("rules") or []):
                w["namespaceSelector"] = {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": ["kube-system", NAMESPACE]}]}
            hooks.append(w)
        d["metadata"] = {"name": "kueue-" + d["metadata"]["name"], "labels": dict(MANAGED_BY)}
        d["webhooks"] = hooks
        out.append(d)
    return out


def with_conversion(crd: dict, ca_pem: bytes, port: int = KUEUE_WEBHOOK_PORT) -> dict:
    """``crd`` with the conversion webhook upstream patches in (``/convert`` at
    :func:`webhook_url`, ``caBundle`` = ``ca_pem``) when its plural is one of
    :data:`CONVERTED_CRDS`; otherwise unchanged. Returns a copy. Pure."""
    crd = copy.deepcopy(crd)
    if crd["spec"]["names"]["plural"] in CONVERTED_CRDS:
        crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
            "clientConfig": {"url": webhook_url("/convert", port),
                             "caBundle": base64.b64encode(ca_pem).decode()},
            "conversionReviewVersions": ["v1"]}}
    return crd


def rbac_objects(role_doc: dict) -> list[dict]:
    """The ClusterRole ``system:kueue`` with the rules of Kueue's own ``manager-role``
    (``role_doc``) and its ClusterRoleBinding to user ``system:kueue``. Pure."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": USER, "labels": dict(MANAGED_BY)},
            "rules": copy.deepcopy(role_doc["rules"])}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": USER, "labels": dict(MANAGED_BY)},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": USER},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                             "name": USER}]}
    return [role, binding]


def queue_objects(quota: dict[str, str], namespaces: Iterable[str] = ()) -> list[dict]:
    """ResourceFlavor ``default-flavor``, ClusterQueue ``cluster-queue`` admitting from
    every namespace with a nominal quota of ``quota`` (resource -> quantity; each resource
    is covered), and a LocalQueue ``user-queue`` per namespace in ``namespaces``. Pure."""
    names = sorted(quota)
    flavor = {"apiVersion": f"{GROUP}/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": FLAVOR, "labels": dict(MANAGED_BY)}, "spec": {}}
    cq = {"apiVersion": f"{GROUP}/v1beta2", "kind": "ClusterQueue",
          "metadata": {"name": CLUSTER_QUEUE, "labels": dict(MANAGED_BY)},
          "spec": {"namespaceSelector": {},
                   "resourceGroups": [{"coveredResources": names, "flavors": [{
                       "name": FLAVOR,
                       "resources": [{"name": n, "nominalQuota": quota[n]} for n in names]}]}]}}
    out = [flavor, cq]
    for ns in sorted(set(namespaces)):
        out.append(local_queue(ns))
    return out


def local_queue(namespace: str, name: str = LOCAL_QUEUE) -> dict:
    """A LocalQueue ``name`` in ``namespace`` feeding ``cluster-queue``. Pure."""
    return {"apiVersion": f"{GROUP}/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
            "spec": {"clusterQueue": CLUSTER_QUEUE}}


PLURALS = {"CustomResourceDefinition": "customresourcedefinitions",
           "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
           "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
           "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
           "Namespace": "namespaces", "ResourceFlavor": "resourceflavors",
           "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
           "ClusterTrainingRuntime": "clustertrainingruntimes"}


def object_path(obj: dict) -> str:
    """The API path of ``obj`` (apiVersion, kind, metadata.name/namespace), e.g.
    ``/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/user-queue``. Pure.
    Raises KeyError for a kind not in :data:`PLURALS`."""
    av = obj["apiVersion"]
    base = f"/api/{av}" if "/" not in av else f"/apis/{av}"
    ns = obj["metadata"].get("namespace")
    where = f"/namespaces/{ns}" if ns else ""
    return f"{base}{where}/{PLURALS[obj['kind']]}/{obj['metadata']['name']}"
