"""Stragglers (pure): a node far below the job's median on the chosen network is a
SlowLink warning naming it, or a failure with probe.maxLinkImbalance."""
from __future__ import annotations

import pytest

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.diagnosis import stragglers
from disttrain.diagnosis.diagnose import Policy, diagnose
from disttrain.diagnosis.findings import ProbeOutcome, typed
from disttrain.diagnosis.report import ProbeWarning
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job, report, typed_report

NODES = [f"node-{x}" for x in "abcdefgh"]


def outcomes(mbps_of_node: list[float]):
    """Ranks on a ring; each downloads from its next and previous neighbour on eth1; a
    pair moves at the slower node's speed."""
    n = len(mbps_of_node)
    outs = []
    for r in range(n):
        rep = report(r, NODES[r])
        rep["worldSize"] = n
        pairs = {(r + 1) % n, (r - 1) % n} - {r}
        rep["pathMbps"] = {"10.101.0.0/24": {str(p): min(mbps_of_node[r], mbps_of_node[p]) for p in pairs}}
        outs.append(ProbeOutcome(rank=r, pod=f"j-probe-{r}", node=NODES[r], report=typed_report(rep)))
    return outs


@pytest.mark.parametrize("speeds,slow", [
    ([9000, 9000, 9000], []),
    ([9000, 9000, 200], ["node-c"]),                # one slow NIC among three
    ([9000, 200, 9000, 9000, 9000], ["node-b"]),
    ([9000, 9000, 6000], []),                       # 1.5x below the median: noise, not a straggler
    ([9000, 200], []),                              # two nodes, one pair: nothing singles one out
])
def test_slow_links_table(speeds, slow):
    got = stragglers.slow_links([typed(o) for o in outcomes(speeds)])
    assert [s.node for s in got] == slow
    for s in got:
        assert s.ifname == "eth1" and s.mbps == 200 and s.median == 9000


def test_a_straggler_is_a_warning_with_its_figure_and_the_expected_slowdown():
    d = diagnose(outcomes([9000, 9000, 200]), "10.100.0.11")
    nv = d.conditions[constants.NETWORK_VALIDATED]
    assert (nv.status, nv.reason) == ("True", vocabulary.SLOW_LINK)
    assert "node-c: eth1 moved 200 Mb/s, 45.0x below the job's median 9000 Mb/s" in nv.message
    assert "about 45.0x slower" in nv.message and len(nv.message) <= 400
    assert d.validated and [n["throughputMbps"] for n in d.nodes] == [9000, 9000, 200]


def spec(**probe):
    body = job()
    body["spec"]["probe"] = probe
    return DistTrainingJobSpec.model_validate(body["spec"])


def test_max_link_imbalance_turns_the_straggler_into_a_failure():
    d = diagnose(outcomes([9000, 9000, 200]), "10.100.0.11", Policy.of(spec(maxLinkImbalance=10)))
    nv = d.conditions[constants.NETWORK_VALIDATED]
    assert (nv.status, nv.reason) == ("False", vocabulary.SLOW_LINK) and not d.validated
    assert "over probe.maxLinkImbalance 10" in nv.message
    assert d.conditions[constants.VALIDATED].message.startswith("NetworkValidated=False (SlowLink) on node-c")
    # a looser limit than the straggler's 45x: still a warning only
    d = diagnose(outcomes([9000, 9000, 200]), "10.100.0.11", Policy.of(spec(maxLinkImbalance=100)))
    assert d.validated and d.conditions[constants.NETWORK_VALIDATED].reason == vocabulary.SLOW_LINK
    # a tighter limit than 2x catches a 1.8x node (steady rounds), as a failure
    d = diagnose(outcomes([9000, 9000, 5000]), "10.100.0.11", Policy.of(spec(maxLinkImbalance=1.2)))
    assert d.conditions[constants.NETWORK_VALIDATED].reason == vocabulary.SLOW_LINK and not d.validated


