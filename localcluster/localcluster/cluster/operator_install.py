"""Install the operator into the local cluster and run it, under the chart's RBAC.

The CRD comes from ``crds/``; the ServiceAccount, ClusterRole and ClusterRoleBinding are
rendered from the Helm chart (``helm template --show-only``), so the operator runs with
exactly the chart's permissions: its kubeconfig holds a token of the chart's
ServiceAccount, and the real apiserver's RBAC decides every request.

The operator itself runs as a process on the host (``python -m disttrain``), detached,
with its log in ``<state>/logs/operator.log`` and its pid in ``<state>/operator.pid``.

CLI: ``python -m localcluster.cluster.operator_install {start,stop,restart,status}``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from localcluster.common import config, procs

NAMESPACE = "disttrain-system"
RELEASE = "disttrain"  # the Helm release (make demo, tests/e2e/test_helm.py)
# The host-process operator gets the chart's RBAC rendered under another release name, so
# its objects never collide with a Helm release's.
LOCAL_RELEASE = "disttrain-local"
SERVICE_ACCOUNT = "disttrain-operator"
CHART = config.REPO_ROOT / "charts" / "disttrain-operator"
CRD_DIR = config.REPO_ROOT / "crds"
LIVENESS_PORT = config.OPERATOR_LIVENESS_PORT  # 18080 (+1000 per DISTTRAIN_CLUSTER_INSTANCE)
METRICS_PORT = config.OPERATOR_METRICS_PORT  # 18090


def _paths() -> dict[str, Path]:
    st = config.state_dir()
    return {
        "admin": st / "admin.kubeconfig",
        "kubeconfig": st / "operator.kubeconfig",
        "pid": st / "operator.pid",
        "log": st / "logs" / "operator.log",
    }


def helm_bin() -> Path:
    """The helm binary built by localcluster/build/build-k8s.sh."""
    return config.cache_dir() / f"helm-{config.versions()['HELM_VERSION']}" / "bin" / "helm"


def kubectl(*args: str, input: Optional[str] = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the project's kubectl as cluster admin. Raises CalledProcessError on failure."""
    env = dict(os.environ, KUBECONFIG=str(_paths()["admin"]))
    return subprocess.run(
        [str(config.k8s_bin_dir() / "kubectl"), *args],
        input=input, text=True, capture_output=True, check=check, env=env,
    )


def apply_crds(timeout: float = 90.0) -> None:
    """Apply (server-side) every CRD in crds/ and wait until it is Established, trying
    again for ``timeout`` seconds while either step fails (an apiserver that has just
    started, or restarted, can refuse the first calls). Raises CalledProcessError with
    the last failure's output."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        apply = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR), check=False)
        last = apply
        if apply.returncode == 0:
            last = kubectl("wait", "--for=condition=Established", "--timeout=30s",
                           "crd/disttrainingjobs.disttrain.dev", check=False)
            if last.returncode == 0:
                return
        if time.monotonic() > deadline:
            raise subprocess.CalledProcessError(last.returncode, last.args, last.stdout, last.stderr)
        time.sleep(1)


def render_rbac() -> str:
    """The chart's ServiceAccount and RBAC objects as YAML (helm template)."""
    versions = config.versions()
    out = subprocess.run(
        [
            str(helm_bin()), "template", LOCAL_RELEASE, str(CHART),
            "--namespace", NAMESPACE,
            "--kube-version", versions["K8S_VERSION"],
            "--set", f"serviceAccount.name={SERVICE_ACCOUNT}",
            "--set", "kueue.enabled=true",  # the e2e tests queue jobs in Kueue
            "--show-only", "templates/serviceaccount.yaml",
            "--show-only", "templates/rbac.yaml",
        ],
        text=True, capture_output=True, check=True,
    )
    return out.stdout


def write_operator_kubeconfig() -> Path:
    """A kubeconfig holding a fresh token of the chart's ServiceAccount (24 h)."""
    p = _paths()
    token = kubectl("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=24h").stdout.strip()
    cfg = kubectl("config", "view", "--raw", "--minify", "--flatten", "-o",
                  "jsonpath={.clusters[0].cluster.server} {.clusters[0].cluster.certificate-authority-data}").stdout
    server, ca = cfg.split()
    p["kubeconfig"].write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n"
        f"users:\n- name: {SERVICE_ACCOUNT}\n  user:\n    token: {token}\n"
        f"contexts:\n- name: operator\n  context: {{cluster: local, user: {SERVICE_ACCOUNT}}}\n"
        "current-context: operator\n"
    )
    p["kubeconfig"].chmod(0o600)
    return p["kubeconfig"]


