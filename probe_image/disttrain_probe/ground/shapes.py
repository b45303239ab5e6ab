"""The shapes the probe's floors hand one another, typed: what a phase returns, what a rank
publishes to its peers, and the report. They stay dicts at run time (``TypedDict``): the
report and the store carry them as JSON, key for key in the order they are built, so typing
them changes no byte of what is emitted (docs/probe-report.md).

Keys are the report's (camelCase); ``total=False`` where a key may be absent. Units: ``ms``
milliseconds, ``Mbps`` megabits per second, ``GBps`` 1e9 bytes per second, ``seconds``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict


class Finding(TypedDict):
    """A warning or a failure without its phase: ``{reason, message}``."""
    reason: str
    message: str


class Failure(TypedDict, total=False):
    """The report's ``failure`` and a local rank's: ``{reason, phase, message}``."""
    reason: str
    phase: str
    message: str


class AllReduce(TypedDict, total=False):
    """One timed all-reduce (phases/collective.py): ``bytes``, ``iterations``, ``seconds``
    per iteration, ``algbwGBps``, ``busbwGBps`` (nccl-tests definitions), ``correct``."""
    bytes: int
    iterations: int
    seconds: Optional[float]
    algbwGBps: Optional[float]
    busbwGBps: Optional[float]
    correct: Optional[bool]


class LocalEntry(TypedDict, total=False):
    """One local rank's compact outcome (the report's ``localRanks``, ground/roles.py)."""
    localRank: int
    ok: bool
    phase: str
    device: str
    intraBusbwGBps: float
    busbwGBps: float
    failure: Failure
    stopped: Any  # True, or why (local rank 0 said stop)
    note: str


class Iface(TypedDict, total=False):
    """A network interface as the inventory found it (phases/inventory.py)."""
    name: str
    index: Optional[int]
    addrs: List[str]
    up: bool
    speedMbps: Optional[int]
    mtu: Optional[int]
    loopback: bool


class Versions(TypedDict, total=False):
    """python, torch, cuda (torch's build), nccl (the loaded libnccl, else torch's build),
    ncclBuild, ncclLib (its path), driver, gpus; ``cudaError`` when CUDA is broken."""
    python: Optional[str]
    torch: Optional[str]
    cuda: Optional[str]
    nccl: Optional[str]
    ncclBuild: Optional[str]
    ncclLib: Optional[str]
    driver: Optional[str]
    gpus: Optional[int]
    cudaError: str


class Inventory(TypedDict, total=False):
    """Phase 1's answer (phases/inventory.py ``collect``); ``versions`` is filled once the
    background torch import is done."""
    settings: Dict[str, str]
    rdma: List[str]
    hostname: str
    hostResolves: List[str]
    interfaces: List[Iface]
    portRange: Optional[List[int]]
    env: Dict[str, str]
    versions: Versions
    kernel: str


class NcclAnswer(TypedDict):
    """NCCL's own interface choice (phases/ncclcheck.py): the interface, its address, or
    the error that kept NCCL from answering."""
    ifname: Optional[str]
    addr: Optional[str]
    error: Optional[str]


class TorchFacts(TypedDict, total=False):
    """What the background torch import reads (phases/torchfacts.py)."""
    versions: Versions
    ncclDefault: Optional[NcclAnswer]


class HostCheck(TypedDict, total=False):
    """What phases/dialing.py ``host_check`` found: the other ``port`` dialled, its result ``r`` and
    the ARP entry's state (None for IPv6)."""
    port: int
    r: str
    arp: Optional[str]
    listening: bool  # the beacon answered: rank 0 listens, the master port refused
    silentSeconds: float  # both silent this long in a row


class Master(TypedDict, total=False):
    """The rendezvous's record of MASTER_ADDR:MASTER_PORT (the report's ``master``)."""
    addr: str
    port: int
    resolved: List[str]
    route: Optional[Dict[str, Optional[str]]]
    joined: bool
    connected: Optional[str]
    source: str  # where the name's answer came from: hosts or dns
    server: str  # the nameserver asked
    dns: Dict[str, Any]
    hostCheck: HostCheck
    peerName: Optional[str]


class Peer(TypedDict, total=False):
    """What a rank publishes at the rendezvous and every rank reads of every other
    (run/probereport.py ``self_summary``)."""
    rank: int
    node: str
    pod: Optional[str]
    hostname: Optional[str]
    hostIp: Optional[str]
    interfaces: Optional[List[Iface]]
    versions: Optional[Versions]
    portRange: Optional[List[int]]
    masterRoute: Optional[Dict[str, Optional[str]]]
    masterResolved: Optional[List[str]]
    hostResolves: Optional[List[str]]
    ncclDefault: Optional[NcclAnswer]
    settings: Dict[str, str]


class Dial(TypedDict, total=False):
    """One dial of the connectivity mesh (phases/connectivity.py ``dial``): ``r`` ok, wrong,
    closed, refused, timeout, unreachable or error; ``ms``; ``src`` the local address;
    ``noroute`` when the kernel had no route (ENETUNREACH: no packet left); the bulk
    transfer's ``mbps``/``mbpsLow`` where measured."""
    r: str
    ms: float
    src: Optional[str]
    noroute: bool
    connected: bool
    got: Any
    err: str
    mbps: float
    mbpsLow: float
    pmtu: Dict[str, int]
    range: List[List[Any]]
    retried: bool



class Chosen(TypedDict, total=False):
    """The interface chosen for a rank (phases/interfaces.py): the report's ``chosen``."""
    ifname: str
    addr: str
    subnet: str


class NetEntry(TypedDict):
    """A rank's IPv4 address as a candidate of the interface choice (phases/networks.py)."""
    ifname: str
    addr: str
    prefix: int
    subnet: str
    up: bool
    speed: Optional[int]
    loopback: bool


class Listen(TypedDict, total=False):
    """What a rank publishes before the mesh (phases/listeners.py): its ``nonce``, its
    listeners ``l`` ([iface, addr, prefix, port]) and the range samples ``s`` ([addr, port])."""
    nonce: str
    l: List[List[Any]]  # noqa: E741  (the published key)
    s: List[List[Any]]


# The gathered mesh: rank -> peer -> address -> that dial (phases/connectivity.py).
Mesh = Dict[int, Dict[int, Dict[str, Dial]]]


__all__ = ["AllReduce", "Chosen", "Dial", "HostCheck", "Listen", "Mesh", "NetEntry", "Failure", "Finding", "Iface", "Inventory", "LocalEntry", "Master",
           "NcclAnswer", "Peer", "TorchFacts", "Versions"]
