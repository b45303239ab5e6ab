"""Generated faults on the direct path (localcluster/faults/direct.py), for real: two seeded
cases (seed 1, cases 0 and 1: a path-MTU black hole on eth1 of 2 nodes, a routed eth1 of 3
nodes that passes ICMP and is forced) built as network namespaces ``dtjf-*``, one real probe
per rank, the operator's verdict. Each must be graded from every rank's report (not an
error, not a probe that failed to report), and nothing of it may be left behind."""
from __future__ import annotations

import os
import shutil

import pytest
from disttrain_probe.contract import vocabulary as V
from localcluster.faults import direct, directplan, generate
from localcluster.faults.grade import OUTCOMES
from localcluster.network import netns

pytestmark = pytest.mark.netns

NO_REPORT = (V.PROBE_FAILED, V.PROBE_REPORT_INVALID, V.PROBE_TIMEOUT, V.PROBE_POD_LOST)


def have_netns() -> bool:
    return os.geteuid() == 0 and all(shutil.which(x) for x in ("ip", "nft", "tc", "unshare"))


@pytest.mark.parametrize("index", [0, 1])
def test_a_seeded_case_is_graded_from_every_ranks_report(index):
    if not have_netns():
        pytest.skip("needs root, iproute2, nft and unshare (network namespaces)")
    case = generate.case(1, index)
    assert directplan.cluster_only(case) is None
    prefix = direct.new_prefix()
    r = direct.run_case(case, prefix=prefix)
    assert r.grade.outcome in OUTCOMES, r.grade.why
    val = next(c for c in r.verdict.conditions if c["type"] == V.VALIDATED)
    assert val["status"] in ("True", "False") and val["reason"] not in NO_REPORT, val
    assert sorted(r.verdict.rank_nodes.values()) == [f"node-{x}" for x in "abcdefgh"[:case.scenario.nodes]]
    assert r.seconds < 120
    left = [ns for ns in netns.list_netns() if ns.startswith(prefix)]
    assert not left and not list(direct.ETC_NETNS.glob(f"{prefix}*")), f"left behind: {left}"
