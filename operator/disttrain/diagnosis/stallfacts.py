"""The stall verdict's facts (pure): what the operator observed of each rank
(:class:`RankObservation`), link evidence (:class:`LinkSilence`), the observations made
consistent (:class:`Facts`), and the verdict (:class:`StallVerdict`) the rules of
:mod:`disttrain.diagnosis.stall` return.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Optional, Sequence, Union

from disttrain.api import constants
from disttrain.api.status import RankProgressStatus
from disttrain.diagnosis import messages
from disttrain.diagnosis import stalltext as T
from disttrain.diagnosis.checkconditions import Verdict
from disttrain_probe.contract import progress, stragglers
from disttrain_probe.contract import vocabulary as V

QUIET_S = 30.0  # a wait in one collective this long is no longer a step's ordinary wait (s)
STALE_S = 30.0  # a record not heard for this long is stale: its rank stopped answering (s)
MAX_WORLD = 1 << 21  # world sizes beyond this are taken as this (numNodes 4096 x 256 procs)
MAX_AGE_S = 10 * 365 * 86400.0  # ages are clipped to ten years
# A rank known to advance without its record's detail: its pod's progress sidecar is Ready
# (every rank of the pod advanced within the sidecar's window); never a culprit.
ADVANCING = "advancing"
WHERES = progress.WHERES + (ADVANCING,)


@dataclass(frozen=True)
class RankObservation:
    """What the operator knows of one rank.

    ``where``: ``progress.IN_COLLECTIVE``, ``IN_PYTHON``, ``NOT_STARTED``, or
    :data:`ADVANCING` for a rank of a pod whose progress sidecar is Ready (give it the
    seconds since the sidecar last passed as ``seq_age_s`` and ``heard_age_s``); anything
    else: unknown. ``seq``: collectives issued on the default group. ``seq_age_s``: seconds from
    the rank's last ``seq`` change to ``now``. ``waiting_op``/``waiting_seq``: the oldest
    collective not completed; ``waiting_age_s``: seconds since it was issued (None: taken
    as ``seq_age_s``). ``frame``: the innermost frame of the user's code, e.g.
    ``train.py:88 (load_batch)`` (:func:`observation` builds one from a record).
    ``heard_age_s``: seconds since the record was written or
    the operator last heard of it (None: never). ``wait_share``: the share (0-1) of the
    shell's recent samples in which the rank waited in a collective (None: not measured).
    ``straggler``: the rank's recorder's view of the job's share histogram when it singled
    this rank out (``stragglers.straggler_view``; its ``share`` stands for ``wait_share``).
    Ages below 0 (clock skew) count as 0; values of the wrong type as unknown."""

    rank: int
    node: str
    where: str
    seq: Optional[int] = None
    seq_age_s: Optional[float] = None
    waiting_op: Optional[str] = None
    waiting_seq: Optional[int] = None
    frame: Optional[str] = None
    heard_age_s: Optional[float] = None
    waiting_age_s: Optional[float] = None
    wait_share: Optional[float] = None
    straggler: Optional[stragglers.StragglerView] = None


# Frames of these files are torch's or Python's own: the frame a message names is the
# innermost one outside them (the user's code), else the innermost.
_LIBRARY_PARTS = ("/torch/", "/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ")


def user_frame(stack: Sequence[progress.Frame]) -> Optional[str]:
    """``train.py:88 (load_batch)``: the innermost frame of ``stack`` (innermost first)
    outside torch and the standard library, else the innermost; None for no frame."""
    if not stack:
        return None
    mine = [fr for fr in stack if not any(p in fr.file for p in _LIBRARY_PARTS)]
    fr = (mine or list(stack))[0]
    return f"{fr.file.rsplit('/', 1)[-1]}:{fr.line} ({fr.func})"


def observation(rec: progress.RankProgress, node: str, now: float,
                heard_at: Optional[float] = None) -> RankObservation:
    """The :class:`RankObservation` of a parsed record of a rank on ``node``: its ages
    measured to ``now`` (Unix s, the operator's clock) from the record's times (the
    writer's clock: a skew shows as an age off by as much, negative ages count as 0), and
    ``heard_age_s`` from ``heard_at`` (when the operator last heard of it) or else the
    record's ``written_at``. A time of 0 (not recorded) gives an unknown age."""
    def age(t: float) -> Optional[float]:
        return now - t if t > 0 else None

    w = rec.waiting
    return RankObservation(
        rank=rec.rank, node=node, where=rec.where, seq=rec.seq, seq_age_s=age(rec.seq_advanced_at),
        waiting_op=w.op if w else None, waiting_seq=w.seq if w else None,
        frame=user_frame(rec.stack), heard_age_s=age(heard_at if heard_at is not None else rec.written_at),
        waiting_age_s=age(w.since) if w else None)


@dataclass(frozen=True)
class LinkSilence:
    """Link evidence: the link ``node_a`` <-> ``node_b`` on ``ifname`` ``evidence`` (e.g.
    ``has carried nothing since 12:03:07``)."""

    node_a: str
    node_b: str
    ifname: str
    evidence: str

    def ends(self) -> tuple[str, str]:
        """The two nodes' names as messages write them (clipped, cleaned)."""
        return T.clean(self.node_a, T.NODE_CHARS), T.clean(self.node_b, T.NODE_CHARS)

    def text(self) -> str:
        return (f"{T.clean(self.node_a, T.NODE_CHARS)} <-> {T.clean(self.node_b, T.NODE_CHARS)} on "
                f"{T.clean(self.ifname, 16)} {T.clean(self.evidence, 60)}")


@dataclass(frozen=True)
class Windows:
    """How long a wait (``quiet_s``) and a record's silence (``stale_s``) may last before
    they count (seconds)."""

    quiet_s: float = QUIET_S
    stale_s: float = STALE_S


@dataclass(frozen=True)
class StallVerdict:
    """The ``Progressing`` condition (``status``, ``reason``, ``message``: one line, at most
    400 characters), the rule that decided it, the culprit ranks and their nodes (only
    those the evidence singles out), the ``candidates`` (nodes still suspected when it does
    not), ``since`` (Unix s: when the wait began; None when nothing waits), the highest
    ``seq`` a rank reached, and ``act``: whether ``runPolicy.onStall`` applies."""

    status: str
    reason: str
    message: str
    rule: str
    ranks: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    since: Optional[float] = None
    seq: Optional[int] = None
    act: bool = False

    def condition(self) -> Verdict:
        """As :class:`~disttrain.diagnosis.checkconditions.Verdict`, for
        :func:`disttrain.reconcile.conditions.set_condition` on ``Progressing``."""
        return Verdict(self.status, self.reason, self.message)

    def summary(self) -> str:
        """The Progress column (at most 80 characters): ``#1533`` while the collectives
        advance, else with the reason and the culprit, ``#1533 (RankStuckInPython: rank 3)``."""
        seq = f"#{self.seq}" if self.seq is not None else "-"
        if self.reason == V.COLLECTIVES_ADVANCING:
            return seq
        if self.ranks:
            who = f"rank {self.ranks[0]}" if len(self.ranks) == 1 else (
                f"ranks {self.ranks[0]}, {self.ranks[1]}" + (f" +{len(self.ranks) - 2}" if len(self.ranks) > 2 else ""))
        else:
            who = messages.node_list(list(self.nodes), 2)
        return messages.cut(f"{seq} ({self.reason}{': ' + who if who else ''})", 80)

    def status_fields(self) -> dict[str, Any]:
        """``status.progress`` as :class:`~disttrain.api.status.ProgressStatus` fields by
        their Python names (for :meth:`disttrain.reconcile.jobstatus.JobStatus.set_progress`):
        ``seq``, ``summary``, ``since`` (RFC 3339, left out when unknown), ``ranks`` (at most
        64) and ``nodes`` (at most 16)."""
        return {"seq": self.seq, "summary": self.summary(), "since": rfc3339(self.since),
                "ranks": list(self.ranks[:64]), "nodes": list(self.nodes[:16])}


def rfc3339(t: Optional[float]) -> Optional[str]:
    """Unix seconds ``t`` as RFC 3339 UTC with second precision; None for None or a time
    no calendar holds."""
    if t is None:
        return None
    try:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


@dataclass(frozen=True)
class _Rank:
    rank: int
    node: str
    where: Optional[str]
    seq: Optional[int]
    seq_age: Optional[float]
    wait_age: Optional[float]
    op: Optional[str]
    wseq: Optional[int]
    frame: str
    heard: Optional[float]
    share: Optional[float]
    straggler: Optional[stragglers.StragglerView] = None


@dataclass(frozen=True)
class Facts:
    """The observations made consistent: ``ranks`` heard at least once (rank -> state, one
    per rank, in ``range(world)``), split into ``fresh`` and ``stale``; ``missing``: how
    many ranks of the world were never heard (or said nothing usable)."""

    now: float
    timeout: float
    windows: Windows
    world: int
    ranks: dict[int, _Rank]
    fresh: tuple[int, ...]
    stale: tuple[int, ...]
    missing: int
    links: tuple[LinkSilence, ...] = field(default=())

    def node_of(self) -> dict[int, str]:
        return {r: x.node for r, x in self.ranks.items()}

    def first_missing(self, most: int = 8) -> list[int]:
        """The first ``most`` ranks of the world never heard."""
        out: list[int] = []
        for r in range(self.world):
            if len(out) >= most:
                break
            if r not in self.ranks or self.ranks[r].where is None:
                out.append(r)
        return out

    def waiting(self) -> list[_Rank]:
        return [self.ranks[r] for r in self.fresh if self.ranks[r].where == progress.IN_COLLECTIVE]

    def in_python(self) -> list[_Rank]:
        return [self.ranks[r] for r in self.fresh
                if self.ranks[r].where in (progress.IN_PYTHON, progress.NOT_STARTED)]

    def longest_wait(self) -> float:
        return max((x.wait_age or 0.0 for x in self.waiting()), default=0.0)

    def top_seq(self) -> Optional[int]:
        seqs = [s for r in self.fresh if (s := self.ranks[r].seq) is not None]
        return max(seqs) if seqs else None


def _age(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return min(max(float(v), 0.0), MAX_AGE_S)


def _count(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _rank(o: RankObservation) -> _Rank:
    seq_age, heard = _age(o.seq_age_s), _age(o.heard_age_s)
    if seq_age is not None and heard is not None:
        seq_age = max(seq_age, heard)  # it cannot be known to have advanced since it was heard
    wait_age = _age(o.waiting_age_s)
    view = o.straggler if isinstance(o.straggler, stragglers.StragglerView) else None
    share = _age(o.wait_share if o.wait_share is not None or view is None else view.share)
    return _Rank(
        rank=o.rank, node=T.clean(o.node, T.NODE_CHARS) or "an unknown node",
        where=o.where if o.where in WHERES else None, seq=_count(o.seq), seq_age=seq_age,
        wait_age=max(wait_age, heard or 0.0) if wait_age is not None else seq_age,
        op=T.clean(o.waiting_op, T.OP_CHARS) or None, wseq=_count(o.waiting_seq),
        frame=T.clean(o.frame, T.FRAME_CHARS), heard=heard,
        share=share if share is not None and share <= 1 else None, straggler=view)


def facts(observations: Iterable[RankObservation], world_size: Any, stall_timeout_s: Any, now: float,
          links: Optional[Sequence[Union[LinkSilence, Sequence[str]]]] = None,
          windows: Windows = Windows()) -> Facts:
    """The observations made consistent: a rank outside ``range(world_size)`` (or not an
    integer) is left out; of two observations of one rank the more recently heard one is
    kept; a world size below 1 is taken from the ranks seen. Never raises."""
    obs = [o for o in observations if isinstance(o, RankObservation) and isinstance(o.rank, int)
           and not isinstance(o.rank, bool) and o.rank >= 0]
    world = world_size if isinstance(world_size, int) and not isinstance(world_size, bool) else 0
    if world < 1:
        world = 1 + max((o.rank for o in obs), default=-1)
    world = min(world, MAX_WORLD)
    ranks: dict[int, _Rank] = {}
    for o in obs:
        if o.rank >= world:
            continue
        x = _rank(o)
        old = ranks.get(o.rank)
        if x.heard is not None and (old is None or old.heard is None or x.heard < old.heard):
            ranks[o.rank] = x
    timeout = _age(stall_timeout_s) or 1.0
    quiet = min(_age(windows.quiet_s) or QUIET_S, timeout)
    win = Windows(quiet, _age(windows.stale_s) or STALE_S)
    known = [r for r in sorted(ranks) if ranks[r].where is not None]
    fresh = tuple(r for r in known if (ranks[r].heard or 0.0) <= win.stale_s)
    stale = tuple(r for r in known if (ranks[r].heard or 0.0) > win.stale_s)
    silent = tuple(_link(x) for x in (links or ()))
    return Facts(now=now if isinstance(now, (int, float)) and math.isfinite(now) else 0.0,
                 timeout=timeout, windows=win, world=world, ranks=ranks, fresh=fresh, stale=stale,
                 missing=world - len(known), links=tuple(x for x in silent if x is not None))


MOST_RANK_DETAILS = 64  # ranks kept in status.progress.rankDetails


def rank_details(f: Facts, culprits: Iterable[int] = (), most: int = MOST_RANK_DETAILS) -> list[dict[str, Any]]:
    """``status.progress.rankDetails``: each rank of ``f`` heard, as
    :class:`~disttrain.api.status.RankProgressStatus` dicts by their JSON names (None values
    left out), at most ``most``: the ``culprits`` first, then stale ranks, then ranks not
    advancing, then the rest, each group lowest rank first; returned in rank order.
    ``idleSeconds`` is the seconds since ``seq`` advanced (rounded down). Never raises."""
    known = [r for r in sorted(f.ranks) if f.ranks[r].where is not None]
    stale, bad = set(f.stale), set(culprits)

    def order(r: int) -> tuple[int, int]:
        x = f.ranks[r]
        return (0 if r in bad else 1 if r in stale else 2 if x.where != ADVANCING else 3, r)

    out = []
    for r in sorted(sorted(known, key=order)[:max(0, most)]):
        x = f.ranks[r]
        out.append(RankProgressStatus(
            rank=r, node=x.node, where=x.where or "", seq=x.seq, op=x.op, waiting_seq=x.wseq,
            idle_seconds=int(x.seq_age) if x.seq_age is not None else None, frame=x.frame or None,
            stale=r in stale).model_dump(by_alias=True, exclude_none=True))
    return out


def _link(x: Any) -> Optional[LinkSilence]:
    if isinstance(x, LinkSilence):
        return x
    if isinstance(x, (tuple, list)) and len(x) == 4:
        return LinkSilence(*(str(v) for v in x))
    return None


@dataclass(frozen=True)
class Claim:
    """What a rule found: its ``reason`` (pass, warning, progress or failure), the ``cause``
    (who waits for whom), the ``fix`` (or what would decide), the ranks it singles out
    (``culprits``), the nodes still suspected (``candidates``), and ``since`` (Unix s) when
    the wait it explains began."""

    rule: str
    reason: str
    cause: str
    fix: str = ""
    culprits: tuple[int, ...] = ()
    candidates: tuple[str, ...] = ()
    since: Optional[float] = None
    note: str = ""  # said last, when there is room: ranks not heard, records late
    nodes: tuple[str, ...] = ()  # the culprit nodes when no rank is (a link's ends)


def compose(cause: str, tail: str, note: str = "", joint: str = messages.SEP,
            limit: int = messages.LIMIT) -> str:
    """``cause``, ``joint``, ``tail`` (the fix) and then ``note`` when there is room, on one
    line within ``limit``: the tail keeps at most 60% of the room and the cause is cut (at a
    word boundary) before it is; the note is cut or left out first."""
    cause, tail, note = (messages.one_line(x) for x in (cause, tail, note))
    if tail:
        tail = messages.cut(tail, limit * 3 // 5)
        text = messages.cut(cause, limit - len(tail) - len(joint)) + joint + tail
    else:
        text = messages.cut(cause, limit)
    room = limit - len(text) - len(messages.SEP)
    if note and room >= min(len(note), messages.MIN_PART):
        text += messages.SEP + messages.cut(note, room)
    return text


def decide(f: Facts, c: Claim) -> StallVerdict:
    """The verdict of claim ``c``: True for a pass or warning reason, Unknown for a progress
    one; a failure reason is False (and acts) once the wait reached the timeout, before
    that Unknown ``RanksWaiting`` with the same culprits, saying it is a wait until the
    timeout. The message is one line of at most 400 characters."""
    r = V.REASONS[c.reason]
    reason, tail, joint = c.reason, c.fix, messages.SEP
    if r.kind in (V.PASS, V.WARNING):
        status = constants.TRUE
    elif r.kind == V.FAILURE and c.since is not None and f.now - c.since >= f.timeout:
        status = constants.FALSE
    else:
        status = constants.UNKNOWN
        if r.kind == V.FAILURE:
            reason, joint = V.RANKS_WAITING, " "
            tail = f"(a wait, not a fault, until runPolicy.stallTimeoutSeconds {f.timeout:.0f} s)"
    node_of = f.node_of()
    culprits = tuple(sorted(set(c.culprits)))
    nodes = c.nodes or tuple(dict.fromkeys(node_of[x] for x in culprits if x in node_of))
    message = compose(c.cause, tail, c.note, joint)
    return StallVerdict(status, reason, message, c.rule, culprits, nodes, tuple(dict.fromkeys(c.candidates)),
                        c.since, f.top_seq(), status == constants.FALSE)
