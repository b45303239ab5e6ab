"""A training rank's progress record: what the recorder writes and the operator reads.

The recorder (in every training process) rewrites one small JSON file per rank about once a
second, ``<DISTTRAIN_PROGRESS_DIR>/rank-<global rank>.json``; a native sidecar's readiness
probe reads the files of its pod and prints a one-line summary that the kubelet carries to
the operator as the probe's Event. Standard library only (the probe's rule).

Times are Unix seconds (float, the writer's clock); ``seq`` counts the collectives the rank
issued on the default process group (``ProcessGroup._get_sequence_number_for_group()``).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

PROGRESS_VERSION = 1  # the record's ``v``; any other is refused by :func:`parse`
PROGRESS_DIR_ENV = "DISTTRAIN_PROGRESS_DIR"  # where the recorder writes, set on training pods
PROGRESS_INTERVAL_S = 1.0  # how often the recorder rewrites its file (seconds)
MAX_FRAMES = 8  # frames kept of the main thread's stack, innermost first
MAX_RECORD_BYTES = 4096  # a record larger than this is refused (bytes)
MAX_TEXT = 200  # characters kept of a file name, function name or op name

# Where the main thread is, as the recorder judges it.
IN_COLLECTIVE = "collective"  # waits for a collective (Flight Recorder or a torch frame says so)
IN_PYTHON = "python"  # runs the user's code between collectives
NOT_STARTED = "not-started"  # the default process group does not exist yet
WHERES = (IN_COLLECTIVE, IN_PYTHON, NOT_STARTED)

# A collective's state, as torch's Flight Recorder names it.
COLLECTIVE_STATES = ("scheduled", "started", "completed")


def _clip(value: Any) -> str:
    return str(value)[:MAX_TEXT]


@dataclass(frozen=True)
class Frame:
    """One stack frame: the file (as Python names it), the 1-based line, the function."""
    file: str
    line: int
    func: str


@dataclass(frozen=True)
class Collective:
    """A collective the rank has issued and not seen complete: its op (``all_reduce``), its
    sequence number on the default group, its Flight Recorder state, and since when (Unix s)."""
    op: str
    seq: int
    state: str
    since: float


@dataclass(frozen=True)
class RankProgress:
    """One rank's progress at ``written_at``.

    ``seq`` is None before ``init_process_group``; ``seq_advanced_at`` is when ``seq`` last
    changed (or the recorder started); ``waiting`` is the oldest collective not completed
    (None when none or when the installed torch cannot tell); ``stack`` the main thread's
    innermost frames (at most :data:`MAX_FRAMES`, innermost first)."""
    rank: int
    local_rank: int
    world_size: int
    pid: int
    written_at: float
    where: str
    seq: Optional[int] = None
    seq_advanced_at: float = 0.0
    waiting: Optional[Collective] = None
    stack: tuple[Frame, ...] = field(default_factory=tuple)

    def dump(self) -> str:
        """The record as one line of JSON (the file's content)."""
        d = asdict(self)
        d["v"] = PROGRESS_VERSION
        d["stack"] = [asdict(f) for f in self.stack]
        return json.dumps(d, separators=(",", ":"), sort_keys=True)


def _int(d: dict, key: str, default: Optional[int] = None) -> Optional[int]:
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key} must be an integer, not {v!r:.40}")
    return v


def _float(d: dict, key: str, default: float = 0.0) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{key} must be a finite number, not {v!r:.40}")
    return float(v)


def parse(text: str) -> RankProgress:
    """Parse one record (the file's content).

    Raises:
        ValueError: not JSON, another version, over :data:`MAX_RECORD_BYTES`, or a field of
            the wrong type; the message names the field.
    """
    if len(text.encode("utf-8", "replace")) > MAX_RECORD_BYTES:
        raise ValueError(f"record over {MAX_RECORD_BYTES} bytes")
    try:
        d = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("v") != PROGRESS_VERSION:
        raise ValueError(f"version {d.get('v')!r:.20} is not {PROGRESS_VERSION}")
    where = d.get("where")
    if where not in WHERES:
        raise ValueError(f"where must be one of {', '.join(WHERES)}")
    waiting = d.get("waiting")
    coll = None
    if waiting is not None:
        if not isinstance(waiting, dict) or waiting.get("state") not in COLLECTIVE_STATES:
            raise ValueError("waiting must be a collective with a known state")
        coll = Collective(op=_clip(waiting.get("op", "")), seq=_int(waiting, "seq", 0) or 0,
                          state=waiting["state"], since=_float(waiting, "since"))
    stack = d.get("stack") or []
    if not isinstance(stack, list) or not all(isinstance(f, dict) for f in stack):
        raise ValueError("stack must be a list of frames")
    frames = tuple(Frame(file=_clip(f.get("file", "")), line=_int(f, "line", 0) or 0,
                         func=_clip(f.get("func", ""))) for f in stack[:MAX_FRAMES])
    return RankProgress(
        rank=_required_int(d, "rank"),
        local_rank=_int(d, "local_rank", 0) or 0, world_size=_int(d, "world_size", 0) or 0,
        pid=_int(d, "pid", 0) or 0, written_at=_float(d, "written_at"), where=where,
        seq=_int(d, "seq"), seq_advanced_at=_float(d, "seq_advanced_at"), waiting=coll,
        stack=frames)


def _required_int(d: dict, key: str) -> int:
    v = _int(d, key)
    if v is None:
        raise ValueError(f"{key} is missing")
    return v


def file_name(rank: int) -> str:
    """The record's file name in :data:`PROGRESS_DIR_ENV` for global ``rank``."""
    return f"rank-{rank}.json"
