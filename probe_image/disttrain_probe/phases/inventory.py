"""Phase 1, inventory: what this node has (interfaces, versions, ports, names).

Interfaces come from ``ip -j addr`` when iproute2 is installed, else from
``socket.if_nameindex()`` + ioctl (IPv4) + /proc/net/if_inet6 (IPv6). The order is
the kernel's interface index order, which is also the order NCCL walks them in.

torch is imported lazily: the probe must report before torch loads (:func:`versions` runs
on the background import's thread, ground/torchload.py).
"""
from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import platform
import re
import shutil
import socket
import struct
import subprocess
from typing import Any, Dict, List, Optional, Tuple

from disttrain_probe.contract import settings
from disttrain_probe.ground.deadline import Deadline
from disttrain_probe.ground.shapes import Iface, Inventory, Versions

SIOCGIFFLAGS = 0x8913
SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
SIOCGIFMTU = 0x8921
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_RUNNING = 0x40


def _run(cmd: List[str], timeout: float) -> Optional[str]:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=max(0.2, timeout), check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.decode("utf-8", "replace")


def _speed(name: str) -> Optional[int]:
    try:
        with open(f"/sys/class/net/{name}/speed") as f:
            v = int(f.read().strip())
        return v if v > 0 else None
    except (OSError, ValueError):
        return None


def _from_ip_json(text: str) -> List[Iface]:
    out: List[Iface] = []
    for link in json.loads(text):
        flags = link.get("flags") or []
        addrs = []
        for a in link.get("addr_info") or []:
            if a.get("family") in ("inet", "inet6") and a.get("local"):
                addrs.append(f"{a['local']}/{a.get('prefixlen', 32 if a['family'] == 'inet' else 128)}")
        name = link.get("ifname", "?")
        out.append({
            "name": name,
            "index": link.get("ifindex"),
            "addrs": addrs,
            "up": "UP" in flags and "LOWER_UP" in flags,
            "speedMbps": _speed(name),
            "mtu": link.get("mtu"),
            "loopback": "LOOPBACK" in flags or link.get("link_type") == "loopback",
        })
    return out


def _ioctl(sock: socket.socket, req: int, name: str) -> bytes:
    import fcntl  # POSIX only
    return fcntl.ioctl(sock.fileno(), req, struct.pack("256s", name[:15].encode()))


def _from_ioctl() -> List[Iface]:
    v6: Dict[str, List[str]] = {}
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                p = line.split()
                if len(p) >= 6:
                    addr = str(ipaddress.IPv6Address(bytes.fromhex(p[0])))
                    v6.setdefault(p[5], []).append(f"{addr}/{int(p[2], 16)}")
    except OSError:
        pass
    out: List[Iface] = []
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for index, name in socket.if_nameindex():
            flags, mtu, addrs = 0, None, []
            try:
                flags = struct.unpack("H", _ioctl(s, SIOCGIFFLAGS, name)[16:18])[0]
                mtu = struct.unpack("i", _ioctl(s, SIOCGIFMTU, name)[16:20])[0]
            except OSError:
                pass
            try:
                addr = socket.inet_ntoa(_ioctl(s, SIOCGIFADDR, name)[20:24])
                mask = socket.inet_ntoa(_ioctl(s, SIOCGIFNETMASK, name)[20:24])
                addrs.append(f"{addr}/{ipaddress.IPv4Network('0.0.0.0/' + mask).prefixlen}")
            except OSError:
                pass
            addrs.extend(v6.get(name, []))
            out.append({
                "name": name, "index": index, "addrs": addrs,
                "up": bool(flags & IFF_UP) and bool(flags & IFF_RUNNING),
                "speedMbps": _speed(name), "mtu": mtu, "loopback": bool(flags & IFF_LOOPBACK),
            })
    finally:
        s.close()
    return out


def list_interfaces(timeout: float = 5.0) -> List[Iface]:
    text = _run(["ip", "-j", "addr"], timeout)
    if text:
        try:
            ifs = _from_ip_json(text)
            ifs.sort(key=lambda i: i.get("index") or 0)
            return ifs
        except (ValueError, KeyError, TypeError):
            pass
    return _from_ioctl()


def ipv4_addrs(iface: Iface) -> List[Tuple[str, int]]:
    out = []
    for a in iface.get("addrs") or []:
        ip, _, pl = a.partition("/")
        if ":" not in ip:
            out.append((ip, int(pl or 32)))
    return out


