"""Kubeflow's training operator (the peer the benchmarks compare with) on the local cluster.

``python -m localcluster up --kubeflow`` runs ``training-operator.v1`` (v1.8.1, built from
its Go module by ``build/build-k8s.sh kubeflow``, cached by version) as a host process
against the local apiserver, for PyTorchJobs only::

    unshare --mount -- (bind <state>/kubeflow/tmp over /tmp)
      training-operator.v1 --kubeconfig=<state>/kubeflow/training-operator.kubeconfig
        --enable-scheme=pytorchjob --webhook-server-port=18070+1000N
        --metrics-bind-address=127.0.0.1:18071+1000N --health-probe-bind-address=127.0.0.1:18072+1000N
      env MY_POD_NAMESPACE=kubeflow

What a Deployment of its ``manifests/overlays/standalone`` gives it in a real cluster,
made here (everything from the same module's manifests, copied to the cache at build):

- the PyTorchJob CRD (``manifests/base/crds/kubeflow.org_pytorchjobs.yaml``);
- its own RBAC identity: a client certificate for user ``kubeflow:training-operator``
  (``pki.py``) bound to upstream's ClusterRole ``training-operator``
  (``manifests/base/rbac/role.yaml``), so the real apiserver's RBAC decides every request;
- namespace ``kubeflow`` and the Secret ``training-operator-webhook-cert`` its cert
  rotator keeps; we pre-fill it with a CA (RSA, PKCS#1, as the rotator parses) and a
  serving certificate whose SANs include 127.0.0.1, so the rotator keeps them;
- the webhook: the rotator and controller-runtime read the certificate from the
  hard-coded ``/tmp/k8s-webhook-server/serving-certs`` (kubelet mounts the Secret there);
  the process runs in its own mount namespace where ``<state>/kubeflow/tmp`` is ``/tmp``,
  so every cluster instance has its own. The apiserver reaches the server by URL
  (``https://127.0.0.1:<port>/validate-kubeflow-org-v1-pytorchjob``: a Service would need
  a route from the host into the cluster network, which the proving ground never has);
  only the PyTorchJob validator of upstream's ``validator.training-operator.kubeflow.org``
  is registered (the only scheme enabled), failurePolicy Fail as upstream.

Its PyTorch init container (image ``alpine:3.10``, upstream's default, running
``nslookup <job>-master-0`` until the master's name resolves) runs with the ``nslookup``
that ``images.yaml`` maps into that image (``localcluster/images/alpine/bin``).

The pure parts (:func:`cluster_role`, :func:`webhook_configuration`, :func:`argv`,
:func:`pytorchjob_documents`) are tested in ``tests/unit/localcluster/cluster/test_kubeflow.py``;
``tests/e2e/test_kubeflow.py`` runs the digits example as a PyTorchJob.
"""
from __future__ import annotations

import base64
import copy
import os
import time
import urllib.request
from pathlib import Path
from typing import Optional

import yaml

from localcluster.cluster import gomanager
from localcluster.common import pki, procs
from localcluster.common.config import (
    KUBEFLOW_HEALTH_PORT,
    KUBEFLOW_METRICS_PORT,
    KUBEFLOW_WEBHOOK_PORT,
    training_operator_dir,
    versions,
)
from localcluster.common.kubeapi import ApiError
from localcluster.common.kubeconfig import write_kubeconfig

PROCESS = "training-operator"  # procs name: <state>/run/training-operator.pid, logs/training-operator.log
BINARY = "training-operator.v1"
NAMESPACE = "kubeflow"  # upstream's (MY_POD_NAMESPACE; the rotator's Secret lives here)
USER = "kubeflow:training-operator"
CLUSTER_ROLE = "training-operator"  # upstream's name
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_SERVICE = "training-operator"  # the rotator's DNS name: <service>.<namespace>.svc
WEBHOOK_CA_NAME = "training-operator-ca"  # the rotator checks its CA against this name
CRD_NAME = "pytorchjobs.kubeflow.org"
INIT_CONTAINER_IMAGE = "alpine:3.10"  # upstream's --pytorch-init-container-image default
MANIFESTS = {"crd": "crds/kubeflow.org_pytorchjobs.yaml", "role": "rbac/role.yaml",
             "webhook": "webhook/manifests.yaml"}
