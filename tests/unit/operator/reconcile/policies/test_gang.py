"""Which gang the job's pods join (:mod:`disttrain.reconcile.policies.gang`): the instance per
role, named by the probe attempt, the training restart and the suspensions."""

from disttrain.api import constants as C
from disttrain.children import gang as gang_objects
from disttrain.reconcile.policies import gang
from tests.support.builders import Want, check, given, table

WORKLOAD_API = frozenset({gang.CAP_WORKLOAD_API})


def names(probe, training, provider="volcano", size=2):
    """A check of :func:`gang.gangs`'s answer: the probe and training gangs of ``provider``,
    with these PodGroup names and ``size`` pods each."""
    return lambda got: got == {
        C.ROLE_PROBE: gang_objects.Gang(provider, probe, "probe", size),
        C.ROLE_WORKER: gang_objects.Gang(provider, training, "training", size)}


def with_gang(setting, n=2):
    """A job of ``n`` nodes asking for gang ``setting``."""
    return given(n).run_policy(schedulingPolicy={"gang": setting})


@table(
    ("no gang asked, none served: none",
     given(),
     Want({})),
    ("auto without the Workload API: none",
     with_gang("auto"),
     Want({})),
    ("auto with the Workload API: the API's gangs",
     with_gang("auto").observing(capabilities=WORKLOAD_API),
     Want(names("j-probe-1", "j-training-0-0",
                provider="workload"))),
    ("none, although served: none",
     with_gang("none").observing(capabilities=WORKLOAD_API),
     Want({})),
    ("volcano: one gang per role of numNodes pods",
     with_gang("volcano", 3),
     Want(names("j-probe-1", "j-training-0-0", size=3))),
    ("probe attempt 3: its own probe gang",
     with_gang("coscheduling").probing(attempt=3),
     Want(names("j-probe-3", "j-training-0-0",
                provider="coscheduling"))),
    ("after 2 restarts and a suspension: a new training gang",
     with_gang("volcano").status(restarts=2, suspensions=1),
     Want(names("j-probe-1", "j-training-2-1"))),
    ("a garbage probe record: attempt 1",
     with_gang("volcano").status(probe="lost"),
     Want(names("j-probe-1", "j-training-0-0"))),
)
def test_gangs(name, given, want):
    check(gang.gangs, given, want)

