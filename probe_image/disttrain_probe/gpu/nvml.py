"""GPU inventory through NVML (``libnvidia-ml.so.1``, shipped with the driver) via ctypes.

Standard library only: no pynvml, no nvidia-smi. :class:`Nvml` is a thin, absent-safe
binding of the few NVML calls used; :func:`inventory` turns any object with its methods
into the report's ``gpus`` block, so tests drive it with a fake. Nothing here raises:
a node without the library, a driver that refuses a call, or a GPU that lacks a feature
(ECC on consumer boards) becomes ``None`` or an ``error`` string.

NVML calls (nvml.h): nvmlInit_v2, nvmlShutdown, nvmlErrorString,
nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion_v2, nvmlDeviceGetCount_v2,
nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName, nvmlDeviceGetUUID,
nvmlDeviceGetPciInfo_v3, nvmlDeviceGetMemoryInfo, nvmlDeviceGetEccMode,
nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRemappedRows, nvmlDeviceGetP2PStatus.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Mapping, Optional, TypedDict

from disttrain_probe.contract.vocabulary import GPU_COUNT_MISMATCH, GPU_ECC_ERRORS  # reasons this module reports

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
MEMORY_ERROR_CORRECTED = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0  # since the last driver load
AGGREGATE_ECC = 1  # over the board's life
P2P_CAPS_INDEX_READ = 0
P2P_STATUS_OK = 0
LIBRARY = "libnvidia-ml.so.1"
MAX_P2P_GPUS = 16  # p2p matrix only up to this many GPUs (n*(n-1)/2 calls)


class RemappedRows(TypedDict):
    """Row remapping of one GPU (:meth:`Nvml.remapped_rows`)."""
    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


class Ecc(TypedDict):
    """One GPU's ECC state and error counts (None: ECC off or unreadable)."""
    enabled: Any
    volatileCorrected: Optional[int]
    volatileUncorrected: Optional[int]
    aggregateUncorrected: Optional[int]


class GpuDevice(TypedDict, total=False):
    """One GPU as NVML sees it (:func:`inventory`'s ``devices``); ``error`` alone when
    NVML gave no handle."""
    index: int
    error: str
    name: Optional[str]
    uuid: Optional[str]
    busId: Optional[str]
    ncclBusId: Optional[str]
    memoryBytes: Optional[int]
    ecc: Optional[Ecc]
    remappedRows: Optional[RemappedRows]


class GpuInventory(TypedDict):
    """The report's ``gpus`` block (:func:`inventory`)."""
    present: bool
    error: Optional[str]
    driver: Optional[str]
    cudaDriverVersion: Optional[int]
    count: int
    requested: Optional[int]
    visible: Optional[str]
    countMatches: Optional[bool]
    devices: List[GpuDevice]
    p2p: Optional[Dict[str, bool]]