MANAGED = {"app.kubernetes.io/managed-by": "localcluster"}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
VWCS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"

# PyTorchJob names (kubeflow.org/v1, pkg/apis/kubeflow.org/v1/pytorch_types.go)
PYTORCH_CONTAINER = "pytorch"
PYTORCH_PORT_NAME = "pytorchjob-port"


class KubeflowError(RuntimeError):
    """The training operator is not built, or did not start or become ready."""


# -- pure parts ---------------------------------------------------------------------------
def _labelled(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **MANAGED}
    return out


def cluster_role(role: dict) -> dict:
    """Upstream's ClusterRole (``manifests/base/rbac/role.yaml``, parsed) with our
    managed-by label, under its own name. Raises ValueError if ``role`` is no ClusterRole."""
    if role.get("kind") != "ClusterRole" or not role.get("rules"):
        raise ValueError("expected upstream's ClusterRole with rules")
    out = _labelled(role)
    out["metadata"]["name"] = CLUSTER_ROLE
    return out


def cluster_role_binding() -> dict:
    """Binds ``training-operator`` to the operator's certificate user."""
    return _labelled({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": CLUSTER_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": CLUSTER_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]})


def webhook_configuration(manifests: list[dict], ca_pem: bytes, port: int) -> dict:
    """Upstream's ValidatingWebhookConfiguration (``manifests/base/webhook/manifests.yaml``,
    parsed) reduced to its PyTorchJob webhook, named as the standalone overlay names it,
    reaching the server by URL on 127.0.0.1:``port`` with ``ca_pem`` (PEM bytes) as its
    CA bundle. Raises ValueError if the manifests hold no PyTorchJob webhook."""
    vwc = next((d for d in manifests if d and d.get("kind") == "ValidatingWebhookConfiguration"),
               None)
    hooks = [h for h in (vwc or {}).get("webhooks") or []
             if any("pytorchjobs" in (r.get("resources") or []) for r in h.get("rules") or [])]
    if not hooks:
        raise ValueError("no PyTorchJob webhook in the training operator's manifests")
    hook = copy.deepcopy(hooks[0])
    path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path") \
        or "/validate-kubeflow-org-v1-pytorchjob"
    hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                            "caBundle": base64.b64encode(ca_pem).decode()}
    return _labelled({"apiVersion": "admissionregistration.k8s.io/v1",
                      "kind": "ValidatingWebhookConfiguration",
                      "metadata": {"name": WEBHOOK_CONFIGURATION}, "webhooks": [hook]})


def webhook_secret(ca_crt: bytes, ca_key: bytes, tls_crt: bytes, tls_key: bytes) -> dict:
    """The rotator's Secret (keys ca.crt, ca.key, tls.crt, tls.key; PEM bytes in)."""
    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()
    return _labelled({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                      "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
                      "data": {"ca.crt": b64(ca_crt), "ca.key": b64(ca_key),
                               "tls.crt": b64(tls_crt), "tls.key": b64(tls_key)}})


def operator_args(kubeconfig: Path) -> list[str]:
    """The training operator's flags (after the binary) for this cluster instance."""
    return [f"--kubeconfig={kubeconfig}", "--enable-scheme=pytorchjob",
            f"--webhook-server-port={KUBEFLOW_WEBHOOK_PORT}",
            f"--metrics-bind-address=127.0.0.1:{KUBEFLOW_METRICS_PORT}",
            f"--health-probe-bind-address=127.0.0.1:{KUBEFLOW_HEALTH_PORT}"]


WEBHOOK_DIR = "k8s-webhook-server"  # the operator reads /tmp/k8s-webhook-server/serving-certs


def argv(binary: Path, kubeconfig: Path, tmp: Path) -> list[str]:
    """The command line: the binary in a private mount namespace where
    ``tmp``/k8s-webhook-server is /tmp/k8s-webhook-server (the operator reads its serving
    certificate from that hard-coded path; ``gomanager.with_private_cert_dir``)."""
    return gomanager.with_private_cert_dir(tmp, [str(binary), *operator_args(kubeconfig)])


def _container_env(c: dict, name: str, value: str) -> None:
    env = [e for e in c.get("env") or [] if e.get("name") != name]
    c["env"] = env + [{"name": name, "value": value}]


