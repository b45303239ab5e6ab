"""``python -m localcluster.faults``: generated faults on the real proving ground.

``run --seed S --cases N [--classes firewall,names,...] [--out benchmarks/results/generated.md]``
builds each case's cluster (``scenariorun.prepare``), applies the example job, waits until
``Validated`` leaves Unknown, grades the final conditions against the oracle (``grade``),
prints one line per case and the summary line (``312 cases: 97.1% right, 6 half, 3 wrong,
0 silent passes``), writes the per-class counts to ``--out`` and keeps every case not right
as a scenario under ``scenarios/regression/`` (its ``expect``: what the right verdict
meets; `make test` runs the folder). ``show --seed S --cases N`` prints the cases'
scenarios without a cluster. ``run --direct`` runs each case on the direct path instead
(``direct.py``: the node networks as plain network namespaces, one real probe per rank, the
operator's pure verdict; seconds a case): a case it cannot build faithfully
(``directplan.cluster_only``) is skipped and counted as ``cluster-only``, never graded.
Exit status: 0 when every case was right, 1 otherwise, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

from localcluster.common.config import REPO_ROOT
from localcluster.faults import generate, grammar
from localcluster.faults.grade import HALF, OUTCOMES, RIGHT, SILENT, WRONG, Grade, grade
from localcluster.scenarios.scenario import Expect

REGRESSION_DIR = REPO_ROOT / "scenarios" / "regression"
ERROR = "error"  # the case could not be run (the cluster would not come up): not graded
SKIPPED = "cluster-only"  # --direct: the case needs the whole cluster; not graded
WITHIN_SECONDS = 240.0


def summary_line(outcomes: list[str]) -> str:
    """``312 cases: 97.1% right, 6 half, 3 wrong, 0 silent passes`` over the graded outcomes
    (cases that could not run are left out)."""
    graded = [o for o in outcomes if o in OUTCOMES]
    n = len(graded)
    pct = 100.0 * graded.count(RIGHT) / n if n else 0.0
    return (f"{n} cases: {pct:.1f}% right, {graded.count(HALF)} half, {graded.count(WRONG)} wrong, "
            f"{graded.count(SILENT)} silent passes")


def timing_line(seconds: list[float]) -> str:
    """``150 case(s) run in 1650 s: 11.0 s a case`` (the cases that ran; '' for none)."""
    if not seconds:
        return ""
    return f"{len(seconds)} case(s) run in {sum(seconds):.0f} s: {sum(seconds) / len(seconds):.1f} s a case"


def markdown(seed: int, rows: list[tuple[generate.Case, Grade]], command: str, timing: str = "") -> str:
    """The results page: the summary line (and ``timing``), right / half / wrong / silent
    pass / not run / cluster-only per class, and every case that was not right with why."""
    lines = ["# Generated faults (issue 31)", "", f"`{command}`, seed {seed}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             f"**{summary_line([g.outcome for _, g in rows])}**" + (f" ({timing})" if timing else ""), "",
             "| class | cases | right | half | wrong | silent passes | not run | cluster-only | "
             "a firewall named where there is none |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cls in grammar.CLASSES:
        mine = [g for c, g in rows if type(c.fault).CLASS == cls]
        if not mine:
            continue
        count = [sum(g.outcome == o for g in mine) for o in (*OUTCOMES, ERROR, SKIPPED)]
        fw = sum("firewall" in g.said for g in mine)
        lines.append(f"| {cls} | {len(mine)} | " + " | ".join(map(str, count)) + f" | {fw} |")
    bad = [(c, g) for c, g in rows if g.outcome not in (RIGHT, SKIPPED)]
    if bad:
        lines += ["", "## Not right", ""]
        lines += [f"- `{c.name}` ({g.outcome}): {c.fault.describe()}. {g.why}" for c, g in bad]
    return "\n".join(lines) + "\n"


def keep(case: generate.Case, g: Grade, folder: Path = REGRESSION_DIR) -> Path:
    """Write ``case`` as ``<folder>/<name>.yaml`` with what was seen as a comment."""
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"{case.name}.yaml"
    seen = " ".join(g.why.split())[:600]
    p.write_text(f"# kept by `python -m localcluster.faults run`: {g.outcome}: {seen}\n{case.text}",
                 encoding="utf-8")
    return p


def _shown(p: Path) -> Path:
    """``p`` relative to the repository when inside it."""
    return p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p


def _run_case(case: generate.Case) -> Grade:
    """Build the case's cluster, run its job until Validated is decided, grade it."""
    from localcluster import scenariorun
    from localcluster.cluster import operator_install

    scenariorun.prepare(case.scenario, say=lambda *_: None)
    relaxed = case.scenario.model_copy(update={"expect": Expect(
        condition="Validated", status=case.expectation.status,
        withinSeconds=WITHIN_SECONDS)})
    ns = f"{case.name[:40]}-{uuid.uuid4().hex[:5]}".lower()
    try:
        o = scenariorun.run_job(relaxed, ns, say=lambda *_: None)
    finally:
        operator_install.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
    ifname = (((o.job or {}).get("status") or {}).get("rendezvous") or {}).get("socketIfname")
    return grade(case.expectation, o.conditions, o.rank_nodes, ifname)


