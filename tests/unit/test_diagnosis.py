"""Diagnosis: reports -> conditions; the first failing check is the cause."""

from disttrain import constants as c
from disttrain.diagnosis import ProbeOutcome, diagnose, summarize_ifnames

from .fixtures import report


def outcomes(*reports):
    return [ProbeOutcome(rank=r["rank"], pod=f"j-probe-{r['rank']}", node=r["node"], report=r) for r in reports]


def test_all_pass():
    d = diagnose(outcomes(report(0, "node-a", busbw=2.0), report(1, "node-b", busbw=1.5)), "10.100.0.10")
    assert d.validated
    assert d.conditions[c.VALIDATED].reason == c.REASON_ALL_CHECKS_PASSED
    assert all(d.conditions[t].status == "True" for t in c.CHECK_CONDITIONS)
    assert d.bus_bandwidth_gbps == 1.5  # the slowest rank bounds the collective
    assert d.socket_ifnames == {0: "eth1", 1: "eth1"}
    assert "docker0 (DuplicateAddress)" in d.conditions[c.NETWORK_VALIDATED].message
    # each rejected decoy is explained once, in the probe's words
    assert d.conditions[c.NETWORK_VALIDATED].message.count("172.17.0.1 on every node") == 1


def test_specific_reason_beats_generic_and_earlier_checks_true():
    loop = {"reason": "MasterAddrLoopback", "phase": "rendezvous",
            "message": "node-b: MASTER_ADDR master resolves to 127.0.0.1; fix /etc/hosts"}
    timeout = {"reason": "RendezvousTimeout", "phase": "rendezvous", "message": "node-a: peers missing: 1"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=timeout),
                          report(1, "node-b", ok=False, failure=loop)), "10.100.0.10")
    v = d.conditions[c.VALIDATED]
    assert (v.status, v.reason) == ("False", "MasterAddrLoopback") and "node-b" in v.message
    assert d.conditions[c.MASTER_REACHABLE].status == "False"
    assert d.conditions[c.NETWORK_VALIDATED].status == "Unknown"
    assert d.conditions[c.PROBES_SCHEDULED].status == "True"


def test_network_failure_marks_master_true():
    f = {"reason": "InterfaceNotFound", "phase": "interface", "message": "node-b: eth2 absent (has lo, eth0)"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=f), report(1, "node-b", ok=False, failure=f)), "10.1.1.1")
    assert d.conditions[c.MASTER_REACHABLE].status == "True"
    assert d.conditions[c.NETWORK_VALIDATED].reason == "InterfaceNotFound"
    assert d.conditions[c.COLLECTIVE_VALIDATED].status == "Unknown"


def test_global_failure_reported_by_every_rank_appears_once():
    f = {"reason": "NoCommonInterface", "phase": "choice", "message": "no interface reaches every node; fix X"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=f), report(1, "node-b", ok=False, failure=f)), "10.1.1.1")
    assert d.conditions[c.VALIDATED].message.count("no interface reaches every node") == 1


def test_null_bandwidth_does_not_crash():
    r = report(0, "node-a")
    r["allreduce"]["busbwGBps"] = None
    d = diagnose(outcomes(r, report(1, "node-b")), "10.1.1.1")
    assert d.bus_bandwidth_gbps == 0.0


def test_version_mismatch_detected_across_reports():
    d = diagnose(outcomes(report(0, "node-a", nccl="2.21.5"), report(1, "node-b", nccl="2.27.5")), "10.1.1.1")
    v = d.conditions[c.VERSIONS_CONSISTENT]
    assert (v.status, v.reason) == ("False", c.REASON_NCCL_VERSION_MISMATCH)
    assert "node-a=2.21.5" in v.message and "node-b=2.27.5" in v.message
    assert not d.validated


def test_invalid_report_is_a_false_condition_not_a_crash():
    o = [ProbeOutcome(0, "j-probe-0", "node-a", report=report(0, "node-a")),
         ProbeOutcome(1, "j-probe-1", "node-b", error="j-probe-1 on node-b: report invalid: not JSON")]
    d = diagnose(o, "10.1.1.1")
    assert d.conditions[c.VALIDATED].reason == c.REASON_PROBE_REPORT_INVALID
    assert "node-b" in d.conditions[c.VALIDATED].message


def test_warning_keeps_condition_true_with_reason():
    w = [{"reason": "HostnameResolvesToLoopback", "message": "node-b: hostname node-b resolves to 127.0.1.1"}]
    d = diagnose(outcomes(report(0, "node-a"), report(1, "node-b", warnings=w)), "10.1.1.1")
    nv = d.conditions[c.NETWORK_VALIDATED]
    assert (nv.status, nv.reason) == ("True", "HostnameResolvesToLoopback") and "node-b" in nv.message
    assert d.conditions[c.VALIDATED].reason == c.REASON_PASSED_WITH_WARNINGS


def test_loopback_master_is_refused_even_if_probes_pass():
    d = diagnose(outcomes(report(0, "node-a"), report(1, "node-b")), "127.0.0.1")
    assert d.conditions[c.VALIDATED].reason == c.REASON_MASTER_ADDR_LOOPBACK


def test_summarize_ifnames():
    assert summarize_ifnames(["eth1", "eth1"]) == "eth1"
    assert summarize_ifnames(["enp6s0", "enp4s0", None]) == "enp4s0,enp6s0"
    assert summarize_ifnames([None]) is None


def test_master_port_failure_names_the_master_node():
    """Rank 1 only knows MASTER_ADDR; the firewall is on rank 0's node: the message says so."""
    drop = {"reason": "MasterPortTimeout", "phase": "rendezvous",
            "message": "node-a (rank 1): connection to MASTER_ADDR 10.100.0.12:29500 timeout for 24.5s"}
    waited = {"reason": "RendezvousTimeout", "phase": "rendezvous", "message": "node-b: rank(s) 1 never arrived"}
    d = diagnose(outcomes(report(0, "node-b", ok=False, failure=waited),
                          report(1, "node-a", ok=False, failure=drop)), "10.100.0.12")
    v = d.conditions[c.MASTER_REACHABLE]
    assert (v.status, v.reason) == ("False", "MasterPortTimeout")
    assert v.message.startswith("node-a (rank 1)")
    assert "MASTER_ADDR 10.100.0.12 is node-b (rank 0" in v.message and "node-b's firewall" in v.message
