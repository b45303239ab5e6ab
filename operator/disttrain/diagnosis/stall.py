"""The stall verdict (pure): whether a running job's collectives advance and, when they do
not, which rank on which node holds them and why, as the ``Progressing`` condition.

Input: one :class:`RankObservation` per rank (what its progress record,
``disttrain_probe.contract.progress``, said and how old it is), the world size,
``runPolicy.stallTimeoutSeconds`` and, when the shell has it, link evidence
(:class:`LinkSilence`). No I/O and no clock: ``now`` is an argument (Unix seconds).

The verdict is the first of :data:`RULES` (ordered, one interface: :class:`Rule`) that
fits; each names the smallest set of ranks that explains every rank's state, and names
none when the evidence does not single one out:

1. ``nothing_heard``: no rank's record was ever heard, or no rank created its process
   group yet: Unknown ``ProgressNotReported``.
2. ``all_stale``: every heard record is older than ``stale_s``: Unknown
   ``ProgressNotReported`` (the operator cannot tell; it never acts on silence alone).
3. ``advancing``: no rank waits in a collective for ``quiet_s`` or more, and some rank
   issued a collective within the timeout: True ``CollectivesAdvancing``, or True
   ``Straggler`` when the ranks' wait shares single out a few that the others wait for.
4. ``in_python``: ranks in Python (or not yet in the process group) while others wait,
   or every rank in Python past the timeout: ``RankStuckInPython``, naming exactly those.
5. ``unresponsive``: ranks whose record went stale while the others wait:
   ``RankUnresponsive`` (frozen process, or its node is gone).
6. ``mismatched``: the waiting ranks wait in different collectives:
   ``CollectivesMismatched``, naming the minority when one group holds most ranks.
7. ``collective_stalled``: every rank waits in the same collective: ``CollectiveStalled``,
   naming a silent link only when link evidence shows one; ranks never heard from leave
   it ``StallNotAttributed`` with them as candidates.
8. ``not_attributed``: anything else: ``StallNotAttributed``.

Rules 4-8 say Unknown ``RanksWaiting`` (a wait, not a fault: a long checkpoint or
evaluation on one rank) while the longest wait is under the timeout, and False (``act``:
``runPolicy.onStall`` applies) once it reaches it.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence, Union

from disttrain.diagnosis import messages
from disttrain.diagnosis import stalltext as T
from disttrain.diagnosis.stallfacts import (
    ADVANCING,
    Claim,
    Facts,
    LinkSilence,
    RankObservation,
    StallVerdict,
    Windows,
    _Rank,
    decide,
    facts,
)
from disttrain_probe.contract import progress, stragglers
from disttrain_probe.contract import vocabulary as V

# the median rank waits at least this share of the time, a straggler at most 1/FACTOR of it
# (every other rank at least half of it); the recorders' rule too (stragglers.straggler_view)
STRAGGLER_MIN_SHARE = stragglers.STRAGGLER_MIN_SHARE
STRAGGLER_FACTOR = stragglers.STRAGGLER_FACTOR


@dataclass(frozen=True)
class Rule:
    """One rule of the verdict: its ``name`` and ``find``, which returns the rule's
    :class:`~disttrain.diagnosis.stallfacts.Claim` when it fits the facts, else None."""

    name: str
    find: Callable[[Facts], Optional[Claim]]


def _ranks(xs: Iterable[_Rank]) -> list[int]:
    return [x.rank for x in xs]


def _long(f: Facts) -> list[_Rank]:
    """The fresh ranks that wait in a collective for ``quiet_s`` or more."""
    return [x for x in f.waiting() if (x.wait_age or 0.0) >= f.windows.quiet_s]


def _waits_text(f: Facts, most: int = 2) -> str:
    """``ranks 1-7 wait in all_reduce #1533`` (per collective, the largest groups first)."""
    groups: dict[tuple, list[int]] = {}
    for x in f.waiting():
        groups.setdefault((x.op, x.wseq), []).append(x.rank)
    order = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    parts = []
    for i, ((op, seq), rs) in enumerate(order[:most]):
        verb = T.verb(rs, "waits", "wait") + " " if i == 0 else ""
        parts.append(f"{T.verb(rs, 'rank', 'ranks')} {T.ranges(rs)} {verb}in {T.collective(op, seq)}")
    rest = sum(len(rs) for _, rs in order[most:])
    return ", ".join(parts) + (f" and {rest} more ranks in other collectives" if rest else "")


