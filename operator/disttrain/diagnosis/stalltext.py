"""The words of the stall verdict (pure): rank ranges, ranks with their nodes, durations.

Everything here is bounded, so a message stays within 400 characters at any world size: a
rank list keeps at most a few ranges and says how many ranks it left out (``0-2, 4-7,
9 (+40 more)``), a node list a few names and how many more, and every text taken from a
record (a node's name, a frame, an op) is one line and clipped.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Optional, Sequence

from disttrain.diagnosis import messages

MOST_RANGES = 6  # ranges of ranks shown before "(+N more)"
MOST_NODES = 3  # nodes shown with their ranks before "and N more"
NODE_CHARS = 63  # a Kubernetes node name's label part; longer ones are clipped
FRAME_CHARS = 80
OP_CHARS = 40


def clean(value: object, limit: int) -> str:
    """``value`` as one line of at most ``limit`` characters ('' for None)."""
    if value is None:
        return ""
    return messages.cut(messages.one_line(str(value)), limit)


def ranges(ranks: Iterable[int], most: int = MOST_RANGES) -> str:
    """``0-2, 4-7`` for the ranks (sorted, duplicates dropped), at most ``most`` ranges, then
    ``(+N more)`` counting the ranks left out."""
    rs = sorted(set(ranks))
    spans: list[tuple[int, int]] = []
    for r in rs:
        if spans and r == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], r)
        else:
            spans.append((r, r))
    shown = spans[:most]
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in shown)
    left = sum(b - a + 1 for a, b in spans[most:])
    return f"{text} (+{left} more)" if left else text


def _noun(ranks: Sequence[int]) -> str:
    return "rank" if len(set(ranks)) == 1 else "ranks"


def who(ranks: Sequence[int], node_of: Mapping[int, str], most: int = MOST_NODES) -> str:
    """The ranks with their nodes: ``rank 3 (node-c)``, ``ranks 0-7 (node-a), 8 (node-b)``;
    beyond ``most`` nodes ``ranks 0-31 on node-a, node-b, node-c and 2 more``."""
    by_node: dict[str, list[int]] = {}
    for r in sorted(set(ranks)):
        by_node.setdefault(node_of.get(r, "") or "an unknown node", []).append(r)
    if not by_node:
        return "no rank"
    if len(by_node) <= most:
        parts = [f"{ranges(rs, 3)} ({node})" for node, rs in by_node.items()]
        return f"{_noun(ranks)} {', '.join(parts)}"
    return f"{_noun(ranks)} {ranges(ranks)} on {messages.node_list(list(by_node), most + 1)}"


def verb(ranks: Sequence[int], one: str, many: str) -> str:
    """``one`` for a single rank, else ``many`` (``is``/``are``, ``waits``/``wait``)."""
    return one if len(set(ranks)) == 1 else many


def seconds(age: Optional[float]) -> str:
    """``45 s``, ``12 min``, ``3 h``, ``2 d`` (``?`` when unknown)."""
    if age is None or not math.isfinite(age):
        return "?"
    if age < 600:
        return f"{age:.0f} s"
    if age < 7200:
        return f"{age / 60:.0f} min"
    if age < 172800:
        return f"{age / 3600:.0f} h"
    return f"{age / 86400:.0f} d"


def collective(op: Optional[str], seq: Optional[int]) -> str:
    """``all_reduce #1533``; ``a collective`` when neither is known."""
    name = op or "a collective"
    return f"{name} #{seq}" if seq is not None else name
