"""Grading a job's final conditions against the oracle (localcluster/faults/grade.py), and the
runner's pure parts (summary line, results page, kept regression files): hand-made
condition lists for every outcome, a silent pass graded as one."""
from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.contract import vocabulary as V
from localcluster.faults import generate, oracle, runner
from localcluster.faults import grammar as G
from localcluster.faults.grade import HALF, RIGHT, SILENT, WRONG, Grade, grade
from localcluster.scenarios import loader

EPHEMERAL = oracle.expectation(G.FirewallFault("node-c", ("node-a",), (32768, 60999), None, "drop",
                                               "ephemeral"), 3)
ISLANDS = oracle.expectation(G.IslandsFault((("node-a",), ("node-b",)), True), 2)
ON_ETH1 = oracle.expectation(G.FirewallFault("node-b", (), (32768, 60999), "eth1", "drop", "ephemeral"), 2)
MASTER = oracle.expectation(G.FirewallFault("*", (), (29500, 29500), "eth0", "drop", "master"), 3)
HOSTNAME = oracle.expectation(G.NamesFault(("node-a",), "hostname"), 2)


def failed(reason: str, message: str, check: str = V.NETWORK_VALIDATED) -> list[dict]:
    return [{"type": check, "status": "False", "reason": reason, "message": message},
            {"type": V.VALIDATED, "status": "False", "reason": reason, "message": message}]


def passed(reason: str = V.ALL_CHECKS_PASSED, message: str = "2 nodes validated",
           net_reason: str = V.INTERFACE_SELECTED, net_message: str = "eth0 chosen") -> list[dict]:
    return [{"type": V.NETWORK_VALIDATED, "status": "True", "reason": net_reason, "message": net_message},
            {"type": V.VALIDATED, "status": "True", "reason": reason, "message": message}]


def test_right_names_culprit_and_source_with_a_fix():
    g = grade(EPHEMERAL, failed(V.EPHEMERAL_PORTS_BLOCKED, "node-c drops node-a's dials to its ephemeral "
                                "ports 32768-60999: open them in node-c's firewall"))
    assert g == Grade(RIGHT, "")


def test_half_when_a_source_is_missing_or_a_bystander_is_named():
    g = grade(EPHEMERAL, failed(V.EPHEMERAL_PORTS_BLOCKED, "node-c: ephemeral ports blocked; check its firewall"))
    assert g.outcome == HALF and "node-a" in g.why
    g = grade(EPHEMERAL, failed(V.EPHEMERAL_PORTS_BLOCKED, "node-c drops node-a and node-b: its firewall"))
    assert g.outcome == HALF and "node-b" in g.why


def test_half_for_the_right_names_under_a_reason_of_another_class():
    g = grade(EPHEMERAL, failed(V.MASTER_PORT_TIMEOUT, "node-c drops node-a: its firewall", V.MASTER_REACHABLE))
    assert g.outcome == HALF and "MasterPortTimeout" in g.why


def test_wrong_for_a_firewall_where_there_is_none_or_no_verdict_or_a_false_alarm():
    g = grade(ISLANDS, failed(V.NO_COMMON_INTERFACE, "node-a (10.101.0.0/24) and node-b (10.102.0.0/24): "
                              "node-b's firewall drops it; add a route"))
    assert g.outcome == WRONG and "firewall" in g.why and g.said == ("firewall",)
    unknown = [{"type": V.VALIDATED, "status": "Unknown", "reason": V.PROBING, "message": "probing"}]
    assert grade(ISLANDS, unknown).outcome == WRONG and "no verdict" in grade(ISLANDS, unknown).why
    assert grade(ISLANDS, []).outcome == WRONG
    alarm = grade(oracle.expectation(G.Healthy("plain"), 2), failed(V.EPHEMERAL_PORTS_BLOCKED, "node-a"))
    assert alarm.outcome == WRONG and "false alarm" in alarm.why


def test_wrong_when_both_the_reason_and_the_names_are_off():
    g = grade(EPHEMERAL, failed(V.MASTER_PORT_TIMEOUT, "node-b's firewall drops 29500", V.MASTER_REACHABLE))
    assert g.outcome == WRONG


