"""Names held by pods that are not the job's (:mod:`disttrain.reconcile.policies.conflicts`):
wait, say so, and stop waiting after NAME_CONFLICT_SECONDS."""

from disttrain.api import constants as C
from disttrain.reconcile.policies import conflicts
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import pod


def held(name="j-probe-1", owner=None):
    """A pod of the job's name that is not the job's: ``owner`` the UID of the job that owns
    it (a deleted namesake), None for an orphan."""
    return pod(name, C.ROLE_PROBE, int(name[-1]), owner_uid=owner)


def said(text, expired):
    """A check of :func:`conflicts.check`'s answer: its message says ``text``; ``expired``."""
    return lambda found: found is not None and text in found[0] and found[1] is expired


def check_names(s):
    """:func:`conflicts.check` over the names of the job's probe pods (one per node)."""
    return conflicts.check(s, [f"j-probe-{r}" for r in range(s.spec.num_nodes)])


@table(
    ("no pod holds the names: nothing",
     given().probes("Running", "Running"),
     Want(None, status={"nameConflictSince": None}, more=lambda s: s.plan.requeue_after is None)),
    ("the conflict is over: its record cleared",
     given().status(nameConflictSince="2026-11-30T11:58:00Z"),
     Want(None, status={"nameConflictSince": None})),
    ("an orphan holds a name: the fix is to delete it, the wait recorded",
     given().probes("Running").with_pods(held()),
     Want(said("j-probe-1 exist(s) and is not this job's (no controller reference to it, e.g. orphaned by "
               "kubectl delete --cascade=orphan): delete it, or rename the job (the job waits up to 300s)", False),
          status={"nameConflictSince": "2026-11-30T12:00:00Z"}, requeue=2.0)),
    ("a deleted namesake's pod: wait for it to go",
     given().with_pods(held("j-probe-0", owner="uid-0"), held(owner="uid-0")),
     Want(said("j-probe-0, j-probe-1 of a deleted job with the same name still exist(s) (terminating, or waiting "
               "for the garbage collector): waiting for it to go", False), requeue=2.0)),
    ("waited almost 300s: run again when it is due",
     given().status(nameConflictSince="2026-11-30T11:55:01Z").with_pods(held()),
     Want(said("not this job's", False), status={"nameConflictSince": "2026-11-30T11:55:01Z"}, requeue=1.0)),
    ("waited 300s: expired, the pod to delete named",
     given().status(nameConflictSince="2026-11-30T11:55:00Z").with_pods(held()),
     Want(said("since 2026-11-30T11:55:00Z, 300s: delete it (kubectl delete pod j-probe-1), or rename the job", True),
          more=lambda s: s.plan.requeue_after is None)),
    ("a recorded wait edited to garbage: counted from now",
     given().status(nameConflictSince="yesterday").with_pods(held()),
     Want(said("not this job's", False), status={"nameConflictSince": "2026-11-30T12:00:00Z"})),
    ("many names held: four named, the rest counted",
     given(6).with_pods(*(held(f"j-probe-{r}") for r in range(6))),
     Want(said("j-probe-0, j-probe-1, j-probe-2, j-probe-3 and 2 more exist(s)", False))),
    ("a name held by a pod not asked about: nothing",
     given().with_pods(held("j-probe-5")),
     Want(None)),
)
def test_check(name, given, want):
    check(check_names, given, want)