def _python_text(f: Facts, xs: Sequence[_Rank], most: int = 2) -> str:
    """``rank 3 (node-c) is in Python at train.py:88 (load_batch) for 300 s``, per frame."""
    groups: dict[tuple, list[_Rank]] = {}
    for x in xs:
        groups.setdefault((x.where, x.frame), []).append(x)
    node_of = f.node_of()
    parts = []
    for i, ((where, frame), g) in enumerate(list(groups.items())[:most]):
        rs = _ranks(g)
        age = T.seconds(max((x.seq_age for x in g if x.seq_age is not None), default=None))
        at = f" at {frame}" if frame else ""
        if where == progress.NOT_STARTED:
            what = f"{T.verb(rs, 'has', 'have')} not joined the process group{at} ({age})"
        else:
            what = f"{T.verb(rs, 'is', 'are')} in Python{at} for {age}"
        parts.append(f"{T.who(rs, node_of)} {what}" if i == 0 else f"{T.who(rs, node_of)}{at}")
    rest = sum(len(g) for g in list(groups.values())[most:])
    return ", ".join(parts) + (f" and {rest} more ranks elsewhere in Python" if rest else "")


def _note(f: Facts, skip_stale: bool = False) -> str:
    """Ranks not heard from, said last when there is room."""
    notes = []
    if f.stale and not skip_stale:
        age = T.seconds(min(f.ranks[r].heard or 0.0 for r in f.stale))
        notes.append(f"no record from {T.who(f.stale, f.node_of())} for {age}")
    if f.missing:
        notes.append(f"none yet from {T.verb(f.first_missing(), 'rank', 'ranks')} "
                     f"{T.ranges(f.first_missing(), 4)}" + (f" ({f.missing} in all)" if f.missing > 8 else ""))
    return ", ".join(notes)


def _least(ages: Iterable[Optional[float]]) -> Optional[float]:
    known = [a for a in ages if a is not None]
    return min(known) if known else None


def _since(f: Facts, age: Optional[float]) -> Optional[float]:
    return None if age is None else f.now - age


def _nothing_heard(f: Facts) -> Optional[Claim]:
    heard = f.fresh + f.stale
    if not heard:
        return Claim("nothing_heard", V.PROGRESS_NOT_REPORTED,
                     f"no progress record heard from any of the {f.world} ranks yet",
                     "the recorder in each training process writes one every second once it runs")
    if all(f.ranks[r].where == progress.NOT_STARTED for r in heard):
        if f.stale and f.fresh:
            # a rank gone silent while the others still write is unresponsive, process group
            # or not (found on the real kubelets: a rank frozen in init_process_group left
            # the job "not reported" for ever)
            return _unresponsive(f)
        return Claim("nothing_heard", V.PROGRESS_NOT_REPORTED,
                     f"no rank has created its process group yet ({len(heard)} of {f.world} heard)",
                     note=_note(f))
    return None


def _all_stale(f: Facts) -> Optional[Claim]:
    if f.fresh:
        return None
    age = min(f.ranks[r].heard or 0.0 for r in f.stale)
    return Claim("all_stale", V.PROGRESS_NOT_REPORTED,
                 f"no progress record heard for {T.seconds(age)} from {T.who(f.stale, f.node_of())}",
                 "the operator cannot tell whether training advances: check the training pods and "
                 "their nodes (kubectl get pods -o wide)", since=f.now - age, note=_note(f, skip_stale=True))


