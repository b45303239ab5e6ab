"""Reports are evidence only when they are the report of the pod that wrote them."""

import math

import pytest

from disttrain import constants as c
from disttrain.trust import Expected, check, identity_problem

from .fixtures import report

EXP = Expected(rank=1, world_size=2, job_uid="uid-1", attempt=1, pod="j-probe-1", node="node-b",
               master_addr="10.100.0.10", master_port=29500, min_busbw_gbps=0.5)


def good():
    r = report(1, "node-b")
    r["pod"] = "j-probe-1"
    return r


def test_the_pods_own_passing_report_is_trusted():
    out = check(good(), EXP)
    assert out.error is None and out.report["ok"] is True


@pytest.mark.parametrize("field,value,named", [
    ("rank", 0, "rank"),
    ("worldSize", 3, "worldSize"),
    ("jobUid", "uid-of-a-deleted-job", "jobUid"),
    ("jobUid", None, "jobUid"),  # a report that does not say whose it is is not evidence
    ("attempt", 2, "attempt"),
    ("pod", "other-job-probe-1", "pod"),
    ("node", "node-c", "node"),
])
def test_a_report_that_is_not_this_pods_is_invalid_naming_the_field(field, value, named):
    r = good()
    r[field] = value
    out = check(r, EXP)
    assert out.report is None and named in out.error and "rank 1" in out.error


def test_master_must_be_the_one_the_operator_gave():
    r = good()
    r["master"]["addr"] = "10.9.9.9"
    assert "master.addr" in identity_problem(r, EXP)
    r = good()
    r["master"]["port"] = 29501
    assert "master.port" in identity_problem(r, EXP)
    # rank 0 learns its own address from the downward API: not compared
    assert identity_problem(good(), Expected(**{**EXP.__dict__, "master_addr": None})) is None


def test_ok_with_a_failure_contradicts_itself():
    r = good()
    r["failure"] = {"reason": "MasterPortTimeout", "message": "x"}
    out = check(r, EXP)
    assert out.report is None and "contradicts" in out.error


def test_incorrect_allreduce_never_validates():
    r = good()
    r["allreduce"]["correct"] = False
    out = check(r, EXP)
    assert out.report["ok"] is False
    assert out.report["failure"]["reason"] == c.REASON_ALLREDUCE_WRONG_RESULT


@pytest.mark.parametrize("busbw,reason", [
    (0.5 / 10000, c.REASON_BANDWIDTH_BELOW_THRESHOLD),
    (0.49, c.REASON_BANDWIDTH_BELOW_THRESHOLD),
    (0.5, None),
    (12.0, None),
])
def test_operator_applies_the_bandwidth_threshold_itself(busbw, reason):
    r = good()
    r["allreduce"]["busbwGBps"] = busbw
    out = check(r, EXP)
    assert out.error is None
    assert (out.report.get("failure") or {}).get("reason") == reason


@pytest.mark.parametrize("busbw", [None, math.nan, math.inf, -1.0, "fast", True])
def test_a_pass_without_a_finite_bandwidth_is_invalid(busbw):
    r = good()
    r["allreduce"]["busbwGBps"] = busbw
    assert check(r, EXP).error


def test_a_pass_without_allreduce_is_invalid_and_a_failure_passes_through():
    r = good()
    r["allreduce"] = None
    assert "without an all-reduce" in check(r, EXP).error
    f = report(1, "node-b", ok=False, failure={"reason": "MasterPortTimeout", "message": "m"})
    out = check(f, EXP)
    assert out.error is None and out.report is f