def pytorchjob_documents(docs: list[dict], master_port: Optional[int] = None,
                         restart_policy: str = "OnFailure") -> list[dict]:
    """The same job as a Kubeflow PyTorchJob (kubeflow.org/v1): every document but the
    DistTrainingJob unchanged (e.g. the script's ConfigMap), and in its place a PyTorchJob
    of the same name with one Master and ``numNodes - 1`` Workers whose pod template is
    the job's (same image, command, env, resources, volumes), its trainer container named
    ``pytorch`` with port ``pytorchjob-port`` = ``master_port`` (default: the job's
    ``rendezvous.port``, 29500; the operator sets MASTER_ADDR=<job>-master-0, MASTER_PORT,
    WORLD_SIZE, RANK, PET_* from them).

    What a user of PyTorchJob writes for the DistTrainingJob's ``spec.network``:
    ``hostNetwork`` -> the pods' hostNetwork with dnsPolicy ClusterFirstWithHostNet (so
    the master's Service name resolves); a ``socketIfname`` other than auto ->
    NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME; ``portRange`` on the pod network -> the
    ``net.ipv4.ip_local_port_range`` sysctl. ``numProcPerNode`` -> ``nprocPerNode``.
    The probe settings have no counterpart. ``restart_policy`` is upstream's examples'
    OnFailure by default. Raises ValueError if ``docs`` hold no DistTrainingJob.
    The input is not modified."""
    out: list[dict] = []
    found = False
    for d in docs:
        if d.get("kind") != "DistTrainingJob":
            out.append(copy.deepcopy(d))
            continue
        found = True
        spec = d.get("spec") or {}
        net = spec.get("network") or {}
        tmpl = copy.deepcopy(spec.get("template") or {})
        pod = tmpl.setdefault("spec", {})
        containers = pod.get("containers") or []
        if not containers:
            raise ValueError("the job's template has no container")
        from disttrain.api.trainer import trainer_index  # the operator's rule: the same trainer

        main = containers[trainer_index(containers, spec.get("trainerContainer")) or 0]
        main["name"] = PYTORCH_CONTAINER
        ports = [p for p in main.get("ports") or [] if p.get("name") != PYTORCH_PORT_NAME]
        port = master_port or (spec.get("rendezvous") or {}).get("port") or 29500
        main["ports"] = ports + [{"name": PYTORCH_PORT_NAME, "containerPort": int(port)}]
        ifname = net.get("socketIfname")
        if ifname and ifname != "auto":
            for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
                _container_env(main, var, str(ifname))
        if net.get("hostNetwork"):
            pod["hostNetwork"] = True
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        elif net.get("portRange"):
            sc = pod.setdefault("securityContext", {})
            sysctls = [s for s in sc.get("sysctls") or []
                       if s.get("name") != "net.ipv4.ip_local_port_range"]
            lo, _, hi = str(net["portRange"]).partition("-")
            sc["sysctls"] = sysctls + [{"name": "net.ipv4.ip_local_port_range",
                                        "value": f"{lo} {hi}"}]
        nodes = int(spec.get("numNodes") or 1)
        replicas = {"Master": {"replicas": 1, "restartPolicy": restart_policy,
                               "template": tmpl}}
        if nodes > 1:
            replicas["Worker"] = {"replicas": nodes - 1, "restartPolicy": restart_policy,
                                  "template": copy.deepcopy(tmpl)}
        pj_spec: dict = {"pytorchReplicaSpecs": replicas}
        if spec.get("numProcPerNode"):
            pj_spec["nprocPerNode"] = str(spec["numProcPerNode"])
        meta = {k: v for k, v in (d.get("metadata") or {}).items()
                if k in ("name", "namespace", "labels", "annotations")}
        out.append({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                    "spec": pj_spec})
    if not found:
        raise ValueError("no DistTrainingJob among the documents")
    return out


# -- files, credentials -------------------------------------------------------------------
def binary() -> Path:
    """The built ``training-operator.v1`` (may not exist)."""
    return training_operator_dir() / "bin" / BINARY