def _advancing(f: Facts) -> Optional[Claim]:
    if _long(f):
        return None
    fresh = [f.ranks[r] for r in f.fresh]
    recent = [x.seq_age for x in fresh if x.seq_age is not None and x.seq_age < f.timeout]
    if not recent:
        return None
    slow = _stragglers(fresh, f.world)
    if slow:
        xs, median = slow
        nodes = messages.node_list([x.node for x in xs])
        return Claim("advancing", V.STRAGGLER,
                     f"collectives advance, but {T.who(_ranks(xs), f.node_of())} "
                     f"{T.verb(_ranks(xs), 'waits', 'wait')} in them {max(x.share or 0 for x in xs):.0%} of "
                     f"the time against the median rank's {median:.0%}: the others wait for "
                     f"{T.verb(_ranks(xs), 'it', 'them')} every step, the job runs at "
                     f"{T.verb(_ranks(xs), 'its', 'their')} pace",
                     f"check {nodes}: its CPU (a limit's throttling in cpu.stat, other load), GPU "
                     "clocks and temperature (nvidia-smi -q -d PERFORMANCE), its data loading", culprits=tuple(_ranks(xs)), note=_note(f))
    seq = f.top_seq()
    return Claim("advancing", V.COLLECTIVES_ADVANCING,
                 f"collectives advance{f' (#{seq})' if seq is not None else ''}, the last "
                 f"{T.seconds(min(recent))} ago ({len(f.fresh)} of {f.world} ranks heard)", note=_note(f))


