"""Real nodes: a real kubelet with its own containerd (runc, the CNI reference plugins)
inside each simulated node's network namespace, running the project's images.

One node is two processes (``python -m localcluster.nodes.realnode run|inner``):

``run`` (tracked as ``node-<name>``, in the machine's namespaces) relays the ``kubernetes``
Service address 10.96.0.1:443 inside the node's namespace to the apiserver (as the node
agent does, ``serviceproxy.py``: the kubelet and the pods reach the API there), gives the
node its pod bridge and routes (``podnet.ensure_node``), places itself in the node's own
cgroup, then starts ``inner`` with ``nsenter --net=<node netns> unshare --mount
--propagation slave`` and waits. SIGTERM, or ``inner`` ending, stops the whole node: every
process in the node's cgroups (kubelet, containerd, shims, containers) is killed, which
is what a lost node looks like.

``inner`` (in the node's network namespace, its own UTS namespace with the node's name as
hostname, and a private mount namespace, so containerd, the kubelet and runc see the same
mounts) bind-mounts private directories and files over
the host paths that containerd 1.6, the kubelet and libcni hard-code or write
(``/run/containerd``: shim sockets; ``/var/lib/cni``: libcni's cache; ``/var/log``:
``/var/log/containers`` links; ``/etc/hosts`` and ``/etc/resolv.conf``: the node's own,
which host-network pods get; ``vm/overcommit_memory``, ``kernel/panic``,
``kernel/panic_on_oops`` under /proc/sys: the kubelet writes them at start, and they are
machine-wide), starts containerd, imports the images that changed, then runs the kubelet.

Layout (``<dir>`` = ``<state>/realnodes/<node>``): ``containerd.toml``, ``kubelet.yaml``,
``kubelet.kubeconfig``, ``cni/10-disttrain.conflist``, ``hosts``, ``resolv.conf``,
``kubelet/`` (--root-dir), ``pod-logs/``, ``private/`` (the bind-mounted directories),
``ipam/``, ``runc/``; logs ``<state>/logs/node-<name>.log``, ``containerd-<name>.log``,
``kubelet-<name>.log``. containerd's root (images, snapshots) is kept across ``down`` in
``$DISTTRAIN_CACHE/nodes/<netns>/`` with one marker per imported archive.

Facts this relies on (measured on this machine kind; localcluster/README.md, "Real
nodes"): no CAP_SYS_RESOURCE (containerd's ``restrict_oom_score_adj``), cgroup v1 (the kubelet's
``failCgroupV1: false``), no registry (the pause image is built here, ``images/pause``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from localcluster.common import pki
from localcluster.common.config import (
    APISERVER_PORT,
    CLUSTER_DOMAIN,
    DNS_SERVICE_IP,
    KUBERNETES_SERVICE_IP,
    KUBERNETES_SERVICE_PORT,
    NodeSpec,
    cache_dir,
    k8s_bin_dir,
    node_spec_by_name,
    pod_cidr,
    venv_python,
)
from localcluster.common.kubeconfig import write_kubeconfig
from localcluster.images.archives import ImageError, image_archives, import_images
from localcluster.network import nodedns, podnet
from localcluster.network.topology import NodeTopology

log = logging.getLogger("localcluster.nodes.realnode")

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
SANDBOX_IMAGE = "localhost/disttrain/pause:3.10"
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBELET_PORT = 10250
# The host paths the node's processes write that must be the node's own (see above).
PRIVATE_DIRS = ["/run/containerd", "/var/lib/cni", "/var/log"]
# Machine-wide sysctls the kubelet sets at start (vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1): a file bind-mounted over each takes the write instead.
SYSCTL_FILES = {"vm/overcommit_memory": "1\n", "kernel/panic": "10\n", "kernel/panic_on_oops": "1\n"}
BASE_SPEC = "base-spec.json"  # containerd's base_runtime_spec (site_spec)


class RealNodeError(RuntimeError):
    """A real node cannot be set up (missing binary, containerd or the kubelet failed)."""


def process_name(node: str) -> str:
    return f"node-{node}"


def node_dir(state: Path, node: str) -> Path:
    return state / "realnodes" / node


def containerd_root(spec: NodeSpec) -> Path:
    return cache_dir() / "nodes" / spec.netns


def binaries() -> dict[str, str]:
    """Paths of containerd, ctr, runc, nsenter, unshare and the kubelet. Raises
    RealNodeError naming what is missing and how to get it."""
    found = {b: shutil.which(b) for b in ("containerd", "ctr", "runc", "nsenter", "unshare")}
    found["kubelet"] = str(k8s_bin_dir() / "kubelet") if (k8s_bin_dir() / "kubelet").exists() else None
    missing = [b for b, p in found.items() if not p]
    if missing or not Path(CNI_BIN_DIR, "bridge").exists():
        raise RealNodeError(
            f"real nodes need {', '.join(missing + (['CNI plugins in ' + CNI_BIN_DIR] if not Path(CNI_BIN_DIR, 'bridge').exists() else []))}: "
            "run `bash localcluster/build/system-deps.sh nodes` and `make build-cluster`")
    return {k: str(v) for k, v in found.items()}


def _cgroup_controllers() -> list[Path]:
    """The v1 hierarchies (one directory per mount, e.g. cpu,cpuacct once) and the unified one."""
    out, seen = [], set()
    for p in sorted(CGROUP_ROOT.iterdir()):
        real = p.resolve()
        if real in seen or not real.is_dir() or not (real / "cgroup.procs").exists():
            continue
        seen.add(real)
        out.append(real)
    return out


def ensure_cgroups(name: str) -> None:
    """Create ``/<name>`` and ``/<name>/system`` in every hierarchy (cpuset's cpus and mems
    copied from the parent, which a new cpuset lacks). Raises OSError."""
    for ctl in _cgroup_controllers():
        for sub in (ctl / name, ctl / name / "system"):
            sub.mkdir(exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):
                if (sub / f).exists() and not (sub / f).read_text().strip():
                    (sub / f).write_text((sub.parent / f).read_text())


def join_cgroups(name: str, pid: int) -> None:
    """Move ``pid`` into ``/<name>/system`` of every hierarchy. Raises OSError."""
    for ctl in _cgroup_controllers():
        (ctl / name / "system" / "cgroup.procs").write_text(str(pid))


def cgroup_pids(name: str) -> list[int]:
    """Every process in ``/<name>`` and below (the pids hierarchy, else the first one)."""
    ctls = [c for c in _cgroup_controllers() if c.name == "pids"] or _cgroup_controllers()[:1]
    out: set[int] = set()
    for ctl in ctls:
        top = ctl / name
        if not top.is_dir():
            continue
        for procs_file in top.rglob("cgroup.procs"):
            try:
                out.update(int(x) for x in procs_file.read_text().split())
            except (OSError, ValueError):
                continue
    return sorted(out)


def kill_node(name: str, timeout: float = 10.0) -> int:
    """SIGKILL every process in the node's cgroups until none is left, then remove the
    cgroups. Returns how many processes were signalled."""
    n, deadline = 0, time.monotonic() + timeout
    me = os.getpid()
    while time.monotonic() < deadline:
        pids = [p for p in cgroup_pids(name) if p != me]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for ctl in _cgroup_controllers():
        top = ctl / name
        if not top.is_dir():
            continue
        for d in sorted([top, *(p for p in top.rglob("*") if p.is_dir())], key=lambda p: -len(p.parts)):
            try:
                d.rmdir()
            except OSError:
                pass
    return n


# -- configuration files ---------------------------------------------------------------------
def containerd_config(d: Path, root: Path) -> str:
    """containerd 1.6's config (version 2) for the node whose files are under ``d``."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}/root"
