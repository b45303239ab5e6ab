"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler as detached processes."""
from __future__ import annotations

import http.client
import ssl
import time
from pathlib import Path

import yaml

from localcluster.cluster import egress
from localcluster.common import pki, procs
from localcluster.common.config import (
    APISERVER_PORT,
    CONTROLLER_MANAGER_PORT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    SCHEDULER_PORT,
    SERVICE_CIDR,
    etcd_bin,
    k8s_bin_dir,
    venv_python,
)
from localcluster.common.kubeconfig import write_kubeconfig

# egress-proxy: the apiserver's way into the node namespaces (kubelets' 10250, pods),
# egress.py; started before the apiserver, whose egress selector names its socket.
COMPONENTS = ["etcd", "egress-proxy", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
# KEP-4671's workload scheduling API: Workload and PodGroup in scheduling.k8s.io/v1beta1
# (beta in v1.37, off by default). The apiserver serves them (and the pod field
# spec.schedulingGroup), the scheduler adds its GangScheduling plugin (a PodGroup with a
# gang policy is scheduled all or nothing), the controller-manager runs the
# podgroup-protection controller. See localcluster/README.md.
FEATURE_GATES = "GenericWorkload=true"
RUNTIME_CONFIG = "scheduling.k8s.io/v1beta1=true"


class ControlPlaneError(RuntimeError):
    """A control-plane component is missing, failed to start or did not become ready."""


def check_binaries() -> None:
    """Raise ControlPlaneError naming the missing binaries (run `make build-cluster`)."""
    need = [etcd_bin()] + [k8s_bin_dir() / b for b in
                           ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise ControlPlaneError("missing binaries (run `make build-cluster`): " + ", ".join(missing))


def ensure_pki_and_kubeconfigs(state: Path) -> None:
    """Create the control-plane certificates and the admin/controller-manager/scheduler
    kubeconfigs in the state dir (idempotent)."""
    p = state / "pki"
    pki.ensure_control_plane_pki(p)
    ca = p / "ca.crt"
    write_kubeconfig(state / "admin.kubeconfig", "admin", ca, p / "admin.crt", p / "admin.key")
    write_kubeconfig(state / "controller-manager.kubeconfig", "system:kube-controller-manager", ca,
                     p / "controller-manager.crt", p / "controller-manager.key")
    write_kubeconfig(state / "scheduler.kubeconfig", "system:kube-scheduler", ca,
                     p / "scheduler.crt", p / "scheduler.key")


def http_ok(port: int, path: str, needle: bytes = b"", timeout: float = 2.0) -> bool:
    """True if plain http://127.0.0.1:``port````path`` answers 200 with ``needle`` in its
    body (seconds ``timeout``); False on any error."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status == 200 and needle in body
    except (OSError, http.client.HTTPException):
        return False


def _etcd_healthy() -> bool:
    return http_ok(ETCD_CLIENT_PORT, "/health", b'"true"')


def _https_ok(state: Path, port: int, path: str) -> bool:
    p = state / "pki"
    ctx = ssl.create_default_context(cafile=str(p / "ca.crt"))
    ctx.load_cert_chain(str(p / "admin.crt"), str(p / "admin.key"))
    if port != APISERVER_PORT:  # controller-manager/scheduler serve self-signed certs
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=3)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 200
    except (OSError, http.client.HTTPException):
        return False


def apiserver_ready(state: Path) -> bool:
    """True if https://127.0.0.1:16443/readyz answers 200 to the admin cert."""
    return _https_ok(state, APISERVER_PORT, "/readyz")


def component_healthy(state: Path, name: str) -> bool:
    """True if the tracked process ``name`` runs and answers its health endpoint."""
    if procs.tracked_pid(state, name) is None:
        return False
    if name == "etcd":
        return _etcd_healthy()
    if name == "kube-apiserver":
        return apiserver_ready(state)
    if name == "egress-proxy":
        return egress.socket_path(state).is_socket()
    port = CONTROLLER_MANAGER_PORT if name == "kube-controller-manager" else SCHEDULER_PORT
    return _https_ok(state, port, "/healthz")


def _wait(pred, what: str, state: Path, name: str, timeout: float, pid: int) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if not procs.alive(pid):
            tail = _log_tail(state, name)
            raise ControlPlaneError(f"{name} exited while waiting for {what}:\n{tail}")
        time.sleep(0.25)
    raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}:\n"
                            + _log_tail(state, name))


