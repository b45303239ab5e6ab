"""The two processes of a real node: ``run``, its supervisor in the machine's namespaces,
and ``inner``, containerd and the kubelet in the node's namespaces, each restarted when it
exits (see the package's docstring)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from localcluster.common.config import (
    APISERVER_PORT,
    KUBERNETES_SERVICE_IP,
    KUBERNETES_SERVICE_PORT,
    NodeSpec,
    pod_cidr,
    venv_python,
)
from localcluster.network import podnet
from localcluster.nodeimages.archives import ImageError, image_archives, import_images
from localcluster.nodes.realnode.base import SYSCTL_FILES, RealNodeError, binaries, containerd_root, node_dir
from localcluster.nodes.realnode.cgroups import cgroup_pids, ensure_cgroups, join_cgroups, kill_node
from localcluster.nodes.realnode.nodeconfig import write_files

log = logging.getLogger("localcluster.nodes.realnode")

# The host paths the node's processes write that must be the node's own (see above).
PRIVATE_DIRS = ["/run/containerd", "/var/lib/cni", "/var/log"]


# -- inner: containerd and the kubelet in the node's namespaces ------------------------------
def _bind(src: Path, dst: str) -> None:
    subprocess.run(["mount", "--bind", str(src), dst], check=True, capture_output=True)


def _private_mounts(d: Path) -> None:
    for host, mine in zip(PRIVATE_DIRS, ("run-containerd", "var-lib-cni", "var-log")):
        os.makedirs(host, exist_ok=True)
        _bind(d / "private" / mine, host)
    _bind(d / "hosts", "/etc/hosts")
    _bind(d / "resolv.conf", "/etc/resolv.conf")
    for rel in SYSCTL_FILES:
        _bind(d / "sysctl" / rel.replace("/", "."), f"/proc/sys/{rel}")


def _answers(path: Path) -> bool:
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def _wait_socket(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until containerd accepts on ``path`` (a socket file left by a killed containerd
    exists but refuses). Raises RealNodeError."""
    deadline = time.monotonic() + timeout
    while not _answers(path):
        if proc.poll() is not None:
            raise RealNodeError(f"containerd exited ({proc.returncode}) before {path} appeared")
        if time.monotonic() > deadline:
            raise RealNodeError(f"containerd: no socket {path} after {timeout:.0f}s")
        time.sleep(0.1)


# As their systemd units restart them on a node (containerd.service: Restart=always,
# RestartSec=5; kubeadm's kubelet.service: Restart=always, RestartSec=10): a daemon that
# exits is started again after this many seconds. The node itself dies only when ``inner``
# is stopped (SIGTERM) or killed with its cgroups (kill_node).
RESTART_SECONDS = {"containerd": 5.0, "kubelet": 10.0}


def inner(state: Path, spec: NodeSpec, internal_ip: str) -> int:
    """Run containerd and the kubelet, each restarted when it exits (RESTART_SECONDS),
    until SIGTERM; returns an exit code (1 when the node could not start)."""
    import socket
    b = binaries()
    d = node_dir(state, spec.name)
    # The node's own hostname (its UTS namespace): host-network pods share it, as on a real
    # node. Without it they had the machine's, which no node's hosts file resolves, and
    # gloo fell back to 127.0.0.1 (found with the probe off).
    socket.sethostname(spec.name)
    _private_mounts(d)
    logs = state / "logs"

    def start_containerd() -> subprocess.Popen:
        for stale in (d / "containerd.sock", d / "containerd.sock.ttrpc"):
            stale.unlink(missing_ok=True)  # left by a containerd that was killed
        return subprocess.Popen([b["containerd"], "--config", str(d / "containerd.toml")],
                                stdout=open(logs / f"containerd-{spec.name}.log", "ab"),
                                stderr=subprocess.STDOUT)

    def start_kubelet() -> subprocess.Popen:
        return subprocess.Popen(
            [b["kubelet"], f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubelet.kubeconfig'}",
             f"--root-dir={d / 'kubelet'}", f"--cert-dir={d / 'kubelet' / 'pki'}",
             f"--hostname-override={spec.name}", f"--node-ip={internal_ip}",
             "--node-labels=disttrain.dev/simulated=true,disttrain.dev/runtime=containerd",
             "--v=1"],
            stdout=open(logs / f"kubelet-{spec.name}.log", "ab"), stderr=subprocess.STDOUT)

    procs_: dict[str, subprocess.Popen] = {"containerd": start_containerd()}
    stopping: list[bool] = []

    def stop(*_):
        stopping.append(True)
        for c in reversed(list(procs_.values())):
            if c.poll() is None:
                c.terminate()
    signal.signal(signal.SIGTERM, stop)
    try:
        _wait_socket(d / "containerd.sock", procs_["containerd"], 30)
        import_images(b["ctr"], d, containerd_root(spec), image_archives(state))
    except (RealNodeError, ImageError, OSError) as e:
        log.error("%s", e)
        stop()
        return 1
    procs_["kubelet"] = start_kubelet()
    starters = {"containerd": start_containerd, "kubelet": start_kubelet}
    due: dict[str, float] = {}
    while not stopping:
        for name, p in list(procs_.items()):
            if p.poll() is None or stopping:
                continue
            if name not in due:
                due[name] = time.monotonic() + RESTART_SECONDS[name]
                log.warning("%s exited (%s); starting it again in %.0f s", name, p.returncode,
                            RESTART_SECONDS[name])
            elif time.monotonic() >= due[name]:
                del due[name]
                procs_[name] = starters[name]()
                log.info("%s started again (pid %d)", name, procs_[name].pid)
        time.sleep(0.5)
    for c in procs_.values():
        try:
            c.wait(10)
        except subprocess.TimeoutExpired:
            c.kill()
    log.info("node stopped: %s", ", ".join(f"{k} exit {v.returncode}" for k, v in procs_.items()))
    return 0


# -- run: the node's supervisor in the machine's namespaces ----------------------------------
def run(state: Path, spec: NodeSpec, internal_ip: str, hosts_lines: list[str],
        pod_routes: list[tuple[str, str]], topo=None) -> int:
    """Set the node up, start ``inner`` and wait; the node is killed whole when either
    ends. Returns an exit code."""
    from localcluster.network.serviceproxy import ServiceProxy
    b = binaries()
    write_files(state, spec, internal_ip, hosts_lines, topo)
    podnet.ensure_node(spec.netns, pod_cidr(spec.index), pod_routes)
    ServiceProxy(spec.netns, KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT,
                 ("127.0.0.1", APISERVER_PORT)).start()
    kill_node(spec.netns)  # an earlier run's leftovers
    ensure_cgroups(spec.netns)
    join_cgroups(spec.netns, os.getpid())  # inherited by inner, containerd, the shims
    child = subprocess.Popen([b["nsenter"], f"--net=/run/netns/{spec.netns}", b["unshare"],
                              "--mount", "--uts", "--propagation", "slave", "--", venv_python(), "-m",
                              "localcluster.nodes.realnode", "inner", "--node", spec.name,
                              "--state", str(state), "--internal-ip", internal_ip])
    stopping = []

    def on_term(*_):
        stopping.append(True)
        child.terminate()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    rc = child.wait()
    deadline = time.monotonic() + 15
    while stopping and time.monotonic() < deadline and len(cgroup_pids(spec.netns)) > 1:
        time.sleep(0.2)  # containerd and the kubelet end; then the rest is killed
    n = kill_node(spec.netns)
    log.info("node %s stopped (inner exit %s, %d processes killed)", spec.name, rc, n)
    return 0 if stopping else 1