def _reported(fresh: Sequence[_Rank], world: int) -> Optional[tuple[list[_Rank], float]]:
    """The ranks whose recorders found themselves the job's stragglers (each from the whole
    job's share histogram), when their views hold the rule, count 2 to ``world`` ranks, and
    the ranks so named are at most a quarter of the world (one below 8); None else."""
    said = [x for x in fresh if (v := x.straggler) is not None and 2 <= v.counted <= world
            and v.median >= STRAGGLER_MIN_SHARE and v.share <= v.median / STRAGGLER_FACTOR
            and 0 < v.below <= max(1, v.counted // 4)]
    if not said or len(said) > max(1, world // 4):
        return None
    return said, statistics.median(x.straggler.median for x in said if x.straggler is not None)


def _stragglers(fresh: Sequence[_Rank], world: int) -> Optional[tuple[list[_Rank], float]]:
    """The few ranks the others wait for: far below the median wait share while every
    other rank is near it (from the ranks' own reports, else from the shares measured);
    None when the shares single out nobody."""
    reported = _reported(fresh, world)
    if reported is not None:
        return reported
    measured = [x for x in fresh if x.share is not None]
    if len(measured) < 2:
        return None
    median = statistics.median(x.share or 0.0 for x in measured)
    if median < STRAGGLER_MIN_SHARE:
        return None
    slow = [x for x in measured if (x.share or 0.0) <= median / STRAGGLER_FACTOR]
    rest = [x for x in measured if (x.share or 0.0) > median / STRAGGLER_FACTOR]
    if not slow or len(slow) > max(1, len(measured) // 4) or any((x.share or 0.0) < median / 2 for x in rest):
        return None
    return slow, median


_PYTHON_FIX = ("see why with py-spy dump --pid <pid> on {nodes} (a data loader, storage, a lock); a "
               "checkpoint or evaluation this long needs a higher runPolicy.stallTimeoutSeconds")


def _in_python(f: Facts) -> Optional[Claim]:
    py = f.in_python()
    if not py:
        return None
    waits = _long(f)
    nodes = messages.node_list([x.node for x in py])
    age: Optional[float]
    if waits:
        age = max(x.wait_age or 0.0 for x in waits)
        cause = f"{_python_text(f, py)} while {_waits_text(f)}"
    elif not f.waiting():
        age = _least(x.seq_age for x in py)
        cause = f"{_python_text(f, py)}, no rank in a collective"
    else:
        return None
    return Claim("in_python", V.RANK_STUCK_IN_PYTHON, cause, _PYTHON_FIX.format(nodes=nodes),
                 culprits=tuple(_ranks(py)), since=_since(f, age), note=_note(f))


def _unresponsive(f: Facts) -> Optional[Claim]:
    if not f.stale:
        return None
    heard = min(f.ranks[r].heard or 0.0 for r in f.stale)
    waits = f.waiting()
    age = max((x.wait_age or 0.0 for x in waits), default=heard)
    one = len({f.ranks[r].node for r in f.stale}) == 1
    its = T.verb(f.stale, "its process is", "their processes are")
    node = "its node is" if len(f.stale) == 1 else ("their node is" if one else "their nodes are")
    held = f", while {_waits_text(f)}" if waits else ""
    nodes = messages.node_list([f.ranks[r].node for r in f.stale])
    return Claim("unresponsive", V.RANK_UNRESPONSIVE,
                 f"{T.who(f.stale, f.node_of())} stopped answering {T.seconds(heard)} ago: {its} frozen "
                 f"or {node} gone{held}",
                 f"check {nodes} (kubectl describe node; py-spy dump --pid <pid> of the training process)",
                 culprits=f.stale, since=_since(f, age), note=_note(f, skip_stale=True))


def _cut_off(f: Facts) -> Optional[Claim]:
    """Ranks last reported advancing (their sidecar Ready), or whose pod's sidecar said no
    record of them, while every other rank heard waits in a collective past the quiet
    window, and the waiting ranks' connections to their node lose packets: that node is gone
    or cut off, and its kubelet could not report the stall either (a live node's sidecar
    turns not Ready within its stall window)."""
    waits = _long(f)
    adv = [f.ranks[r] for r in f.fresh if f.ranks[r].where == ADVANCING]
    unheard = [x for x in f.ranks.values() if x.where is None]  # their pod's sidecar said no record of them
    if not waits or not adv + unheard or len(f.waiting()) + len(adv) != len(f.fresh):
        return None
    waiting_nodes = {x.node for x in f.waiting()}
    lossy = [s for s in _job_links(f)
             if set(s.ends()) & waiting_nodes]
    ends = {e for s in lossy for e in s.ends()}
    cut = sorted((x for x in adv + unheard if x.node in ends and x.node not in waiting_nodes), key=lambda x: x.rank)
    if not cut:
        return None
    rs = _ranks(cut)
    nodes = messages.node_list([x.node for x in cut])
    link = next(s for s in lossy if set(s.ends()) & {x.node for x in cut})
    return Claim("cut_off", V.RANK_UNRESPONSIVE,
                 f"{T.who(rs, f.node_of())} {T.verb(rs, 'is', 'are')} unreachable ({link.text()}) while "
                 f"{_waits_text(f)}: {T.verb(rs, 'its', 'their')} node is gone or cut off from the job's "
                 "network, its kubelet reports nothing newer",
                 f"check {nodes} (kubectl describe node; its links and firewall rules)",
                 culprits=tuple(rs), since=_since(f, max(x.wait_age or 0.0 for x in waits)), note=_note(f))


def _job_links(f: Facts) -> list[LinkSilence]:
    """The silent links of ``f`` whose both ends are nodes of the job."""
    job_nodes = {x.node for x in f.ranks.values()}
    return [s for s in f.links if set(s.ends()) <= job_nodes]


def _one_apart(f: Facts, same_op: bool = True) -> bool:
    """The waiting ranks' known sequence numbers are at most one apart (and, with
    ``same_op``, their known ops one): what a link that stopped mid-collective leaves (the
    ranks that got their data went on to the next collective, the others wait for theirs);
    without ``same_op`` the next collective may be another op, never two ops at one seq.
    An unknown seq or op (not read, or cut from the line) matches any."""
    waits = f.waiting()
    seqs = [x.wseq for x in waits if x.wseq is not None]
    ops_at: dict[Optional[int], set[str]] = {}
    for x in waits:
        if x.op:
            ops_at.setdefault(None if same_op else x.wseq, set()).add(x.op)
    one_op = all(len(ops) <= 1 for ops in ops_at.values())
    return bool(seqs) and max(seqs) - min(seqs) <= 1 and one_op


def _mismatched(f: Facts) -> Optional[Claim]:
    if _one_apart(f, same_op=not _job_links(f)):
        # what a link or a peer that stopped mid-collective leaves (the ranks that got their
        # data went on, to the same op or, with a lossy link, the next one), as much as a
        # skipped collective: _collective_stalled says which evidence there is, and names no
        # rank on the split alone
        return None
    groups: dict[tuple, list[int]] = {}
    for x in f.waiting():
        if x.op is not None and x.wseq is not None:  # a rank with an unknown part matches any
            groups.setdefault((x.op, x.wseq), []).append(x.rank)
    waits = _long(f)
    if len(groups) < 2 or not waits:
        return None
    largest = max(groups.values(), key=len)
    total = sum(len(g) for g in groups.values())
    culprits = tuple(r for g in groups.values() if g is not largest for r in g) if 2 * len(largest) > total else ()
    candidates = () if culprits else tuple(x.node for x in f.waiting())
    return Claim("mismatched", V.COLLECTIVES_MISMATCHED,
                 f"the ranks wait in different collectives: {_waits_text(f)}",
                 "every rank must issue the same collectives in the same order (a branch on the rank "
                 "or the data skips one); TORCH_DISTRIBUTED_DEBUG=DETAIL names the first mismatch",
                 culprits=culprits, candidates=candidates, note=_note(f),
                 since=_since(f, max(x.wait_age or 0.0 for x in waits)))


def _collective_stalled(f: Facts) -> Optional[Claim]:
    waits = _long(f)
    if not waits or len(f.waiting()) != len(f.fresh):
        return None
    since = f.now - max(x.wait_age or 0.0 for x in waits)
    seqs = sorted({x.wseq for x in f.waiting() if x.wseq is not None})
    ops = {x.op for x in f.waiting() if x.op}
    what = T.collective(next(iter(ops)) if len(ops) == 1 else None, seqs[0] if seqs else None) + (
        f" or #{seqs[-1]}" if len(seqs) > 1 else "")
    if f.missing:
        unknown = [r for r in f.ranks if f.ranks[r].where is None]
        return Claim("collective_stalled", V.STALL_NOT_ATTRIBUTED,
                     f"every rank heard from waits in {what} for {T.seconds(f.now - since)}; {_note(f)}: "
                     f"one of those may not have joined it",
                     "decide: py-spy dump --pid <pid> on their nodes, or a Flight Recorder dump "
                     "(TORCH_NCCL_DUMP_ON_TIMEOUT=1)",
                     candidates=tuple(f.ranks[r].node for r in unknown), since=since)
    return _link_claim(f, what, since, apart=len(seqs) > 1)


def _link_claim(f: Facts, what: str, since: float, apart: bool) -> Claim:
    """Every rank waits in ``what`` (``apart``: the ranks are one collective apart): a silent
    link between two of the job's nodes when the
    evidence shows one, else the candidates and what would decide."""
    links = _job_links(f)
    age = T.seconds(f.now - since)
    if not links:
        held = ("a link, NCCL or a GPU that stopped mid-collective (the ranks ahead got their data), "
                "or a rank skipped a collective; nothing yet says which" if apart else
                "a link between the nodes, NCCL or a GPU holds it, and nothing yet says which")
        decide = ("decide: ip -s link on each node shows a link that carries nothing; "
                  "TORCH_DISTRIBUTED_DEBUG=DETAIL names a skipped collective" if apart else
                  "decide: ip -s link on each node shows a link that carries nothing; a Flight Recorder dump "
                  "(TORCH_NCCL_DUMP_ON_TIMEOUT=1) shows each rank's op; nvidia-smi and Xid lines in dmesg "
                  "show a GPU that stopped")
        return Claim("collective_stalled", V.COLLECTIVE_STALLED,
                     f"every rank waits in {what} for {age}" + ("" if apart else " and none is elsewhere") +
                     f": {held}", decide, since=since)
    ends = [s.ends() for s in links]
    common = set(ends[0]).intersection(*ends[1:])
    nodes = tuple(sorted(common)) if len(links) > 1 and len(common) == 1 else tuple(
        dict.fromkeys(n for e in ends for n in e))
    more = f" (and {len(links) - 1} more links)" if len(links) > 1 else ""
    return Claim("collective_stalled", V.COLLECTIVE_STALLED,
                 f"every rank waits in {what} for {age}: {links[0].text()}{more}",
                 f"check {messages.node_list(list(nodes))}: firewall rules between them (nft list ruleset), "
                 "the link's counters (ip -s link), the switch port and cable; cordon the node to run the "
                 "job elsewhere", nodes=nodes, since=since)


def _not_attributed(f: Facts) -> Claim:
    waits = f.waiting()
    if waits:
        age: Optional[float] = max(x.wait_age or 0.0 for x in waits)
        cause = f"{_waits_text(f)} for {T.seconds(age)}, and no other rank's state explains it"
    else:
        age = _least(f.ranks[r].seq_age for r in f.fresh)
        cause = f"no collective advanced for {T.seconds(age)} and no rank's state explains it"
    others = tuple(x.node for x in f.ranks.values() if x.where != progress.IN_COLLECTIVE)
    return Claim("not_attributed", V.STALL_NOT_ATTRIBUTED, cause,
                 "decide: py-spy dump --pid <pid> of the training process on each node",
                 candidates=others, since=_since(f, age), note=_note(f))


RULES: tuple[Rule, ...] = (
    Rule("nothing_heard", _nothing_heard),
    Rule("all_stale", _all_stale),
    Rule("advancing", _advancing),
    Rule("in_python", _in_python),
    Rule("unresponsive", _unresponsive),
    Rule("cut_off", _cut_off),
    Rule("mismatched", _mismatched),
    Rule("collective_stalled", _collective_stalled),
    Rule("not_attributed", _not_attributed),
)


def judge(observations: Iterable[RankObservation], world_size: int, stall_timeout_s: float, now: float,
          links: Optional[Sequence[Union[LinkSilence, Sequence[str]]]] = None,
          windows: Windows = Windows()) -> StallVerdict:
    """The ``Progressing`` verdict: the claim of the first of :data:`RULES` that fits,
    decided against the timeout (:func:`~disttrain.diagnosis.stallfacts.decide`). ``now``
    and ``since`` are Unix seconds; ``stall_timeout_s`` is runPolicy.stallTimeoutSeconds.
    Never raises; the message is one line of at most 400 characters."""
    f = facts(observations, world_size, stall_timeout_s, now, links, windows)
    for rule in RULES:
        claim = rule.find(f)
        if claim is not None:
            return decide(f, claim)
    return decide(f, _not_attributed(f))  # pragma: no cover - the last rule always fits


# Progressing reasons that fault the culprit's node, not the user's code or a link between two
# nodes: a restart (runPolicy.onStall: Restart) places the next attempt without it.
NODE_FAULTS = frozenset({V.RANK_UNRESPONSIVE})


def nodes_to_avoid(v: StallVerdict) -> tuple[str, ...]:
    """The nodes a restart after ``v`` should leave out: its culprit nodes when its reason
    is one of :data:`NODE_FAULTS` (a rank frozen or its node gone), else () (a rank stuck in
    Python is the script's doing, a silent link has two ends the evidence does not tell
    apart)."""
    return tuple(dict.fromkeys(v.nodes)) if v.reason in NODE_FAULTS else ()


__all__ = ["NODE_FAULTS", "RULES", "Rule", "judge", "nodes_to_avoid"]
