"""Where the check's answer is read from and written to in a Workload (pure): which of our
checks wait for an answer (:func:`awaiting`), their entry's ``retryCount``, and the
server-side apply body that writes an :class:`~disttrain.admissioncheck.answer.Answer`
(:func:`apply_body`).

As Kueue v0.17.0 keeps them: ``status.admissionChecks`` is a list map keyed by ``name``
(``+listType=map``), so a server-side apply of one entry under the check controller's own
field manager leaves the other checks' entries alone (a JSON merge patch would replace the
whole list). ``lastTransitionTime`` changes only when the state does, as Kueue's
``workload.SetAdmissionCheckState`` keeps it; ``retryCount`` is Kueue's to count, never
written here. A Workload is probed once its ``QuotaReserved`` condition is True, our
check's state is Pending, and it is neither finished nor being deleted.

Kueue holds a ClusterQueue inactive while one of its AdmissionChecks is not ``Active``
(a condition the check's controller sets): :func:`active_body` is that condition, written
by the controller on each AdmissionCheck with our controllerName.
"""

from __future__ import annotations

from typing import Any, Optional

from disttrain.admissioncheck.answer import PENDING, Answer
from disttrain.admissioncheck.workload import WORKLOAD_API_VERSION
from disttrain.api import constants

QUOTA_RESERVED = "QuotaReserved"
FINISHED = "Finished"
FIELD_MANAGER = "disttrain-preflight"


def _conditions(workload: Any) -> dict[str, Any]:
    status = workload.get("status") if isinstance(workload, dict) else None
    conds = status.get("conditions") if isinstance(status, dict) else None
    return {c["type"]: c.get("status") for c in (conds if isinstance(conds, list) else [])
            if isinstance(c, dict) and isinstance(c.get("type"), str)}


def entry(workload: Any, check: str) -> Optional[dict[str, Any]]:
    """The ``status.admissionChecks[]`` entry of ``check`` (None: Kueue has not added it)."""
    status = workload.get("status") if isinstance(workload, dict) else None
    checks = status.get("admissionChecks") if isinstance(status, dict) else None
    for c in checks if isinstance(checks, list) else []:
        if isinstance(c, dict) and c.get("name") == check:
            return c
    return None


def awaiting(workload: Any, ours: set[str]) -> list[str]:
    """Our checks (``ours``: the AdmissionChecks with our controllerName) this Workload waits
    on now: quota reserved, the check Pending, not finished, not being deleted."""
    meta = workload.get("metadata") if isinstance(workload, dict) else None
    if not isinstance(meta, dict) or meta.get("deletionTimestamp"):
        return []
    conds = _conditions(workload)
    if conds.get(QUOTA_RESERVED) != constants.TRUE or conds.get(FINISHED) == constants.TRUE:
        return []
    out = []
    for name in sorted(ours):
        e = entry(workload, name)
        if e is not None and e.get("state") == PENDING:
            out.append(name)
    return out


def retry_count(workload: Any, check: str) -> int:
    """How many times Kueue counted a Retry of ``check`` (0 when absent or unreadable)."""
    e = entry(workload, check)
    n = e.get("retryCount") if e else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def apply_body(workload: dict[str, Any], check: str, ans: Answer, now: str) -> dict[str, Any]:
    """The server-side apply body (status subresource, field manager :data:`FIELD_MANAGER`)
    that sets ``check``'s entry to ``ans``; ``now`` (RFC 3339) is its lastTransitionTime
    when the state changes."""
    old = entry(workload, check) or {}
    since = old.get("lastTransitionTime") if old.get("state") == ans.state else None
    new: dict[str, Any] = {"name": check, "state": ans.state, "message": ans.message,
                           "lastTransitionTime": since if isinstance(since, str) and since else now}
    if ans.pod_set_updates:
        new["podSetUpdates"] = ans.pod_set_updates
    if ans.requeue_after_seconds is not None:
        new["requeueAfterSeconds"] = ans.requeue_after_seconds
    meta = workload["metadata"]
    return {"apiVersion": WORKLOAD_API_VERSION, "kind": "Workload",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "status": {"admissionChecks": [new]}}


ACTIVE = "Active"


def active_body(check: Any, now: str) -> Optional[dict[str, Any]]:
    """The server-side apply body (status subresource) that marks the AdmissionCheck
    ``check`` Active at its generation; None when it already is (or is unreadable)."""
    meta = check.get("metadata") if isinstance(check, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    gen = meta.get("generation") if isinstance(meta.get("generation"), int) else None
    st = check.get("status")
    conds = st.get("conditions") if isinstance(st, dict) else None
    for c in conds if isinstance(conds, list) else []:
        if isinstance(c, dict) and c.get("type") == ACTIVE and c.get("status") == constants.TRUE \
                and c.get("observedGeneration") == gen:
            return None
    cond: dict[str, Any] = {"type": ACTIVE, "status": constants.TRUE, "reason": "Active",
                            "message": "the disttrain operator's preflight controller runs",
                            "lastTransitionTime": now}
    if gen is not None:
        cond["observedGeneration"] = gen
    return {"apiVersion": WORKLOAD_API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": meta["name"]},
            "status": {"conditions": [cond]}}
