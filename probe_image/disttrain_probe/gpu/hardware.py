"""What a GPU node offers NCCL, from files and libraries inside the image (standard library only).

:func:`collect` gathers, absent-safe (a CPU node gets empty or ``None`` fields, never an
error): the GPUs (``nvml.inventory``), the RDMA devices and the GPUDirect RDMA module
(``rdma``), the size of ``/dev/shm`` (NCCL's SHM transport and its proxy buffers live
there; a container's default 64 MiB makes NCCL fail with "failed to extend /dev/shm"),
whether ``libibverbs`` can be loaded (NCCL's IB transport dlopens it), which NCCL
network plugins (``libnccl-net*.so``) are on the library path, and the locked-memory
limit with ``CAP_IPC_LOCK`` (what ``ibv_reg_mr`` may pin: :func:`memlock`). :func:`findings` turns
that, and optionally what NCCL logged (``nccllog.parse``), into warnings.
:func:`start_nccl_capture` / :func:`finish_nccl_capture` route NCCL's INFO lines to a file
around the collective; with NCCL >= 2.31 :func:`start_diag_capture` /
:func:`stop_diag_capture` also run NCCL's own diagnostics and keep their ``NCCL DIAG`` lines,
which NCCL prints to standard output only (``nccldiag`` reads them).
"""
from __future__ import annotations

import ctypes
import glob
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, TypedDict

from disttrain_probe.contract import probe_env
from disttrain_probe.contract.vocabulary import DEV_SHM_TOO_SMALL  # reasons this module reports
from disttrain_probe.gpu import nccldiag, nccllog, nvml, rdma

SHM_PATH = "/dev/shm"
SHM_MIN_BYTES = 1 << 30  # below 1 GiB, NCCL on several local GPUs may run out (see module doc)
STANDARD_LIB_DIRS = ("/usr/local/lib", "/usr/lib", "/usr/lib64", "/lib", "/lib64",
                     "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
LD_SO_CONF_DIR = "/etc/ld.so.conf.d"
GPUS_REQUESTED_VAR = probe_env.GPUS  # nvidia.com/gpu the pod requested (the operator sets it)
NCCL_SUBSYS = "INIT,BOOTSTRAP,ENV,NET"  # INIT: channels and Init COMPLETE; NET: GDR per HCA


class Shm(TypedDict):
    """The shared-memory mount (:func:`shm`), bytes."""
    path: str
    totalBytes: Optional[int]
    freeBytes: Optional[int]


class NetPlugin(TypedDict):
    """The NCCL network plugins this process could load (:func:`net_plugin`)."""
    requested: Optional[str]
    found: List[str]


class Memlock(TypedDict):
    """The locked-memory limit (:func:`memlock`), bytes; None: unlimited or unreadable."""
    softBytes: Optional[int]
    hardBytes: Optional[int]
    ipcLock: Optional[bool]


class Hardware(TypedDict):
    """The node's accelerator inventory (:func:`collect`)."""
    gpus: nvml.GpuInventory
    rdma: List[rdma.Device]
    peermem: Optional[str]
    shm: Shm
    ibverbs: List[str]
    netPlugin: NetPlugin
    memlock: Memlock


def shm(path: str = SHM_PATH) -> Shm:
    """``{"path", "totalBytes", "freeBytes"}`` of the filesystem at ``path`` (bytes);
    ``None`` sizes when it does not exist. Never raises."""
    try:
        st = os.statvfs(path)
    except OSError:
        return {"path": path, "totalBytes": None, "freeBytes": None}
    return {"path": path, "totalBytes": st.f_frsize * st.f_blocks,
            "freeBytes": st.f_frsize * st.f_bavail}


def library_dirs(env: Optional[Mapping[str, str]] = None, conf_dir: str = LD_SO_CONF_DIR,
                 extra: Iterable[str] = ()) -> List[str]:
    """Where the dynamic loader looks, in order: ``extra``, LD_LIBRARY_PATH, the
    directories listed in ``conf_dir``/*.conf, then :data:`STANDARD_LIB_DIRS`; each once.
    Never raises."""
    env = os.environ if env is None else env
    dirs: List[str] = list(extra)
    dirs += [d for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d]
    for conf in sorted(glob.glob(os.path.join(conf_dir, "*.conf"))):
        try:
            with open(conf) as f:
                dirs += [ln.strip() for ln in f
                         if ln.strip().startswith("/") and not ln.startswith("include")]
        except OSError:
            pass
    dirs += STANDARD_LIB_DIRS
    seen: List[str] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def find_libraries(pattern: str, dirs: Iterable[str]) -> List[str]:
    """Paths matching the glob ``pattern`` (e.g. ``libnccl-net*.so*``) in ``dirs``, in
    search order. Never raises."""
    out: List[str] = []
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, pattern))):
            if p not in out:
                out.append(p)
    return out


