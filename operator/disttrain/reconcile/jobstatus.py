"""Typed access to the job's status while a step builds it (pure).

The status is the operator's memory between steps and what ``kubectl`` shows. A step works
on a plain dict (:attr:`disttrain.reconcile.step.Plan.status`, a repaired copy of what the
API returned: :mod:`.status_repair`) because the dict is exactly what is written back: an
absent field, ``None`` and ``0`` are three different writes, and whether the status must be
written at all (``Plan.status_changed``) is decided by comparing dicts. Rebuilding it from
the pydantic models (:mod:`disttrain.api.status`) would fill in their defaults (``restarts:
0``, ``probe.attempt: 0``, empty lists) and write fields no step decided.

So the policies read and write the status through :class:`JobStatus` (and its
:class:`ProbeRecord` and :class:`RendezvousRecord`): typed properties over that dict, one
per field a policy uses, whose camelCase keys are taken from the pydantic models' aliases
when this module is imported (a field renamed in the models fails the import, not a job).
Reads never raise on a hand-edited value the repair kept (a non-string
``nameConflictSince``, a probe record that is not a dict): they return ``None`` or the
documented default. No policy indexes the status by a string (a unit test checks).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel

from disttrain.api.status import (
    DistTrainingJobStatus,
    ExcludedNode,
    NodeResult,
    ProbeStatus,
    ProgressStatus,
    RendezvousStatus,
)


def _alias(model: type[BaseModel], name: str) -> str:
    """The wire (camelCase) name of ``model``'s field ``name``. Raises KeyError when the model
    has no such field."""
    f = model.model_fields[name]
    return f.alias or name


_CONDITIONS = _alias(DistTrainingJobStatus, "conditions")
_RESTARTS = _alias(DistTrainingJobStatus, "restarts")
_SUSPENSIONS = _alias(DistTrainingJobStatus, "suspensions")
_START_TIME = _alias(DistTrainingJobStatus, "start_time")
_COMPLETION_TIME = _alias(DistTrainingJobStatus, "completion_time")
_NAME_CONFLICT_SINCE = _alias(DistTrainingJobStatus, "name_conflict_since")
_EXCLUDED = _alias(DistTrainingJobStatus, "excluded_nodes")
_EXCLUDED_NODE = _alias(ExcludedNode, "node")
MOST_EXCLUDED = 16  # status.excludedNodes entries kept (the oldest go first)
_NODES = _alias(DistTrainingJobStatus, "nodes")
_PROBE = _alias(DistTrainingJobStatus, "probe")
_RENDEZVOUS = _alias(DistTrainingJobStatus, "rendezvous")
_OBSERVED_GENERATION = _alias(DistTrainingJobStatus, "observed_generation")
_PHASE = _alias(DistTrainingJobStatus, "phase")
_PROGRESS = _alias(DistTrainingJobStatus, "progress")
_RANK = _alias(NodeResult, "rank")
_ATTEMPT = _alias(ProbeStatus, "attempt")
_PROBE_START = _alias(ProbeStatus, "start_time")
_PROBE_COMPLETION = _alias(ProbeStatus, "completion_time")
_MASTER_ADDR = _alias(RendezvousStatus, "master_addr")
_MASTER_PORT = _alias(RendezvousStatus, "master_port")
_SOCKET_IFNAME = _alias(RendezvousStatus, "socket_ifname")

# The keys this module reads and writes, by model (tests/unit/operator/reconcile/test_jobstatus.py
# checks each against the CRD's schema as well).
KEYS: dict[str, tuple[str, ...]] = {
    "status": (_CONDITIONS, _RESTARTS, _SUSPENSIONS, _START_TIME, _COMPLETION_TIME,
               _NAME_CONFLICT_SINCE, _NODES, _PROBE, _RENDEZVOUS, _OBSERVED_GENERATION, _PHASE, _PROGRESS,
               _EXCLUDED),
    "status.nodes[]": (_RANK,),
    "status.probe": (_ATTEMPT, _PROBE_START, _PROBE_COMPLETION),
    "status.rendezvous": (_MASTER_ADDR, _MASTER_PORT, _SOCKET_IFNAME),
    "status.progress": tuple(_alias(ProgressStatus, k) for k in ProgressStatus.model_fields),
}

_UNSET: Any = object()


def _count(value: Any) -> int:
    """A counter as the repaired status holds it (int >= 0, or absent: 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


class ProbeRecord:
    """``status.probe``, the last probe run (:class:`disttrain.api.status.ProbeStatus`),
    over the dict it is stored in. A record that is not a dict reads as empty."""

    def __init__(self, raw: Any) -> None:
        self.raw: dict[str, Any] = raw if isinstance(raw, dict) else {}

    @property
    def attempt(self) -> Optional[int]:
        """Probe runs started (1-based), or None when none is recorded."""
        v = self.raw.get(_ATTEMPT)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @attempt.setter
    def attempt(self, n: int) -> None:
        self.raw[_ATTEMPT] = n

    @property
    def start_time(self) -> Optional[str]:
        """RFC 3339: the attempt's first probe pod was created (None: not yet)."""
        return _text(self.raw.get(_PROBE_START))

    @start_time.setter
    def start_time(self, ts: str) -> None:
        self.raw[_PROBE_START] = ts

    def complete(self, ts: str) -> None:
        """Record the verdict's time (RFC 3339) unless one is recorded."""
        self.raw.setdefault(_PROBE_COMPLETION, ts)


class RendezvousRecord:
    """``status.rendezvous``, the rendezvous training uses
    (:class:`disttrain.api.status.RendezvousStatus`)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    @property
    def master_addr(self) -> Optional[str]:
        """MASTER_ADDR, or None when none (or an empty one) is recorded."""
        return _text(self.raw.get(_MASTER_ADDR)) or None

    def record(self, master_addr: Optional[str], master_port: int, socket_ifname: Optional[str] = _UNSET) -> None:
        """Write MASTER_ADDR and MASTER_PORT, and NCCL_SOCKET_IFNAME when given (None is
        written as null: no interface set); a field not given keeps its value."""
        self.raw[_MASTER_ADDR] = master_addr
        self.raw[_MASTER_PORT] = master_port
        if socket_ifname is not _UNSET:
            self.raw[_SOCKET_IFNAME] = socket_ifname


class JobStatus:
    """The job's status (:class:`disttrain.api.status.DistTrainingJobStatus`) over the dict a
    step writes (``raw``, changed in place)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    @property
    def conditions(self) -> list[dict[str, Any]]:
        """metav1.Conditions (created empty when absent)."""
        return self.raw.setdefault(_CONDITIONS, [])

    @property
    def restarts(self) -> int:
        """Gang restarts so far (0 when absent)."""
        return _count(self.raw.get(_RESTARTS))

    @restarts.setter
    def restarts(self, n: int) -> None:
        self.raw[_RESTARTS] = n

    @property
    def suspensions(self) -> int:
        """Times the job was stopped without failing (0 when absent)."""
        return _count(self.raw.get(_SUSPENSIONS))

    @suspensions.setter
    def suspensions(self, n: int) -> None:
        self.raw[_SUSPENSIONS] = n

    @property
    def start_time(self) -> Optional[str]:
        """RFC 3339: the first training pod was created (None: not yet)."""
        return _text(self.raw.get(_START_TIME))

    @start_time.setter
    def start_time(self, ts: Optional[str]) -> None:
        """Set it, or (None) remove it: a resumed job starts its training time again."""
        if ts is None:
            self.raw.pop(_START_TIME, None)
        else:
            self.raw[_START_TIME] = ts

    @property
    def completion_time(self) -> Optional[str]:
        """RFC 3339: the job finished (None: not yet)."""
        return _text(self.raw.get(_COMPLETION_TIME))

    def complete(self, ts: str) -> None:
        """Record when the job finished (RFC 3339) unless it is recorded."""
        self.raw.setdefault(_COMPLETION_TIME, ts)

    @property
    def name_conflict_since(self) -> Any:
        """Since when a name the job needs is held by another pod: the value as stored,
        which a hand edit may have made anything (the reader checks it); None when absent."""
        return self.raw.get(_NAME_CONFLICT_SINCE)

    @name_conflict_since.setter
    def name_conflict_since(self, ts: Optional[str]) -> None:
        if ts is None:
            self.raw.pop(_NAME_CONFLICT_SINCE, None)
        else:
            self.raw[_NAME_CONFLICT_SINCE] = ts

    @property
    def excluded_nodes(self) -> list[str]:
        """The nodes ``status.excludedNodes`` keeps the job's pods off, in order, at most
        :data:`MOST_EXCLUDED`; entries a hand edit garbled (not a mapping, no string node)
        are skipped. Never raises."""
        raw = self.raw.get(_EXCLUDED)
        names = [e.get(_EXCLUDED_NODE) for e in (raw if isinstance(raw, list) else []) if isinstance(e, dict)]
        return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))[-MOST_EXCLUDED:]

    def exclude(self, node: str, reason: str) -> bool:
        """Add ``node`` to ``status.excludedNodes`` with the stall ``reason`` and the gang
        restart about to begin (restarts + 1); False when it is there already. Keeps the
        newest :data:`MOST_EXCLUDED` entries; drops garbled ones."""
        if node in self.excluded_nodes:
            return False
        raw = self.raw.get(_EXCLUDED)
        kept = [e for e in (raw if isinstance(raw, list) else [])
                if isinstance(e, dict) and isinstance(e.get(_EXCLUDED_NODE), str) and e.get(_EXCLUDED_NODE)]
        kept.append(ExcludedNode(node=node, reason=reason, restart=self.restarts + 1).model_dump(by_alias=True))
        self.raw[_EXCLUDED] = kept[-MOST_EXCLUDED:]
        return True

    @property
    def waiting_for_name(self) -> bool:
        """A name conflict is recorded (whatever its value)."""
        return _NAME_CONFLICT_SINCE in self.raw

    @property
    def nodes(self) -> dict[int, dict[str, Any]]:
        """What the probe validated, by node rank (entries without an integer rank skipped;
        of two entries of one rank, the later wins)."""
        out: dict[int, dict[str, Any]] = {}
        for x in self.raw.get(_NODES) or []:
            if isinstance(x, dict) and isinstance(x.get(_RANK), int):
                out[x[_RANK]] = x
        return out

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Replace the per-node results (camelCase :class:`~disttrain.api.status.NodeResult` dicts)."""
        self.raw[_NODES] = nodes

    @property
    def probe(self) -> ProbeRecord:
        """The last probe run (created empty when absent; a value that is not a dict reads
        as empty and is left as it is)."""
        return ProbeRecord(self.raw.setdefault(_PROBE, {}))

    def has_probe_record(self) -> bool:
        """``status.probe`` is a dict (the repair makes it one)."""
        return isinstance(self.raw.get(_PROBE), dict)

    def new_probe_attempt(self, attempt: int) -> None:
        """Start probe attempt ``attempt``: the last run's record is replaced by one that
        holds only the attempt number."""
        self.raw[_PROBE] = {_ATTEMPT: attempt}

    def set_probe_summary(self, **fields: Any) -> None:
        """Replace ``status.probe`` with a finished run's summary: ``fields`` are
        :class:`~disttrain.api.status.ProbeStatus` fields by their Python names
        (``attempt``, ``start_time``, ``duration_seconds``, ``bus_bandwidth_gbps``, ...);
        None values are left out. Raises KeyError for a name the model does not have."""
        self.raw[_PROBE] = {_alias(ProbeStatus, k): v for k, v in fields.items() if v is not None}

    def set_progress(self, **fields: Any) -> None:
        """Replace ``status.progress`` (the stall verdict:
        :meth:`disttrain.diagnosis.stallfacts.StallVerdict.status_fields`): ``fields`` are
        :class:`~disttrain.api.status.ProgressStatus` fields by their Python names; None
        values are left out. Raises KeyError for a name the model does not have."""
        self.raw[_PROGRESS] = {_alias(ProgressStatus, k): v for k, v in fields.items() if v is not None}

    @property
    def rendezvous(self) -> RendezvousRecord:
        """The rendezvous training uses (created empty when absent)."""
        return RendezvousRecord(self.raw.setdefault(_RENDEZVOUS, {}))

    @property
    def recorded_master(self) -> Optional[str]:
        """MASTER_ADDR recorded in the status, without creating the record."""
        rdzv = self.raw.get(_RENDEZVOUS)
        return RendezvousRecord(rdzv).master_addr if isinstance(rdzv, dict) else None

    def observe(self, generation: Optional[int]) -> None:
        """Record the spec's ``metadata.generation`` this step acted on."""
        self.raw[_OBSERVED_GENERATION] = generation

    def set_phase(self, phase: str) -> None:
        """The phase column (Pending, Probing, Validated, Running, Succeeded, Failed)."""
        self.raw[_PHASE] = phase
