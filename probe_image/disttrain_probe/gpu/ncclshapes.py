"""What NCCL's own lines say, typed: the summaries :mod:`nccllog` (``NCCL_DEBUG=INFO``
lines) and :mod:`nccldiag` (``NCCL DIAG`` lines) return. JSON-able dicts at run time
(``TypedDict``), key for key as the report and ``make gpu-check`` carry them.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict


class Channel(TypedDict):
    """A channel's transport (:func:`classify`)."""
    kind: str
    detail: str
    net: Optional[str]
    netDev: Optional[int]
    gdr: bool


class PeerPath(TypedDict):
    """How one rank reached another (``"0->1"``): the transports, their ``via`` texts,
    the network, GPUDirect RDMA and the channel count."""
    kinds: List[str]
    via: List[str]
    net: Optional[str]
    gdr: bool
    channels: int


class NcclLog(TypedDict):
    """What :func:`parse` read (its docstring gives the shape)."""
    version: Optional[str]
    cuda: Optional[str]
    cudaDriverVersion: Optional[int]
    network: Optional[str]
    bootstrap: Optional[Dict[str, str]]
    ib: Optional[Dict[str, Any]]
    ibNoDevice: bool
    socket: Optional[Dict[str, List[Dict[str, Any]]]]
    netPlugin: Optional[str]
    gdr: Dict[str, bool]
    ranks: Dict[str, Dict[str, Any]]
    initComplete: int
    peers: Dict[str, PeerPath]
    warnLines: List[str]
    lines: int

class Differ(TypedDict):
    """A RAS ``check`` (CUDA driver version, GPU inventory count or model, NVLink
    link-count) whose ``value`` differs on ``ranks`` from the reference rank ``ref``'s;
    ``n`` ranks compared, e.g. ``{"check": "CUDA driver version", "ranks": [4, 5],
    "total": 2, "ref": 0, "value": "13000", "n": 8}``."""
    check: str
    ranks: List[int]
    total: int
    ref: int
    value: str
    n: int


class Edge(TypedDict, total=False):
    """A failed P2P pair: ``kind`` (e.g. write mismatch), the reporting ``host``, the
    ranks' and devices' numbers (:data:`nccldiag.INT_FIELDS`), the ``path`` (NVL), ``handle``
    (LEGACY_CUDA_IPC) and ``reason`` NCCL named."""
    kind: str
    host: Optional[str]
    srcRank: Optional[int]
    srcCudaDev: Optional[int]
    srcNvmlDev: Optional[int]
    dstRank: Optional[int]
    dstCudaDev: Optional[int]
    dstNvmlDev: Optional[int]
    path: Optional[str]
    handle: Optional[str]
    reason: Optional[str]


class RankSet(TypedDict):
    """The ranks a finding holds for (at most :data:`MAX_ITEMS`) and how many in all."""
    ranks: List[int]
    total: int


class Ecc(RankSet):
    """ECC errors NCCL's RAS found: ``kind`` uncorrected or corrected, the ``worst`` rank's
    count and the ``threshold`` (None: any), e.g. ``{"kind": "corrected", "ranks": [3],
    "total": 1, "worst": 2, "threshold": 10}``."""
    kind: str
    worst: int
    threshold: Optional[int]


class NcclDiag(TypedDict):
    """What :func:`parse` read (its docstring gives the shape)."""
    lines: int
    reports: List[str]
    completed: int
    differ: List[Differ]
    ecc: List[Ecc]
    nvlinkInactive: List[RankSet]
    env: Dict[str, Dict[str, List[int]]]
    incomplete: List[str]
    p2p: Optional[Dict[str, int]]
    edges: List[Edge]
    checkErrors: List[str]


__all__ = ["Channel", "Differ", "Ecc", "Edge", "NcclDiag", "NcclLog", "PeerPath", "RankSet"]
