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
import re
from dataclasses import asdict, dataclass, field
from typing import Any, List, Optional, Sequence, Union
from urllib.parse import quote, unquote

from . import stragglers
from .stragglers import StragglerView

PROGRESS_VERSION = 1  # the record's ``v``; any other is refused by :func:`parse`
PROGRESS_DIR_ENV = "DISTTRAIN_PROGRESS_DIR"  # where the recorder writes, set on training pods
PROGRESS_INTERVAL_S = 1.0  # how often the recorder rewrites its file (seconds)
MAX_FRAMES = 8  # frames kept of the main thread's stack, innermost first
MAX_RECORD_BYTES = 4096  # a record larger than this is refused (bytes)
MAX_TEXT = 200  # characters kept of a file name, function name or op name
STALE_AFTER_S = 5 * PROGRESS_INTERVAL_S  # a record not rewritten for this long: the writer is frozen or gone
DEFAULT_STALL_AFTER_S = 60.0  # ``ready``'s default: a rank whose seq has not advanced for longer is stalled
MAX_SUMMARY_BYTES = 900  # the readiness probe's one line (the kubelet carries it in an Event)
SUMMARY_PREFIX = "progress:"

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
    innermost frames (at most :data:`MAX_FRAMES`, innermost first); ``share`` the share
    (0-1) of the last ``stragglers.SHARE_WINDOW_S`` in which the main thread waited in a
    collective (None until measured); ``straggler`` set while the job's wait shares single
    this rank out (``stragglers.straggler_view``)."""
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
    share: Optional[float] = None
    straggler: Optional[StragglerView] = None

    def dump(self) -> str:
        """The record as one line of JSON (the file's content)."""
        d = asdict(self)
        d["v"] = PROGRESS_VERSION
        d["stack"] = [asdict(f) for f in self.stack]
        if self.straggler is None:
            d.pop("straggler")
        if self.share is None:
            d.pop("share")
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
        stack=frames, share=stragglers.share_of(d.get("share"), "share"),
        straggler=stragglers.view_of(d.get("straggler")))


def _required_int(d: dict, key: str) -> int:
    v = _int(d, key)
    if v is None:
        raise ValueError(f"{key} is missing")
    return v


def file_name(rank: int) -> str:
    """The record's file name in :data:`PROGRESS_DIR_ENV` for global ``rank``."""
    return f"rank-{rank}.json"


# ---------------------------------------------------------------------------------------
# The readiness probe's one-line summary of a pod's records (``disttrain_probe.progress.ready``
# prints it; the operator reads it back from the Event "Readiness probe failed: <line>").
#
#   progress: r0 collective seq=1001 idle=12s op=all_reduce at=train.py:19(main); r1 python
#   seq=1000 idle=12s at=train.py:30(step) stale; unreadable file=rank-3.json error=not%20JSON
#
# Segments are joined by "; ", fields by " "; values are percent-quoted (never a space, ";"
# or "="), so any file or function name survives. ``seq=-`` before init_process_group. When
# the line would pass MAX_SUMMARY_BYTES, ``at`` is dropped (collective ranks first), then
# ``op``, then trailing segments, replaced by "+N more".

UNREADABLE = "unreadable"  # a record file that could not be read or parsed
_SAFE = "/:._()-,<>@+[]"
_RANK = re.compile(r"^r([0-9]{1,9})$")
_IDLE = re.compile(r"^(\d{1,12})s$")
_MORE = re.compile(r"^\+(\d{1,9}) more$")


def _q(text: str) -> str:
    return quote(text, _SAFE, errors="replace")


@dataclass(frozen=True)
class Unreadable:
    """A record file of the directory that could not be read or parsed: its name, why."""
    file: str
    error: str


