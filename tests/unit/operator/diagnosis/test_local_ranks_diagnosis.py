"""Several processes per node in the diagnosis: status names how many ran, messages name the
node and the local rank."""

from disttrain.api import constants
from disttrain.diagnosis.diagnose import diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile.status_repair import repair
from tests.support.fixtures import report, typed_report


def multi(rank, node, busbw=1.5, intra=4.0, **kw):
    r = report(rank, node, busbw=busbw, **kw)
    r["localWorldSize"] = 2
    r["intraNode"] = ({"bytes": 4194304, "iterations": 10, "seconds": 0.01, "algbwGBps": intra,
                       "busbwGBps": intra, "correct": True} if r["ok"] else None)
    r["localRanks"] = [{"localRank": k, "ok": r["ok"], "phase": "report"} for k in range(2)]
    return r


def outcomes(*reports):
    return [ProbeOutcome(rank=r["rank"], pod=f"j-probe-{r['rank']}", node=r["node"], report=typed_report(r))
            for r in reports]


def test_a_pass_says_how_many_ranks_and_the_intra_node_bandwidth():
    d = diagnose(outcomes(multi(0, "node-a", intra=4.0), multi(1, "node-b", intra=3.0)), "10.100.0.10")
    assert d.validated
    m = d.conditions[constants.COLLECTIVE_VALIDATED].message
    assert "among each node's 2 local ranks (intra-node busbw 3.0 GB/s, slowest node)" in m
    assert "over 4 ranks (2 nodes x 2, gloo)" in m
    assert [(n["localRanks"], n["intraNodeBusBandwidthGBps"]) for n in d.nodes] == [(2, 4.0), (2, 3.0)]


def test_one_process_per_node_keeps_its_message_and_status():
    d = diagnose(outcomes(report(0, "node-a"), report(1, "node-b")), "10.100.0.10")
    assert d.conditions[constants.COLLECTIVE_VALIDATED].message.startswith("all-reduce correct over 2 ranks (gloo)")
    assert all("localRanks" not in n for n in d.nodes)


def test_a_local_ranks_failure_names_the_node_and_the_local_rank():
    """node-b's local rank 1 failed its process-group init; node-a, which only waited for
    it, passed the failure on: the verdict names node-b local rank 1, not node-a."""
    own = {"reason": "ProcessGroupInitFailed", "phase": "collective",
           "message": "node-b local rank 1: init_process_group(nccl) on eth1 failed: CUDA error: "
                      "uncorrectable ECC error encountered"}
    relayed = dict(own, message=f"peer node-b (rank 1) failed in collective: {own['message']}")
    d = diagnose(outcomes(multi(0, "node-a", ok=False, failure=relayed),
                          multi(1, "node-b", ok=False, failure=own)), "10.100.0.10")
    v = d.conditions[constants.COLLECTIVE_VALIDATED]
    assert (v.status, v.reason) == ("False", "ProcessGroupInitFailed")
    assert "node-b local rank 1: init_process_group(nccl)" in v.message
    assert d.conditions[constants.VALIDATED].message.endswith(
        "on node-b: see the CollectiveValidated condition for the cause and the fix")
    assert any(f.startswith("node-b local rank 1: ") for f in d.failures)


def test_the_status_keeps_the_per_node_numbers_across_steps():
    """status.nodes is rebuilt from the written status on every step: numbers (localRanks,
    throughputMbps) and the paths map survive; garbage does not."""
    nodes = [{"rank": 0, "name": "node-a", "localRanks": 2, "intraNodeBusBandwidthGBps": 3.5,
              "throughputMbps": 940.0, "paths": {"10.0.0.0/24": ".o", "bad": 1},
              "junk": float("nan"), "flag": True}]
    out = repair({"nodes": nodes}, "2026-01-01T00:00:00Z")["nodes"]
    assert out == [{"rank": 0, "name": "node-a", "localRanks": 2, "intraNodeBusBandwidthGBps": 3.5,
                    "throughputMbps": 940.0, "paths": {"10.0.0.0/24": ".o"}}]