state = "{d}/containerd-state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[{cri}]
  sandbox_image = "{SANDBOX_IMAGE}"
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE here: the pause container's -998 would fail runc
  restrict_oom_score_adj = true
  enable_unprivileged_ports = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  # the node's own software and settings, in every container (site_spec)
  base_runtime_spec = "{d}/{BASE_SPEC}"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d}/runc"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{d}/cni"
"""


def cni_conflist(d: Path, index: int) -> dict:
    """The pod network: bridge ``cni0`` (the node is the gateway, no NAT), host-local
    addresses from the node's pod CIDR, portmap for ``hostPort``."""
    cidr = pod_cidr(index)
    return {
        "cniVersion": "1.0.0", "name": "disttrain-pods",
        "plugins": [
            {"type": "bridge", "bridge": podnet.BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(d / "ipam"),
                      "ranges": [[{"subnet": cidr, "gateway": podnet.gateway(cidr)}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(d: Path, spec: NodeSpec, ca: Path, certs: dict,
                   cluster_dns: str = DNS_SERVICE_IP) -> dict:
    """The KubeletConfiguration (v1beta1) of one node; ``cluster_dns``: the nameserver of
    its pods (a node-local DNS, ``nodedns.py``, or cluster DNS)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # 1.37 refuses cgroup v1 by default; this machine has v1
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{spec.netns}", "cgroupsPerQOS": True,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{d}/containerd.sock",
        "podLogsDir": str(d / "pod-logs"),
        "address": "0.0.0.0", "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(certs["serving_crt"]), "tlsPrivateKeyFile": str(certs["serving_key"]),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [cluster_dns], "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(d / "resolv.conf"),
        # images are imported, never pulled: never garbage-collect them
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%"},
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "protectKernelDefaults": False, "makeIPTablesUtilChains": False,
        "localStorageCapacityIsolation": True,
        "shutdownGracePeriod": "0s",
    }


def write_files(state: Path, spec: NodeSpec, internal_ip: str, hosts_lines: list[str],
                topo=None) -> Path:
    """Write every configuration file of node ``spec`` (``topo``, a
    ``topology.NodeTopology``, gives its site env; see :func:`site_spec`); returns its
    directory. Raises RealNodeError (no torch tree, no ``ctr``)."""
    d = node_dir(state, spec.name)
    for sub in ("cni", "ipam", "runc", "kubelet", "pod-logs", "opt", "private/run-containerd",
                "private/var-lib-cni", "private/var-log", "sysctl"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    root = containerd_root(spec)
    root.mkdir(parents=True, exist_ok=True)
    p = state / "pki"
    certs = pki.ensure_node_pki(p, spec.name, internal_ip)
    write_kubeconfig(d / "kubelet.kubeconfig", f"system:node:{spec.name}", p / "ca.crt",
                     certs["client_crt"], certs["client_key"],
                     server=f"https://{KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT}")
    (d / "containerd.toml").write_text(containerd_config(d, root))
    env, mounts = site_env_and_mounts(topo, torch_tree())
    (d / BASE_SPEC).write_text(json.dumps(site_spec(default_oci_spec(), env, mounts), indent=1))
    (d / "cni" / "10-disttrain.conflist").write_text(json.dumps(cni_conflist(d, spec.index), indent=1))
    dns = nodedns.server_for(topo.dns_records if topo is not None else {})
    (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(d, spec, p / "ca.crt", certs, dns)))
    (d / "hosts").write_text("".join(f"{ln}\n" for ln in hosts_lines))
    (d / "resolv.conf").write_text(f"nameserver {DNS_SERVICE_IP}\n")
    for rel, value in SYSCTL_FILES.items():
        (d / "sysctl" / rel.replace("/", ".")).write_text(value)
    return d


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


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="localcluster.nodes.realnode")
    ap.add_argument("mode", choices=["run", "inner"])
    ap.add_argument("--node", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--internal-ip")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s {a.mode} %(message)s")
    state = Path(a.state).resolve()
    spec = node_spec_by_name(a.node)
    if a.mode == "inner":
        return inner(state, spec, a.internal_ip)
    doc = json.loads((state / "nodes" / f"{spec.name}.topology.json").read_text())
    topo = NodeTopology.from_json(doc["topology"])
    hosts = ["127.0.0.1 localhost", *topo.hosts, *(doc.get("peerHosts") or [])]
    routes = []
    for f in sorted((state / "nodes").glob("*.topology.json")):
        try:
            t = json.loads(f.read_text())["topology"]
            routes.append((pod_cidr(int(t["index"])), t["internal_ip"]))
        except (OSError, ValueError, KeyError):
            continue
    return run(state, spec, topo.internal_ip, hosts, routes, topo)


# -- the shared torch tree --------------------------------------------------------------------
TORCH_MOUNT = "/opt/site/torch"


def torch_tree() -> Path:
    """The newest complete torch tree ``make images`` made
    (``$DISTTRAIN_CACHE/torch-tree/torch-<version>-<key>/``). Raises RealNodeError."""
    trees = sorted((p for p in (cache_dir() / "torch-tree").glob("torch-*")
                    if (p / ".complete").exists()), key=lambda p: p.stat().st_mtime)
    if not trees:
        raise RealNodeError("no torch tree: run `make images` (it makes "
                            f"{cache_dir() / 'torch-tree'}/torch-<version>-<key>/)")
    return trees[-1]


def default_oci_spec() -> dict:
    """containerd's own default OCI spec (``ctr oci spec``), the base a site edits.
    Raises RealNodeError when ctr fails."""
    p = subprocess.run([binaries()["ctr"], "oci", "spec"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RealNodeError(f"ctr oci spec exited {p.returncode}: {p.stderr.strip()[:300]}")
    return json.loads(p.stdout)


def _host_paths(values: list[str]) -> list[str]:
    """The existing host directories that ``values`` (env values, ``:``-separated path
    lists) name: a directory itself, a file's parent. Pure apart from stat."""
    out: list[str] = []
    for v in values:
        for part in v.split(":"):
            p = Path(part)
            if not p.is_absolute() or not p.exists():
                continue
            out.append(str(p if p.is_dir() else p.parent))
    return out


HOST_MOUNT_ROOT = "/opt/site/host"  # host directory D is at HOST_MOUNT_ROOT + D in containers
# Console scripts of the torch tree (it has none: pip would write them into an image's bin),
# each mounted read-only at /usr/local/bin/<name>, which every image's PATH holds.
SITE_BIN = ["torchrun"]


def site_env_and_mounts(topo, tree: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """What this node gives every container, as a site's node configuration does: the
    shared torch tree read-only at TORCH_MOUNT and on PYTHONPATH, the scenario's ``env``,
    ``libraryPaths`` (appended to LD_LIBRARY_PATH) and ``pythonpath`` (relative to the
    repository, appended to PYTHONPATH), torch's console scripts (SITE_BIN), and each host
    directory those name, read-only at
    HOST_MOUNT_ROOT + its path, the values rewritten to match (a host path under /root
    would not do: a non-root container cannot pass the image's mode-700 /root). Returns
    (env, [(host path, container path)]). A container's own env (its image's ENV, then the
    pod spec's) overrides these by name, as it does on any node."""
    from localcluster.common.config import REPO_ROOT
    env = dict(getattr(topo, "env", None) or {})
    pythonpath = [str(REPO_ROOT / p) for p in getattr(topo, "pythonpath", None) or []]
    libs = list(getattr(topo, "library_paths", None) or [])
    hosts: list[str] = []
    for h in sorted(set(_host_paths(list(env.values()) + pythonpath + libs))):
        if not any(h == m or h.startswith(m.rstrip("/") + "/") for m in hosts):
            hosts.append(h)

    def inside(value: str) -> str:
        parts = []
        for part in value.split(":"):
            for h in hosts:
                if part == h or part.startswith(h.rstrip("/") + "/"):
                    part = HOST_MOUNT_ROOT + part
                    break
            parts.append(part)
        return ":".join(parts)

    env = {k: inside(v) for k, v in env.items()}
    env["PYTHONPATH"] = ":".join([x for x in [env.get("PYTHONPATH", ""), TORCH_MOUNT] if x]
                                 + [inside(p) for p in pythonpath])
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join([x for x in [env.get("LD_LIBRARY_PATH", "")] if x]
                                          + [inside(p) for p in libs])
    site_bin = REPO_ROOT / "localcluster" / "images" / "site-bin"
    return env, ([(str(tree), TORCH_MOUNT)] + [(str(site_bin / b), f"/usr/local/bin/{b}") for b in SITE_BIN]
                 + [(h, HOST_MOUNT_ROOT + h) for h in hosts])


def site_spec(default: dict, env: dict[str, str], mounts: list[tuple[str, str]]) -> dict:
    """``default`` (an OCI runtime spec) with ``env`` set in process.env (replacing by name)
    and each (source, destination) of ``mounts`` added as a read-only bind. Pure."""
    import copy
    spec = copy.deepcopy(default)
    proc = spec.setdefault("process", {})
    names = set(env)
    proc["env"] = [e for e in proc.get("env") or [] if e.split("=", 1)[0] not in names] + [
        f"{k}={v}" for k, v in env.items()]
    spec["mounts"] = list(spec.get("mounts") or []) + [
        {"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro"]}
        for src, dst in mounts]
    return spec


if __name__ == "__main__":
    sys.exit(main())
