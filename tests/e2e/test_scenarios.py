"""Every scenario in scenarios/ on the real local cluster: the cluster is rebuilt as the
scenario says, the operator runs the scenario's job, and its ``expect`` must hold (healthy
scenarios also reach Succeeded).

Run on your own cluster instance when others use the default one:
``DISTTRAIN_CLUSTER_INSTANCE=1 .venv/bin/python -m pytest -q tests/e2e/test_scenarios.py``.
Nodes are rebuilt per scenario, so this module brings the cluster up itself (after it,
the default 2-node topology is restored for the other e2e tests).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest

from localcluster import bringup, scenariorun
from localcluster.cluster import operator_install
from localcluster.network import netns
from localcluster.scenarios import loader

pytestmark = pytest.mark.e2e

TIMINGS: dict[str, float] = {}
LONGEST: dict[str, tuple[int, str, str]] = {}  # scenario -> (length, condition, message)


@pytest.fixture(scope="module")
def scenario_cluster(cluster):
    operator_install.stop()
    yield cluster
    operator_install.stop()
    bringup.up(nodes=2)  # the default topology again, for the tests that follow
    if TIMINGS:
        print("\nseconds from apply to the expected condition:")
        for k, v in TIMINGS.items():
            print(f"  {k:32s} {v:6.1f}")
    if LONGEST:
        name, (n, ctype, msg) = max(LONGEST.items(), key=lambda kv: kv[1][0])
        print(f"\nlongest condition message: {n} characters ({name}, {ctype}): {msg}")


SLOW = os.environ.get("DISTTRAIN_SLOW_SCENARIOS") == "1"


def _one_run(sc, name, run):
    ns = f"sc-{name.rsplit('/', 1)[-1][:40]}-{uuid.uuid4().hex[:5]}"
    lines: list[str] = []
    try:
        outcome = scenariorun.run_job(sc, ns, say=lines.append, run=run)
        problems = scenariorun.describe_problems(scenariorun.describe(ns), sc.expect)
        for _ in range(20):  # events are written after the status: give them a moment
            if not problems or not outcome.ok:
                break
            time.sleep(0.5)
            problems = scenariorun.describe_problems(scenariorun.describe(ns), sc.expect)
    finally:
        operator_install.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
    return outcome, problems, lines


# `make test` runs the scenarios of the open boundary issue and the healthy path always, and
# SCENARIO_SAMPLE of the others (:func:`_sampled`) drawn by the day (or DISTTRAIN_SCENARIO_SEED); `make
# test-scenarios` (DISTTRAIN_ALL_SCENARIOS=1) runs every one. The generated cases kept under
# scenarios/regression/: a sample by the day (DISTTRAIN_REGRESSION_SEED) in `make test`, all
# of them in `make test-regression`.
DAY = int(time.time() // 86400)


def _sampled(sc) -> bool:
    """In `make test`'s sample: not slow, and no fault while training (those take minutes
    each: `make test-stall` runs them, and `make test` runs two stall cases of its own)."""
    return not sc.slow and sc.training is None and sc.strike is None
ALWAYS = ("healthy", "integer-quantities", "sidecar-first", "probe-oomkilled")
SCENARIO_SAMPLE = 12
SCENARIOS = (loader.all_names() if os.environ.get("DISTTRAIN_ALL_SCENARIOS") == "1"
             else loader.scenario_sample(SCENARIO_SAMPLE, int(os.environ.get("DISTTRAIN_SCENARIO_SEED") or DAY),
                                         ALWAYS, [n for n in loader.all_names() if _sampled(loader.load(n))]))
REGRESSION_SEED = int(os.environ.get("DISTTRAIN_REGRESSION_SEED") or DAY)
REGRESSIONS = (loader.regression_names() if os.environ.get("DISTTRAIN_ALL_REGRESSIONS") == "1"
               else loader.regression_sample(3, REGRESSION_SEED))


@pytest.mark.parametrize("name", SCENARIOS + REGRESSIONS)
def test_scenario(scenario_cluster, name):
    sc = loader.load(name)
    if sc.slow and not SLOW:
        pytest.skip("a slow scenario: make test-scale (DISTTRAIN_SLOW_SCENARIOS=1) runs it")
    scenariorun.prepare(sc, say=lambda *_: None)
    runs = []
    for i in range(sc.expect.repeat):  # the same outcome (and interface) on every run
        runs.append(_one_run(sc, name, i))
        if not runs[-1][0].ok:
            break
    outcome = scenariorun.same_outcome([o for o, _, _ in runs])
    problems = next((p for _, p, _ in runs if p), [])
    lines = [x for _, _, ls in runs for x in ls]
    assert outcome.ok, f"{name}: {outcome.why}\n" + "\n".join(lines)
    longest = max(((len(c.get("message") or ""), c.get("type"), c.get("message") or "")
                   for o, _, _ in runs for c in o.conditions), default=(0, "", ""))
    LONGEST[name] = longest
    assert longest[0] <= 400, f"{name}: {longest[1]} message is {longest[0]} characters: {longest[2]}"
    assert not problems, f"{name}: kubectl describe dtj lacks what a user acts on: {problems}"
    TIMINGS[name] = outcome.seconds
    if sc.expect.status == "False":
        assert outcome.seconds < 60, f"{name}: diagnosed only after {outcome.seconds:.0f}s"


# Both placements reach the same verdict (issue 34): a scenario of each kind of cause runs
# again with probe.placement InPlace (the training pods probe first) and its expect must
# hold as with probe pods: a healthy job trains, an ordinary spec, the kubelet's word, a
# host firewall on either port or one pair, a missing interface or one named differently
# per node, a NetworkPolicy (the operator's own verdict), the scheduler's, a loopback
# master address or hostname, a wrong headless-Service name, an MTU black hole, a mesh
# sidecar, skewed settings or versions, a slow link, and the stall watch (its two init
# containers shrink the report's share of the termination messages). `make test-scenarios` runs every
# scenario in both.
# `make test` runs healthy and IN_PLACE_SAMPLE of the others drawn by the day; `make
# test-in-place` runs all of IN_PLACE.
IN_PLACE = ("healthy", "integer-quantities", "sidecar-first", "probe-oomkilled", "firewall-ephemeral",
            "firewall-master-drop", "partition-one-pair", "ifname-missing", "two-nics-one-subnet",
            "networkpolicy-default-deny", "not-enough-nodes", "gpu-not-offered", "master-addr-loopback",
            "hostname-loopback-one-node", "headless-dns-wrong-name", "mtu-black-hole",
            "mesh-sidecar-intercepts", "settings-skew", "version-skew", "slow-link", "stall-frozen-rank")
IN_PLACE_SAMPLE = 2
IN_PLACE_SCENARIOS = (
    tuple(sorted(set(IN_PLACE) | {n for n in loader.all_names() if _sampled(loader.load(n))}))
    if os.environ.get("DISTTRAIN_ALL_SCENARIOS") == "1"
    else IN_PLACE if os.environ.get("DISTTRAIN_IN_PLACE_ALL") == "1"
    else loader.scenario_sample(IN_PLACE_SAMPLE, int(os.environ.get("DISTTRAIN_SCENARIO_SEED") or DAY),
                                ("healthy",), IN_PLACE))


@pytest.mark.parametrize("name", IN_PLACE_SCENARIOS)
def test_scenario_in_place(scenario_cluster, name):
    sc = loader.placed(loader.load(name), "InPlace")
    scenariorun.prepare(sc, say=lambda *_: None)
    outcome, problems, lines = _one_run(sc, f"ip-{name}", 0)
    assert outcome.ok, f"{name} in place: {outcome.why}\n" + "\n".join(lines)
    assert not problems, f"{name} in place: kubectl describe dtj lacks what a user acts on: {problems}"
    TIMINGS[f"{name} (in place)"] = outcome.seconds


def test_bad_scenario_names_line_and_field_and_creates_nothing(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("nodes: 2\nnodeOverrides:\n  node-a:\n    nics:\n      - {name: eth0, segment: mgmt, mtu: 5}\n"
                 "expect: {status: 'True'}\n")
    before = sorted(netns.list_netns())
    p = subprocess.run([sys.executable, "-m", "localcluster.scenariorun", str(f)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert f"{f}:5: nodeOverrides.node-a.nics.0.mtu" in p.stderr
    assert sorted(netns.list_netns()) == before
