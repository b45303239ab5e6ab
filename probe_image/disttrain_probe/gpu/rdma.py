"""RDMA devices from sysfs (``/sys/class/infiniband``) and the GPUDirect RDMA module.

Standard library only; every function takes the sysfs root so tests run on a fake tree.
Layout read (Linux ``drivers/infiniband/core/sysfs.c``)::

    /sys/class/infiniband/<dev>/node_type          "1: CA"
    /sys/class/infiniband/<dev>/fw_ver             "28.39.1002"
    /sys/class/infiniband/<dev>/ports/<n>/state       "4: ACTIVE"
    /sys/class/infiniband/<dev>/ports/<n>/phys_state  "5: LinkUp"
    /sys/class/infiniband/<dev>/ports/<n>/rate        "400 Gb/sec (4X NDR)"
    /sys/class/infiniband/<dev>/ports/<n>/link_layer  "InfiniBand" | "Ethernet"
    /sys/class/infiniband/<dev>/ports/<n>/gids/<i>    "fe80:0000:...:0e0f" (all zero: empty)
    /sys/class/infiniband/<dev>/ports/<n>/gid_attrs/types/<i>  "IB/RoCE v1" | "RoCE v2"
    /sys/class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/<i>  "net1" (the netdev of a RoCE GID)
    /sys/class/infiniband/<dev>/device/net/<netdev>   the Ethernet netdev (RoCE, IPoIB)

GPUDirect RDMA needs a peer-memory module: ``nvidia_peermem`` (the driver's) or the
older ``nv_peer_mem``, visible under ``/sys/module``.
"""
from __future__ import annotations

import ipaddress
import os
import re
from typing import Dict, List, Optional, TypedDict

from disttrain_probe.contract.vocabulary import RDMA_PORT_DOWN  # reasons this module reports

SYS_IB = "/sys/class/infiniband"
SYS_MODULE = "/sys/module"
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
MAX_GIDS_READ = 256  # a port's GID table (mlx5: 255 or 256 entries); the rest is not read
MAX_GIDS_KEPT = 32  # non-empty entries kept per port (NCCL, too, looks at 32 at most)
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


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


class Gid(TypedDict):
    """One GID table entry (:func:`gid_entry`)."""
    index: int
    gid: str
    type: Optional[str]
    family: Optional[str]
    address: Optional[str]
    netdev: Optional[str]


class PortGids(TypedDict):
    """A port's GID table (:func:`port_gids`)."""
    gids: List[Gid]
    gidsTruncated: bool


class Port(PortGids, total=False):
    """One port of an RDMA device (:func:`devices`)."""
    port: int
    state: Optional[str]
    physState: Optional[str]
    rate: Optional[str]
    rateGbps: Optional[float]
    linkLayer: Optional[str]


class Device(TypedDict):
    """One RDMA device (:func:`devices`)."""
    name: str
    nodeType: Optional[str]
    fwVer: Optional[str]
    netdevs: List[str]
    ports: List[Port]


def devices(root: str = SYS_IB) -> List[Device]:
    """Every RDMA device under ``root``, sorted by name::

        [{"name": "mlx5_0", "nodeType": "CA", "fwVer": "28.39.1002", "netdevs": ["eth2"],
          "ports": [{"port": 1, "state": "ACTIVE", "physState": "LinkUp",
                     "rate": "400 Gb/sec (4X NDR)", "rateGbps": 400.0,
                     "linkLayer": "InfiniBand", "gids": [gid_entry(...)...],
                     "gidsTruncated": False}]}]

    An absent ``root`` (no RDMA, or sysfs not mounted) gives []. Never raises."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    out: List[Device] = []
    for name in names:
        base = os.path.join(root, name)
        ports: List[Port] = []
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
                          "linkLayer": _read(os.path.join(pb, "link_layer")),
                          **port_gids(pb)})
        try:
            netdevs = sorted(os.listdir(os.path.join(base, "device", "net")))
        except OSError:
            netdevs = []
        out.append({"name": name, "nodeType": _state(_read(os.path.join(base, "node_type"))),
                    "fwVer": _read(os.path.join(base, "fw_ver")), "netdevs": netdevs,
                    "ports": ports})
    return out


def port_gids(port_dir: str) -> PortGids:
    """The non-empty entries of one port's GID table, by index:
    ``{"gids": [gid_entry()...], "gidsTruncated": bool}``; at most :data:`MAX_GIDS_READ`
    entries are read and :data:`MAX_GIDS_KEPT` kept (``gidsTruncated`` says some were
    not). An all-zero GID is an empty slot (Linux leaves it there when a pod's network
    namespace holds only some of the port's addresses, so a table may start at 4 or 6:
    NVIDIA/nccl#1573). Never raises."""
    try:
        indexes = sorted((i for i in (_num(n) for n in os.listdir(os.path.join(port_dir, "gids")))
                          if i >= 0))
    except OSError:
        return {"gids": [], "gidsTruncated": False}
    kept: List[Gid] = []
    truncated = len(indexes) > MAX_GIDS_READ
    for i in indexes[:MAX_GIDS_READ]:
        raw = _read(os.path.join(port_dir, "gids", str(i)))
        if not raw or raw == ZERO_GID:
            continue
        if len(kept) == MAX_GIDS_KEPT:
            truncated = True
            break
        attrs = os.path.join(port_dir, "gid_attrs")
        kept.append(gid_entry(i, raw, _read(os.path.join(attrs, "types", str(i))),
                              _read(os.path.join(attrs, "ndevs", str(i)))))
    return {"gids": kept, "gidsTruncated": truncated}


def gid_entry(index: int, raw: str, gid_type: Optional[str], netdev: Optional[str]
              ) -> Gid:
    """One GID table entry as the report holds it::

        {"index": 7, "gid": "0000:...:ffff:0a98:000c", "type": "RoCE v2",
         "family": "IPv4" | "IPv6" | "link-local" | None, "address": "10.152.0.12" | None,
         "netdev": "net1" | None}

    ``family``: the address the GID carries (an IPv4-mapped GID is IPv4; fe80::/10 is
    link-local, routable by no RoCE v2 switch); None when ``raw`` is not a GID. ``type``
    is sysfs's text ("IB/RoCE v1", "RoCE v2"; None unreadable). Pure."""
    family: Optional[str] = None
    address: Optional[str] = None
    try:
        ip = ipaddress.IPv6Address(raw.strip())
    except ValueError:
        ip = None
    if ip is not None and ip.ipv4_mapped is not None:
        family, address = "IPv4", str(ip.ipv4_mapped)
    elif ip is not None:
        family = "link-local" if ip.is_link_local else "IPv6"
        address = None if ip.is_link_local else str(ip)
    return {"index": index, "gid": raw[:39], "type": (gid_type or None) and gid_type[:16],
            "family": family, "address": address, "netdev": (netdev or None) and netdev[:15]}


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


def port_warnings(devs: List[Device], node: str) -> List[Dict[str, str]]:
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
