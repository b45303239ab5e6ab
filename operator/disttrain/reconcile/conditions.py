"""metav1.Condition list handling (pure).

Semantics borrowed from JobSet and the Kubernetes API conventions: a condition list is
keyed by ``type``; ``lastTransitionTime`` moves only when ``status`` changes; reason and
message may change in place; every write carries the ``observedGeneration`` it was
computed from. ``phase`` is derived from the conditions, never stored as its own truth.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Optional

from disttrain.api import constants
from disttrain.diagnosis import messages
from disttrain.diagnosis.checkconditions import Verdict
from disttrain_probe.contract import vocabulary

# A condition message says the cause, the node(s) and the fix in at most this many
# characters; details go to status fields, Events and `disttrain explain`.
MAX_MESSAGE = 400


def clip(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` on one line (line breaks joined by " | ") and at most ``limit``
    characters, cut at a word boundary and ending in "…" when cut
    (:func:`disttrain.diagnosis.messages.cut`)."""
    return messages.cut(messages.one_line(str(message)), limit)


def now_rfc3339(now: Optional[datetime] = None) -> str:
    """``now`` (default: the current UTC time) as RFC 3339 with second precision and ``Z``."""
    now = now or datetime.now(timezone.utc)
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def get(conditions: Iterable[dict[str, Any]], ctype: str) -> Optional[dict[str, Any]]:
    """The condition of type ``ctype``, or None."""
    for cond in conditions:
        if cond.get("type") == ctype:
            return cond
    return None


def status_of(conditions: Iterable[dict[str, Any]], ctype: str) -> str:
    """"True", "False" or "Unknown" (also when the condition is absent)."""
    cond = get(conditions, ctype)
    return cond["status"] if cond else constants.UNKNOWN


def is_true(conditions: Iterable[dict[str, Any]], ctype: str) -> bool:
    return status_of(conditions, ctype) == constants.TRUE


def set_condition(
    conditions: list[dict[str, Any]],
    ctype: str,
    value: Verdict,
    generation: Optional[int],
    now: str,
) -> bool:
    """Set condition ``ctype`` in place to ``value`` (its status, reason and message).
    Returns True when status, reason or message changed.

    ``lastTransitionTime`` is set to ``now`` only when the status changes (or the condition
    is new). Raises ValueError for a status other than True/False/Unknown.
    """
    status, reason, message = value.status, value.reason, value.message
    if status not in (constants.TRUE, constants.FALSE, constants.UNKNOWN):
        raise ValueError(f"condition status must be True, False or Unknown, not {status!r}")
    message = message[:32768]
    cond = get(conditions, ctype)
    if cond is None:
        conditions.append(
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
                "observedGeneration": generation,
            }
        )
        return True
    changed = (cond["status"], cond.get("reason"), cond.get("message")) != (status, reason, message)
    if cond["status"] != status:
        cond["lastTransitionTime"] = now
    cond.update(status=status, reason=reason, message=message, observedGeneration=generation)
    return changed


def initial(generation: Optional[int], now: str, probe_enabled: bool) -> list[dict[str, Any]]:
    """Every condition type as Unknown, written on the first visit."""
    conds: list[dict[str, Any]] = []
    for ctype in constants.ALL_CONDITIONS:
        if ctype in constants.CHECK_CONDITIONS and not probe_enabled:
            reason, msg = vocabulary.PROBE_DISABLED, "spec.probe.enabled is false: not checked"
        elif ctype in (constants.SUCCEEDED, constants.FAILED, constants.TRAINING_STARTED):
            reason, msg = vocabulary.TRAINING_PENDING, "training has not started"
        else:
            reason, msg = vocabulary.NOT_CHECKED, "waiting for the preflight probe"
        set_condition(conds, ctype, Verdict(constants.UNKNOWN, reason, msg), generation, now)
    return conds


def phase(conditions: list[dict[str, Any]], probing: bool) -> str:
    """The printer-column summary derived from the conditions."""
    if is_true(conditions, constants.SUCCEEDED):
        return constants.PHASE_SUCCEEDED
    if is_true(conditions, constants.FAILED):
        return constants.PHASE_FAILED
    if is_true(conditions, constants.SUSPENDED):
        return constants.PHASE_SUSPENDED
    if is_true(conditions, constants.TRAINING_STARTED):
        return constants.PHASE_RUNNING
    if is_true(conditions, constants.VALIDATED):
        return constants.PHASE_VALIDATED
    if probing:
        return constants.PHASE_PROBING
    return constants.PHASE_PENDING