def net_plugin(env: Optional[Mapping[str, str]] = None, dirs: Optional[List[str]] = None
               ) -> NetPlugin:
    """The NCCL network plugins this process could load: ``{"requested": NCCL_NET_PLUGIN
    or None, "found": [paths of libnccl-net*.so*]}``; NCCL loads ``libnccl-net.so`` (or
    ``libnccl-net-<NCCL_NET_PLUGIN>.so``) and otherwise uses its internal IB/Socket
    transports. Never raises."""
    env = os.environ if env is None else env
    dirs = library_dirs(env) if dirs is None else dirs
    return {"requested": env.get("NCCL_NET_PLUGIN") or None,
            "found": find_libraries("libnccl-net*.so*", dirs)[:8]}


CAP_IPC_LOCK = 14  # linux/capability.h: exempts a process from RLIMIT_MEMLOCK
PROC_STATUS = "/proc/self/status"


def memlock(status_path: str = PROC_STATUS) -> Memlock:
    """This process's locked-memory limit, what bounds the memory NCCL's IB transport can
    register (``ibv_reg_mr`` pins it; above the limit it fails with ENOMEM, "Cannot
    allocate memory")::

        {"softBytes": 8388608 | None, "hardBytes": ... | None, "ipcLock": True | False | None}

    ``None`` bytes: unlimited (or unreadable); ``ipcLock``: whether ``CAP_IPC_LOCK`` is in
    the effective set (read from ``status_path``'s ``CapEff``; the kernel then ignores the
    limit), None when unreadable. Never raises."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    except (OSError, ValueError, AttributeError):
        soft = hard = resource.RLIM_INFINITY
    cap: Optional[bool] = None
    try:
        with open(status_path) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    cap = bool(int(line.split(":", 1)[1].strip(), 16) >> CAP_IPC_LOCK & 1)
    except (OSError, ValueError):
        cap = None
    return {"softBytes": None if soft == resource.RLIM_INFINITY else int(soft),
            "hardBytes": None if hard == resource.RLIM_INFINITY else int(hard), "ipcLock": cap}


@dataclass(frozen=True)
class Sources:
    """Where :func:`collect` looks (tests point these at fakes): ``nvml_api`` (None: the
    real NVML), the sysfs InfiniBand and module roots, the shared-memory mount and the
    library directories (None: from LD_LIBRARY_PATH and the usual places), and the
    ``/proc`` status file ``CapEff`` is read from."""
    nvml_api: Any = None
    ib_root: str = rdma.SYS_IB
    module_root: str = rdma.SYS_MODULE
    shm_path: str = SHM_PATH
    lib_dirs: Optional[List[str]] = None
    proc_status: str = PROC_STATUS


def collect(requested_gpus: Optional[int] = None, env: Optional[Dict[str, str]] = None,
            sources: Optional[Sources] = None) -> Hardware:
    """The node's accelerator inventory (JSON-able, camelCase)::

        {"gpus": nvml.inventory(...), "rdma": [rdma.devices()...],
         "peermem": "nvidia_peermem" | None, "shm": shm(), "ibverbs": [paths],
         "netPlugin": net_plugin(), "memlock": memlock()}

    ``requested_gpus``: what the pod asked for (``nvidia.com/gpu``), compared with what it
    sees; ``env`` (default os.environ) gives CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES,
    LD_LIBRARY_PATH and NCCL_NET_PLUGIN; ``sources``: where to look (default: this node).
    Never raises."""
    src = sources or Sources()
    env = dict(os.environ if env is None else env)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        visible = env.get("NVIDIA_VISIBLE_DEVICES")
    dirs = library_dirs(env) if src.lib_dirs is None else src.lib_dirs
    return {"gpus": nvml.inventory(src.nvml_api, requested_gpus, visible),
            "rdma": rdma.devices(src.ib_root), "peermem": rdma.peermem_module(src.module_root),
            "shm": shm(src.shm_path), "ibverbs": find_libraries("libibverbs.so*", dirs)[:4],
            "netPlugin": net_plugin(env, dirs), "memlock": memlock(src.proc_status)}


def findings(hw: Hardware, node: str, nccl: Optional[nccllog.NcclLog] = None
             ) -> List[Dict[str, str]]:
    """Warnings (``[{"reason", "message"}]``, each naming the node and the fix) from the
    inventory ``hw`` (:func:`collect`) and, when given, NCCL's own log (``nccl``,
    ``nccllog.parse``): GPU count and ECC (``nvml.gpu_warnings``), RDMA ports not ACTIVE,
    a small /dev/shm on a node with more than one GPU, RDMA devices without libibverbs in
    the image, and NCCL's fallbacks (``nccllog.warnings``). Pure."""
    out = nvml.gpu_warnings(hw.get("gpus") or {}, node)
    devs = hw.get("rdma") or []
    out += rdma.port_warnings(devs, node)
    total = (hw.get("shm") or {}).get("totalBytes")
    if (hw.get("gpus") or {}).get("count", 0) > 1 and total is not None and total < SHM_MIN_BYTES:
        out.append({"reason": DEV_SHM_TOO_SMALL, "message": (
            f"{node}: /dev/shm is {total / 2**20:.0f} MiB; NCCL between local GPUs needs more "
            f"(it fails with 'failed to extend /dev/shm'); mount an emptyDir with medium: Memory "
            f"at /dev/shm (sizeLimit of a few GiB)")[:400]})
    if devs and not hw.get("ibverbs"):
        out.append({"reason": nccllog.NCCL_SOCKETS_DESPITE_RDMA, "message": (
            f"{node}: the node has RDMA device(s) {', '.join(d['name'] for d in devs[:4])} but "
            f"libibverbs.so is not in the image, so NCCL can only use sockets; install rdma-core "
            f"(libibverbs1) in the training image")[:400]})
    if nccl is not None:
        p2p = (hw.get("gpus") or {}).get("p2p")
        seen = {w["reason"] for w in out}
        out += [w for w in nccllog.warnings(nccl, node, devs, p2p) if w["reason"] not in seen]
    return out