def install() -> None:
    """CRD + namespace + the chart's RBAC + the operator's kubeconfig (idempotent)."""
    apply_crds()
    kubectl("create", "namespace", NAMESPACE, check=False)
    kubectl("apply", "-f", "-", input=render_rbac())
    write_operator_kubeconfig()


def helm(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the project's helm as cluster admin. Raises CalledProcessError on failure."""
    env = dict(os.environ, KUBECONFIG=str(_paths()["admin"]))
    return subprocess.run([str(helm_bin()), *args], text=True, capture_output=True, check=check,
                          env=env, timeout=timeout)


def helm_install(*sets: str) -> str:
    """`helm upgrade --install` the chart as release `disttrain` in disttrain-system and wait
    for the operator Deployment; stops a host-process operator first (never two at once).
    Returns `helm status`. Raises CalledProcessError on failure."""
    stop()
    args = ["upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace",
            "--wait", "--timeout", "180s"]
    for s in sets:
        args += ["--set", s]
    helm(*args, timeout=240)
    return helm("status", RELEASE, "-n", NAMESPACE).stdout


def helm_uninstall() -> None:
    """`helm uninstall` the release (and wait); no error if it is not installed."""
    helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)


def _alive(value: int) -> bool:
    """True while ``value`` runs; a killed operator started by this process is reaped here
    (else it stays a zombie, which os.kill(pid, 0) still finds, until the next Popen)."""
    try:
        os.waitpid(value, os.WNOHANG)
    except ChildProcessError:  # not our child: its parent or init reaps it
        pass
    except OSError:
        return False
    return procs.alive(value)


def pid() -> Optional[int]:
    """The running operator's pid, or None."""
    try:
        value = int(_paths()["pid"].read_text().strip())
    except (OSError, ValueError):
        return None
    return value if _alive(value) else None


def start(wait_seconds: float = 30.0, reinstall: bool = True) -> int:
    """Install if needed and start the operator process; wait for its liveness endpoint.

    ``reinstall=False`` skips the Helm uninstall, CRD, RBAC and token steps (several
    seconds) when they were done by an earlier ``start`` of this cluster: the fault
    injection tests restart a killed operator that way. Returns the pid. Raises
    RuntimeError (with the log tail) if it does not become live.
    """
    running = pid()
    if running:
        return running
    if reinstall or not _paths()["kubeconfig"].exists():
        helm_uninstall()  # never two operators at once
        install()
    p = _paths()
    p["log"].parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KUBECONFIG=str(p["kubeconfig"]), PYTHONUNBUFFERED="1")
    with open(p["log"], "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "disttrain", f"--liveness=http://127.0.0.1:{LIVENESS_PORT}/healthz",
             f"--metrics-port={METRICS_PORT}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True, cwd=str(config.REPO_ROOT),
        )
    p["pid"].write_text(str(proc.pid))
    import urllib.request

    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{LIVENESS_PORT}/healthz", timeout=1) as r:
                if r.status == 200:
                    return proc.pid
        except OSError:
            time.sleep(0.3)
    tail = p["log"].read_text(errors="replace")[-3000:]
    stop()
    raise RuntimeError(f"operator did not become live in {wait_seconds}s; log tail:\n{tail}")


def stop(sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """Stop the operator process (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
    value = pid()
    if value is None:
        _paths()["pid"].unlink(missing_ok=True)
        return
    try:
        os.killpg(value, sig)
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(value):
            break
        time.sleep(0.05)
    else:
        try:
            os.killpg(value, signal.SIGKILL)
        except OSError:
            pass
    _paths()["pid"].unlink(missing_ok=True)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localcluster.cluster.operator_install")
    parser.add_argument("action", choices=["start", "stop", "restart", "status", "kill"])
    args = parser.parse_args(argv)
    if args.action == "start":
        print(f"operator running, pid {start()}, log {_paths()['log']}")
    elif args.action == "stop":
        stop()
    elif args.action == "kill":
        stop(signal.SIGKILL)
    elif args.action == "restart":
        stop()
        print(f"operator running, pid {start()}")
    else:
        print(f"running, pid {pid()}" if pid() else "not running")


if __name__ == "__main__":
    main()
