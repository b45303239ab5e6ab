"""Diagnosis: reports -> conditions; the first failing check is the cause."""

import pytest

from disttrain.api import constants
from disttrain.diagnosis.diagnose import diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.diagnosis.netsummary import summarize_ifnames
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import report, typed_report


def outcomes(*reports):
    return [ProbeOutcome(rank=r["rank"], pod=f"j-probe-{r['rank']}", node=r["node"], report=typed_report(r)) for r in reports]


def test_all_pass():
    d = diagnose(outcomes(report(0, "node-a", busbw=2.0), report(1, "node-b", busbw=1.5)), "10.100.0.10")
    assert d.validated
    assert d.conditions[constants.VALIDATED].reason == vocabulary.ALL_CHECKS_PASSED
    assert all(d.conditions[t].status == "True" for t in constants.CHECK_CONDITIONS)
    assert d.bus_bandwidth_gbps == 1.5  # the slowest rank bounds the collective
    assert d.socket_ifnames == {0: "eth1", 1: "eth1"}
    m = d.conditions[constants.NETWORK_VALIDATED].message
    # the choice in one sentence; each rejection reason said once in status.probe
    assert m == "eth1 (10.101.0.0/24) chosen on every node"
    assert d.not_chosen == ["not chosen: docker0 (DuplicateAddress: the same address on every node)"]


def test_specific_reason_beats_generic_and_earlier_checks_true():
    loop = {"reason": "MasterAddrLoopback", "phase": "rendezvous",
            "message": "node-b: MASTER_ADDR master resolves to 127.0.0.1; fix /etc/hosts"}
    timeout = {"reason": "RendezvousTimeout", "phase": "rendezvous", "message": "node-a: peers missing: 1"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=timeout),
                          report(1, "node-b", ok=False, failure=loop)), "10.100.0.10")
    v = d.conditions[constants.VALIDATED]
    assert (v.status, v.reason) == ("False", "MasterAddrLoopback") and "node-b" in v.message
    assert d.conditions[constants.MASTER_REACHABLE].status == "False"
    assert d.conditions[constants.NETWORK_VALIDATED].status == "Unknown"
    assert d.conditions[constants.PROBES_SCHEDULED].status == "True"


def test_network_failure_marks_master_true():
    f = {"reason": "InterfaceNotFound", "phase": "interface", "message": "node-b: eth2 absent (has lo, eth0)"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=f), report(1, "node-b", ok=False, failure=f)), "10.1.1.1")
    assert d.conditions[constants.MASTER_REACHABLE].status == "True"
    assert d.conditions[constants.NETWORK_VALIDATED].reason == "InterfaceNotFound"
    assert d.conditions[constants.COLLECTIVE_VALIDATED].status == "Unknown"


def test_global_failure_reported_by_every_rank_appears_once():
    f = {"reason": "NoCommonInterface", "phase": "choice", "message": "no interface reaches every node; fix X"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=f), report(1, "node-b", ok=False, failure=f)), "10.1.1.1")
    assert d.conditions[constants.NETWORK_VALIDATED].message.count("no interface reaches every node") == 1
    assert d.conditions[constants.VALIDATED].message.startswith("NetworkValidated=False (NoCommonInterface)")


def test_null_bandwidth_does_not_crash():
    r = report(0, "node-a")
    r["allreduce"]["busbwGBps"] = None
    d = diagnose(outcomes(r, report(1, "node-b")), "10.1.1.1")
    assert d.bus_bandwidth_gbps == 0.0


def test_version_mismatch_detected_across_reports():
    d = diagnose(outcomes(report(0, "node-a", nccl="2.21.5"), report(1, "node-b", nccl="2.27.5")), "10.1.1.1")
    v = d.conditions[constants.VERSIONS_CONSISTENT]
    assert (v.status, v.reason) == ("False", vocabulary.NCCL_VERSION_MISMATCH)
    assert v.message.startswith("NCCL differs between nodes: node-a: torch 2.8.0, NCCL 2.21.5; "
                                "node-b: torch 2.8.0, NCCL 2.27.5; ")
    # nothing tells which node is off: both are named
    assert "LD_LIBRARY_PATH/LD_PRELOAD on node-a, node-b" in v.message
    assert not d.validated


def _skewed(probe_failed: bool):
    """node-b preloads NCCL 2.28.9 while torch (and node-a) use the wheel's 2.27.3."""
    lib_a = "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"
    lib_b = "/opt/nccl-2.28.9/lib/libnccl.so.2"
    reps = []
    for rank, node, nccl, lib in ((0, "node-a", "2.27.3", lib_a), (1, "node-b", "2.28.9", lib_b)):
        f = {"reason": vocabulary.NCCL_VERSION_MISMATCH, "phase": "versions",
             "message": f"{node}: peer ... failed in versions"} if probe_failed else None
        r = report(rank, node, ok=not probe_failed, failure=f, torch="2.8.0+cu128", nccl=nccl)
        r["versions"].update(cuda="12.8", ncclBuild="2.27.3", ncclLib=lib)
        reps.append(r)
    return diagnose(outcomes(*reps), "10.1.1.1")