class NvmlError(Exception):
    """An NVML call returned ``code`` (nvmlReturn_t); the message is nvmlErrorString's."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class _PciInfo(ctypes.Structure):
    # nvmlPciInfo_t (nvml.h, v3 layout)
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Nvml:
    """The NVML calls the inventory needs, on a loaded ``libnvidia-ml``.

    :meth:`open` returns an initialized instance or raises NvmlError/OSError; every
    other method raises :class:`NvmlError` (``NotSupported`` included) or
    AttributeError when the driver's library lacks the symbol."""

    def __init__(self, lib: Any):
        self.lib = lib

    @classmethod
    def open(cls, name: str = LIBRARY) -> "Nvml":
        """Load ``name`` and call nvmlInit_v2. Raises OSError (no library) or NvmlError."""
        n = cls(ctypes.CDLL(name))
        n._call("nvmlInit_v2")
        return n

    def _call(self, fn: str, *args: Any) -> None:
        f = getattr(self.lib, fn)
        f.restype = ctypes.c_int
        rc = f(*args)
        if rc != NVML_SUCCESS:
            raise NvmlError(rc, self.error_string(rc))

    def error_string(self, code: int) -> str:
        """nvmlErrorString(code), or ``"NVML error <code>"``."""
        try:
            f = self.lib.nvmlErrorString
            f.restype = ctypes.c_char_p
            s = f(ctypes.c_int(code))
            return s.decode(errors="replace") if s else f"NVML error {code}"
        except Exception:
            return f"NVML error {code}"

    def shutdown(self) -> None:
        """nvmlShutdown; errors are ignored."""
        try:
            self._call("nvmlShutdown")
        except Exception:
            pass

    def _text(self, fn: str, *args: Any, size: int = 96) -> str:
        buf = ctypes.create_string_buffer(size)
        self._call(fn, *args, buf, ctypes.c_uint(size))
        return buf.value.decode(errors="replace")

    def driver_version(self) -> str:
        """The kernel driver's version, e.g. "550.54.15"."""
        return self._text("nvmlSystemGetDriverVersion")

    def cuda_driver_version(self) -> int:
        """The CUDA version the driver supports, e.g. 12040 for 12.4."""
        v = ctypes.c_int(0)
        self._call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(v))
        return v.value

    def count(self) -> int:
        """Number of GPUs NVML sees (all of the node's, whatever CUDA_VISIBLE_DEVICES says)."""
        n = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value

    def handle(self, index: int) -> Any:
        """The device handle of GPU ``index``."""
        h = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(h))
        return h

    def name(self, h: Any) -> str:
        """The product name, e.g. "NVIDIA H100 80GB HBM3"."""
        return self._text("nvmlDeviceGetName", h)

    def uuid(self, h: Any) -> str:
        """The GPU's UUID ("GPU-...")."""
        return self._text("nvmlDeviceGetUUID", h)

    def bus_id(self, h: Any) -> str:
        """PCI bus id as NVML writes it, e.g. "00000000:1B:00.0"."""
        p = _PciInfo()
        self._call("nvmlDeviceGetPciInfo_v3", h, ctypes.byref(p))
        return p.busId.decode(errors="replace")

    def memory_total(self, h: Any) -> int:
        """Framebuffer size in bytes."""
        m = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", h, ctypes.byref(m))
        return int(m.total)

    def ecc_enabled(self, h: Any) -> bool:
        """Whether ECC is on now (current mode)."""
        cur, pend = ctypes.c_int(0), ctypes.c_int(0)
        self._call("nvmlDeviceGetEccMode", h, ctypes.byref(cur), ctypes.byref(pend))
        return bool(cur.value)

    def ecc_errors(self, h: Any, error_type: int, counter: int) -> int:
        """Total ECC errors of ``error_type`` (corrected/uncorrected) on ``counter``
        (volatile/aggregate)."""
        v = ctypes.c_ulonglong(0)
        self._call("nvmlDeviceGetTotalEccErrors", h, ctypes.c_int(error_type),
                   ctypes.c_int(counter), ctypes.byref(v))
        return int(v.value)

    def remapped_rows(self, h: Any) -> RemappedRows:
        """Row remapping (A100 and later): ``{"correctable", "uncorrectable", "pending",
        "failed"}``."""
        c, u, p, f = (ctypes.c_uint(0) for _ in range(4))
        self._call("nvmlDeviceGetRemappedRows", h, ctypes.byref(c), ctypes.byref(u),
                   ctypes.byref(p), ctypes.byref(f))
        return {"correctable": c.value, "uncorrectable": u.value, "pending": bool(p.value),
                "failed": bool(f.value)}

    def p2p_status(self, a: Any, b: Any) -> int:
        """nvmlDeviceGetP2PStatus(a, b, READ): 0 (OK) or the nvmlGpuP2PStatus_t code of
        why not (1 chipset, 2 GPU, 3 IOH topology, 4 disabled by regkey, 5 not supported)."""
        s = ctypes.c_int(0)
        self._call("nvmlDeviceGetP2PStatus", a, b, ctypes.c_int(P2P_CAPS_INDEX_READ),
                   ctypes.byref(s))
        return s.value