def manifest(key: str) -> list[dict]:
    """Upstream's manifest ``MANIFESTS[key]`` from the cache, parsed (all documents).
    Raises KubeflowError if it is missing (not built)."""
    p = training_operator_dir() / "manifests" / MANIFESTS[key]
    try:
        return [d for d in yaml.safe_load_all(p.read_text()) if d]
    except OSError:
        raise KubeflowError(f"missing {p} (run `make build-cluster` or "
                            "`bash localcluster/build/build-k8s.sh kubeflow`)") from None


def check_built() -> None:
    """Raise KubeflowError naming what `build-k8s.sh kubeflow` has not built."""
    missing = [str(p) for p in [binary()] + [training_operator_dir() / "manifests" / m
                                              for m in MANIFESTS.values()] if not p.exists()]
    if missing:
        raise KubeflowError("Kubeflow's training operator is not built (run `make build-cluster` "
                            "or `bash localcluster/build/build-k8s.sh kubeflow`): missing "
                            + ", ".join(missing))


def kubeflow_dir(state: Path) -> Path:
    """``<state>/kubeflow``: kubeconfig, the operator's /tmp (serving certs)."""
    return state / "kubeflow"


def cert_dir(state: Path) -> Path:
    """Where the operator finds its serving certificate, as seen from the host."""
    return kubeflow_dir(state) / "tmp" / "k8s-webhook-server" / "serving-certs"