def test_nccl_skew_table_names_the_node_off_torchs_build_and_replaces_probe_messages():
    for probe_failed in (True, False):
        d = _skewed(probe_failed)
        v = d.conditions[constants.VERSIONS_CONSISTENT]
        assert (v.status, v.reason) == ("False", vocabulary.NCCL_VERSION_MISMATCH)
        assert v.message == (
            "NCCL differs between nodes: node-a: torch 2.8.0+cu128, CUDA 12.8, NCCL 2.27.3; "
            "node-b: torch 2.8.0+cu128, CUDA 12.8, NCCL 2.28.9 from /opt/nccl-2.28.9/lib/libnccl.so.2; "
            "make every node load the same NCCL: check LD_LIBRARY_PATH/LD_PRELOAD on node-b "
            "(or the image's NCCL)")
        assert d.conditions[constants.VALIDATED].message == (
            "VersionsConsistent=False (NCCLVersionMismatch) on node-b: see the "
            "VersionsConsistent condition for the cause and the fix")
        assert d.conditions[constants.NETWORK_VALIDATED].status == "True"
        assert d.conditions[constants.COLLECTIVE_VALIDATED].status == "Unknown"
        assert [n["nccl"] for n in d.nodes] == ["2.27.3", "2.28.9"]


def test_torch_skew_names_the_minority_node():
    reps = [report(r, f"node-{x}", torch=t) for r, (x, t) in enumerate(zip("abc", ["2.8.0", "2.7.1", "2.8.0"]))]
    v = diagnose(outcomes(*reps), "10.1.1.1").conditions[constants.VERSIONS_CONSISTENT]
    assert (v.status, v.reason) == ("False", vocabulary.TORCH_VERSION_MISMATCH)
    assert "node-b: torch 2.7.1" in v.message and v.message.endswith("PYTHONPATH on node-b")


def _two_nics(rank, node, eth0_mbps, eth1_mbps):
    r = report(rank, node)
    r["interfaces"] = [
        {"name": "eth0", "addrs": [f"10.100.0.{11 + rank}/24"], "up": True, "speedMbps": 10000,
         "measuredMbps": eth0_mbps},
        {"name": "eth1", "addrs": [f"10.101.0.{11 + rank}/24"], "up": True, "speedMbps": 10000,
         "measuredMbps": eth1_mbps},
    ]
    r["rejected"].append({"ifname": "eth0", "reason": "NotPreferred",
                          "message": "eth0 on 10.100.0.0/24 is usable, but eth1 ranked higher: faster by measurement"})
    return r


def test_network_message_says_why_the_measured_faster_nic_won():
    d = diagnose(outcomes(_two_nics(0, "node-a", 990.0, 9400.0), _two_nics(1, "node-b", 950.0, 8100.0)),
                 "10.100.0.11")
    m = d.conditions[constants.NETWORK_VALIDATED].message
    assert m == "eth1 (10.101.0.0/24) chosen on every node: 8100 Mb/s measured vs eth0 950 Mb/s"
    assert any(x.startswith("eth0 not preferred: faster by measurement") for x in d.not_chosen), d.not_chosen
    # the runners-up fastest first
    r0 = _two_nics(0, "node-a", 990.0, 9400.0)
    r0["interfaces"].append({"name": "cni0", "addrs": ["10.244.0.1/24"], "measuredMbps": 800.0})
    r0["rejected"].append({"ifname": "cni0", "reason": "NotPreferred", "message": "cni0 ... ranked higher"})
    d = diagnose(outcomes(r0, _two_nics(1, "node-b", 950.0, 8100.0)), "10.100.0.11")
    assert d.conditions[constants.NETWORK_VALIDATED].message.endswith("8100 Mb/s measured vs eth0 950 Mb/s, cni0 800 Mb/s")
    # nothing measured: no numbers
    plain = diagnose(outcomes(report(0, "node-a"), report(1, "node-b")), "10.1.1.1")
    assert "measured" not in plain.conditions[constants.NETWORK_VALIDATED].message


def test_invalid_report_is_a_false_condition_not_a_crash():
    o = [ProbeOutcome(0, "j-probe-0", "node-a", report=typed_report(report(0, "node-a"))),
         ProbeOutcome(1, "j-probe-1", "node-b", error="j-probe-1 on node-b: report invalid: not JSON")]
    d = diagnose(o, "10.1.1.1")
    assert d.conditions[constants.VALIDATED].reason == vocabulary.PROBE_REPORT_INVALID
    assert "node-b" in d.conditions[constants.VALIDATED].message


def test_warning_keeps_condition_true_with_reason():
    w = [{"reason": "HostnameResolvesToLoopback", "message": "node-b: hostname node-b resolves to 127.0.1.1"}]
    d = diagnose(outcomes(report(0, "node-a"), report(1, "node-b", warnings=w)), "10.1.1.1")
    nv = d.conditions[constants.NETWORK_VALIDATED]
    assert (nv.status, nv.reason) == ("True", "HostnameResolvesToLoopback") and "node-b" in nv.message
    assert d.conditions[constants.VALIDATED].reason == vocabulary.PASSED_WITH_WARNINGS


