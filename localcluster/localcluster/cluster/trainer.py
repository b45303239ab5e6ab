"""Kubeflow Trainer v2 (github.com/kubeflow/trainer/v2, built from its Go module) as a host
process of the local cluster: TrainJobs, which run as JobSets (``up --trainer`` also runs
JobSet, ``jobset.py``).

``python -m localcluster up --trainer`` runs it; Kueue's ``trainer.kubeflow.org/trainjob``
integration and the admission check's TrainJob scenarios need it. Instance 0 ports
(instance N adds N*1000)::

    kube-apiserver --(webhooks)--> https://127.0.0.1:18075   (Trainer's webhook server)
    trainer-controller-manager --(client cert CN=kubeflow-trainer:controller)--> apiserver
    healthz/readyz on http://127.0.0.1:18076

What upstream's ``manifests/overlays/manager`` gives it in a real cluster, made here from
the same module version's manifests (``build-k8s.sh trainer`` copies them): the CRDs
(TrainJob, TrainingRuntime, ClusterTrainingRuntime), a ClusterRole with the rules of
upstream's ``kubeflow-trainer-controller-manager`` bound to its certificate user, the
webhooks (named as upstream's patches name them) reached by URL on 127.0.0.1 with the
cluster CA, and the ClusterTrainingRuntime ``torch-distributed``
(``manifests/base/runtimes/torch_distributed.yaml``) that a TrainJob's ``runtimeRef``
names. Its configuration (``<state>/trainer/config.yaml``): certificate management off,
no leader election, metrics off, webhook and health servers on 127.0.0.1. Its webhook
server reads controller-runtime's default ``/tmp/k8s-webhook-server/serving-certs`` (the
configuration has no certDir), so it runs in a private mount namespace where that is
``<state>/trainer/tmp/k8s-webhook-server`` (``gomanager.with_private_cert_dir``).

``down`` stops it. Log: ``<state>/logs/trainer.log``. Pure parts tested in
``tests/unit/localcluster/cluster/test_jobset.py`` (with JobSet's).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import yaml

from localcluster.cluster import gomanager
from localcluster.cluster.gomanager import ManagerError as TrainerError  # noqa: F401 (raised here)
from localcluster.common.config import (
    TRAINER_HEALTH_PORT,
    TRAINER_WEBHOOK_PORT,
    trainer_dir,
    versions,
)
from localcluster.common.kubeapi import ApiError

PROCESS = "trainer"
USER = "kubeflow-trainer:controller"
CLUSTER_ROLE = "kubeflow-trainer-controller-manager"  # upstream's name
WEBHOOK_NAMES = {"MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
                 "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org"}
RUNTIME = "torch-distributed"  # the ClusterTrainingRuntime a TrainJob's runtimeRef names
MANAGER = gomanager.Manager(PROCESS, USER, "trainer-controller-manager", TRAINER_HEALTH_PORT,
                            trainer_dir, "trainer")


def render_config(webhook_port: int = TRAINER_WEBHOOK_PORT,
                  health_port: int = TRAINER_HEALTH_PORT) -> dict:
    """Trainer's ``Configuration`` (config.trainer.kubeflow.org/v1alpha1) for a host
    process: webhook and health servers on 127.0.0.1, metrics off, no leader election,
    no certificate management. Pure."""
    return {"apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": webhook_port},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"}}


def argv(state: Path) -> list[str]:
    """The command line: the manager with its config, in a mount namespace where its
    default webhook certificate directory is ``<state>/trainer/tmp``'s."""
    d = MANAGER.state(state)
    return gomanager.with_private_cert_dir(d / "tmp", [str(MANAGER.bin()),
                                                        f"--config={d / 'config.yaml'}"])


def ensure(state: Path, client, timeout: float = 60.0) -> int:
    """Install what Trainer v2 needs and run it (idempotent), then apply the
    ``torch-distributed`` ClusterTrainingRuntime through its webhook; returns the pid.
    JobSet must run already (TrainJobs become JobSets). ``client`` is an admin
    ``kubeapi.KubeClient``; ``timeout`` in seconds. Raises TrainerError (not built, exited,
    not ready, the runtime refused), kubeapi.ApiError, OSError."""
    MANAGER.check_built()
    d = MANAGER.state(state)
    kc = MANAGER.ensure_certs(state, d / "tmp" / "k8s-webhook-server" / "serving-certs")
    cfg = d / "config.yaml"
    text = yaml.safe_dump(render_config(), sort_keys=False)
    if not cfg.exists() or cfg.read_text() != text:
        cfg.write_text(text)
    ca_pem = (state / "pki" / "ca.crt").read_bytes()
    crds = [doc for f in sorted((MANAGER.config() / "crd").glob("*.yaml"))
            for doc in MANAGER.upstream(f"crd/{f.name}")]
    objects = (gomanager.rbac_objects(MANAGER.upstream("rbac/role.yaml")[0], CLUSTER_ROLE, USER)
               + gomanager.url_webhooks(MANAGER.upstream("webhook/manifests.yaml"), ca_pem,
                                        TRAINER_WEBHOOK_PORT, WEBHOOK_NAMES))
    MANAGER.ensure_api_objects(client, objects, crds, timeout=timeout)
    pid = MANAGER.run(state, argv(state), kc, timeout=timeout)
    runtime = next(doc for doc in MANAGER.upstream("runtimes/torch_distributed.yaml")
                   if doc.get("kind") == "ClusterTrainingRuntime")
    deadline = time.monotonic() + timeout
    while True:  # the webhook answers a moment after /readyz
        try:
            gomanager.apply(client, runtime)
            return pid
        except ApiError as e:
            if "webhook" not in str(e).lower() or time.monotonic() > deadline:
                raise TrainerError(f"ClusterTrainingRuntime {RUNTIME}: {e}") from e
            time.sleep(0.3)


def stop(state: Path) -> bool:
    """Stop Trainer (SIGTERM, SIGKILL after 5 s). True if it was running."""
    return MANAGER.stop(state)


def status_line(state: Path) -> Optional[str]:
    """``healthy``/``DOWN`` with the pid, or None when it was never started here."""
    return MANAGER.status_line(state, versions()["TRAINER_VERSION"])
