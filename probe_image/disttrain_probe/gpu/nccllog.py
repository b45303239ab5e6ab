"""What NCCL really used, read from its own ``NCCL_DEBUG=INFO`` lines (standard library only).

NCCL prints every line as ``[timestamp ]<host>:<pid>:<tid> [<cudaDev>] NCCL INFO <msg>``
(src/debug.cc; WARN lines carry ``<file>:<line>`` before ``NCCL WARN``). The messages read
here, with the NCCL source that prints them (the formats are the same from 2.18 to 2.30
unless noted):

===========================================  =========================================
``NCCL version 2.27.3+cuda12.9``             src/init.cc ``VERSION_STRING``
``cudaDriverVersion 12090``                  src/misc/cudawrap.cc
``Bootstrap : Using eth0:10.0.0.1<0>``       src/bootstrap.cc (``Bootstrap: Using`` from 2.27)
``NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB eth0:10.0.0.1<0>``   src/transport/net_ib.cc
``NET/IB : No device found.``                src/transport/net_ib.cc
``NET/Socket : Using [0]eth0:10.0.0.1<0>``   src/transport/net_socket.cc
``NET/Plugin: Loaded net plugin NAME (v10)`` src/plugin/net/net_v*.cc
``Using network IB``                         src/init.cc
``NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'``       src/graph/topo.cc
``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC``  src/transport/p2p.cc (also P2P/CUMEM, P2P/MNNVL,
                                             P2P/direct pointer, P2P/indirect/2[2]; ``/read``)
``Channel 00 : 0[0] -> 1[1] via SHM/direct/direct``            src/transport/shm.cc
``Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA``     src/transport/net.cc
                                             (``NET/<net>/<dev>[(<proxy>)][/GDRDMA][(PCI)][/Shared]``)
``[ncclCommInitRank ]comm 0x.. rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x.. - Init COMPLETE``
                                             src/init.cc
===========================================  =========================================

:func:`parse` turns lines (any mix of ranks and processes) into a JSON-able summary: the
version, the network NCCL chose, the devices of each network, the bootstrap interface,
the ranks that completed init (with host, GPU and bus id), and per peer pair
(``"0->1"``) the transports its channels use. :func:`warnings` compares that with what
the node has (RDMA devices, GPU peer-to-peer capability) and says when NCCL fell back:
sockets although RDMA ports are up, SHM between GPUs of one node where P2P was expected,
GPUDirect RDMA off. Pure functions; nothing here touches a GPU.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from disttrain_probe.contract.vocabulary import (  # reasons this module reports
    GPUDIRECT_RDMA_OFF,
    NCCL_SHM_INSTEAD_OF_P2P,
    NCCL_SOCKETS_DESPITE_RDMA,
)
from disttrain_probe.gpu.ncclshapes import Channel, NcclLog, PeerPath

MAX_WARN_LINES = 20

PREFIX = re.compile(
    r"^(?:\[[^\]]*\]\s*)?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) "
    r"\[(?P<dev>-?\d+)\] (?:(?P<where>\S+:\d+) )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
VERSION = re.compile(r"^NCCL version (?P<version>\d+\.\d+\.\d+)(?P<suffix>[^+\s]*)"
                     r"(?:\+cuda(?P<cuda>\d+\.\d+))?")
CUDA_DRIVER = re.compile(r"^cudaDriverVersion (?P<v>\d+)$")
BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (?P<ifname>[^:\s]+):(?P<addr>.+)<(?P<port>\d+)>$")
NET_IB = re.compile(r"^NET/IB : Using(?P<devs>(?: \[\d+\][^:\s]+:\d+/\S+)*) ?(?P<ro>\[RO\])?; "
                    r"OOB (?P<ifname>[^:\s]+):(?P<addr>.*)<(?P<port>\d+)>$")
IB_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[^:\s]+):(?P<port>\d+)/(?P<link>\S+)")
NET_IB_NONE = re.compile(r"^NET/IB : No device found\.?$")
NET_SOCKET = re.compile(r"^NET/Socket : Using(?P<devs>(?: \[\d+\][^:\s]+:\S+)*)$")
SOCKET_DEV = re.compile(r"\[(?P<i>\d+)\](?P<ifname>[^:\s]+):(?P<addr>[^<\s]+)<(?P<port>\d+)>")
PLUGIN = re.compile(r"^NET/Plugin ?: Loaded (?P<kind>net|collnet) plugin (?P<name>.+?)"
                    r"(?: \(v\d+\))?$")
USING_NETWORK = re.compile(r"^Using network (?P<name>.+)$")
GDR = re.compile(r"^NET/(?P<net>.+?) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA "
                 r"(?P<i>\d+) '(?P<hca>[^']*)'")
CHANNEL = re.compile(r"^Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<srcdev>-?\d+)\]"
                     r" -> (?P<dst>\d+)\[(?P<dstdev>-?\d+)\] (?:\[(?P<dir>send|receive)\] )?"
                     r"via (?P<via>\S.*)$")
INIT_COMPLETE = re.compile(r"^(?:(?P<fn>\w+) )?comm (?P<comm>\S+) rank (?P<rank>\d+) nranks "
                           r"(?P<nranks>\d+) cudaDev (?P<cudaDev>-?\d+) nvmlDev (?P<nvmlDev>-?\d+) "
                           r"busId (?P<busId>[0-9a-fA-F]+) .*- Init COMPLETE$")


def split_line(line: str) -> Optional[Dict[str, str]]:
    """One NCCL log line -> ``{"host", "pid", "dev", "level" (INFO|WARN), "msg", "where"}``,
    or None for a line NCCL did not print (other output is mixed in freely). Pure."""
    m = PREFIX.match(line.rstrip("\r\n"))
    if not m:
        return None
    d = m.groupdict()
    d["msg"] = d["msg"].strip()
    return d



def classify(via: str) -> Channel:
    """A channel's ``via`` text -> ``{"kind": "P2P"|"SHM"|"NET"|"other", "detail", "net",
    "netDev", "gdr"}``: ``P2P/IPC/read`` -> P2P (IPC), ``SHM/direct/direct`` -> SHM,
    ``NET/IB/0/GDRDMA`` -> NET over IB device 0 with GPUDirect RDMA. Pure."""
    parts = via.split("/")
    out: Channel = {"kind": "other", "detail": via, "net": None, "netDev": None, "gdr": False}
    if parts[0] == "P2P":
        out.update({"kind": "P2P", "detail": parts[1] if len(parts) > 1 else ""})
    elif parts[0] == "SHM":
        out.update({"kind": "SHM", "detail": "/".join(parts[1:])})
    elif parts[0] == "NET" and len(parts) > 2:
        dev = re.match(r"(\d+)", parts[2])
        out.update({"kind": "NET", "net": parts[1], "netDev": int(dev.group(1)) if dev else None,
                    "gdr": any(x.startswith("GDRDMA") for x in parts[3:]), "detail": "/".join(parts[3:])})
    return out


def parse(lines: Iterable[str]) -> NcclLog:
    """Summarize NCCL INFO/WARN lines. Returns (JSON-able, camelCase)::

        {"version": "2.27.3", "cuda": "12.9", "cudaDriverVersion": 12090,
         "network": "IB" | "Socket" | <plugin name> | None,      # "Using network ..."
         "bootstrap": {"ifname", "addr"} | None,
         "ib": {"devices": [{"index", "name", "port", "link"}], "oob": {...},
                "relaxedOrdering": bool} | None,
         "ibNoDevice": bool, "socket": {"devices": [{"index", "ifname", "addr"}]} | None,
         "netPlugin": name | None, "gdr": {hca: bool},
         "ranks": {"0": {"host", "nranks", "cudaDev", "nvmlDev", "busId"}},
         "initComplete": number of Init COMPLETE lines,
         "peers": {"0->1": {"kinds": ["P2P"], "via": ["P2P/IPC/read"], "net": None,
                            "gdr": False, "channels": 2}},
         "warnLines": [first NCCL WARN messages], "lines": number of NCCL lines}

    Several communicators in one log add up; a peer pair seen over several transports
    lists each. Pure; never raises on odd input (unknown lines are ignored)."""
    out: NcclLog = {
        "version": None, "cuda": None, "cudaDriverVersion": None, "network": None,
        "bootstrap": None, "ib": None, "ibNoDevice": False, "socket": None, "netPlugin": None,
        "gdr": {}, "ranks": {}, "initComplete": 0, "peers": {}, "warnLines": [], "lines": 0,
    }
    for raw in lines:
        d = split_line(raw)
        if d is None:
            continue
        out["lines"] += 1
        msg = d["msg"]
        if d["level"] == "WARN":
            if len(out["warnLines"]) < MAX_WARN_LINES:
                out["warnLines"].append(f"{d['host']}: {msg}"[:300])
            continue
        if not _setup_line(out, msg):
            _transport_line(out, msg, d["host"])
    return out


def _setup_line(out: NcclLog, msg: str) -> bool:
    """Record a version, bootstrap or network-device line into ``out``; True when ``msg``
    was one."""
    m = VERSION.match(msg)
    if m:
        out["version"] = m.group("version") + (m.group("suffix") or "")
        out["cuda"] = m.group("cuda")
        return True
    m = CUDA_DRIVER.match(msg)
    if m:
        out["cudaDriverVersion"] = int(m.group("v"))
        return True
    m = BOOTSTRAP.match(msg)
    if m:
        out["bootstrap"] = {"ifname": m.group("ifname"), "addr": m.group("addr")}
        return True
    m = NET_IB.match(msg)
    if m:
        out["ib"] = {"devices": [{"index": int(x.group("i")), "name": x.group("name"),
                                  "port": int(x.group("port")), "link": x.group("link")}
                                 for x in IB_DEV.finditer(m.group("devs"))],
                     "oob": {"ifname": m.group("ifname"), "addr": m.group("addr")},
                     "relaxedOrdering": bool(m.group("ro"))}
        return True
    if NET_IB_NONE.match(msg):
        out["ibNoDevice"] = True
        return True
    m = NET_SOCKET.match(msg)
    if m:
        out["socket"] = {"devices": [{"index": int(x.group("i")), "ifname": x.group("ifname"),
                                      "addr": x.group("addr")}
                                     for x in SOCKET_DEV.finditer(m.group("devs"))]}
        return True
    return False


def _transport_line(out: NcclLog, msg: str, host: str) -> None:
    """Record a plugin, network, GDR, channel or Init COMPLETE line into ``out`` (others
    are ignored)."""
    m = PLUGIN.match(msg)
    if m:
        if m.group("kind") == "net":
            out["netPlugin"] = m.group("name")
        return
    m = USING_NETWORK.match(msg)
    if m:
        out["network"] = m.group("name").strip()
        return
    m = GDR.match(msg)
    if m:
        # NCCL prints this line for every net, its own sockets too ("NET/Socket : GPU Direct
        # RDMA Disabled for HCA 0 'eth0'", seen with 2.28.9 on an H200): GPUDirect RDMA is a
        # property of an RDMA net only
        if m.group("net") != "Socket":
            out["gdr"][m.group("hca")] = m.group("state") == "Enabled"
        return
    m = CHANNEL.match(msg)
    if m:
        _add_channel(out["peers"], m.groupdict())
        return
    m = INIT_COMPLETE.match(msg)
    if m:
        out["initComplete"] += 1
        out["ranks"][m.group("rank")] = {
            "host": host, "nranks": int(m.group("nranks")),
            "cudaDev": int(m.group("cudaDev")), "nvmlDev": int(m.group("nvmlDev")),
            "busId": m.group("busId").lower()}


def _add_channel(peers: Dict[str, PeerPath], g: Dict[str, Optional[str]]) -> None:
    key = f"{g['src']}->{g['dst']}"
    via = (g["via"] or "").strip()
    c = classify(via)
    p = peers.setdefault(key, {"kinds": [], "via": [], "net": None, "gdr": False, "channels": 0})
    p["channels"] += 1
    if c["kind"] not in p["kinds"]:
        p["kinds"].append(c["kind"])
    if via not in p["via"] and len(p["via"]) < 4:
        p["via"].append(via)
    if c["kind"] == "NET":
        p["net"] = c["net"]
        p["gdr"] = p["gdr"] or c["gdr"]


def _rank_host(parsed: NcclLog, rank: str) -> Optional[str]:
    r = parsed.get("ranks", {}).get(rank)
    return r.get("host") if r else None


def _bus(parsed: NcclLog, rank: str) -> Optional[str]:
    r = parsed.get("ranks", {}).get(rank)
    return r.get("busId") if r else None


def net_used(parsed: NcclLog) -> Optional[str]:
    """The network NCCL used between nodes: "IB", "Socket", a plugin's name, or None when
    no channel crossed the network (and "Using network" was not printed). Pure."""
    nets = {n for p in parsed.get("peers", {}).values() if (n := p.get("net"))}
    if len(nets) == 1:
        return nets.pop()
    if nets:
        return ",".join(sorted(nets))
    return parsed.get("network")


def warnings(parsed: NcclLog, node: str, rdma: Optional[Sequence[Mapping[str, Any]]] = None,
             p2p: Optional[Dict[str, bool]] = None) -> List[Dict[str, str]]:
    """Fallbacks NCCL took, as ``[{"reason", "message"}]`` (each message names the node,
    what NCCL logged and the fix; at most 400 characters).

    ``rdma``: this node's RDMA devices (``rdma.devices()``: name, ports with state); a
    network that is not IB while some port is ACTIVE is :data:`NCCL_SOCKETS_DESPITE_RDMA`.
    ``p2p``: ``{"<busIdA>,<busIdB>": bool}`` from NVML (``nvml``'s p2p matrix, lower-case
    bus ids as NCCL prints them, e.g. ``"1000,2000"``); a pair of ranks on one host whose
    channels use SHM is :data:`NCCL_SHM_INSTEAD_OF_P2P` when NVML says P2P works, or when
    NVML could not say (the message names what decides). NET/IB channels without
    GDRDMA, or an HCA logged "GPU Direct RDMA Disabled", is :data:`GPUDIRECT_RDMA_OFF`.
    Pure."""
    out: List[Dict[str, str]] = []
    used = net_used(parsed)
    active = [f"{d['name']}:{p['port']}" for d in rdma or [] for p in d.get("ports") or []
              if str(p.get("state", "")).upper().endswith("ACTIVE")]
    crossed = any("NET" in p["kinds"] for p in parsed.get("peers", {}).values())
    if active and used and used != "IB" and (crossed or parsed.get("network")):
        why = ("NCCL found no IB device (NET/IB : No device found: libibverbs missing in the image, "
               "or /dev/infiniband not mounted into the pod)" if parsed.get("ibNoDevice")
               else "NCCL_IB_DISABLE=1, NCCL_NET=Socket, or the IB device filter (NCCL_IB_HCA) "
                    "excludes them")
        out.append({"reason": NCCL_SOCKETS_DESPITE_RDMA, "message": _cap(
            f"{node}: NCCL used network {used} although RDMA port(s) {', '.join(active[:4])} are "
            f"ACTIVE; likely {why}; fix that and check the NCCL log says 'Using network IB'")})
    shm_pairs = []
    for key, p in sorted(parsed.get("peers", {}).items()):
        if "SHM" not in p["kinds"]:
            continue
        a, b = key.split("->")
        ha, hb = _rank_host(parsed, a), _rank_host(parsed, b)
        if ha is not None and ha != hb:
            continue
        ba, bb = _bus(parsed, a), _bus(parsed, b)
        ok = None
        if p2p is not None and ba and bb:
            ok = p2p.get(f"{ba},{bb}", p2p.get(f"{bb},{ba}"))
        if ok is False:
            continue  # NVML says no P2P between these GPUs: SHM is the right path
        shm_pairs.append((key, ok))
    if shm_pairs:
        keys = ", ".join(k for k, _ in shm_pairs[:4])
        sure = any(ok for _, ok in shm_pairs)
        evidence = ("NVML reports P2P supported between these GPUs" if sure else
                    "NVML could not say whether P2P works (check `nvidia-smi topo -p2p r`; GPUs "
                    "on different CPU sockets legitimately use SHM)")
        out.append({"reason": NCCL_SHM_INSTEAD_OF_P2P, "message": _cap(
            f"{node}: GPUs of one node talk through SHM (ranks {keys}) where P2P was expected; "
            f"{evidence}; check NCCL_P2P_DISABLE/NCCL_P2P_LEVEL, that all local ranks share one "
            f"container (IPC), and ACS/IOMMU settings")})
    ib_net = [p for p in parsed.get("peers", {}).values() if p.get("net") == "IB"]
    off_hcas = sorted(h for h, on in (parsed.get("gdr") or {}).items() if not on)
    if (ib_net and not any(p["gdr"] for p in ib_net)) or off_hcas:
        shown = f" (HCA {', '.join(off_hcas[:4])} logged 'GPU Direct RDMA Disabled')" \
            if off_hcas else ""
        out.append({"reason": GPUDIRECT_RDMA_OFF, "message": _cap(
            f"{node}: NCCL moves inter-node traffic over IB without GPUDirect RDMA{shown}, "
            f"staging through host memory; load the nvidia-peermem module (or use DMA-BUF with "
            f"a recent kernel and driver) and check NCCL_NET_GDR_LEVEL")})
    return out


def _cap(text: str, n: int = 400) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
