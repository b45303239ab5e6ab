"""What every controller-runtime manager the proving ground runs as a host process shares
(JobSet: ``jobset.py``, Kubeflow Trainer v2: ``trainer.py``): upstream's webhooks reached by
URL on 127.0.0.1, upstream's ClusterRole bound to a certificate user, a serving
certificate from the cluster CA, CRDs applied and waited for, the process started and
waited for on its ``/readyz``.

In a real cluster each is a Deployment behind a Service, its webhook certificate kept by
an in-process rotator or cert-manager. Here the apiserver runs on the host with no route
into the cluster network, so each webhook's ``clientConfig`` is a URL on 127.0.0.1 and its
``caBundle`` the cluster CA, which signs the serving certificate (SANs 127.0.0.1,
localhost); the rotators are off in each manager's configuration.
"""
from __future__ import annotations

import base64
import copy
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from localcluster.cluster.kueue import _load_yaml_docs, apply, apply_crds
from localcluster.common import pki, procs
from localcluster.common.kubeconfig import write_kubeconfig

MANAGED_BY = {"app.kubernetes.io/managed-by": "localcluster"}
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class ManagerError(RuntimeError):
    """A manager is not built, or did not start or become ready."""


# -- pure parts ---------------------------------------------------------------------------
def url_webhooks(docs: list[dict], ca_pem: bytes, port: int,
                 names: dict[str, str],
                 patch: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """Upstream's Mutating/ValidatingWebhookConfigurations among ``docs`` renamed by
    ``names`` (kind -> name), each webhook at ``https://127.0.0.1:<port><path>`` with
    ``caBundle`` = ``ca_pem`` (PEM bytes), then ``patch(webhook)`` (upstream's kustomize
    patches) when given. The input is not modified. Pure. Raises KeyError for a webhook
    without a service path or a kind missing from ``names``."""
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for d in docs:
        if d.get("kind") not in WEBHOOK_KINDS:
            continue
        d = copy.deepcopy(d)
        for w in d.get("webhooks") or []:
            path = w["clientConfig"]["service"]["path"]
            w["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            if patch is not None:
                patch(w)
        d["metadata"] = {"name": names[d["kind"]], "labels": dict(MANAGED_BY)}
        out.append(d)
    return out


def rbac_objects(role_doc: dict, name: str, user: str) -> list[dict]:
    """ClusterRole ``name`` with the rules of upstream's ClusterRole ``role_doc`` and its
    binding to the certificate user ``user``. Pure. Raises ValueError if ``role_doc`` is
    no ClusterRole with rules."""
    if role_doc.get("kind") != "ClusterRole" or not role_doc.get("rules"):
        raise ValueError("expected upstream's ClusterRole with rules")
    meta = {"name": name, "labels": dict(MANAGED_BY)}
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": meta, "rules": copy.deepcopy(role_doc["rules"])},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": dict(meta),
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": name},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                           "name": user}]}]


CERT_MOUNT = "/tmp/k8s-webhook-server"  # controller-runtime's default webhook cert dir's parent


def with_private_cert_dir(tmp: Path, cmd: list[str]) -> list[str]:
    """``cmd`` run in a private mount namespace where ``tmp``/k8s-webhook-server is
    /tmp/k8s-webhook-server (controller-runtime's default ``serving-certs`` directory, for
    a manager that cannot be told another), the same pid (``unshare`` and ``sh`` exec).
    Only that directory is bound, not /tmp. Pure."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mkdir -p {CERT_MOUNT} && mount --bind "$0/k8s-webhook-server" {CERT_MOUNT} '
            '&& exec "$@"', str(tmp), *cmd]


# -- one manager --------------------------------------------------------------------------
@dataclass(frozen=True)
class Manager:
    """One manager: ``process`` (``<state>/run/<process>.pid``, ``logs/<process>.log``),
    its certificate ``user``, ``health_port`` (http ``/readyz`` on 127.0.0.1), ``top``
    (returns the build's cache dir: ``bin/<binary>``, ``config/{crd/*.yaml,rbac/role.yaml,
    webhook/manifests.yaml}``; read when used, as $DISTTRAIN_CACHE may change) and the
    ``build`` argument of build-k8s.sh."""

    process: str
    user: str
    binary: str
    health_port: int
    top: Callable[[], Path]
    build: str

    def bin(self) -> Path:
        return self.top() / "bin" / self.binary

    def config(self) -> Path:
        return self.top() / "config"

    def state(self, state: Path) -> Path:
        """``<state>/<process>``: its kubeconfig, certs/, config.yaml."""
        return state / self.process

    def check_built(self) -> None:
        """Raise ManagerError naming what ``build-k8s.sh <build>`` has not built."""
        m = self.config()
        missing = [str(p) for p in (self.bin(), m / "rbac" / "role.yaml",
                                    m / "webhook" / "manifests.yaml") if not p.exists()]
        if not list((m / "crd").glob("*.yaml")):
            missing.append(str(m / "crd" / "*.yaml"))
        if missing:
            raise ManagerError(f"{self.process} is not built (run `make build-cluster` or "
                               f"`bash localcluster/build/build-k8s.sh {self.build}`): missing "
                               + ", ".join(missing))

    def upstream(self, rel: str) -> list[dict]:
        """The documents of ``config/<rel>`` in the build's cache."""
        return _load_yaml_docs(self.config() / rel)

    def ensure_certs(self, state: Path, cert_dir: Path) -> Path:
        """The client certificate and kubeconfig (returned), and the serving certificate
        (cluster CA; SANs localhost, 127.0.0.1) as ``cert_dir``/tls.{crt,key}. Raises
        FileNotFoundError if the cluster CA does not exist yet."""
        p = state / "pki"
        crt, key = pki.ensure_cert(p, self.process, self.user)
        kc = write_kubeconfig(self.state(state) / f"{self.process}.kubeconfig", self.user,
                              p / "ca.crt", crt, key)
        scrt, skey = pki.ensure_cert(p, f"{self.process}-serving", f"{self.process}-webhook",
                                     serving=["localhost", "127.0.0.1"])
        pki.install_pair(scrt, skey, cert_dir)
        return kc

    def ensure_api_objects(self, client, objects: list[dict], crds: list[dict],
                           timeout: float = 60.0) -> None:
        """Apply ``crds`` (and wait until Established), then ``objects`` (RBAC, webhooks,
        ...). Raises kubeapi.ApiError, ManagerError (a CRD not Established within
        ``timeout`` seconds)."""
        late = apply_crds(client, crds, timeout)
        if late is not None:
            raise ManagerError(f"CRD {late} not Established after {timeout:.0f}s")
        for obj in objects:
            apply(client, obj)

    def ready(self, timeout: float = 2.0) -> bool:
        """True if ``/readyz`` answers 200 (certificates loaded, webhook server up)."""
        from localcluster.cluster.controlplane import http_ok
        return http_ok(self.health_port, "/readyz", timeout=timeout)

    def _log_tail(self, state: Path, n: int = 20) -> str:
        try:
            return "\n".join((state / "logs" / f"{self.process}.log")
                             .read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def run(self, state: Path, argv: list[str], kubeconfig: Path, timeout: float = 60.0) -> int:
        """Start ``argv`` (unless a ready process runs it, or the command it execs) with
        KUBECONFIG=``kubeconfig``; returns its pid once ``/readyz`` answers. ``timeout``
        in seconds. Raises ManagerError (exited, not ready in time), OSError."""
        pid = procs.tracked_pid(state, self.process)
        cur = procs.cmdline(pid) if pid is not None else []
        # after `unshare ... exec "$@"` the process's command line is argv's tail
        if pid is not None and (not cur or argv[-len(cur):] != cur or not self.ready()):
            procs.stop_tracked(state, self.process, grace=5)
            pid = None
        if pid is None:
            env = dict(os.environ, KUBECONFIG=str(kubeconfig))
            pid = procs.start_detached(state, self.process, argv, env=env)
        deadline = time.monotonic() + timeout
        log = f"{state}/logs/{self.process}.log"
        while not self.ready():
            if not procs.alive(pid):
                raise ManagerError(f"{self.process} exited; {log}:\n" + self._log_tail(state))
            if time.monotonic() > deadline:
                raise ManagerError(f"{self.process} not ready after {timeout:.0f}s; {log}:\n"
                                   + self._log_tail(state))
            time.sleep(0.3)
        return pid

    def stop(self, state: Path) -> bool:
        """Stop it (SIGTERM, SIGKILL after 5 s). True if it was running."""
        return procs.stop_tracked(state, self.process, grace=5)

    def status_line(self, state: Path, version: str) -> Optional[str]:
        """``healthy``/``DOWN`` with the pid, or None when it was never started here."""
        if not (state / "run" / f"{self.process}.pid").exists():
            return None
        pid = procs.tracked_pid(state, self.process)
        return f"{'healthy' if pid and self.ready() else 'DOWN'} (pid {pid}, {version})"
