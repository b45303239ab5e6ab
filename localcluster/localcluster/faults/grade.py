"""Grading a job's final conditions against the oracle's expectation: ``right`` (the status,
an acceptable reason, every required name and the fix's object, nothing forbidden), ``half``
(the right status and cause class, but a name, node, interface or fix wrong or missing; or a
job refused over a fault on a network it need not use),
``wrong`` (no verdict, the wrong status, a cause the fault does not have, or a false alarm),
``silent-pass`` (``Validated=True`` where the fault breaks the network the job would use:
the worst outcome). Pure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from disttrain_probe.contract import vocabulary as V
from localcluster.faults.oracle import Expectation

RIGHT, HALF, WRONG, SILENT = "right", "half", "wrong", "silent-pass"
OUTCOMES = (RIGHT, HALF, WRONG, SILENT)


@dataclass(frozen=True)
class Grade:
    outcome: str  # one of OUTCOMES
    why: str  # '' when right; else what fell short, with the condition's message
    said: tuple[str, ...] = ()  # what it must never say and said (e.g. "firewall")


def _find(conditions: list[dict], ctype: str) -> Optional[dict]:
    return next((c for c in conditions if c.get("type") == ctype), None)


def _sub(text: str, rank_nodes: dict[int, str]) -> str:
    for r, n in rank_nodes.items():
        text = text.replace(f"{{node:{r}}}", n)
    return text


def _defects(exp: Expectation, message: str, rank_nodes: dict[int, str]) -> tuple[list[str], list[str]]:
    """(naming defects: a required string missing, a forbidden node named, no fix object;
    cause defects: something it must never say)."""
    naming = []
    missing = [s for s in (_sub(x, rank_nodes) for x in exp.must_name) if s not in message]
    if missing:
        naming.append(f"does not name {missing}")
    named = [s for s in (_sub(x, rank_nodes) for x in exp.must_not_name) if s in message]
    if named:
        naming.append(f"names {named}, which only waited")
    if exp.fix and not any(f in message for f in exp.fix):
        naming.append(f"names no fix object ({' or '.join(exp.fix)})")
    said = [s for s in exp.never_say if s in message]
    return naming, ([f"says {said}, which the fault does not have"] if said else [])


def _said(exp: Expectation, conditions: list[dict]) -> tuple[str, ...]:
    text = " ".join(c.get("message") or "" for c in conditions)
    return tuple(s for s in exp.never_say if s in text)


def _grade_false(exp: Expectation, conditions: list[dict], rank_nodes: dict[int, str]) -> Grade:
    val = _find(conditions, V.VALIDATED)
    if val is None or val.get("status") not in ("True", "False"):
        return Grade(WRONG, f"no verdict: Validated is {val and val.get('status')}/{val and val.get('reason')}")
    if val["status"] == "True":
        return Grade(SILENT, f"Validated=True ({val.get('reason')}) but {exp.why}: {val.get('message', '')}")
    failed = [c for c in conditions if c.get("type") in V.PROBE_CHECKS and c.get("status") == "False"]
    message = " ".join([val.get("message") or ""] + [c.get("message") or "" for c in failed])
    reason = val.get("reason")
    naming, cause = _defects(exp, message, rank_nodes)
    wrong_reason = bool(exp.reasons) and reason not in exp.reasons
    head = f"Validated=False {reason}: {val.get('message', '')}"
    if cause or (wrong_reason and naming):
        return Grade(WRONG, "; ".join(cause + naming + ([f"reason {reason} not in {exp.reasons}"]
                                                         if wrong_reason else [])) + f" ({head})")
    if wrong_reason or naming:
        return Grade(HALF, "; ".join(naming + ([f"reason {reason} not in {exp.reasons}"]
                                               if wrong_reason else [])) + f" ({head})")
    return Grade(RIGHT, "")


def _grade_true(exp: Expectation, conditions: list[dict], rank_nodes: dict[int, str],
                socket_ifname: Optional[str]) -> Grade:
    val = _find(conditions, V.VALIDATED)
    if val is None or val.get("status") not in ("True", "False"):
        return Grade(WRONG, f"no verdict: Validated is {val and val.get('status')}/{val and val.get('reason')}")
    if val["status"] == "False":
        if exp.broken_ifnames:  # a real fault, on a network the job need not use
            return Grade(HALF, f"refused a job that could train (right: {exp.why}): Validated=False "
                               f"{val.get('reason')}: {val.get('message', '')}")
        return Grade(WRONG, f"a false alarm: Validated=False {val.get('reason')}: {val.get('message', '')} "
                            f"(right: {exp.why})")
    if socket_ifname and set(socket_ifname.split(",")) & set(exp.broken_ifnames):
        return Grade(SILENT, f"validated on {socket_ifname}, which the fault breaks (right: {exp.why})")
    cond = _find(conditions, exp.condition) or {}
    message, reason = cond.get("message") or "", cond.get("reason")
    if exp.reasons and reason not in exp.reasons:
        return Grade(WRONG, f"{exp.condition} is {cond.get('status')}/{reason}, not the expected "
                            f"{'/'.join(exp.reasons)}: {message} (right: {exp.why})")
    naming, cause = _defects(exp, message, rank_nodes)
    if cause:
        return Grade(WRONG, "; ".join(cause + naming) + f" ({exp.condition}: {message})")
    if exp.socket_ifname and socket_ifname != exp.socket_ifname:
        naming.append(f"validated on {socket_ifname}, expected {exp.socket_ifname}")
    if naming:
        return Grade(HALF, "; ".join(naming) + f" ({exp.condition}: {message})")
    return Grade(RIGHT, "")


def grade(exp: Expectation, conditions: list[dict], rank_nodes: Optional[dict[int, str]] = None,
          socket_ifname: Optional[str] = None) -> Grade:
    """Grade the job's final ``conditions`` (status.conditions: dicts with type, status,
    reason, message) against ``exp``. ``rank_nodes``: probe rank -> node (resolves
    ``{node:N}``); ``socket_ifname``: status.rendezvous.socketIfname (a comma list when
    nodes differ). Never raises for malformed conditions: they grade as no verdict."""
    conds = [c for c in conditions or [] if isinstance(c, dict)]
    if exp.status == "False":
        g = _grade_false(exp, conds, rank_nodes or {})
    else:
        g = _grade_true(exp, conds, rank_nodes or {}, socket_ifname)
    said = _said(exp, [c for c in conds if c.get("status") == "False" or c.get("type") == exp.condition])
    return Grade(g.outcome, g.why, said)
