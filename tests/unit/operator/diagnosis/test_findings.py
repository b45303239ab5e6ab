"""Findings (pure, typed): failures, the cause, warnings, version skew (table tests)."""
import pytest

from disttrain.diagnosis import findings
from disttrain.diagnosis.report import ProbeReport
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import report, typed_report


def rank(r, node, rep=None, **kw):
    return findings.typed(findings.ProbeOutcome(rank=r, pod=f"j-probe-{r}", node=node, report=typed_report(rep), **kw))


def test_typed_takes_the_parsed_model_as_is():
    """No second validation: the report parse_report returned is the one diagnosed (a
    foreign shape never gets here: the parse refuses it, see test_collect)."""
    d = report(0, "node-a")
    model = ProbeReport.model_validate(d)
    assert findings.typed(findings.ProbeOutcome(rank=0, pod="j-probe-0", node="node-a",
                                                report=model)).report is model
    assert rank(0, "node-a", d).report.chosen.ifname == "eth1"
    # the node name: the pod's node, else the report's, else the pod's name
    assert rank(0, None, d).node == "node-a" and rank(0, None).node == "j-probe-0"


FAIL = {"reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous", "message": "node-b: dropped"}


@pytest.mark.parametrize("case,kw,want", [
    ("passed", dict(rep=report(1, "node-b")), None),
    ("failed", dict(rep=report(1, "node-b", ok=False, failure=FAIL)), V.MASTER_PORT_TIMEOUT),
    ("not ok, no failure", dict(rep=report(1, "node-b", ok=False)), V.PROBE_FAILED),
    ("no report", dict(error="exited 137", error_reason=V.PROBE_FAILED), V.PROBE_FAILED),
    ("still running", dict(running=True), None),
])
def test_rank_failure_table(case, kw, want):
    f = findings.rank_failure(rank(1, "node-b", **kw))
    assert (f.reason if f else None) == want, case


def test_a_pass_without_a_chosen_interface_is_an_invalid_report():
    rep = report(1, "node-b")
    rep.update(chosen=None, truncated=True)
    f = findings.rank_failure(rank(1, "node-b", rep))
    assert f.reason == V.PROBE_REPORT_INVALID and "(truncated)" in f.message


@pytest.mark.parametrize("reasons,want", [
    ([V.RENDEZVOUS_TIMEOUT, V.MASTER_ADDR_LOOPBACK], V.MASTER_ADDR_LOOPBACK),  # specific wins
    ([V.ALL_REDUCE_TIMEOUT, V.INTERFACE_NOT_FOUND], V.INTERFACE_NOT_FOUND),    # earlier check
    ([V.PROBE_INTERNAL_ERROR, V.ALL_REDUCE_TIMEOUT], V.ALL_REDUCE_TIMEOUT),     # generic last
    ([V.PROBE_REPORT_INVALID, V.RENDEZVOUS_TIMEOUT], V.PROBE_REPORT_INVALID),   # no check > generic
    ([], None),
])
def test_cause_table(reasons, want):
    c = findings.cause([findings.Finding(r, f"n{i}", "m") for i, r in enumerate(reasons)])
    assert (c.reason if c else None) == want


def test_loopback_master_is_a_failure_only_when_nothing_else_failed():
    ranks = [rank(0, "node-a", report(0, "node-a")), rank(1, "node-b", report(1, "node-b"))]
    [f] = findings.failures(ranks, "127.0.0.1")
    assert f.reason == V.MASTER_ADDR_LOOPBACK and f.node == "node-a"
    assert findings.failures(ranks, "10.0.0.1") == []


def test_version_table_of_many_nodes_names_only_the_odd_ones():
    ranks = [rank(i, f"node-{i:02d}", report(i, f"node-{i:02d}", nccl="2.27.3" if i != 7 else "2.28.9"))
             for i in range(16)]
    f = findings.version_mismatch(ranks)
    assert f.reason == V.NCCL_VERSION_MISMATCH
    assert "node-07: torch 2.8.0, NCCL 2.28.9" in f.message and "node-03" not in f.message
    assert "15 other node(s): NCCL 2.27.3" in f.message and len(f.message) < 400
    two = findings.version_mismatch(ranks[6:8])
    assert "node-06: torch 2.8.0, NCCL 2.27.3; node-07" in two.message  # short: the whole table


@pytest.mark.parametrize("reason,check", [
    (V.HOSTNAME_LOOPBACK, V.NETWORK_VALIDATED), (V.MASTER_ADDR_NOT_LOCAL, V.MASTER_REACHABLE),
    (V.TEARDOWN_HUNG, V.COLLECTIVE_VALIDATED), ("SomethingNewer", V.NETWORK_VALIDATED),
])
def test_warning_check(reason, check):
    assert findings.warning_check(reason) == check


def test_settings_skew_is_one_table_replacing_the_probes_messages():
    reps = [report(r, f"node-{x}") for r, x in enumerate("ab")]
    reps[1]["settings"] = {"NCCL_PROTO": "Simple"}
    reps[1].update(ok=False, chosen=None, failure={"reason": V.SETTINGS_MISMATCH, "phase": "versions",
                                                    "message": "peer relayed"})
    found = findings.failures([rank(r, rep["node"], rep) for r, rep in enumerate(reps)], "10.0.0.1")
    [f] = found
    assert f.reason == V.SETTINGS_MISMATCH and f.node == ""
    assert "node-a: NCCL_PROTO unset; node-b: NCCL_PROTO=Simple" in f.message