@pytest.mark.parametrize("reason,ctype", [("MasterAddrNotLocal", constants.MASTER_REACHABLE),
                                          ("TeardownHung", constants.COLLECTIVE_VALIDATED),
                                          ("NCCLDefaultInterfaceDiffers", constants.NETWORK_VALIDATED)])
def test_each_warning_lands_on_its_check(reason, ctype):
    w = [{"reason": reason, "message": f"node-a: {reason}"}]
    d = diagnose(outcomes(report(0, "node-a", warnings=w), report(1, "node-b")), "10.1.1.1")
    assert (d.conditions[ctype].status, d.conditions[ctype].reason) == ("True", reason)
    others = [t for t in constants.CHECK_CONDITIONS[1:] if t != ctype]
    assert all(d.conditions[t].reason == constants.PASS_REASON[t] for t in others)


def test_loopback_master_is_refused_even_if_probes_pass():
    d = diagnose(outcomes(report(0, "node-a"), report(1, "node-b")), "127.0.0.1")
    assert d.conditions[constants.VALIDATED].reason == vocabulary.MASTER_ADDR_LOOPBACK


def test_summarize_ifnames():
    assert summarize_ifnames(["eth1", "eth1"]) == "eth1"
    assert summarize_ifnames(["enp6s0", "enp4s0", None]) == "enp4s0,enp6s0"
    assert summarize_ifnames([None]) is None


def test_master_port_failure_names_the_master_node():
    """Rank 1 only knows MASTER_ADDR; the firewall is on rank 0's node: the message says so
    (and, with one dialling rank, that the path is the other candidate and what decides)."""
    drop = {"reason": "MasterPortTimeout", "phase": "rendezvous",
            "message": "node-a (rank 1): connection to MASTER_ADDR 10.100.0.12:29500 timeout for 24.5s"}
    waited = {"reason": "RendezvousTimeout", "phase": "rendezvous", "message": "node-b: rank(s) 1 never arrived"}
    d = diagnose(outcomes(report(0, "node-b", ok=False, failure=waited),
                          report(1, "node-a", ok=False, failure=drop)), "10.100.0.12")
    v = d.conditions[constants.MASTER_REACHABLE]
    assert (v.status, v.reason) == ("False", "MasterPortTimeout")
    assert v.message.startswith("no rank reached MASTER_ADDR 10.100.0.12 (node-b, rank 0) on TCP 29500 "
                                "(node-a timeout): node-b's firewall drops it")
    assert "or the path node-a->node-b" in v.message and "decide: tcpdump on node-b" in v.message
    assert d.conditions[constants.VALIDATED].message.startswith("MasterReachable=False (MasterPortTimeout) on node-b")


def test_passing_report_without_interface_or_master_is_invalid_not_validated():
    """A report cut down to its verdict (or a foreign probe) passes the schema but would
    start training without NCCL_SOCKET_IFNAME: refuse it, naming the pod, and do not crash
    on its missing master or all-reduce sizes."""
    bare = report(1, "node-b")
    bare.update(chosen=None, master=None, truncated=True)
    bare["allreduce"] = {"busbwGBps": 1.0, "algbwGBps": 1.0}
    first = report(0, "node-a")
    first["allreduce"] = {"busbwGBps": 1.0, "algbwGBps": 1.0}  # no "bytes"
    d = diagnose(outcomes(first, bare), "10.1.1.1")
    v = d.conditions[constants.VALIDATED]
    assert (v.status, v.reason) == ("False", vocabulary.PROBE_REPORT_INVALID)
    assert "node-b" in v.message and "NCCL_SOCKET_IFNAME" in v.message and "(truncated)" in v.message
    bare0 = report(0, "node-a")
    bare0["master"] = None
    ok = diagnose(outcomes(bare0, report(1, "node-b")), "10.1.1.1")
    assert ok.conditions[constants.VALIDATED].status == "True"  # a missing master block is no crash


def test_an_rdma_limit_decided_before_the_collective_is_its_cause():
    """gpu/rdmalimits.py fails one node before NCCL opens its RDMA ports; the peers it
    aborts relay the same failure. The verdict is CollectiveValidated=False with that
    node, not a generic ProcessGroupInitFailed."""
    m = {"reason": vocabulary.MEMLOCK_TOO_LOW, "phase": "collective",
         "message": "node-b: the locked-memory limit (ulimit -l) is 8 MiB and the container lacks "
                    "CAP_IPC_LOCK, while NCCL will register its buffers on RDMA port(s) mlx5_0:1"}
    d = diagnose(outcomes(report(0, "node-a", ok=False, failure=m),
                          report(1, "node-b", ok=False, failure=m)), "10.100.0.10")
    c = d.conditions[constants.COLLECTIVE_VALIDATED]
    assert (c.status, c.reason) == ("False", vocabulary.MEMLOCK_TOO_LOW) and "node-b" in c.message
    assert d.conditions[constants.VALIDATED].reason == vocabulary.MEMLOCK_TOO_LOW
    assert d.conditions[constants.VERSIONS_CONSISTENT].status == "True"
