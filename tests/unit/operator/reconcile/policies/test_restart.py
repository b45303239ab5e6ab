"""Gang restart and re-probe after a rank fails (:mod:`disttrain.reconcile.policies.restart`)."""

import pytest

from disttrain.reconcile.policies import restart
from disttrain_probe.contract import vocabulary


@pytest.mark.parametrize("restarts,limit,reprobe,probe,want", [
    (0, 0, False, True, restart.Decision(False, False, vocabulary.RANK_FAILED)),
    (0, 2, False, True, restart.Decision(True, False, vocabulary.RESTARTING)),
    (1, 2, True, True, restart.Decision(True, True, vocabulary.RESTARTING)),
    (1, 2, True, False, restart.Decision(True, False, vocabulary.RESTARTING)),  # nothing to re-probe
    (2, 2, True, True, restart.Decision(False, False, vocabulary.BACKOFF_LIMIT_EXCEEDED)),
    (5, 2, False, True, restart.Decision(False, False, vocabulary.BACKOFF_LIMIT_EXCEEDED)),
])
def test_restart_decision(restarts, limit, reprobe, probe, want):
    assert restart.on_rank_failure(restarts, limit, reprobe, probe) == want
