"""Reports are evidence only when they are the report of the pod that wrote them."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.diagnosis.trust import Expected, check, identity_problem
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import report, typed_report

EXP = Expected(rank=1, world_size=2, job_uid="uid-1", attempt=1, pod="j-probe-1", node="node-b",
               master_addr="10.100.0.10", master_port=29500, min_busbw_gbps=0.5)


def good():
    r = report(1, "node-b")
    r["pod"] = "j-probe-1"
    return r


def test_the_pods_own_passing_report_is_trusted():
    out = check(typed_report(good()), EXP)
    assert out.error is None and out.report.ok is True


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
    out = check(typed_report(r), EXP)
    assert out.report is None and named in out.error and "rank 1" in out.error


def test_master_must_be_the_one_the_operator_gave():
    r = good()
    r["master"]["addr"] = "10.9.9.9"
    assert "master.addr" in identity_problem(typed_report(r), EXP)
    r = good()
    r["master"]["port"] = 29501
    assert "master.port" in identity_problem(typed_report(r), EXP)
    # rank 0 learns its own address from the downward API: not compared
    assert identity_problem(typed_report(good()), Expected(**{**EXP.__dict__, "master_addr": None})) is None


def test_ok_with_a_failure_contradicts_itself():
    r = good()
    r["failure"] = {"reason": "MasterPortTimeout", "message": "x"}
    out = check(typed_report(r), EXP)
    assert out.report is None and "contradicts" in out.error


@pytest.mark.parametrize("field,several,said", [
    ("allreduce", False, "node-b: the all-reduce result was wrong"),
    ("intraNode", True, "node-b: the all-reduce among its 2 local ranks was wrong"),
])
def test_incorrect_allreduce_never_validates(field, several, said):
    r = good2() if several else good()
    r[field]["correct"] = False
    out = check(typed_report(r), EXP2 if several else EXP)
    assert out.report.ok is False
    assert out.report.failure.reason == vocabulary.ALL_REDUCE_WRONG_RESULT
    assert out.report.failure.message.startswith(said)


@pytest.mark.parametrize("busbw,reason", [
    (0.5 / 10000, vocabulary.BANDWIDTH_BELOW_THRESHOLD),
    (0.49, vocabulary.BANDWIDTH_BELOW_THRESHOLD),
    (0.5, None),
    (12.0, None),
])
def test_operator_applies_the_bandwidth_threshold_itself(busbw, reason):
    r = good()
    r["allreduce"]["busbwGBps"] = busbw
    out = check(typed_report(r), EXP)
    assert out.error is None
    assert out.report.failure_reason == reason


@pytest.mark.parametrize("busbw", [None, math.nan, math.inf, -1.0, "fast", True])
def test_a_pass_without_a_finite_bandwidth_is_invalid(busbw):
    """Refused at the parse (the model: no text, no bool, no negative) or by check."""
    r = good()
    r["allreduce"]["busbwGBps"] = busbw
    try:
        rep = typed_report(r)
    except ValueError:
        return
    assert check(rep, EXP).error


def test_a_pass_without_allreduce_is_invalid_and_a_failure_passes_through():
    r = good()
    r["allreduce"] = None
    assert "without an all-reduce" in check(typed_report(r), EXP).error
    f = typed_report(report(1, "node-b", ok=False, failure={"reason": "MasterPortTimeout", "message": "m"}))
    out = check(f, EXP)
    assert out.error is None and out.report is f


EXP2 = Expected(**{**EXP.__dict__, "local_world_size": 2})


def good2():
    """A passing report of a pod that ran 2 processes."""
    r = good()
    r["localWorldSize"] = 2
    r["intraNode"] = {"bytes": 4194304, "iterations": 10, "seconds": 0.02, "algbwGBps": 2.0,
                      "busbwGBps": 2.0, "correct": True}
    r["localRanks"] = [{"localRank": 0, "ok": True, "phase": "report", "busbwGBps": 1.5},
                       {"localRank": 1, "ok": True, "phase": "report", "busbwGBps": 1.5}]
    return r


def test_a_multi_process_report_is_trusted_when_every_local_rank_passed():
    assert check(typed_report(good2()), EXP2).error is None


def test_local_world_size_is_part_of_the_identity():
    r = good2()
    r["localWorldSize"] = 4
    assert "localWorldSize is 4, expected 2" in check(typed_report(r), EXP2).error
    # an older probe that ignored DISTTRAIN_PROBE_NPROC_PER_NODE ran one process: not evidence
    r = good()
    assert "localWorldSize is None, expected 2" in check(typed_report(r), EXP2).error
    # one process per node: a report without the field is as before; one that says 2 is not
    assert check(typed_report(good()), EXP).error is None
    assert "localWorldSize" in check(typed_report(good2()), EXP).error


@pytest.mark.parametrize("mutate,needle", [
    (lambda r: r.pop("intraNode"), "without the intra-node all-reduce"),
    (lambda r: r["intraNode"].update(busbwGBps=math.inf), "intra-node bus bandwidth"),
    (lambda r: r["localRanks"][1].update(ok=False), "local rank(s) 1 did not pass"),
    (lambda r: r["localRanks"].pop(1), "without the outcome of local rank(s) 1 of 2"),
])
def test_a_multi_process_pass_that_lacks_or_contradicts_its_local_ranks_is_invalid(mutate, needle):
    r = good2()
    mutate(r)
    out = check(typed_report(r), EXP2)
    assert out.report is None and needle in out.error and "rank 1" in out.error


def test_a_cut_report_may_list_only_its_failing_local_ranks():
    r = good2()
    r["localRanks"], r["truncated"] = [], True
    assert check(typed_report(r), EXP2).error is None



def test_a_local_rank_outside_the_local_world_contradicts_the_report():
    r = good2()
    r["localRanks"][1]["localRank"] = 7
    out = check(typed_report(r), EXP2)
    assert out.report is None and "local rank 7, outside 0..1" in out.error and "rank 1" in out.error


@pytest.mark.parametrize("ranks,shown", [
    ([7, "x"], None),
    ([None, "x"], None),
    ([9, -1], "local rank -1, outside"),
])
def test_local_ranks_that_are_not_ints_never_reach_check(ranks, shown):
    """check() takes the parsed model: local ranks that are not ints (None, text) are
    refused by the parse; ints outside the local world are named, the lowest first."""
    r = good2()
    r["localRanks"] = [{"localRank": k, "ok": True} for k in ranks]
    if shown is None:
        with pytest.raises(ValueError):
            typed_report(r)
        return
    out = check(typed_report(r), EXP2)
    assert out.report is None and shown in out.error and "rank 1" in out.error


@pytest.mark.parametrize("nproc", [10**6, 2**40])
def test_the_local_rank_check_works_in_the_reports_size_not_the_number_of_local_ranks(nproc):
    """numProcPerNode ("auto": the GPUs requested) must not size the operator's work: a
    list over every local rank ran the operator out of memory at 2**40."""
    import tracemalloc
    r = good2()
    r["localWorldSize"] = nproc
    exp = Expected(**{**EXP.__dict__, "local_world_size": nproc})
    tracemalloc.start()
    try:
        out = check(typed_report(r), exp)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, peak  # a list of 10**6 missing ranks alone is about 36 MB
    assert out.error.endswith(f"without the outcome of local rank(s) 2, 3, 4, 5, 6, 7, 8, 9 ... of {nproc}")


@pytest.mark.parametrize("mutate,needle", [
    (lambda r: r.pop("phase"), "passed in phase None"),
    (lambda r: r.update(phase="collective"), "passed in phase 'collective'"),
    (lambda r: r.pop("master"), "without its master block"),
    (lambda r: r.update(master=None), "without its master block"),
    # an empty block parses to one with every field None (as parse_report always gave it)
    (lambda r: r.update(master={}), "with master.port None"),
    (lambda r: r["master"].pop("port"), "with master.port None"),
    (lambda r: r["master"].update(joined=False), "master.joined is false"),
    (lambda r: r.update(final=False), "final: false"),
])
def test_a_pass_outside_the_last_phase_or_without_its_master_is_not_the_probes(mutate, needle):
    r = good()
    mutate(r)
    out = check(typed_report(r), EXP)
    assert out.report is None and needle in out.error and out.error.startswith("rank 1 ")
    assert len(out.error) <= 400


@pytest.mark.parametrize("joined,final", [(True, None), (None, None)])
def test_a_pass_that_joined_or_from_an_older_probe_without_joined_is_trusted(joined, final):
    """``master.joined`` absent is an older probe's report (docs/probe-report.md): trusted."""
    r = good()
    if joined is not None:
        r["master"]["joined"] = joined
    out = check(typed_report(r), EXP)
    assert out.error is None and out.report.ok is True


