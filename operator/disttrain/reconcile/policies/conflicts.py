"""Names held by pods that are not the job's (pure): wait, say so, and stop waiting.

A pod's name is the job's to create (``<job>-probe-<rank>``, ``<job>-worker-<rank>``), but
another pod may hold it: the pod of a deleted job with the same name that is still
terminating (the garbage collector removes it after its grace period), or a pod orphaned by
``kubectl delete --cascade=orphan``. While one does, the job waits and its condition says
``NameConflict`` naming the pod(s); the wait is recorded in ``status.nameConflictSince``
(the probe budget does not run meanwhile). A conflict that lasts
:data:`NAME_CONFLICT_SECONDS` ends the job with ``NameConflict`` as its reason, never as a
timeout of something else.
"""

from __future__ import annotations

from typing import Optional

from disttrain.api import constants
from disttrain.children import observe
from disttrain.reconcile.policies.deadline import seconds_left
from disttrain.reconcile.step import Step

# A deleted job's pods go once their grace period ends (30 s unless the template asks for
# more) and the garbage collector has run; five minutes covers both with room, and a pod
# that is nobody's never goes on its own.
NAME_CONFLICT_SECONDS = 300.0


def check(s: Step, names: list[str]) -> Optional[tuple[str, bool]]:
    """(message, expired) when foreign pods hold any of ``names``, else None (and the
    recorded wait is cleared). ``expired``: the conflict has lasted NAME_CONFLICT_SECONDS.
    The message (< 400 characters for a few names) names the pods and the fix."""
    held = s.blockers(names)
    if not held:
        s.st.name_conflict_since = None
        return None
    since = s.st.name_conflict_since
    if not isinstance(since, str) or observe.parse_time(since) is None:  # new, or edited to garbage
        since = s.st.name_conflict_since = s.ts
    left = seconds_left(observe.parse_time(since), NAME_CONFLICT_SECONDS, s.now)
    shown = sorted(observe.name(p) for p in held)
    names_text = ", ".join(shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")
    deleted_job = all(observe.controller_kind(p) == constants.KIND for p in held)
    if deleted_job:
        msg = (f"{names_text} of a deleted job with the same name still exist(s) (terminating, "
               "or waiting for the garbage collector)")
    else:
        msg = (f"{names_text} exist(s) and is not this job's (no controller reference to it, e.g. "
               "orphaned by kubectl delete --cascade=orphan)")
    if left is not None and left <= 0:
        return (f"{msg} since {since}, {NAME_CONFLICT_SECONDS:g}s: delete it "
                f"(kubectl delete pod {shown[0]}), or rename the job", True)
    s.plan.requeue(min(2.0, left) if left is not None else 2.0)
    fix = "waiting for it to go" if deleted_job else "delete it, or rename the job"
    return f"{msg}: {fix} (the job waits up to {NAME_CONFLICT_SECONDS:g}s)", False
