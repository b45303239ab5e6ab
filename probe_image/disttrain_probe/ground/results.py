"""What a probe run keeps, phase by phase (:class:`disttrain_probe.run.probe.Probe`):
the outcome so far, the rendezvous's shared state, the connectivity mesh, the interface
choice, the collective and the local ranks, gathered in :class:`Kept`. The report
(:mod:`disttrain_probe.run.probereport`) is built from a :class:`Kept` alone.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, TypedDict

from disttrain_probe.ground.config import Config
from disttrain_probe.ground.deadline import Tracker
from disttrain_probe.ground.shapes import (
    AllReduce,
    Chosen,
    Dial,
    Failure,
    Inventory,
    LocalEntry,
    Master,
    NcclAnswer,
    Peer,
)
from disttrain_probe.ground.torchload import TorchLoader

Listener = Tuple[Optional[socket.socket], Optional[str]]  # (socket, None) or (None, the error)


class MeshRow(Dial, total=False):
    """A row of the report's ``mesh``: this rank's dial of ``peer`` at ``addr``."""
    peer: int
    addr: str


class SharedState(TypedDict, total=False):
    """What the probe shares with the rendezvous (its ``state`` argument): ``warnings`` (the
    report's, every phase adds to it), ``master`` (the rendezvous's record of MASTER_ADDR),
    ``self_summary`` (this rank's inventory as published), ``master_listener`` and
    ``beacon`` (rank 0's early sockets) and ``bus`` (set as soon as the store is joined)."""
    warnings: List[Dict[str, str]]
    master: Optional[Master]
    self_summary: Callable[[], Peer]
    master_listener: Listener
    beacon: Listener
    bus: Any


@dataclass
class Outcome:
    """The phase reached, whether it passed, the failure, and whether the final report
    was written (``emitted``: never twice)."""
    phase: str = "config"
    ok: bool = False
    failure: Optional[Failure] = None
    emitted: bool = False

    @property
    def passed(self) -> bool:
        return bool(self.ok and self.failure is None)


@dataclass
class MeshResult:
    """The connectivity phase: this rank's mesh rows, the per-network path characters
    (paths.py) and bandwidths, and the addresses it could not listen on."""
    rows: List[MeshRow] = field(default_factory=list)
    paths: Dict[str, str] = field(default_factory=dict)  # network -> one character per peer rank
    path_mbps: Dict[str, Dict[str, float]] = field(default_factory=dict)
    path_mbps_low: Dict[str, Dict[str, float]] = field(default_factory=dict)
    listen_errors: Optional[Any] = None


@dataclass
class ChoiceResult:
    """The interface choice for this rank, and NCCL's own answer with that interface."""
    chosen: Optional[Chosen] = None
    network: Optional[str] = None
    rejected: List[Dict[str, str]] = field(default_factory=list)
    nccl_default: Optional[str] = None
    measured: Dict[str, float] = field(default_factory=dict)  # ifname -> Mb/s measured on its network
    nccl_chosen: Optional[NcclAnswer] = None  # NCCL's answer with our ifname

    @property
    def ifname(self) -> Optional[str]:
        return (self.chosen or {}).get("ifname")


@dataclass
class CollectiveResult:
    """The backend, this process's world all-reduce and its intra-node all-reduce."""
    backend: Optional[str] = None
    allreduce: Optional[AllReduce] = None
    intra: Optional[AllReduce] = None


@dataclass
class LocalRanksResult:
    """Local ranks 1..P-1 (several processes per node): their processes
    (spawn.LocalRanks), the first own failure of one, whether that was the first failure
    peers were told of, and their collected outcomes."""
    procs: Optional[Any] = None
    failure: Optional[Failure] = None
    published: bool = False
    final: Optional[List[LocalEntry]] = None


@dataclass
class Kept:
    """Everything one run keeps, and all a report is built from (run/probereport.py): the
    config, the deadlines (``tracker``), the background torch import, the inventory
    (``inv``, phase 1), the state shared with the rendezvous, and each phase's result."""
    cfg: Config
    tracker: Tracker
    torch: TorchLoader
    state: SharedState
    inv: Inventory = field(default_factory=lambda: Inventory(interfaces=[]))
    outcome: Outcome = field(default_factory=Outcome)
    mesh: MeshResult = field(default_factory=MeshResult)
    choice: ChoiceResult = field(default_factory=ChoiceResult)
    coll: CollectiveResult = field(default_factory=CollectiveResult)
    ranks: LocalRanksResult = field(default_factory=LocalRanksResult)