def ensure_credentials(state: Path) -> dict[str, Path]:
    """The operator's client certificate (user ``kubeflow:training-operator``) and its
    kubeconfig, the webhook CA (``<state>/pki/kubeflow-webhook/``) and serving certificate
    (SANs: the rotator's ``training-operator.kubeflow.svc`` and 127.0.0.1), the latter
    also written where the operator reads it. Idempotent. Returns the paths by name.
    Raises FileNotFoundError if the cluster CA does not exist yet."""
    p = state / "pki"
    crt, key = pki.ensure_cert(p, "kubeflow-training-operator", USER)
    kc = write_kubeconfig(kubeflow_dir(state) / "training-operator.kubeconfig", USER,
                          p / "ca.crt", crt, key)
    wp = p / "kubeflow-webhook"
    ca_crt, ca_key = pki.ensure_ca(wp, cn=WEBHOOK_CA_NAME, dns=[WEBHOOK_CA_NAME], rsa_pkcs1=True)
    tls_crt, tls_key = pki.ensure_cert(wp, "serving", WEBHOOK_SERVICE, serving=[
        f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc", "localhost", "127.0.0.1"])
    d = cert_dir(state)
    d.mkdir(parents=True, exist_ok=True)
    for src, name in ((tls_crt, "tls.crt"), (tls_key, "tls.key")):
        dst = d / name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            dst.write_bytes(src.read_bytes())
            dst.chmod(0o600)
    return {"kubeconfig": kc, "ca_crt": ca_crt, "ca_key": ca_key, "tls_crt": tls_crt,
            "tls_key": tls_key}


# -- API objects --------------------------------------------------------------------------
def _create_or_replace(client, collection: str, obj: dict) -> None:
    """POST ``obj``; if it exists, PUT it over (keeping its resourceVersion)."""
    try:
        client.post(collection, obj)
    except ApiError as e:
        if e.status != 409:
            raise
        path = f"{collection}/{obj['metadata']['name']}"
        body = copy.deepcopy(obj)
        body["metadata"]["resourceVersion"] = client.get(path)["metadata"]["resourceVersion"]
        client.put(path, body)


def _crd_established(client) -> bool:
    try:
        crd = client.get(f"{CRDS}/{CRD_NAME}")
    except ApiError:
        return False
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


def ensure_api_objects(client, creds: dict[str, Path], timeout: float = 60.0) -> None:
    """The PyTorchJob CRD (waits until Established), namespace ``kubeflow``, the
    ClusterRole and its binding, the webhook Secret and configuration. ``client`` is an
    admin ``kubeapi.KubeClient``; ``timeout`` in seconds. Raises KubeflowError (not built,
    CRD not Established in time), kubeapi.ApiError or OSError."""
    crd = next(d for d in manifest("crd") if d.get("kind") == "CustomResourceDefinition")
    _create_or_replace(client, CRDS, _labelled(crd))
    try:
        client.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": NAMESPACE, "labels": MANAGED}})
    except ApiError as e:
        if e.status != 409:
            raise
    role = next(d for d in manifest("role") if d.get("kind") == "ClusterRole")
    _create_or_replace(client, f"{RBAC}/clusterroles", cluster_role(role))
    _create_or_replace(client, f"{RBAC}/clusterrolebindings", cluster_role_binding())
    read = {k: creds[k].read_bytes() for k in ("ca_crt", "ca_key", "tls_crt", "tls_key")}
    _create_or_replace(client, f"/api/v1/namespaces/{NAMESPACE}/secrets",
                       webhook_secret(read["ca_crt"], read["ca_key"], read["tls_crt"],
                                      read["tls_key"]))
    _create_or_replace(client, VWCS, webhook_configuration(manifest("webhook"), read["ca_crt"],
                                                           KUBEFLOW_WEBHOOK_PORT))
    deadline = time.monotonic() + timeout
    while not _crd_established(client):
        if time.monotonic() > deadline:
            raise KubeflowError(f"CRD {CRD_NAME} not Established after {timeout:.0f}s")
        time.sleep(0.2)


# -- the process --------------------------------------------------------------------------
def ready(timeout: float = 1.0) -> bool:
    """True if the operator's /readyz answers 200 (its certificates are in place and its
    webhook server listens; the PyTorchJob controller starts right then)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{KUBEFLOW_HEALTH_PORT}/readyz",
                                    timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def healthy(state: Path) -> bool:
    """True if the tracked process runs and is ready."""
    return procs.tracked_pid(state, PROCESS) is not None and ready()


def _log_tail(state: Path, n: int = 20) -> str:
    try:
        lines = (state / "logs" / f"{PROCESS}.log").read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return "(no log)"


def ensure(state: Path, client, timeout: float = 60.0) -> int:
    """Install what the training operator needs and run it (idempotent: a healthy one
    started with the same command line keeps running); returns its pid once /readyz
    answers. ``client`` is an admin ``kubeapi.KubeClient``; ``timeout`` in seconds.
    Raises KubeflowError (not built, exited, not ready in time), kubeapi.ApiError, OSError."""
    check_built()
    creds = ensure_credentials(state)
    ensure_api_objects(client, creds, timeout=timeout)
    cmd = argv(binary(), creds["kubeconfig"], kubeflow_dir(state) / "tmp")
    pid = procs.tracked_pid(state, PROCESS)
    if pid is not None and procs.cmdline(pid)[1:] != operator_args(creds["kubeconfig"]):
        procs.stop_tracked(state, PROCESS, grace=5)  # started with other flags (older code)
        pid = None
    if pid is None:
        env = dict(os.environ, MY_POD_NAMESPACE=NAMESPACE)
        pid = procs.start_detached(state, PROCESS, cmd, env=env)
    deadline = time.monotonic() + timeout
    while not ready():
        if procs.tracked_pid(state, PROCESS) is None:
            how = procs.exit_status(pid)
            raise KubeflowError(f"training operator exited{f' ({how})' if how else ''}; "
                                f"{state}/logs/{PROCESS}.log:\n"
                                + _log_tail(state))
        if time.monotonic() > deadline:
            raise KubeflowError(f"training operator not ready after {timeout:.0f}s; "
                                f"{state}/logs/{PROCESS}.log:\n" + _log_tail(state))
        time.sleep(0.5)  # each failed /readyz is two log lines
    return pid


def stop(state: Path) -> bool:
    """Stop the training operator (SIGTERM, SIGKILL after 5 s). True if it was running.
    Its API objects stay (``down`` wipes etcd); while it is stopped, its webhook
    (failurePolicy Fail) refuses PyTorchJob writes, as in a real cluster."""
    return procs.stop_tracked(state, PROCESS, grace=5)


def status_line(state: Path) -> Optional[str]:
    """``healthy``/``DOWN`` with the pid, or None when it was never started here."""
    if not (state / "run" / f"{PROCESS}.pid").exists():
        return None
    pid = procs.tracked_pid(state, PROCESS)
    return (f"{'healthy' if pid and ready() else 'DOWN'} (pid {pid}, "
            f"{versions()['TRAINING_OPERATOR_VERSION']}, PyTorchJob)")
