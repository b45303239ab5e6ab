"""Conditions from findings (pure): the check conditions and the ``Validated`` summary.

- The cause's check is False with the cause's message (bounded, see :mod:`messages`);
  the checks before it are True, those after it Unknown (not reached); a cause that
  belongs to no check (invalid report, crashed probe) leaves every check Unknown.
- ``Validated`` names the first failing check and points at it instead of repeating it
  (for a cause of no check, it carries the cause itself).
- Warnings keep their check True with the first warning's reason and say each kind of
  warning once, naming the nodes; ``Validated`` is then ``PassedWithWarnings`` and lists
  which checks warned.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from disttrain.api import constants
from disttrain.diagnosis import messages
from disttrain.diagnosis.findings import Finding, is_warning_reason, warning_check
from disttrain_probe.contract import vocabulary


@dataclass
class Verdict:
    """One condition: status True/False/Unknown, a vocabulary reason, a message of at most
    :data:`messages.LIMIT` characters."""

    status: str
    reason: str
    message: str


def merged_message(found: Sequence[Finding], reason: str, limit: int = messages.LIMIT) -> str:
    """The message of ``reason``'s findings: the first one whole (bounded), then the other
    nodes that reported the same reason, named, not repeated. A verdict every rank
    reports identically (choice, versions) is said once, unprefixed."""
    mine = [f for f in found if f.reason == reason]
    if not mine:
        return ""
    first = mine[0]
    same = [f for f in mine if f.message == first.message]
    text = first.message if len(same) > 1 or not first.node else first.text
    others = [f.node for f in mine if f.message != first.message and f.node and f.node != first.node]
    also = (f"the same reason on {messages.node_list(others, messages.MOST_NAMED)} (status.probe.failures)"
            if others else "")
    if also:
        return messages.bound(text, limit - len(also) - len(messages.SEP)) + messages.SEP + also
    return messages.bound(text, limit)


def failed(cause: Finding, message: str, nodes: Sequence[str]) -> dict[str, Verdict]:
    """The probe checks and Validated when ``cause`` failed with ``message`` (already
    bounded); ``nodes`` the node(s) it names, for Validated's pointer."""
    check = cause.check
    out: dict[str, Verdict] = {}
    if check is None:
        for ctype in vocabulary.PROBE_CHECKS:
            out[ctype] = Verdict(constants.UNKNOWN, vocabulary.NOT_REACHED,
                                 f"not checked: the probe run failed ({cause.reason}), see Validated")
        out[vocabulary.VALIDATED] = Verdict(constants.FALSE, cause.reason, messages.bound(message, messages.SUMMARY_LIMIT))
        return out
    idx = vocabulary.CHECK_CONDITIONS.index(check)
    for ctype in vocabulary.PROBE_CHECKS:
        i = vocabulary.CHECK_CONDITIONS.index(ctype)
        if i < idx:
            out[ctype] = Verdict(constants.TRUE, vocabulary.PASS_REASON[ctype], "passed on every node")
        elif i == idx:
            out[ctype] = Verdict(constants.FALSE, cause.reason, message)
        else:
            out[ctype] = Verdict(constants.UNKNOWN, vocabulary.NOT_REACHED, f"not checked: {check} is False")
    head, tail = f"{check}=False ({cause.reason})", f": see the {check} condition for the cause and the fix"
    room = messages.SUMMARY_LIMIT - len(head) - len(tail) - len(" on ")
    where = f" on {messages.node_list(nodes, messages.MOST_NAMED, room)}" if nodes else ""
    out[vocabulary.VALIDATED] = Verdict(constants.FALSE, cause.reason, messages.bound(
        head + where + tail, messages.SUMMARY_LIMIT))
    return out


NODE_PLACEHOLDER = "<node>"


def _strip_node(f: Finding) -> str:
    """The warning's text without its leading node, its other mentions of that node as
    ``<node>``, so the same warning on several nodes groups as one."""
    text = f.message
    for prefix in (f"{f.node}: ", f"{f.node} "):
        if f.node and text.startswith(prefix):
            text = text[len(prefix):]
            break
    if f.node:
        text = re.sub(rf"(?<![\w-]){re.escape(f.node)}(?![\w-])", NODE_PLACEHOLDER, text)
    return text


def grouped_warnings(found: Sequence[Finding]) -> list[tuple[str, list[str], str]]:
    """(reason, nodes, text without the node) per distinct warning, first seen first:
    the same warning on several nodes is one entry naming them all. Texts that differ only
    in their figures (``took 14.2s`` / ``took 12.9s``) are the same warning: the first
    node's figures are shown, ``(node-a; also node-b)`` says whose they are."""
    groups: dict[tuple[str, str], tuple[str, list[str]]] = {}
    differs: set[tuple[str, str]] = set()
    for f in found:
        text = _strip_node(f)
        key = (f.reason, re.sub(r"\d+(\.\d+)?", "#", text))
        first, nodes = groups.setdefault(key, (text, []))
        if f.node and f.node not in nodes:
            nodes.append(f.node)
        if text != first:
            differs.add(key)
    return [(reason, nodes, _own_figures(text, nodes) if (reason, norm) in differs else text)
            for (reason, norm), (text, nodes) in groups.items()]