def test_validated_true_on_a_broken_fault_is_a_silent_pass():
    g = grade(EPHEMERAL, passed())
    assert g.outcome == SILENT and "Validated=True" in g.why
    assert grade(ISLANDS, passed(V.PASSED_WITH_WARNINGS)).outcome == SILENT


def test_validated_on_the_broken_interface_is_a_silent_pass_on_the_clean_one_right():
    assert grade(ON_ETH1, passed(), socket_ifname="eth1").outcome == SILENT
    assert grade(ON_ETH1, passed(), socket_ifname="eth0,eth1").outcome == SILENT
    assert grade(ON_ETH1, passed(), socket_ifname="eth0").outcome == RIGHT


def test_refusing_over_a_fault_on_a_network_the_job_need_not_use_is_half():
    g = grade(ON_ETH1, failed(V.EPHEMERAL_PORTS_BLOCKED, "node-b: ephemeral ports blocked on eth1"))
    assert g.outcome == HALF and "could train" in g.why


def test_rank_0s_node_is_named_through_the_placement():
    conds = failed(V.MASTER_PORT_TIMEOUT, "node-b's firewall drops 29500 from every rank", V.MASTER_REACHABLE)
    assert grade(MASTER, conds, {0: "node-b", 1: "node-a"}).outcome == RIGHT
    g = grade(MASTER, conds, {0: "node-c", 1: "node-a"})
    assert g.outcome == HALF and "node-c" in g.why
    assert grade(MASTER, conds, {}).outcome == HALF  # placement unknown: {node:0} unmet


def test_an_expected_warning_missing_is_wrong_and_a_bystander_named_half():
    assert grade(HOSTNAME, passed()).outcome == WRONG
    ok = passed(V.PASSED_WITH_WARNINGS, "passed with warnings", V.HOSTNAME_LOOPBACK,
                "node-a: hostname node-a resolves to 127.0.1.1")
    assert grade(HOSTNAME, ok).outcome == RIGHT
    both = passed(V.PASSED_WITH_WARNINGS, "", V.HOSTNAME_LOOPBACK, "node-a and node-b resolve to 127.0.1.1")
    assert grade(HOSTNAME, both).outcome == HALF


@given(st.lists(st.one_of(st.none(), st.integers(), st.text(), st.dictionaries(st.text(), st.text())), max_size=5))
def test_malformed_conditions_grade_without_raising(conds):
    assert grade(EPHEMERAL, conds).outcome in (WRONG, HALF, RIGHT, SILENT)


def test_the_summary_line_has_the_issues_form():
    line = runner.summary_line([RIGHT] * 303 + [HALF] * 6 + [WRONG] * 3 + [runner.ERROR])
    assert line == "312 cases: 97.1% right, 6 half, 3 wrong, 0 silent passes"
    assert runner.summary_line([]) == "0 cases: 0.0% right, 0 half, 0 wrong, 0 silent passes"
    assert re.fullmatch(r"\d+ cases: \d+\.\d% right, \d+ half, \d+ wrong, \d+ silent passes",
                        runner.summary_line([SILENT, RIGHT]))


def test_the_results_page_counts_per_class_and_lists_what_was_not_right():
    cs = generate.cases(5, 12)
    rows = [(c, Grade(RIGHT if k % 3 else SILENT, "" if k % 3 else "validated anyway")) for k, c in enumerate(cs)]
    page = runner.markdown(5, rows, "python -m localcluster.faults run --seed 5 --cases 12")
    assert "**12 cases: 66.7% right, 0 half, 0 wrong, 4 silent passes**" in page
    for cls in {type(c.fault).CLASS for c in cs}:
        assert re.search(rf"^\| {cls} \| {sum(type(c.fault).CLASS == cls for c in cs)} \|", page, re.M)
    assert page.count("(silent-pass): ") == 4 and cs[0].name in page