def ipv6_global(iface: Iface) -> List[str]:
    out = []
    for a in iface.get("addrs") or []:
        ip = a.partition("/")[0]
        if ":" in ip:
            try:
                x = ipaddress.IPv6Address(ip)
            except ValueError:
                continue
            if not (x.is_link_local or x.is_loopback):
                out.append(ip)
    return out


def iface_of_addr(interfaces: List[Iface], addr: str) -> Optional[str]:
    for i in interfaces:
        for a in i.get("addrs") or []:
            if a.partition("/")[0] == addr:
                return i["name"]
    return None


def route_get(addr: str, interfaces: List[Iface], timeout: float = 2.0,
              use_ip: bool = True) -> Optional[Dict[str, Optional[str]]]:
    """The kernel's route to ``addr``: {iface, src}. ``ip -j route get`` else a UDP connect."""
    if use_ip:
        text = _run(["ip", "-j", "route", "get", addr], timeout)
        if text:
            try:
                r = json.loads(text)[0]
                return {"iface": r.get("dev"), "src": r.get("prefsrc")}
            except (ValueError, IndexError, KeyError, TypeError):
                pass
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        s.connect((addr, 9))  # no packet is sent for UDP connect
        src = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return {"iface": iface_of_addr(interfaces, src), "src": src}


def port_range() -> Optional[List[int]]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = f.read().split()[:2]
        return [int(lo), int(hi)]
    except (OSError, ValueError):
        return None


def nameserver(path: str = "/etc/resolv.conf") -> Optional[str]:
    """The first ``nameserver`` of ``path`` (the DNS server getaddrinfo asks first), or None
    when there is none or the file cannot be read. Never raises."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    return parts[1]
    except OSError:
        pass
    return None


def hosts_entry(name: str, path: str = "/etc/hosts") -> Optional[str]:
    """The address ``path`` maps ``name`` to (its first line naming it, case-insensitive,
    comments ignored), or None when no line names it or the file cannot be read: whether
    getaddrinfo's answer came from the hosts file (glibc reads it before DNS with the usual
    ``hosts: files dns``). Never raises."""
    want = name.lower().rstrip(".")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 2 and want in (p.lower().rstrip(".") for p in parts[1:]):
                    return parts[0]
    except OSError:
        pass
    return None


def resolve(name: str) -> List[str]:
    """All addresses ``name`` resolves to (both families), in resolver order, deduplicated."""
    seen: List[str] = []
    for fam, _, _, _, sa in socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM):
        addr = str(sa[0])  # an IPv4 or IPv6 address (text) for these families
        if addr not in seen:
            seen.append(addr)
    return seen


def _driver_version(timeout: float) -> Optional[str]:
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    text = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout)
    if text and text.strip():
        return text.strip().splitlines()[0].strip()
    return None


def nccl_version_string(code: int) -> Optional[str]:
    """Decode ``ncclGetVersion``'s integer (NCCL_VERSION_CODE) into "major.minor.patch".

    NCCL >= 2.9 encodes major*10000 + minor*100 + patch (22809 -> "2.28.9"); older
    releases major*1000 + minor*100 + patch (2708 -> "2.7.8"). None for a code <= 0.
    """
    if not isinstance(code, int) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def _mapped_library(prefix: str, maps: str = "/proc/self/maps") -> Optional[str]:
    """Path of the first shared object named ``prefix``* mapped into this process."""
    try:
        with open(maps) as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    path = parts[5].strip()
                    if os.path.basename(path).startswith(prefix) and not path.endswith("(deleted)"):
                        return path
    except OSError:
        pass
    return None


def loaded_nccl() -> Tuple[Optional[str], Optional[str]]:
    """(version, path) of the NCCL library this process's NCCL calls bind to, from its own
    ``ncclGetVersion`` (the runtime version, which is what NCCL logs at init and what
    must match across nodes; torch's ``torch.cuda.nccl.version()`` is the version torch
    was compiled against). Needs no GPU. (None, None) when no libnccl is loaded (a
    CPU-only torch build, or NCCL linked statically into torch); never raises.

    The global symbol scope comes first: with ``LD_PRELOAD=.../libnccl.so.2`` two copies are
    mapped (the preloaded one and torch's own), and torch's calls bind to the preloaded one,
    which comes first in the dynamic linker's lookup (seen on an H200: NCCL logged 2.32.6
    while the first mapped copy said 2.28.9). Then the first mapped ``libnccl.so*``.
    """

    try:
        fn = ctypes.CDLL(None).ncclGetVersion  # dlsym(RTLD_DEFAULT): what a call binds to
        v = _call_version(fn)
        if v:
            return v, _defining_object(fn)
    except (OSError, AttributeError):
        pass
    path = _mapped_library("libnccl.so")
    mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 1)
    for name in ([path] if path else []) + ["libnccl.so.2"]:
        try:
            lib = ctypes.CDLL(name, mode=mode)  # RTLD_NOLOAD: only an already loaded one
            v = _call_version(lib.ncclGetVersion)
        except (OSError, AttributeError):
            continue
        if v:
            return v, (path if name == path else None)
    return None, None


def _call_version(fn: Any) -> Optional[str]:
    """``ncclGetVersion`` called through ctypes -> "2.28.9"; None when it fails or is not
    NCCL's."""

    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    code = ctypes.c_int(0)
    try:
        if fn(ctypes.byref(code)) != 0:
            return None
    except Exception:  # a foreign symbol of that name: not NCCL's
        return None
    return nccl_version_string(code.value)


