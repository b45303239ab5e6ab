"""RDMA devices from sysfs (``/sys/class/infiniband``) and the GPUDirect RDMA module.

Standard library only; every function takes the sysfs root so tests run on a fake tree.
Layout read (Linux ``drivers/infiniband/core/sysfs.c``)::

    /sys/class/infiniband/<dev>/node_type          "1: CA"
    /sys/class/infiniband/<dev>/fw_ver             "28.39.1002"
    /sys/class/infiniband/<dev>/ports/<n>/state       "4: ACTIVE"
    /sys/class/infiniband/<dev>/ports/<n>/phys_state  "5: LinkUp"
    /sys/class/infiniband/<dev>/ports/<n>/rate        "400 Gb/sec (4X NDR)"
    /sys/class/infiniband/<dev>/ports/<n>/link_layer  "InfiniBand" | "Ethernet"
    /sys/class/infiniband/<dev>/device/net/<netdev>   the Ethernet netdev (RoCE, IPoIB)

GPUDirect RDMA needs a peer-memory module: ``nvidia_peermem`` (the driver's) or the
older ``nv_peer_mem``, visible under ``/sys/module``.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from disttrain_probe.contract.vocabulary import RDMA_PORT_DOWN  # reasons this module reports

SYS_IB = "/sys/class/infiniband"
SYS_MODULE = "/sys/module"
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _state(text: Optional[str]) -> Optional[str]:
    """ "4: ACTIVE" -> "ACTIVE"; None stays None."""
    if text is None:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text


def rate_gbps(text: Optional[str]) -> Optional[float]:
    """ "400 Gb/sec (4X NDR)" -> 400.0, "2.5 Gb/sec (1X SDR)" -> 2.5; None when unknown. Pure."""
    m = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec", text or "")
    return float(m.group(1)) if m else None


def devices(root: str = SYS_IB) -> List[Dict[str, Any]]:
    """Every RDMA device under ``root``, sorted by name::

        [{"name": "mlx5_0", "nodeType": "CA", "fwVer": "28.39.1002", "netdevs": ["eth2"],
          "ports": [{"port": 1, "state": "ACTIVE", "physState": "LinkUp",
                     "rate": "400 Gb/sec (4X NDR)", "rateGbps": 400.0,
                     "linkLayer": "InfiniBand"}]}]

    An absent ``root`` (no RDMA, or sysfs not mounted) gives []. Never raises."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out = []
    for name in names:
        base = os.path.join(root, name)
        ports = []
        try:
            port_ids = sorted(os.listdir(os.path.join(base, "ports")), key=_num)
        except OSError:
            port_ids = []
        for p in port_ids:
            pb = os.path.join(base, "ports", p)
            rate = _read(os.path.join(pb, "rate"))
            ports.append({"port": _num(p), "state": _state(_read(os.path.join(pb, "state"))),
                          "physState": _state(_read(os.path.join(pb, "phys_state"))),
                          "rate": rate, "rateGbps": rate_gbps(rate),
                          "linkLayer": _read(os.path.join(pb, "link_layer"))})
        try:
            netdevs = sorted(os.listdir(os.path.join(base, "device", "net")))
        except OSError:
            netdevs = []
        out.append({"name": name, "nodeType": _state(_read(os.path.join(base, "node_type"))),
                    "fwVer": _read(os.path.join(base, "fw_ver")), "netdevs": netdevs,
                    "ports": ports})
    return out


def _num(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def peermem_module(root: str = SYS_MODULE) -> Optional[str]:
    """The loaded GPUDirect RDMA peer-memory module's name, or None. Never raises."""
    for m in PEERMEM_MODULES:
        if os.path.isdir(os.path.join(root, m)):
            return m
    return None


def port_warnings(devs: List[Dict[str, Any]], node: str) -> List[Dict[str, str]]:
    """``RDMAPortDown`` when some RDMA port is not ACTIVE while the node has RDMA devices
    (NCCL skips such a port, so fewer rails carry traffic or it falls back to sockets).
    The message names the ports, their state and the fix; at most 400 characters. Pure."""
    down = [f"{d['name']}:{p['port']} {p.get('state') or '?'}/{p.get('physState') or '?'}"
            for d in devs for p in d.get("ports") or []
            if (p.get("state") or "").upper() != "ACTIVE"]
    if not down:
        return []
    return [{"reason": RDMA_PORT_DOWN, "message": (
        f"{node}: RDMA port(s) not ACTIVE: {', '.join(down[:6])}; check the cable/switch "
        f"port and the subnet manager (ibstat), or exclude them with NCCL_IB_HCA")[:400]}]