def test_a_gap_within_the_measurements_own_noise_is_no_straggler():
    """16 probes on 2 cores: every node's typical round is half its best, and one node's
    best pair is 2.2x below the median: CPU noise, not a slow link. A rate-limited node
    with steady rounds 45x below is still named."""
    outs = outcomes([9000, 9000, 9000, 9000, 4000])
    for o in outs:
        o.report.path_mbps_low = {k: {p: v * 0.5 for p, v in row.items()}
                                  for k, row in o.report.path_mbps.items()}
    assert stragglers.slow_links([typed(o) for o in outs]) == []  # typical 4500 vs its best 4000
    outs = outcomes([9000, 9000, 9000, 200])
    for o in outs:
        o.report.path_mbps_low = {k: {p: (v * 0.98 if v == 200 else v * 0.5) for p, v in row.items()}
                                  for k, row in o.report.path_mbps.items()}
    assert [s.node for s in stragglers.slow_links([typed(o) for o in outs])] == ["node-d"]


# -- references other than the median (issue 19: a slow link every node shares) -----------

def two_nodes(a_from_b: float, b_from_a: float, speed=10000, eth0=None):
    """node-a and node-b on eth1 (10.101.0.0/24): a downloads from b at ``a_from_b``, b
    from a at ``b_from_a``; ``speed``: eth1's link speed on both; ``eth0``: the same pair's
    rate on 10.100.0.0/24, both ways, when measured."""
    outs = []
    for r, node in enumerate(("node-a", "node-b")):
        rep = report(r, node)
        rep["interfaces"] = [{"name": "eth1", "addrs": [f"10.101.0.{10 + r}/24"], "up": True, "speedMbps": speed},
                             {"name": "eth0", "addrs": [f"10.100.0.{10 + r}/24"], "up": True, "speedMbps": speed}]
        rep["pathMbps"] = {"10.101.0.0/24": {str(1 - r): a_from_b if r == 0 else b_from_a}}
        if eth0:
            rep["pathMbps"]["10.100.0.0/24"] = {str(1 - r): eth0}
        outs.append(ProbeOutcome(rank=r, pod=f"j-probe-{r}", node=node, report=typed_report(rep)))
    return outs


@pytest.mark.parametrize("a_from_b,b_from_a,speed,eth0,words", [
    (11, 9400, 10000, None, ["node-b: its eth1 sends slowly", "node-a timed 11 Mb/s from node-b",
                             "against 10000 Mb/s (eth1's link speed), 9400 Mb/s (the other direction)"]),
    (9400, 11, 10000, None, ["node-a: its eth1 sends slowly"]),
    (11, 11, 10000, None, ["slow paths on eth1: node-a<->node-b", "10000 Mb/s (eth1's link speed)"]),
    (11, 11, None, 9400, []),          # another network is no reference (cni0 rides the NICs)
    (3000, 2500, 10000, None, []),     # veth on a busy host: far from the speed, not 50x below
    (11, 11, None, None, []),          # no reference at all: nothing to judge against
    (5000, 9000, 10000, None, []),     # 1.8x between directions: within the noise
    (15125, 30090, 10000, None, []),   # 2x: measured on a healthy veth pair in CI
    (4000, 30000, 100000, None, []),   # 7.5x: still under DIRECTION_RATIO
    (1000, 9400, None, None, ["node-b: its eth1 sends slowly", "9400 Mb/s (the other direction)"]),
])
def test_slow_sides_table(a_from_b, b_from_a, speed, eth0, words):
    got = stragglers.slow_sides([typed(o) for o in two_nodes(a_from_b, b_from_a, speed, eth0)])
    if not words:
        assert got == []
        return
    [f] = got
    assert f.reason == vocabulary.SLOW_LINK and len(f.message) <= 400
    for w in words:
        assert w in f.message, f.message


def test_a_slow_shared_link_with_two_nodes_is_a_warning_naming_the_sending_side():
    """Two nodes, eth1 rate-limited on node-b's egress: the median cannot single anyone
    out, the other direction and the link speed do."""
    outs = two_nodes(11, 9400)
    for o in outs:  # a lesser warning every node also gives: the slow link still leads
        o.report.warnings = [ProbeWarning(reason=vocabulary.NCCL_DEFAULT_DIFFERS,
                                          message="NCCL left alone would use eth0")]
    d = diagnose(outs, "10.100.0.11")
    nv = d.conditions[constants.NETWORK_VALIDATED]
    assert (nv.status, nv.reason) == ("True", vocabulary.SLOW_LINK)
    assert "node-b: its eth1 sends slowly" in nv.message and len(nv.message) <= 400
    assert d.validated