def _log_tail(state: Path, name: str, n: int = 25) -> str:
    try:
        return "\n".join((state / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _argv(state: Path, name: str) -> list[str]:
    p = state / "pki"
    b = k8s_bin_dir()
    if name == "etcd":
        return [str(etcd_bin()), "--name=localcluster", f"--data-dir={state}/etcd",
                f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER_PORT}",
                f"--initial-cluster=localcluster=http://127.0.0.1:{ETCD_PEER_PORT}",
                "--listen-metrics-urls=", "--log-level=warn",
                "--quota-backend-bytes=2147483648", "--snapshot-count=10000",
                "--unsafe-no-fsync"]
    if name == "egress-proxy":
        return [venv_python(), "-m", "localcluster.cluster.egress", f"--state={state}"]
    if name == "kube-apiserver":
        egress_cfg = state / "egress-selector.yaml"
        egress_cfg.write_text(egress.config_yaml(state))
        return [str(b / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}",
                "--bind-address=127.0.0.1", f"--secure-port={APISERVER_PORT}",
                "--advertise-address=127.0.0.1",
                # The "kubernetes" Service endpoint may not be a loopback address: keep no endpoints.
                "--endpoint-reconciler-type=none",
                f"--client-ca-file={p}/ca.crt",
                f"--tls-cert-file={p}/apiserver.crt", f"--tls-private-key-file={p}/apiserver.key",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p}/sa.pub",
                f"--service-account-signing-key-file={p}/sa.key",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={p}/apiserver-kubelet-client.crt",
                f"--kubelet-client-key={p}/apiserver-kubelet-client.key",
                f"--kubelet-certificate-authority={p}/ca.crt",
                # Node agents publish an InternalDNS address "localhost": see README (kubectl logs).
                "--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname",
                # Real kubelets listen on their InternalIP inside the node's namespace: the
                # apiserver reaches them (and pods, webhooks) through egress.py.
                f"--egress-selector-config-file={egress_cfg}",
                # Front-proxy (aggregation layer) auth; also silences the controllers'
                # "missing requestheader-client-ca-file" complaints.
                f"--requestheader-client-ca-file={p}/ca.crt",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={p}/front-proxy-client.crt",
                f"--proxy-client-key-file={p}/front-proxy-client.key",
                f"--feature-gates={FEATURE_GATES}", f"--runtime-config={RUNTIME_CONFIG}",
                "--allow-privileged=true", "--profiling=false", "--event-ttl=1h",
                f"--cert-dir={state}/apiserver-certs", "--v=1"]
    if name == "kube-controller-manager":
        kc = state / "controller-manager.kubeconfig"
        return [str(b / "kube-controller-manager"), f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", f"--secure-port={CONTROLLER_MANAGER_PORT}",
                f"--cert-dir={state}/controller-manager-certs",
                "--leader-elect=false", "--use-service-account-credentials=true",
                f"--root-ca-file={p}/ca.crt",
                f"--service-account-private-key-file={p}/sa.key",
                f"--cluster-signing-cert-file={p}/ca.crt", f"--cluster-signing-key-file={p}/ca.key",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--feature-gates={FEATURE_GATES}", "--profiling=false", "--v=1"]
    if name == "kube-scheduler":
        kc = state / "scheduler.kubeconfig"
        cfg = state / "scheduler-config.yaml"
        cfg.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kc)},
            "leaderElection": {"leaderElect": False},
        }))
        return [str(b / "kube-scheduler"), f"--config={cfg}",
                f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", f"--secure-port={SCHEDULER_PORT}",
                f"--cert-dir={state}/scheduler-certs", f"--feature-gates={FEATURE_GATES}",
                "--profiling=false", "--v=1"]
    raise ValueError(name)


def ensure_control_plane(state: Path, timeout: float = 120.0) -> None:
    """Start each component that is not healthy, or runs with other flags than
    :func:`_argv` gives now (e.g. feature gates added since it started), and wait until
    it is healthy.

    Raises ControlPlaneError if a binary is missing or a component fails/times out.
    """
    check_binaries()
    ensure_pki_and_kubeconfigs(state)
    for name in COMPONENTS:
        pid = procs.tracked_pid(state, name)
        if pid is not None and procs.cmdline(pid) == _argv(state, name) \
                and component_healthy(state, name):
            continue
        procs.stop_tracked(state, name)
        pid = procs.start_detached(state, name, _argv(state, name))
        if name == "egress-proxy":
            _wait(lambda: egress.socket_path(state).is_socket(), "egress proxy socket", state,
                  name, timeout, pid)
        elif name == "etcd":
            _wait(_etcd_healthy, "etcd /health", state, name, timeout, pid)
        elif name == "kube-apiserver":
            _wait(lambda: apiserver_ready(state), "kube-apiserver /readyz", state, name, timeout,
                  pid)
        else:
            _wait(lambda n=name: component_healthy(state, n), f"{name} /healthz", state, name,
                  timeout, pid)


def stop_control_plane(state: Path, grace: float = 3.0) -> list[str]:
    """Stop all components together (SIGTERM, SIGKILL after ``grace`` seconds) and remove
    their pid files. Returns the names that were running."""
    running = {name: procs.tracked_pid(state, name) for name in COMPONENTS}
    running = {n: p for n, p in running.items() if p is not None}
    procs.stop_many(list(running.values()), grace)
    for name in COMPONENTS:
        procs.stop_tracked(state, name)  # removes the pid file
    return list(running)