def _try(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or None when NVML cannot say (not supported, no symbol, error)."""
    try:
        return fn(*args)
    except (NvmlError, AttributeError, OSError, ValueError, TypeError):
        return None


def nccl_bus_id(nvml_bus_id: Optional[str]) -> Optional[str]:
    """NVML's "00000000:1B:00.0" -> NCCL's ``busId %lx`` form "1b000" (its Init COMPLETE
    line). None for anything else. Pure."""
    if not nvml_bus_id:
        return None
    try:
        dom, bus, devfn = nvml_bus_id.lower().split(":")
        dev, fn = devfn.split(".")
        return format((int(dom, 16) << 20) | (int(bus, 16) << 12) | (int(dev, 16) << 4)
                      | int(fn, 16), "x")
    except ValueError:
        return None


def inventory(nvml: Any = None, requested: Optional[int] = None,
              visible: Optional[str] = None) -> GpuInventory:
    """The node's GPUs as the report's ``gpus`` block::

        {"present": bool, "error": str | None, "driver": "550.54.15",
         "cudaDriverVersion": 12040, "count": 8, "requested": 8 | None,
         "visible": "0,1" | None, "countMatches": bool | None,
         "devices": [{"index", "name", "uuid", "busId", "ncclBusId", "memoryBytes",
                      "ecc": {"enabled", "volatileCorrected", "volatileUncorrected",
                              "aggregateUncorrected"} | None,
                      "remappedRows": {...} | None}],
         "p2p": {"<ncclBusIdA>,<ncclBusIdB>": bool} | None}

    ``nvml``: an object with :class:`Nvml`'s methods (default: :meth:`Nvml.open`, and
    ``present`` is False with ``error`` when that fails). ``requested``: GPUs the pod
    asked for (``nvidia.com/gpu``); ``visible``: CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES
    (a list of indexes or UUIDs), counted instead of NVML's total when set, since a
    container may see the node's NVML yet be granted fewer GPUs. Never raises."""
    out: GpuInventory = {"present": False, "error": None, "driver": None,
                           "cudaDriverVersion": None, "count": 0, "requested": requested,
                           "visible": visible, "countMatches": None, "devices": [], "p2p": None}
    opened = nvml is None
    if nvml is None:
        try:
            nvml = Nvml.open()
        except (OSError, NvmlError, AttributeError) as e:
            text = str(e)
            out["error"] = (text if LIBRARY in text else f"{LIBRARY}: {text}")[:200]
            return out
    try:
        out["driver"] = _try(nvml.driver_version)
        out["cudaDriverVersion"] = _try(nvml.cuda_driver_version)
        n = _try(nvml.count)
        if n is None:
            out["error"] = "nvmlDeviceGetCount failed"
            return out
        out["present"] = n > 0
        handles: List[Any] = []
        for i in range(n):
            h = _try(nvml.handle, i)
            handles.append(h)
            if h is None:
                out["devices"].append({"index": i, "error": "no handle"})
                continue
            bus = _try(nvml.bus_id, h)
            ecc: Optional[Ecc] = None
            enabled = _try(nvml.ecc_enabled, h)
            if enabled is not None:
                ecc = {"enabled": enabled,
                       "volatileCorrected": _try(nvml.ecc_errors, h, MEMORY_ERROR_CORRECTED,
                                                 VOLATILE_ECC) if enabled else None,
                       "volatileUncorrected": _try(nvml.ecc_errors, h, MEMORY_ERROR_UNCORRECTED,
                                                   VOLATILE_ECC) if enabled else None,
                       "aggregateUncorrected": _try(nvml.ecc_errors, h, MEMORY_ERROR_UNCORRECTED,
                                                    AGGREGATE_ECC) if enabled else None}
            out["devices"].append({
                "index": i, "name": _try(nvml.name, h), "uuid": _try(nvml.uuid, h),
                "busId": bus, "ncclBusId": nccl_bus_id(bus),
                "memoryBytes": _try(nvml.memory_total, h), "ecc": ecc,
                "remappedRows": _try(nvml.remapped_rows, h)})
        out["count"] = n
        if 1 < n <= MAX_P2P_GPUS:
            p2p: Dict[str, bool] = {}
            for i in range(n):
                for j in range(i + 1, n):
                    a, b = out["devices"][i].get("ncclBusId"), out["devices"][j].get("ncclBusId")
                    if handles[i] is None or handles[j] is None or not a or not b:
                        continue
                    s = _try(nvml.p2p_status, handles[i], handles[j])
                    if s is not None:
                        p2p[f"{a},{b}"] = s == P2P_STATUS_OK
            out["p2p"] = p2p or None
        granted = visible_count(visible)
        seen = granted if granted is not None else n
        if requested is not None:
            out["countMatches"] = seen == requested
    finally:
        if opened:
            nvml.shutdown()
    return out


def visible_count(visible: Optional[str]) -> Optional[int]:
    """GPUs named by a CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES value: "0,1" -> 2,
    "" or "none"/"void" -> 0, None or "all" -> None (unknown: NVML's count applies). Pure."""
    if visible is None:
        return None
    v = visible.strip().lower()
    if v == "all":
        return None
    if v in ("", "none", "void", "-1"):
        return 0
    return len([x for x in v.split(",") if x.strip()])


def gpu_warnings(inv: GpuInventory, node: str) -> List[Dict[str, str]]:
    """Findings on the ``gpus`` block: ``GPUCountMismatch`` (the pod sees another number of
    GPUs than it requested) and ``GPUECCErrors`` (uncorrectable ECC errors since the
    driver loaded, or rows that failed to remap). Each message names the node, the
    GPU(s) and the fix; at most 400 characters. Pure."""
    out: List[Dict[str, str]] = []
    if inv.get("countMatches") is False:
        seen = visible_count(inv.get("visible"))
        seen = inv.get("count") if seen is None else seen
        out.append({"reason": GPU_COUNT_MISMATCH, "message": (
            f"{node}: the pod sees {seen} GPU(s) but requested {inv.get('requested')} "
            f"(NVML counts {inv.get('count')} on the node); check the device plugin and "
            f"CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES, or set numProcPerNode to match")[:400]})
    bad = []
    for d in inv.get("devices") or []:
        ecc: Mapping[str, Any] = d.get("ecc") or {}
        rows: Mapping[str, Any] = d.get("remappedRows") or {}
        if (ecc.get("volatileUncorrected") or 0) > 0 or rows.get("failed"):
            bad.append(f"GPU {d.get('index')} ({d.get('busId')}: "
                       f"{ecc.get('volatileUncorrected') or 0} uncorrectable"
                       + (", row remapping failed" if rows.get("failed") else "") + ")")
    if bad:
        out.append({"reason": GPU_ECC_ERRORS, "message": (
            f"{node}: uncorrectable memory errors on {'; '.join(bad[:4])}; drain the node and "
            f"reset the GPU (nvidia-smi -r) or have it replaced before training there")[:400]})
    return out
