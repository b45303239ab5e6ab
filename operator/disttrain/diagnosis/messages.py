"""Condition messages a person can act on (pure): at most 400 characters, cause, node(s), fix.

Probe and operator messages are clauses joined by ``"; "``: the cause first, evidence in
the middle, the fix last. :func:`bound` keeps the first clause and the last one (the
fix) and as many of the middle ones as fit; what is cut is marked ``…``, and every cut
falls at a word boundary (:func:`cut`). The evidence
left out stays whole in ``status.probe.failures``/``warnings``, ``status.nodes``, the
Events and ``kubectl disttrain explain``.
"""
from __future__ import annotations

import re
from typing import Iterable, Optional, Sequence

LIMIT = 400  # every condition message, characters
# Validated's message is repeated inside Failed's ("preflight failed (<Reason>), no training
# pods were created: <message>", about 75 characters more): keep room for that.
SUMMARY_LIMIT = 320
SEP = "; "
ELLIPSIS = "…"
MIN_PART = 60  # a part cut shorter than this says nothing: it is left out instead


def clauses(text: str) -> list[str]:
    """``text`` split at ``"; "`` (empty clauses dropped)."""
    return [c.strip() for c in (text or "").split(SEP) if c.strip()]


# Where a cut may fall: before or after one of these (never inside a word, a node name
# such as node-a, a number such as 10.100.0.1 or an identifier).
BOUNDARY = frozenset(" \t,;:|()[]{}/=\"'<>")


def one_line(text: str) -> str:
    """``text`` stripped, its line breaks (every one :meth:`str.splitlines` knows: also
    U+2028, U+0085, vertical tab, form feed) and the blanks around them joined by
    ``" | "``: a condition message is one line. Linear in ``len(text)`` (a regex around
    the breaks backtracked over long runs of blanks: 8 s for 40,000 spaces)."""
    return " | ".join(part for line in (text or "").splitlines() if (part := line.strip()))


def _boundary(text: str, limit: int) -> int:
    """The longest head ``text[:p]``, ``p <= limit``, that ends at a word boundary
    (:data:`BOUNDARY` on either side of the cut), preferring a space in the last 40%;
    0 when ``text`` has no boundary before ``limit`` (one token longer than the room)."""
    at = [p for p in range(min(limit, len(text) - 1), 0, -1)
          if text[p] in BOUNDARY or text[p - 1] in BOUNDARY]
    space = next((p for p in at if text[p] == " "), 0)
    if space >= limit * 0.6:
        return space
    return at[0] if at and at[0] >= limit * 0.6 else (space or (at[0] if at else 0))


def cut(text: str, limit: int) -> str:
    """``text`` shortened to at most ``limit`` characters at a word boundary (a space,
    else punctuation; a single token longer than the room is cut where it must), ending in
    ``…`` when shortened. Never raises."""
    text = text.strip()
    if len(text) <= limit:
        return text
    if limit <= 1:
        return ELLIPSIS[:limit]
    p = _boundary(text, limit - 1)
    if not p:  # one token longer than the room: nowhere else to cut
        return text[: limit - 1] + ELLIPSIS
    return text[:p].rstrip(" ,;:(|") + ELLIPSIS


def bound(text: str, limit: int = LIMIT) -> str:
    """``text`` within ``limit`` characters, keeping whole clauses: the first (the cause)
    and the last (the fix) first, then the middle ones in order while they fit, ``…``
    where some were left out. A single clause too long is cut (:func:`cut`)."""
    text = (text or "").strip()
    if len(text) <= limit:
        return text
    parts = clauses(text)
    if len(parts) == 1:
        return cut(parts[0], limit)
    first, last, middle = parts[0], parts[-1], parts[1:-1]
    # the fix gets at most 60% of the room (a fix that fits there stays whole, so that only
    # the cause is cut, once), the cause what is left
    last = cut(last, max(limit * 3 // 5, limit - len(first) - 2 * len(SEP) - 1))
    room = limit - len(last) - len(SEP)
    first = cut(first, max(1, room - len(SEP) - len(ELLIPSIS)))
    kept: list[str] = [first]
    used = len(first)
    dropped = False
    for m in middle:
        extra = len(SEP) + len(m)
        if not dropped and used + extra + len(SEP) + len(ELLIPSIS) <= room:
            kept.append(m)
            used += extra
        else:
            dropped = True
    if dropped:
        kept.append(ELLIPSIS)
    out = SEP.join(kept + [last])
    return out if len(out) <= limit else cut(out, limit)


def join(parts: Iterable[Optional[str]], limit: int = LIMIT) -> str:
    """Parts joined by ``"; "`` in priority order while they fit within ``limit``; the
    first is bounded itself; the first one that does not fit is cut to the room left
    (when that is at least :data:`MIN_PART` characters) or left out, ``…`` marking it, and
    the rest are left out."""
    items = [p.strip() for p in parts if p and p.strip()]
    if not items:
        return ""
    out = bound(items[0], limit)
    for i, p in enumerate(items[1:], 1):
        tail = len(SEP) + len(ELLIPSIS) if i < len(items) - 1 else 0
        if len(out) + len(SEP) + len(p) + tail <= limit:
            out += SEP + p
            continue
        room = limit - len(out) - len(SEP)
        if room >= MIN_PART:
            out += SEP + cut(p, room)
        elif room >= len(ELLIPSIS):
            out += SEP + ELLIPSIS
        break
    return out


def named_nodes(text: str, nodes: Sequence[str]) -> list[str]:
    """The names in ``nodes`` that ``text`` mentions as whole words, in ``nodes`` order."""
    out = []
    for n in nodes:
        if n and n not in out and re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text or ""):
            out.append(n)
    return out


MOST_NAMED = 8  # culprits a verdict names before "and N more" (status fields carry them all)


def node_list(nodes: Sequence[str], most: int = 4, room: Optional[int] = None) -> str:
    """``node-a, node-b`` or ``node-a, node-b, node-c and 5 more``: the distinct names in
    order, at most ``most`` of them (``most - 1`` and the count when there are more). With
    ``room`` (characters), fewer names while the list is longer than that (one name at
    least: the list may then still exceed ``room``). '' for no names."""
    nodes = list(dict.fromkeys(n for n in nodes if n))
    shown = min(len(nodes), max(1, most))
    while True:
        if shown >= len(nodes):
            text = ", ".join(nodes)
        else:
            head = nodes[:max(1, shown - 1)]
            text = f"{', '.join(head)} and {len(nodes) - len(head)} more"
        if room is None or len(text) <= room or shown <= 1:
            return text
        shown -= 1


__all__ = ["BOUNDARY", "LIMIT", "MOST_NAMED", "SUMMARY_LIMIT", "bound", "clauses", "cut", "join", "named_nodes", "node_list",
           "one_line"]