def _run_direct(case: generate.Case) -> Grade:
    """The case on the direct path (``direct.py``), or SKIPPED when it needs the cluster."""
    from localcluster.faults import direct, directplan

    why = directplan.cluster_only(case)
    if why:
        return Grade(SKIPPED, f"cluster-only: {why}")
    return direct.run_case(case).grade


def run(seed: int, indexes: range, classes: Optional[list[str]], out: Optional[Path],  # noqa: PLR0913
        folder: Path = REGRESSION_DIR, say: Callable[[str], None] = print, direct: bool = False) -> list[str]:
    """Run the cases ``indexes`` of ``seed`` (``direct``: on the direct path); returns their
    outcomes (``error`` for a case that could not run, ``cluster-only`` for one the direct
    path skipped)."""
    rows: list[tuple[generate.Case, Grade]] = []
    seconds: list[float] = []
    command = " ".join(["python -m localcluster.faults", *sys.argv[1:]])
    if direct:  # SIGTERM ends the run through its clean-up (probes killed, namespaces deleted)
        from localcluster.faults.direct import sweep
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        sweep()
    for i in indexes:
        case = generate.case(seed, i, classes)
        t0 = time.monotonic()
        try:
            g = _run_direct(case) if direct else _run_case(case)
        except Exception as e:  # noqa: BLE001 - one broken case must not end the run
            g = Grade(ERROR, f"not run: {type(e).__name__}: {e}")
        rows.append((case, g))
        if g.outcome != SKIPPED:
            seconds.append(time.monotonic() - t0)
        where = f" -> {_shown(keep(case, g, folder))}" if g.outcome in OUTCOMES and g.outcome != RIGHT else ""
        say(f"{i:4d} {type(case.fault).CLASS:<8} {g.outcome:<11} {time.monotonic() - t0:5.0f}s "
            f"{case.fault.describe()}{where}" + (f"\n       {g.why}" if g.why else ""))
        if out is not None:  # after every case: a run cut short keeps what it graded
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(markdown(seed, rows, command, timing_line(seconds)), encoding="utf-8")
    outcomes = [g.outcome for _, g in rows]
    say(summary_line(outcomes))
    if direct:
        say(timing_line(seconds))
    if outcomes.count(ERROR):
        say(f"({outcomes.count(ERROR)} case(s) could not run; see the lines marked {ERROR})")
    if outcomes.count(SKIPPED):
        say(f"({outcomes.count(SKIPPED)} case(s) need the whole cluster and were skipped: {SKIPPED})")
    return outcomes


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m localcluster.faults", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "show"):
        p = sub.add_parser(name)
        p.add_argument("--seed", type=int, default=1)
        p.add_argument("--cases", type=int, default=3)
        p.add_argument("--classes", default="", help=f"comma list of {', '.join(grammar.CLASSES)}")
        p.add_argument("--start", type=int, default=0, help="the first case's index (replay one case)")
    sub.choices["run"].add_argument("--out", type=Path, default=None,
                                    help="write the per-class results here (markdown)")
    sub.choices["run"].add_argument("--direct", action="store_true",
                                    help="probes in plain network namespaces and the operator's pure verdict "
                                         "(seconds a case); cluster-only cases are skipped")
    a = ap.parse_args(argv)
    classes = [c for c in a.classes.split(",") if c] or None
    try:
        chosen = [generate.case(a.seed, i, classes) for i in range(a.start, a.start + a.cases)]
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if a.cmd == "show":
        for c in chosen:
            print(f"--- # {c.name}\n{c.text}")
        return 0
    outcomes = run(a.seed, range(a.start, a.start + a.cases), classes, a.out, direct=a.direct)
    graded = [o for o in outcomes if o != SKIPPED]
    return 0 if graded and all(o == RIGHT for o in graded) else 1