def requested_gpus(env: Optional[Dict[str, str]] = None) -> Optional[int]:
    """:data:`GPUS_REQUESTED_VAR` as a count; None when unset or not a number. Pure."""
    raw = ((os.environ if env is None else env).get(GPUS_REQUESTED_VAR) or "").strip()
    return int(raw) if raw.isdigit() else None


def start_nccl_capture(backend: str, env: Any = None) -> Optional[str]:
    """Before NCCL initializes in this process: with ``backend`` nccl, make NCCL write its
    INFO lines (:data:`NCCL_SUBSYS`) to a file and return its path; None (nothing changed)
    for gloo or when the user already routes NCCL's log (NCCL_DEBUG_FILE set). ``env``
    defaults to os.environ, which NCCL reads at its first call. Never raises."""
    env = os.environ if env is None else env
    if backend != "nccl" or env.get("NCCL_DEBUG_FILE"):
        return None
    try:
        fd, path = tempfile.mkstemp(prefix="disttrain-nccl-", suffix=".log")
        os.close(fd)
    except OSError:
        return None
    env["NCCL_DEBUG_FILE"] = path
    if (env.get("NCCL_DEBUG") or "").upper() not in ("INFO", "TRACE"):
        env["NCCL_DEBUG"] = "INFO"
    env.setdefault("NCCL_DEBUG_SUBSYS", NCCL_SUBSYS)
    return path


