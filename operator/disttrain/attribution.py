"""Attribution (pure): the cause's message, naming the node(s) the evidence singles out.

:func:`explain` returns the failing check's message (at most :data:`messages.LIMIT`).
"""
from __future__ import annotations

from typing import Optional, Sequence

from disttrain_probe import vocabulary as V

from . import messages as M
from .findings import Finding, RankInput
from .verdicts import merged_message

_MASTER_PORT = (V.MASTER_PORT_TIMEOUT, V.MASTER_PORT_REFUSED)


def master_node_note(cause: Finding, ranks: Sequence[RankInput],
                     master_addr: Optional[str]) -> str:
    """For a blocked master port: the dialling ranks report, but the fault (a firewall,
    nothing listening) may be on the master's node, which their messages know only by
    address: name it. '' when it is already named or unknown."""
    if cause.reason not in _MASTER_PORT or not ranks or ranks[0].rank != 0:
        return ""
    master = ranks[0].node
    if not master or master == ranks[0].pod:
        return ""
    where = f"MASTER_ADDR {master_addr}" if master_addr else "MASTER_ADDR"
    return (f"{where} is {master} (rank 0, where the rendezvous listens): check {master}'s "
            f"firewall for the master port")


def culprits(message: str, nodes: Sequence[str]) -> list[str]:
    """The node(s) a message singles out: the one it starts with (``node-a: ...``,
    ``node-a (rank 1): ...``), else those its last clause (the fix) names, else all it
    names."""
    for n in nodes:
        if n and (message.startswith(n + ":") or message.startswith(n + " (")):
            return [n]
    parts = M.clauses(message)
    return (M.named_nodes(parts[-1], nodes) if parts else []) or M.named_nodes(message, nodes)


def explain(cause: Finding, found: Sequence[Finding], ranks: Sequence[RankInput],
            master_addr: Optional[str]) -> tuple[str, list[str]]:
    """The message of the failing check for ``cause`` (one of ``found``) and the node(s)
    it singles out."""
    nodes = [r.node for r in ranks]
    note = master_node_note(cause, ranks, master_addr)
    message = merged_message(found, cause.reason)
    if note and ranks[0].node not in message:
        message = M.bound(message, M.LIMIT - len(note) - len(M.SEP)) + M.SEP + note
    named = culprits(message, nodes) or ([cause.node] if cause.node else [])
    if len(named) == 1 and message.startswith(named[0]):  # each node that reported it
        named += [f.node for f in found if f.reason == cause.reason and f.node
                  and f.node not in named]
    return message, named


__all__ = ["culprits", "explain", "master_node_note"]