def test_a_kept_case_loads_with_its_expect_and_says_what_was_seen(tmp_path, monkeypatch):
    c = generate.case(9, 4)
    p = runner.keep(c, Grade(WRONG, "Validated=False MasterPortTimeout: node-a's firewall\ndrops it"), tmp_path)
    assert p.name == f"{c.name}.yaml" and p.read_text().startswith("# kept by")
    assert "firewall drops it" in p.read_text().splitlines()[0]
    assert loader.load(str(p)).expect == c.scenario.expect
    monkeypatch.setattr(loader, "SCENARIO_DIR", tmp_path.parent)
    (tmp_path.parent / "regression").mkdir(exist_ok=True)
    runner.keep(c, Grade(WRONG, "x"), tmp_path.parent / "regression")
    assert loader.regression_names() == [f"regression/{c.name}"]
    assert loader.load(f"regression/{c.name}").expect == c.scenario.expect


def test_a_run_prints_a_line_per_case_and_the_summary_and_keeps_what_was_not_right(tmp_path, monkeypatch):
    verdicts = iter([Grade(RIGHT, ""), Grade(SILENT, "validated on eth1"), Grade(HALF, "does not name node-b")])

    def fake(case):
        g = next(verdicts, None)
        if g is None:
            raise RuntimeError("up failed")
        return g

    monkeypatch.setattr(runner, "_run_case", fake)
    monkeypatch.setattr(runner, "REPO_ROOT", tmp_path)
    lines: list[str] = []
    out = tmp_path / "results" / "generated.md"
    got = runner.run(4, range(2, 6), ["firewall", "names"], out, tmp_path / "regression", lines.append)
    assert got == [RIGHT, SILENT, HALF, runner.ERROR]
    assert "3 cases: 33.3% right, 1 half, 0 wrong, 1 silent passes" in lines
    assert sum(ln.startswith(("   2 ", "   3 ", "   4 ", "   5 ")) for ln in lines) == 4
    kept = sorted(p.name for p in (tmp_path / "regression").glob("*.yaml"))
    assert kept == sorted(f"{generate.case(4, i, ['firewall', 'names']).name}.yaml" for i in (3, 4))
    assert "1 case(s) could not run" in lines[-1] and out.read_text().startswith("# Generated faults")


def test_show_prints_the_cases_and_a_bad_class_is_refused(capsys):
    assert runner.main(["show", "--seed", "2", "--cases", "2", "--classes", "mtu"]) == 0
    text = capsys.readouterr().out
    assert text.count("--- # gen-2-") == 2 and "routers:" in text
    assert runner.main(["run", "--classes", "firewal"]) == 2
    assert "unknown fault class" in capsys.readouterr().err


def test_a_case_runs_its_scenario_waits_for_validated_and_grades_what_it_saw(monkeypatch):
    """``_run_case`` with the cluster calls faked: the scenario prepared, the job run with an
    expect on Validated only, its namespace deleted, the outcome's placement and interface
    handed to the grader."""
    from localcluster import scenariorun
    from localcluster.cluster import operator_install

    c = next(x for x in generate.cases(1, 40, ["firewall"]) if x.expectation.status == "False"
             and "{node:0}" in x.expectation.must_name)
    calls: list = []
    monkeypatch.setattr(scenariorun, "prepare", lambda sc, say=None: calls.append(("prepare", sc.name)))

    def run_job(sc, ns, say=None):
        calls.append(("run", sc.expect.condition, sc.expect.status, sc.expect.phase, ns))
        conds = [{"type": V.MASTER_REACHABLE, "status": "False", "reason": c.expectation.reasons[0],
                  "message": "node-b's firewall drops 29500"},
                 {"type": V.VALIDATED, "status": "False", "reason": c.expectation.reasons[0],
                  "message": "node-b's firewall drops 29500"}]
        return scenariorun.Outcome(False, "", None, 1.0, {"status": {"conditions": conds}}, conds, {0: "node-b"})

    monkeypatch.setattr(scenariorun, "run_job", run_job)
    monkeypatch.setattr(operator_install, "kubectl", lambda *a, **k: calls.append(("kubectl",) + a))
    g = runner._run_case(c)
    assert g.outcome == RIGHT, g.why
    assert calls[0] == ("prepare", c.name)
    assert calls[1][1:4] == (V.VALIDATED, "False", None) and calls[1][4].startswith(c.name[:20])
    assert calls[2][:3] == ("kubectl", "delete", "namespace") and calls[2][3] == calls[1][4]