MASTER_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 70000), st.text(max_size=6),
                          st.floats(allow_nan=True), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(drop=st.sets(st.sampled_from(["addr", "port", "resolved", "route", "joined"])),
       port=st.one_of(st.just(29500), MASTER_VALUES), joined=st.one_of(st.just(True), MASTER_VALUES),
       final=st.one_of(st.just("absent"), MASTER_VALUES), master_kind=st.sampled_from(["dict", "empty", "other"]))
def test_a_pass_is_trusted_only_with_its_master_port_joined_and_final(drop, port, joined, final, master_kind):
    """Whatever the master block and ``final`` say, a report counts as a pass only with an
    integer master.port (the one given), master.joined not false and final not false."""
    r = good()
    r["master"].update(port=port, joined=joined)
    for k in drop:
        r["master"].pop(k, None)
    if master_kind == "empty":
        r["master"] = {}
    elif master_kind == "other":
        r["master"] = [port]
    if final != "absent":
        r["final"] = final
    try:
        rep = typed_report(r)
    except ValueError:
        return  # refused at the parse (a value of the wrong type): never trusted
    out = check(rep, EXP)
    assert (out.report is None) != (out.error is None)
    if out.report is not None and out.report.ok is True:
        m = out.report.master
        assert m is not None and m.port == 29500 and not isinstance(m.port, bool)
        assert m.joined is not False and out.report.final is not False