@dataclass(frozen=True)
class RankSummary:
    """One segment of the summary: a rank's state (``rank`` None and ``where`` UNREADABLE
    for a file that could not be read, with ``file`` and ``error``). ``idle_s`` is whole
    seconds since ``seq`` advanced; ``op`` the collective waited in ("" when none); ``at``
    the innermost user frame ``file:line(func)`` ("" when unknown); ``stale``: the record
    was not rewritten for :data:`STALE_AFTER_S` (the process is frozen or gone)."""
    rank: Optional[int]
    where: str
    seq: Optional[int] = None
    idle_s: int = 0
    op: str = ""
    at: str = ""
    stale: bool = False
    file: str = ""
    error: str = ""


def _library(path: str) -> bool:
    p = path.replace("\\", "/")
    return (p.startswith("<") or "/torch/" in p
            or (re.search(r"/lib/python3\.\d+/", p) is not None and "-packages/" not in p))


def user_frame(stack: Sequence[Frame]) -> str:
    """The innermost frame outside torch and the standard library, as ``dir/file.py:line(func)``
    (at most two path components); the innermost frame when all are library; "" for none."""
    if not stack:
        return ""
    f = next((f for f in stack if not _library(f.file)), stack[0])
    short = "/".join(f.file.replace("\\", "/").split("/")[-2:])
    return f"{short}:{f.line}({f.func})"