def _own_figures(text: str, nodes: list[str]) -> str:
    """A grouped warning whose figures are the first node's: say so."""
    if len(nodes) < 2:
        return text
    return f"{text.replace(NODE_PLACEHOLDER, nodes[0])} ({nodes[0]}'s figures)"


def warning_text(nodes: Sequence[str], text: str) -> str:
    """``node-a, node-b: text``; with one node, ``<node>`` in the text is that node."""
    if len(nodes) == 1:
        text = text.replace(NODE_PLACEHOLDER, nodes[0])
    return f"{messages.node_list(nodes, messages.MOST_NAMED)}: {text}" if nodes else text


def warned(passed: dict[str, Verdict], found: Sequence[Finding]) -> dict[str, Verdict]:
    """``passed`` with each warned check's reason and message replaced: its first
    warning's reason; what passed (its first clause), the first warning (naming its nodes),
    the rest of what passed, and how many more warnings (status.probe.warnings), while it
    fits."""
    out = dict(passed)
    by_check: dict[str, list[tuple[str, list[str], str]]] = {}
    for g in grouped_warnings(found):
        by_check.setdefault(warning_check(g[0]), []).append(g)
    for ctype, groups in by_check.items():
        if ctype not in out:
            continue
        texts = [warning_text(nodes, text) for _, nodes, text in groups]
        more = (f"{len(texts) - 1} more warning(s): "
                + ", ".join(dict.fromkeys(g[0] for g in groups[1:])) + " (status.probe.warnings)"
                if len(texts) > 1 else "")
        # a reason the vocabulary does not know (a newer probe) is said, never set
        reason = next((g[0] for g in groups if is_warning_reason(g[0])), out[ctype].reason)
        passed_parts = messages.clauses(out[ctype].message)  # what passed first, then the warnings
        tail = len(messages.SEP) + len(more) if more else 0
        head = _passed_head(passed_parts[0], texts[0], tail)
        first = messages.bound(texts[0], max(messages.LIMIT - 160, messages.LIMIT - len(head) - len(messages.SEP) - tail))
        out[ctype] = Verdict(constants.TRUE, reason, messages.join([head, first, *passed_parts[1:], more]))
    return out


def _passed_head(passed: str, warning: str, tail: int) -> str:
    """What passed (its first clause), shortened when the first warning (its nodes, the
    fix) and ``tail`` characters would not fit after it: its part before ``": "`` (the
    choice, without why it ranked first: ``eth0 (10.100.0.0/24) chosen on every node over
    eth1``), else cut at a word boundary; never below 60 characters."""
    room = messages.LIMIT - len(warning) - len(messages.SEP) - tail
    if len(passed) <= room:
        return passed
    short = passed.split(": ", 1)[0]
    return short if len(short) <= max(room, 60) else messages.cut(passed, max(room, 60))


def summary_passed(passed: dict[str, Verdict], found: Sequence[Finding], n: int,
                   ifnames: Optional[str], master_addr: Optional[str],
                   busbw: Optional[float]) -> Verdict:
    """Validated when every check passed: the rendezvous training gets, or which checks
    warned (pointing at them)."""
    if not found:
        return Verdict(constants.TRUE, vocabulary.ALL_CHECKS_PASSED, messages.bound(
            f"{n} nodes validated; NCCL_SOCKET_IFNAME={ifnames}; MASTER_ADDR={master_addr}; "
            f"busbw {busbw} GB/s", messages.SUMMARY_LIMIT))
    parts = []
    for ctype in vocabulary.PROBE_CHECKS:
        by_reason: dict[str, list[str]] = {}
        for f in found:
            if warning_check(f.reason) == ctype:
                nodes = by_reason.setdefault(f.reason, [])
                if f.node and f.node not in nodes:
                    nodes.append(f.node)
        if by_reason:
            what = ", ".join(f"{reason} on {messages.node_list(nodes, messages.MOST_NAMED) or 'all nodes'}"
                             for reason, nodes in by_reason.items())
            parts.append(f"{ctype}: {what}")
    return Verdict(constants.TRUE, vocabulary.PASSED_WITH_WARNINGS, messages.bound(
        f"passed with warnings: {'; '.join(parts)}; see those conditions", messages.SUMMARY_LIMIT))


__all__ = ["Verdict", "failed", "grouped_warnings", "merged_message", "summary_passed", "warned",
           "warning_text"]