def _defining_object(fn: Any) -> Optional[str]:
    """Path of the shared object defining the ctypes function ``fn`` (glibc's ``dladdr``);
    None when it cannot say."""

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        info = DlInfo()
        if not dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) or not info.dli_fname:
            return None
        return os.path.realpath(info.dli_fname.decode(errors="replace"))
    except Exception:
        return None


def torch_nccl_build(torch: Any) -> Optional[str]:
    """The NCCL version ``torch`` was compiled against ("2.27.3"), or None for a build
    without NCCL (CPU-only wheels) or one whose binding fails; never raises."""
    try:
        if not hasattr(getattr(torch, "_C", None), "_nccl_version"):
            return None
        nv = torch.cuda.nccl.version()
    except Exception:
        return None
    if isinstance(nv, tuple):
        return ".".join(str(x) for x in nv) if nv and nv[0] else None
    return str(nv) if nv else None


def versions(timeout: float = 5.0) -> Versions:
    """python, torch, cuda (torch's build), nccl, driver, gpus.

    ``nccl`` is the version of the libnccl loaded into this process (``loaded_nccl``;
    with ``ncclLib`` its path), whether or not CUDA is usable: which NCCL a node loads
    (LD_PRELOAD, a stray libnccl on LD_LIBRARY_PATH) matters before any GPU is touched.
    Without a loaded libnccl it falls back to torch's build version (NCCL linked into
    torch). ``ncclBuild`` is the version torch was compiled against. driver/gpus only with
    CUDA.
    """
    import torch  # the slow import; the caller has registered a step for it

    v: Versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": getattr(torch.version, "cuda", None),
        "nccl": None,
        "ncclBuild": None,
        "ncclLib": None,
        "driver": None,
        "gpus": 0,
    }
    v["ncclBuild"] = torch_nccl_build(torch)
    try:
        loaded, path = loaded_nccl()
    except Exception:  # defensive: a version is data, never a crash
        loaded, path = None, None
    v["nccl"] = loaded or v["ncclBuild"]
    v["ncclLib"] = path[-160:] if path else None
    try:
        if torch.cuda.is_available():
            v["gpus"] = torch.cuda.device_count()
            v["driver"] = _driver_version(timeout)
    except Exception as e:  # a broken CUDA install is data, not a crash
        v["cudaError"] = str(e)[:200]
    return v


def collect(cfg: Any, deadline: Deadline, tracker: Any = None) -> Inventory:
    """Everything this node knows about itself without torch (standard library only; the
    versions come from the background import, torchload.py). Fields are report-ready
    (camelCase)."""
    hostname = socket.gethostname()
    try:
        host_resolves = resolve(hostname)
    except (OSError, UnicodeError):
        host_resolves = []
    interfaces = list_interfaces(min(5.0, deadline.remaining()))
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "GLOO_"))}
    return {
        "settings": settings.of(os.environ),
        "rdma": settings.rdma_devices(),
        "hostname": hostname,
        "hostResolves": host_resolves,
        "interfaces": interfaces,
        "portRange": port_range(),
        "env": env,
        "versions": {},
        "kernel": platform.release(),
    }
