"""One typed report from the parse to the verdict (issue 32): the report the step's parser
returns is the very object the diagnosis reads (never dumped back to a dict, never
validated a second time), and the policies read its attributes, never a string key."""

import ast
from pathlib import Path

import pytest

from disttrain.api import constants as C
from disttrain.children import observe
from disttrain.diagnosis.findings import typed
from disttrain.diagnosis.report import ProbeReport, parse_report
from disttrain.reconcile.policies import verdict
from disttrain.reconcile.step import ProbeRun
from disttrain.shell import runner
from tests.support.builders import given
from tests.support.reconcile import finished_probes

OPERATOR = Path(__file__).resolve().parents[4] / "operator" / "disttrain"
# every module a report passes through between the parse and the verdict's conditions
ON_THE_PATH = sorted([*(OPERATOR / "reconcile" / "policies").glob("*.py"),
                      OPERATOR / "reconcile" / "step.py", OPERATOR / "reconcile" / "loop.py",
                      OPERATOR / "shell" / "runner.py", OPERATOR / "diagnosis" / "trust.py",
                      OPERATOR / "diagnosis" / "findings.py", OPERATOR / "diagnosis" / "diagnose.py"])
REPORT_NAMES = {"rep", "report"}  # what the modules call a report held in a variable


def test_the_runner_hands_the_step_the_typed_parser():
    assert runner.parse_report is parse_report


def test_the_report_the_parser_returns_is_the_one_diagnosed():
    parsed: list[ProbeReport] = []

    def parser(raw: str) -> ProbeReport:
        parsed.append(parse_report(raw))
        return parsed[-1]

    s = given().with_pods(*finished_probes()).build()
    s.parse_report = parser
    outcomes = verdict.collect(s, ProbeRun(None, {observe.int_label(p, C.LABEL_RANK): p for p in s.ours}))
    assert len(parsed) == 2 and all(o.error is None for o in outcomes)
    for o, rep in zip(outcomes, parsed):
        assert o.report is rep  # not a dict, not a copy
        assert typed(o).report is rep  # the diagnosis takes it as is


# conversions that are not of a report: the job's spec, and the versions block the probe's
# stdlib comparisons (disttrain_probe.contract.versions) take as a dict
NOT_A_REPORT = {"DistTrainingJobSpec.model_validate", "r.report.versions.model_dump"}


def _report_reads(path: Path) -> list[str]:
    """``x.get(...)`` where x is a report (a name in REPORT_NAMES, or ``<anything>.report``),
    and any ``model_dump``/``model_validate`` call not in NOT_A_REPORT, as "file:line: call"."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        recv, attr = node.func.value, node.func.attr
        on_report = (isinstance(recv, ast.Name) and recv.id in REPORT_NAMES) or \
            (isinstance(recv, ast.Attribute) and recv.attr == "report")
        converts = attr in ("model_dump", "model_validate") and ast.unparse(node.func) not in NOT_A_REPORT
        if (attr == "get" and on_report) or converts:
            hits.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


@pytest.mark.parametrize("path", ON_THE_PATH, ids=lambda p: str(p.relative_to(OPERATOR)))
def test_no_module_on_the_path_reads_a_report_by_key_or_converts_it(path):
    assert _report_reads(path) == []


def test_the_scan_finds_a_read_by_key_and_a_dump(tmp_path):
    """The scan above can fail: it sees the shapes this change removed."""
    bad = tmp_path / "policy.py"
    bad.write_text('def f(rep, out, m):\n    return (rep.get("final"), out.report.get("portRange"),\n'
                   '            m.model_dump(by_alias=True), out.get("x"))\n')
    assert [h.split(": ", 1)[1] for h in _report_reads(bad)] == [
        "rep.get('final')", "out.report.get('portRange')", "m.model_dump(by_alias=True)"]
