"""Generated training pod statuses through :mod:`disttrain.children.rankend` (untrusted
input): it never raises for any shape, and a rank's outcome is its non-sidecar
containers', whatever its sidecars (plain or native) report."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.children import rankend

pytestmark = pytest.mark.fuzz

junk = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(
                                                ["status", "spec", "containerStatuses", "initContainerStatuses",
                                                 "name", "state", "terminated", "exitCode", "message", "phase",
                                                 "initContainers", "restartPolicy", "trainer"]), inner, max_size=4)),
                    max_leaves=20)


@given(junk)
def test_never_raises(pod):
    rankend.done(pod, "trainer")
    rankend.failure(pod, "trainer")
    rankend.trainer_end(pod, "trainer")


states = st.one_of(st.just("running"), st.just("waiting"), st.integers(0, 2), st.just(137))


def _state(s):
    if s == "running":
        return {"running": {}}
    if s == "waiting":
        return {"waiting": {"reason": "PodInitializing"}}
    return {"terminated": {"exitCode": s, "message": f"exit {s}"}}


@given(trainer=states, init=st.one_of(st.none(), states), sidecars=st.lists(states, max_size=3),
       natives=st.lists(states, max_size=2), phase=st.sampled_from(["Running", "Failed", "Succeeded", "Pending"]))
def test_the_outcome_is_the_non_sidecar_containers(trainer, init, sidecars, natives, phase):
    pod = {"spec": {"containers": [{"name": f"s{i}"} for i in range(len(sidecars))] + [{"name": "trainer"}],
                    "initContainers": [{"name": f"n{i}", "restartPolicy": "Always"} for i in range(len(natives))]
                    + ([{"name": "init"}] if init is not None else [])},
           "status": {"phase": phase,
                      "containerStatuses": [{"name": f"s{i}", "state": _state(x)} for i, x in enumerate(sidecars)]
                      + [{"name": "trainer", "state": _state(trainer)}],
                      "initContainerStatuses": [{"name": f"n{i}", "state": _state(x)} for i, x in enumerate(natives)]
                      + ([{"name": "init", "state": _state(init)}] if init is not None else [])}}
    # the trainer's exit decides; a pod the kubelet calls Succeeded counts without one
    assert rankend.done(pod, "trainer") == (trainer == 0 or (isinstance(trainer, str) and phase == "Succeeded"))
    end = rankend.failure(pod, "trainer")
    if isinstance(init, int) and init != 0:
        assert end is not None and (end.container, end.code, end.message) == ("init", init, f"exit {init}")
    elif isinstance(trainer, int) and trainer != 0:
        assert end is not None and (end.container, end.code) == ("trainer", trainer)
    else:
        assert end is None  # a sidecar's exit, 0 or not, is never the rank's
