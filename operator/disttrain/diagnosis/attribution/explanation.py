"""An attribution's result (pure): :class:`Explanation`, the cause, culprits and fix a
class of :mod:`disttrain.diagnosis.attribution` names, and the wording its classes share
(a list of node pairs, the capture that tells a pair's two ends apart)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from disttrain.diagnosis import evidence as evidence_matrix
from disttrain.diagnosis import messages


@dataclass(frozen=True)
class Explanation:
    """``kind`` (see the module doc), the node(s) singled out (``culprits``; all candidates
    when undecided), the sentence naming them (``cause``), the ``fix``, and ``decide``:
    the test that would tell the remaining candidates apart ('' when the evidence decides)."""

    kind: str
    culprits: tuple[str, ...]
    cause: str
    fix: str
    decide: str = ""
    pairs: tuple[tuple[str, str], ...] = field(default=())
    groups: tuple[tuple[str, ...], ...] = field(default=())  # islands: the nodes of each group

    def message(self, evidence: str = "", limit: int = messages.LIMIT) -> str:
        """``cause; fix; decide: ...; seen: <evidence>`` within ``limit`` (the probe's own
        words last, shortened, and only when there is room for them)."""
        base = messages.join([self.cause, self.fix, f"decide: {self.decide}" if self.decide else ""], limit)
        room = limit - len(base) - len(messages.SEP) - len("seen: ")
        if evidence and room >= 60 and not base.endswith(messages.ELLIPSIS):
            base += f"{messages.SEP}seen: {messages.cut(evidence, room)}"
        return base


def pairs_text(pairs: Sequence[tuple[str, str]], most: int = 3) -> str:
    """``a<->b, c<->d`` for at most ``most`` pairs, then how many more."""
    shown = [f"{a}<->{b}" for a, b in pairs[:most]]
    more = f" and {len(pairs) - most} more" if len(pairs) > most else ""
    return ", ".join(shown) + more


def capture_test(pair: tuple[str, str], m: Optional[evidence_matrix.Matrix] = None) -> str:
    """The test that tells whether ``pair``'s second node or the first (or the path) drops
    the first's connections; with the matrix ``m``, turned to a direction that failed when
    only the second's dials to the first did (an egress rule on the second reads the same)."""
    a, b = pair
    if m is not None and a in m.nodes and b in m.nodes:
        i, j = m.nodes.index(a), m.nodes.index(b)
        if m.failed(j, i) and not m.failed(i, j):
            a, b = b, a
    return f"tcpdump on {b}: SYNs from {a} arriving unanswered: {b}'s rule; none: {a}'s or the path"
