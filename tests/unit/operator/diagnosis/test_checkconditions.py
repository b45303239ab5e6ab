"""Check conditions (pure): conditions from findings; Validated points at the failing check."""
from disttrain.diagnosis import checkconditions
from disttrain.diagnosis.findings import Finding
from disttrain_probe.contract import vocabulary as V


def test_merged_message_says_a_global_verdict_once_and_names_other_nodes():
    same = [Finding(V.NO_COMMON_INTERFACE, n, "no network joins all nodes; fix it") for n in ("a", "b")]
    assert checkconditions.merged_message(same, V.NO_COMMON_INTERFACE) == "no network joins all nodes; fix it"
    own = [Finding(V.MASTER_PORT_TIMEOUT, f"node-{x}", f"node-{x} (rank 1): dial timed out") for x in "bcd"]
    msg = checkconditions.merged_message(own, V.MASTER_PORT_TIMEOUT)
    assert msg == ("node-b (rank 1): dial timed out; the same reason on node-c, node-d "
                   "(status.probe.failures)")
    prefixed = checkconditions.merged_message([Finding(V.MASTER_PORT_TIMEOUT, "node-b", "timed out")], V.MASTER_PORT_TIMEOUT)
    assert prefixed == "node-b: timed out"


def test_failed_sets_checks_before_true_after_unknown_and_points_from_validated():
    out = checkconditions.failed(Finding(V.EPHEMERAL_PORTS_BLOCKED, "", "m"), "node-a blocks; open it", ["node-a"])
    assert [out[t].status for t in V.PROBE_CHECKS] == ["True", "False", "Unknown", "Unknown"]
    assert out[V.NETWORK_VALIDATED].message == "node-a blocks; open it"
    assert out[V.VALIDATED].message == ("NetworkValidated=False (EphemeralPortsBlocked) on node-a: "
                                        "see the NetworkValidated condition for the cause and the fix")


def test_failed_without_a_check_leaves_checks_unknown_and_says_the_cause():
    out = checkconditions.failed(Finding(V.PROBE_FAILED, "node-b", "m"), "x" * 1000, ["node-b"])
    assert all(out[t].status == "Unknown" for t in V.PROBE_CHECKS)
    assert out[V.VALIDATED].reason == V.PROBE_FAILED and len(out[V.VALIDATED].message) <= 320


PASSED = {t: checkconditions.Verdict("True", V.PASS_REASON[t], f"{t} ok") for t in V.PROBE_CHECKS}


def test_warned_groups_one_warning_of_many_nodes_and_keeps_what_passed():
    ws = [Finding(V.NCCL_DEFAULT_DIFFERS, f"node-{x}", f"node-{x}: NCCL left alone would use eth0")
          for x in "ab"] + [Finding(V.TEARDOWN_HUNG, "node-a", "node-a: destroy hung")]
    out = checkconditions.warned(PASSED, ws)
    nv = out[V.NETWORK_VALIDATED]
    assert (nv.status, nv.reason) == ("True", V.NCCL_DEFAULT_DIFFERS)
    assert nv.message == "NetworkValidated ok; node-a, node-b: NCCL left alone would use eth0"
    assert out[V.COLLECTIVE_VALIDATED].reason == V.TEARDOWN_HUNG
    assert out[V.MASTER_REACHABLE] == PASSED[V.MASTER_REACHABLE]
    s = checkconditions.summary_passed(PASSED, ws, 2, "eth1", "10.0.0.1", 1.0)
    assert (s.reason, s.message) == (V.PASSED_WITH_WARNINGS, (
        "passed with warnings: NetworkValidated: NCCLDefaultInterfaceDiffers on node-a, node-b; "
        "CollectiveValidated: TeardownHung on node-a; see those conditions"))


def test_many_warnings_stay_within_the_bound_and_count_the_rest():
    ws = [Finding(V.ROUTE_VIA_OTHER_INTERFACE, f"node-{i}", f"node-{i}: route via {chr(97 + i) * 3} " + "x" * 150)
          for i in range(20)]
    nv = checkconditions.warned(PASSED, ws)[V.NETWORK_VALIDATED]
    assert len(nv.message) <= 400 and "19 more warning(s): RouteViaOtherInterface" in nv.message
    s = checkconditions.summary_passed(PASSED, ws, 20, "eth1", "10.0.0.1", 1.0)
    assert len(s.message) <= 320 and "node-6 and 13 more" in s.message


def test_warnings_that_differ_only_in_their_figures_are_one():
    ws = [Finding(V.NCCL_DEFAULT_DIFFERS, "node-a", "node-a: importing torch took 14.2s"),
          Finding(V.NCCL_DEFAULT_DIFFERS, "node-b", "node-b: importing torch took 12.9s")]
    [(reason, nodes, text)] = checkconditions.grouped_warnings(ws)
    assert nodes == ["node-a", "node-b"] and text == "importing torch took 14.2s (node-a's figures)"