def _fit(text: str, limit: int) -> str:
    """``text`` (lone surrogates as "?") cut to whole characters whose quoted form fits
    ``limit`` bytes, so a clipped value quotes and parses back unchanged."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    size = 0
    for i, ch in enumerate(text):
        size += len(_q(ch))
        if size > limit:
            return text[:i]
    return text


def summary_of(record: Union[RankProgress, Unreadable], now: float) -> RankSummary:
    """One record (or unreadable file) as a summary segment, ``now`` in Unix seconds."""
    if isinstance(record, Unreadable):
        return RankSummary(rank=None, where=UNREADABLE, file=_fit(record.file, 100),
                           error=_fit(record.error, 120))
    return RankSummary(rank=record.rank, where=record.where, seq=record.seq,
                       idle_s=max(0, int(now - record.seq_advanced_at)),
                       op=_fit(record.waiting.op, 100) if record.waiting else "",
                       at=_fit(user_frame(record.stack), 160),
                       stale=now - record.written_at > STALE_AFTER_S)


def _segment(s: RankSummary, at: bool, op: bool) -> str:
    if s.where == UNREADABLE:
        return f"{UNREADABLE} file={_q(s.file)} error={_q(s.error)}"
    parts = [f"r{s.rank}", s.where, f"seq={'-' if s.seq is None else s.seq}", f"idle={s.idle_s}s"]
    if s.op and op:
        parts.append(f"op={_q(s.op)}")
    if s.at and at:
        parts.append(f"at={_q(s.at)}")
    if s.stale:
        parts.append("stale")
    return " ".join(parts)


def format_summary(summaries: Sequence[RankSummary], tcp: Sequence["TcpPeer"] = (),
                   lead: Sequence["StragglerWord"] = ()) -> str:
    """The one line for ``summaries``, at most :data:`MAX_SUMMARY_BYTES` bytes (see above),
    the straggler segments of ``lead`` and those of ``tcp`` (at most :data:`MAX_TCP_PEERS`
    of each, most retransmitted first) before the ranks' and kept whole: the ranks' frames
    and ops give way first, then trailing ranks."""
    head = [f"{STRAGGLER} r{w.rank} {stragglers.fields(w.view)}" for w in lead[:MAX_TCP_PEERS]]
    head += [_tcp_segment(p) for p in _tcp_kept(tcp)]
    if not summaries and not head:
        return f"{SUMMARY_PREFIX} no records"
    stages = ((lambda s: True, True), (lambda s: s.where != IN_COLLECTIVE, True),
              (lambda s: False, True), (lambda s: False, False))
    for at_of, op in stages:
        segs = [_segment(s, at_of(s), op) for s in summaries]
        line = f"{SUMMARY_PREFIX} " + "; ".join(head + segs)
        if len(line.encode()) <= MAX_SUMMARY_BYTES:
            return line
    for keep in range(len(segs) - 1, -1, -1):
        line = f"{SUMMARY_PREFIX} " + "; ".join(head + segs[:keep] + [f"+{len(segs) - keep} more"])
        if len(line.encode()) <= MAX_SUMMARY_BYTES:
            return line
    return f"{SUMMARY_PREFIX} " + "; ".join(head + [f"+{len(segs)} more"])  # not reached: segments are short


def summarize(records: Sequence[Union[RankProgress, Unreadable]], now: float,
              tcp: Sequence["TcpPeer"] = (), lead: Sequence["StragglerWord"] = ()) -> str:
    """The readiness probe's line for a pod's ``records`` at ``now`` (Unix seconds), ranks in
    order and unreadable files last, after the straggler segments of ``lead`` and the ``tcp``
    segments (:func:`format_summary`)."""
    ordered = sorted(records, key=lambda r: (1, 0, r.file) if isinstance(r, Unreadable) else (0, r.rank, ""))
    return format_summary([summary_of(r, now) for r in ordered], tcp, lead)


# A pod's TCP connections that hold unacknowledged data after repeated retransmission
# timeouts (the kernel's own counters, read from /proc/net/tcp by the sidecar while its ranks
# do not advance): one segment per peer address, before the ranks' segments and kept whole
# when the line is cut,
#
#   tcp peer=10.101.0.13 sockets=2 unacked=1448 retrans=6
#
# ``unacked`` bytes summed over the sockets, ``retrans`` the most consecutive timeouts of any.
TCP = "tcp"
MAX_TCP_PEERS = 4  # peers kept in one line, most retransmitted first
_PEER = re.compile(r"^[0-9A-Fa-f:.]{2,45}$")


@dataclass(frozen=True)
class TcpPeer:
    """The pod's TCP connections to one ``peer`` address (IPv4 or IPv6 text) that hold
    ``unacked`` bytes not acknowledged after ``retrans`` (>= 1) retransmission timeouts in a
    row: packets to or from the peer are lost. ``sockets``: how many such connections."""
    peer: str
    sockets: int
    unacked: int
    retrans: int


def _tcp_segment(t: TcpPeer) -> str:
    return f"{TCP} peer={t.peer} sockets={t.sockets} unacked={t.unacked} retrans={t.retrans}"


def _parse_tcp(seg: str) -> TcpPeer:
    f = _fields(seg.split(" ")[1:], ("peer", "sockets", "unacked", "retrans"))
    nums = [f.get(k, "") for k in ("sockets", "unacked", "retrans")]
    if not _PEER.match(f.get("peer", "")) or not all(n.isdigit() and n.isascii() and len(n) <= 20 for n in nums):
        raise ValueError(f"not a tcp segment: {seg[:40]!r}")
    return TcpPeer(f["peer"], int(nums[0]), int(nums[1]), int(nums[2]))


def _tcp_kept(peers: Sequence[TcpPeer]) -> List[TcpPeer]:
    """The peers a line carries: well-formed addresses, most retransmitted first, at most
    :data:`MAX_TCP_PEERS`."""
    ok = [p for p in peers if _PEER.match(p.peer)]
    return sorted(ok, key=lambda p: (-p.retrans, -p.unacked, p.peer))[:MAX_TCP_PEERS]


def _fields(tokens: List[str], allowed: Sequence[str]) -> dict:
    out = {}
    for t in tokens:
        key, eq, value = t.partition("=")
        if not eq or key not in allowed or key in out:
            raise ValueError(f"unexpected field {t[:40]!r}")
        out[key] = unquote(value)
    return out


def _parse_segment(seg: str) -> RankSummary:
    tokens = seg.split(" ")
    if tokens[0] == UNREADABLE:
        f = _fields(tokens[1:], ("file", "error"))
        if set(f) != {"file", "error"}:
            raise ValueError("an unreadable segment needs file and error")
        return RankSummary(rank=None, where=UNREADABLE, file=f["file"], error=f["error"])
    m = _RANK.match(tokens[0])
    if not m or len(tokens) < 4 or tokens[1] not in WHERES:
        raise ValueError(f"not a rank segment: {seg[:40]!r}")
    stale = tokens[-1] == "stale"
    f = _fields(tokens[2:len(tokens) - stale], ("seq", "idle", "op", "at"))
    seq, idle = f.get("seq", ""), _IDLE.match(f.get("idle", ""))
    if not (seq == "-" or (seq.isdigit() and seq.isascii())) or not idle:
        raise ValueError(f"seq and idle are required: {seg[:40]!r}")
    return RankSummary(rank=int(m.group(1)), where=tokens[1], seq=None if seq == "-" else int(seq),
                       idle_s=int(idle.group(1)), op=f.get("op", ""), at=f.get("at", ""), stale=stale)


def parse_summary(line: str) -> List[RankSummary]:
    """The segments of a line :func:`format_summary` wrote ("+N more" is dropped).

    Raises:
        ValueError: any other text (no prefix, an unknown field or state, over the cap).
    """
    if len(line.encode("utf-8", "replace")) > MAX_SUMMARY_BYTES:
        raise ValueError(f"summary over {MAX_SUMMARY_BYTES} bytes")
    if not line.startswith(SUMMARY_PREFIX + " "):
        raise ValueError(f"a summary starts with {SUMMARY_PREFIX!r}")
    body = line[len(SUMMARY_PREFIX) + 1:]
    if body == "no records":
        return []
    segs = body.split("; ")
    if _MORE.match(segs[-1]):
        segs = segs[:-1]
    return [_parse_segment(s) for s in segs if not s.startswith((TCP + " ", STRAGGLER + " "))]


def parse_tcp(line: str) -> List[TcpPeer]:
    """The ``tcp`` segments of a summary line (:func:`format_summary`); [] for none.

    Raises:
        ValueError: what :func:`parse_summary` refuses, or a malformed tcp segment.
    """
    parse_summary(line)
    body = line[len(SUMMARY_PREFIX) + 1:]
    return [_parse_tcp(s) for s in body.split("; ") if s.startswith(TCP + " ")]


# ---------------------------------------------------------------------------------------
# A straggler in the summary line (the view: ``contract.stragglers``), a segment kept whole
# before the ranks':
#
#   straggler r3 share=0.025 median=0.875 counted=8 below=1
STRAGGLER = "straggler"


@dataclass(frozen=True)
class StragglerWord:
    """A straggler segment of a summary line: the rank and its recorder's view."""
    rank: int
    view: StragglerView


def straggler_words(records: Sequence[Union[RankProgress, Unreadable]], now: float) -> List[StragglerWord]:
    """The fresh records' straggler views, by rank, at most :data:`MAX_TCP_PEERS`."""
    words = [StragglerWord(r.rank, r.straggler) for r in records
             if isinstance(r, RankProgress) and r.straggler is not None and now - r.written_at <= STALE_AFTER_S]
    return sorted(words, key=lambda w: w.rank)[:MAX_TCP_PEERS]


def parse_straggler(line: str) -> List[StragglerWord]:
    """The ``straggler`` segments of a summary line; [] for none.

    Raises:
        ValueError: what :func:`parse_summary` refuses, or a malformed straggler segment.
    """
    parse_summary(line)
    out = []
    for seg in line[len(SUMMARY_PREFIX) + 1:].split("; "):
        tokens = seg.split(" ")
        if tokens[0] != STRAGGLER:
            continue
        m = _RANK.match(tokens[1]) if len(tokens) > 1 else None
        if not m:
            raise ValueError(f"not a straggler segment: {seg[:40]!r}")
        out.append(StragglerWord(int(m.group(1)), stragglers.parse_fields(tokens[2:])))
    return out
