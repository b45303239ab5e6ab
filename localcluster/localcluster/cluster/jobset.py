"""JobSet (sigs.k8s.io/jobset, built from its Go module) as a host process of the local cluster.

``python -m localcluster up --jobset`` runs it; Kueue's ``jobset.x-k8s.io/jobset``
integration and the admission check's JobSet scenarios need it. What it sets up
(instance 0 ports; instance N adds N*1000)::

    kube-apiserver --(webhooks)--> https://127.0.0.1:18073   (JobSet's webhook server)
    jobset --(client cert CN=jobset:controller)--> https://127.0.0.1:16443
    jobset healthz/readyz on http://127.0.0.1:18074

What a Deployment of upstream's ``config/default`` gives it in a real cluster, made here
from the same module version's manifests (``build-k8s.sh jobset`` copies them):

- the JobSet CRD (``config/components/crd/bases``);
- its RBAC identity: a client certificate for user ``jobset:controller`` bound to a
  ClusterRole with upstream's ``manager-role`` rules, so the real apiserver's RBAC decides;
- its webhooks (``config/components/webhook/manifests.yaml``) with upstream's kustomize
  patches applied (the pod webhooks only for pods labelled
  ``jobset.sigs.k8s.io/jobset-name``, CREATE only: without the patch every pod in the
  cluster would need JobSet up), reached by URL on 127.0.0.1 with the cluster CA, which
  signed JobSet's serving certificate (SANs 127.0.0.1, localhost);
- its configuration (``<state>/jobset/config.yaml``, :func:`render_config`): internal
  certificate management off, no leader election, metrics off, webhook and health servers
  on 127.0.0.1.

``down`` stops it (etcd, and with it every JobSet, is wiped). Log: ``<state>/logs/jobset.log``.
What it shares with Trainer v2's manager is in ``gomanager.py``. The pure parts are tested in ``tests/unit/localcluster/cluster/test_jobset.py``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

from localcluster.cluster import gomanager
from localcluster.cluster.gomanager import ManagerError as JobSetError  # noqa: F401 (raised here)
from localcluster.common.config import (
    JOBSET_HEALTH_PORT,
    JOBSET_WEBHOOK_PORT,
    jobset_dir,
    versions,
)

PROCESS = "jobset"  # <state>/run/jobset.pid, <state>/logs/jobset.log
USER = "jobset:controller"
CLUSTER_ROLE = "jobset-manager"
NAME_PREFIX = "jobset-"  # upstream's kustomize namePrefix
POD_LABEL = "jobset.sigs.k8s.io/jobset-name"  # upstream's pod-webhook objectSelector key
MANAGER = gomanager.Manager(PROCESS, USER, "jobset", JOBSET_HEALTH_PORT, jobset_dir, "jobset")


# -- pure parts ---------------------------------------------------------------------------
def render_config(cert_dir: Path, webhook_port: int = JOBSET_WEBHOOK_PORT,
                  health_port: int = JOBSET_HEALTH_PORT) -> dict:
    """JobSet's ``Configuration`` (config.jobset.x-k8s.io/v1alpha1) for a host process:
    serving certificate ``cert_dir``/tls.{crt,key}, webhook and health servers on
    127.0.0.1, metrics off, no leader election, no internal certificate management. Pure."""
    return {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0", "certDir": str(cert_dir)}}


def _pod_patch(w: dict) -> None:
    """Upstream's kustomize patch of the pod webhooks: CREATE only, JobSet's pods only."""
    if any("pods" in (r.get("resources") or []) for r in w.get("rules") or []):
        w["objectSelector"] = {"matchExpressions": [{"key": POD_LABEL, "operator": "Exists"}]}
        for r in w["rules"]:
            r["operations"] = ["CREATE"]


def webhook_configurations(docs: list[dict], ca_pem: bytes,
                           port: int = JOBSET_WEBHOOK_PORT) -> list[dict]:
    """Upstream's Mutating/ValidatingWebhookConfigurations (``docs``) named ``jobset-<name>``,
    each webhook at ``https://127.0.0.1:<port><path>`` with ``caBundle`` = ``ca_pem`` (PEM
    bytes); a pod webhook gets upstream's patch (CREATE only, objectSelector
    :data:`POD_LABEL` Exists). Pure. Raises KeyError for a webhook without a service path."""
    names = {d["kind"]: NAME_PREFIX + d["metadata"]["name"] for d in docs
             if d.get("kind") in gomanager.WEBHOOK_KINDS}
    return gomanager.url_webhooks(docs, ca_pem, port, names, _pod_patch)


def rbac_objects(role_doc: dict) -> list[dict]:
    """ClusterRole :data:`CLUSTER_ROLE` with the rules of upstream's ``manager-role``
    (``role_doc``) and its binding to user :data:`USER`. Pure. Raises ValueError if
    ``role_doc`` is no ClusterRole with rules."""
    return gomanager.rbac_objects(role_doc, CLUSTER_ROLE, USER)


# -- the process --------------------------------------------------------------------------
def argv(state: Path) -> list[str]:
    """The command line (it names the state dir: ``procs.tracked_pid`` relies on it)."""
    return [str(MANAGER.bin()), f"--config={MANAGER.state(state) / 'config.yaml'}"]


def ensure(state: Path, client, timeout: float = 60.0) -> int:
    """Install what JobSet needs (certificates, config.yaml, CRD, RBAC, webhooks) and run
    it (idempotent: a ready one started with the same command line keeps running); returns
    its pid once ``/readyz`` answers. ``client`` is an admin ``kubeapi.KubeClient``;
    ``timeout`` in seconds. Raises JobSetError (not built, exited, not ready in time),
    kubeapi.ApiError, OSError."""
    MANAGER.check_built()
    d = MANAGER.state(state)
    kc = MANAGER.ensure_certs(state, d / "certs")
    cfg = d / "config.yaml"
    text = yaml.safe_dump(render_config(d / "certs"), sort_keys=False)
    if not cfg.exists() or cfg.read_text() != text:
        cfg.write_text(text)
    ca_pem = (state / "pki" / "ca.crt").read_bytes()
    crds = [doc for f in sorted((MANAGER.config() / "crd").glob("*.yaml"))
            for doc in MANAGER.upstream(f"crd/{f.name}")]
    objects = (rbac_objects(MANAGER.upstream("rbac/role.yaml")[0])
               + webhook_configurations(MANAGER.upstream("webhook/manifests.yaml"), ca_pem))
    MANAGER.ensure_api_objects(client, objects, crds, timeout=timeout)
    return MANAGER.run(state, argv(state), kc, timeout=timeout)


def stop(state: Path) -> bool:
    """Stop JobSet (SIGTERM, SIGKILL after 5 s). True if it was running. Its webhooks
    (failurePolicy Fail) then refuse JobSet writes and JobSet pods, as in a real cluster."""
    return MANAGER.stop(state)


def status_line(state: Path) -> Optional[str]:
    """``healthy``/``DOWN`` with the pid, or None when it was never started here."""
    return MANAGER.status_line(state, versions()["JOBSET_VERSION"])