def finish_nccl_capture(path: Optional[str], hw: Hardware, node: str,
                        echo: Any = None) -> List[Dict[str, str]]:
    """Read what NCCL logged to ``path`` (:func:`start_nccl_capture`), copy it to ``echo``
    (default stderr: the pod log keeps NCCL's lines) and return the NCCL fallbacks
    (``nccllog.warnings`` with this node's RDMA devices and GPU P2P matrix from ``hw``),
    and remove the file. [] when ``path`` is None or unreadable. Never raises."""
    if not path:
        return []
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
        os.unlink(path)
    except OSError:
        return []
    try:
        (echo or sys.stderr).write("\n".join(lines[-400:]) + "\n")
    except Exception:
        pass
    parsed = nccllog.parse(lines)
    return nccllog.warnings(parsed, node, hw.get("rdma") or [], (hw.get("gpus") or {}).get("p2p"))


@dataclass
class DiagCapture:
    """NCCL's diagnostics turned on in this process (:func:`start_diag_capture`): ``env``, the
    variables the probe added (the local ranks get the same, so every rank of the communicator
    runs the check, which synchronises them), and this process's standard output (file
    descriptor ``fd``) redirected to ``path``, the original kept as ``saved`` (None: not
    redirected)."""
    env: Dict[str, str]
    path: Optional[str] = None
    saved: Optional[int] = None
    fd: int = 1


def start_diag_capture(backend: str, nccl_version: Optional[str], env: Any = None,
                       fd: int = 1) -> Optional[DiagCapture]:
    """Before NCCL initializes: where ``nccldiag.wanted`` (backend nccl, ``nccl_version`` of
    the loaded libnccl >= 2.31), add ``NCCL_RUN_RAS_DIAGNOSTICS=1`` and
    ``NCCL_RUN_DIAGNOSTICS=1`` to ``env`` (default os.environ; a user's own value wins) and
    redirect ``fd`` (standard output, where NCCL prints its ``NCCL DIAG`` lines, not to
    NCCL_DEBUG_FILE) to a file. None (nothing changed) below 2.31 or with gloo. Never
    raises: without a file the variables are still set and nothing is read back."""
    env = os.environ if env is None else env
    if not nccldiag.wanted(backend, nccl_version):
        return None
    cap = DiagCapture(nccldiag.env_to_set(env, backend, nccl_version), fd=fd)
    env.update(cap.env)
    tmp = -1
    try:
        tmp, path = tempfile.mkstemp(prefix="disttrain-nccl-diag-", suffix=".log")
        _flush_stdout()
        saved = os.dup(fd)
        os.dup2(tmp, fd)
        cap.path, cap.saved = path, saved
    except OSError:
        pass
    finally:
        if tmp >= 0:
            os.close(tmp)
    return cap


def stop_diag_capture(cap: Optional[DiagCapture], wait: float = 2.0, echo: Any = None,
                      poll: float = 0.05) -> List[str]:
    """Give the standard output back and return what was printed meanwhile (NCCL's
    ``NCCL DIAG`` lines among it), copied to ``echo`` (default the restored sys.stdout: the
    pod log keeps it). Waits up to ``wait`` seconds for every ``=== ... ===`` report to reach
    its ``completed`` line (NCCL's RAS thread prints its results after init returns). []
    for None or when nothing was redirected. Never raises."""
    if cap is None or cap.saved is None or not cap.path:
        return []
    end = time.monotonic() + max(0.0, wait)
    text = _read_text(cap.path)
    while text.count("NCCL DIAG === ") > text.count(" completed in ") and time.monotonic() < end:
        time.sleep(poll)
        text = _read_text(cap.path)
    try:
        os.dup2(cap.saved, cap.fd)
        os.close(cap.saved)
    except OSError:
        pass
    cap.saved = None
    text = _read_text(cap.path)
    try:
        os.unlink(cap.path)
    except OSError:
        pass
    if text:
        try:
            out = echo or sys.stdout
            out.write(text if text.endswith("\n") else text + "\n")
            out.flush()
        except Exception:
            pass
    return text.splitlines()


def _flush_stdout() -> None:
    """Flush Python's and C's buffered standard output (NCCL prints with C stdio)."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass


def _read_text(path: str) -> str:
    _flush_stdout()
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""
