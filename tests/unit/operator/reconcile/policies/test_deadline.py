"""Time limits (:mod:`disttrain.reconcile.policies.deadline`): the probe budget and
``runPolicy.activeDeadlineSeconds``."""

from datetime import timedelta

import pytest

from disttrain.reconcile.policies import deadline
from tests.support.builders import spec_of as spec
from tests.support.reconcile import NOW


@pytest.mark.parametrize("start,limit,now_offset,want", [
    (None, 90, 0, None),
    (NOW, None, 0, None),
    (NOW, 90, 0, 90.0),
    (NOW, 90, 89.5, 0.5),
    (NOW, 90, 120, -30.0),
])
def test_seconds_left(start, limit, now_offset, want):
    assert deadline.seconds_left(start, limit, NOW + timedelta(seconds=now_offset)) == want


def test_probe_budget_is_timeout_plus_slack():
    assert deadline.probe_budget_seconds(spec(probe={"timeoutSeconds": 20})) == 20 + deadline.PROBE_SLACK_SECONDS


@pytest.mark.parametrize("probe,want", [
    ({}, 90.0),                         # the default timeoutSeconds (60) and 30 s of slack
    ({"timeoutSeconds": 20}, 50.0),
    ({"timeoutSeconds": 600}, 630.0),
])
def test_probe_budget(probe, want):
    assert deadline.probe_budget_seconds(spec(probe=probe)) == want


def test_training_deadline_only_when_set():
    assert deadline.training_seconds_left(spec(), NOW, NOW) is None
    s = spec(runPolicy={"activeDeadlineSeconds": 10})
    assert deadline.training_seconds_left(s, NOW, NOW + timedelta(seconds=4)) == 6
    assert deadline.training_seconds_left(s, None, NOW) is None
