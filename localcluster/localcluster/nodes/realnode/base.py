"""What every part of a real node shares: the binaries it needs (containerd, ctr, runc,
the kubelet, the CNI plugins), its directories, its tracked process name and RealNodeError."""
from __future__ import annotations

import shutil
from pathlib import Path

from localcluster.common.config import (
    NodeSpec,
    cache_dir,
    k8s_bin_dir,
)

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
SANDBOX_IMAGE = "localhost/disttrain/pause:3.10"
KUBELET_PORT = 10250
BASE_SPEC = "base-spec.json"  # containerd's base_runtime_spec (site_spec)
# The kubelet's hard eviction floor for its filesystems (nodefs, imagefs), and the free
# disk `up` asks for beyond it (one node's images unpacked, logs, etcd).
EVICTION_DISK_FLOOR = "1Gi"
EVICTION_DISK_FLOOR_BYTES = 1 << 30
UP_DISK_MARGIN_BYTES = 3 << 30


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


# Machine-wide sysctls the kubelet sets at start (vm.overcommit_memory=1, kernel.panic=10,
# kernel.panic_on_oops=1): a file bind-mounted over each takes the write instead.
SYSCTL_FILES = {"vm/overcommit_memory": "1\n", "kernel/panic": "10\n", "kernel/panic_on_oops": "1\n"}


def free_disk() -> int:
    """Free bytes on the disk that holds the cache (its nearest existing folder)."""
    p = cache_dir()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def disk_hint() -> str:
    """One sentence on the disk the real nodes use: free bytes and how to free more."""
    free = free_disk()
    return (f"; {free / (1 << 30):.1f} GiB free on the disk of {cache_dir()}: "
            "`make prune-images` removes image archives and builds no longer used")


def check_disk() -> None:
    """Raises RealNodeError when the disk of the nodes' containerd roots has less free room
    than the kubelet's eviction floor plus a margin: below the floor the kubelet evicts
    pods and deletes images, which are imported here and never pulled back."""
    free = free_disk()
    need = EVICTION_DISK_FLOOR_BYTES + UP_DISK_MARGIN_BYTES
    if free < need:
        raise RealNodeError(f"real nodes need {need / (1 << 30):.0f} GiB of free disk (the "
                            f"kubelet evicts pods below {EVICTION_DISK_FLOOR})" + disk_hint())
