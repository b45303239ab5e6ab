"""Report cap, reasons, bandwidth formula, config parsing, deadlines, operator-side parsing."""
from __future__ import annotations

import json
import re
import time

import pytest

from disttrain.diagnosis.report import ProbeReport, ReportInvalid, parse_report
from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.versions import check as check_versions
from disttrain_probe.ground.config import ConfigError, load, parse_ifname_spec, parse_port_range
from disttrain_probe.ground.deadline import Tracker
from disttrain_probe.phases.collective import bandwidth, busbw_factor
from disttrain_probe.run import report as REP


def big_report(n_ifaces: int = 64) -> dict:
    ifs = [{"name": f"enp{i}s0f1np1", "addrs": [f"10.{i}.0.1/24", f"fd00:{i:x}::1/64",
                                                  f"fe80::{i:x}:ff:fe00:1/64"],
            "up": True, "speedMbps": 100000, "mtu": 9000} for i in range(n_ifaces)]
    return {
        "v": 1, "rank": 3, "worldSize": 64, "node": "gpu-node-0003.example.internal",
        "pod": "job-probe-3", "hostname": "gpu-node-0003", "hostIp": "10.0.0.4", "ok": False,
        "phase": "choice",
        "failure": {"reason": vocabulary.NO_COMMON_INTERFACE, "phase": "choice", "message": "x" * 3000},
        "warnings": [{"reason": vocabulary.HOSTNAME_LOOPBACK, "message": "w" * 500}] * 6,
        "versions": {"python": "3.11.7", "torch": "2.8.0", "cuda": "12.8", "nccl": "2.27.3",
                     "driver": "570.1", "gpus": 8},
        "master": {"addr": "job-master.ns.svc", "port": 29500, "resolved": ["10.0.0.1"],
                   "route": {"iface": "enp0s0f1np1", "src": "10.0.0.4"}},
        "portRange": [32768, 60999], "portRangeAllowed": None,
        "interfaces": ifs,
        "chosen": None, "network": None,
        "rejected": [{"ifname": i["name"], "reason": "Unreachable", "message": "m" * 300} for i in ifs],
        "ncclDefaultIfname": "enp0s0f1np1", "socketIfname": "auto", "backend": None,
        "allreduce": None, "timings": {"inventory": 1.2, "rendezvous": 0.3, "total": 9.9},
        "hostResolves": ["127.0.1.1"] * 5,
        "mesh": [{"peer": p, "addr": f"10.{i}.0.{p}", "r": "timeout", "ms": 2000.0}
                 for p in range(64) for i in range(8)],
        "env": {f"NCCL_VAR_{i}": "v" * 40 for i in range(40)},
        "truncated": False,
    }


def test_small_report_is_untouched():
    r = {"v": 1, "ok": True, "rank": 0, "warnings": []}
    text, truncated = REP.cap(r)
    assert not truncated and json.loads(text) == r


def test_truncation_with_64_interfaces_stays_under_cap_and_parses():
    text, truncated = REP.cap(big_report(64))
    assert truncated
    assert len(text.encode()) <= 4096
    obj = json.loads(text)
    assert obj["truncated"] is True and "mesh" not in obj  # mesh detail goes first
    assert obj["failure"]["reason"] == vocabulary.NO_COMMON_INTERFACE
    rep = parse_report(text)
    assert rep.truncated and rep.rank == 3 and rep.versions.nccl == "2.27.3"


@pytest.mark.parametrize("n", [0, 1, 8, 64, 300])
def test_truncation_never_exceeds_cap(n):
    r = big_report(n)
    r["node"] = "n" * (50 * n)
    text, _ = REP.cap(r)
    assert len(text.encode()) <= REP.MAX_REPORT_BYTES
    parse_report(text)


def test_a_passing_report_cut_to_the_bone_keeps_its_chosen_interface_and_master():
    """Even the last resort keeps what the operator needs for training: the interface
    (NCCL_SOCKET_IFNAME) and the master this rank reached."""
    r = big_report(300)
    r.update(ok=True, failure=None, phase="report",
             chosen={"ifname": "enp7s0f1np1", "addr": "10.7.0.1", "subnet": "10.7.0.0/24"})
    r["master"]["resolved"] = [f"fd00::{i:x}" for i in range(400)]
    r["node"] = "n" * 900
    text, truncated = REP.cap(r)
    obj = json.loads(text)
    assert truncated and len(text.encode()) <= REP.MAX_REPORT_BYTES
    assert obj["chosen"]["ifname"] == "enp7s0f1np1" and obj["master"]["port"] == 29500
    parse_report(text)


@pytest.mark.parametrize("node_len", [900, 5000])  # the essentials; the bone (the node name cut)
@pytest.mark.parametrize("joined,final", [(False, False), (True, False), (True, None)])
def test_a_report_cut_to_the_bone_still_says_whether_it_joined_and_was_final(joined, final, node_len):
    """What the operator's stranded and node-loss rules read survives the last resorts: whether
    the rank joined rank 0's store (False is kept, not dropped as empty) and whether the
    report is the pessimistic one written before a phase."""
    r = big_report(300)
    r["node"] = "n" * node_len
    r["master"]["resolved"] = [f"fd00::{i:x}" for i in range(400)]
    r["master"]["joined"] = joined
    if final is not None:
        r["final"] = final
    text, truncated = REP.cap(r)
    rep = parse_report(text)
    assert truncated and rep.master.joined is joined and rep.final is final
    assert rep.master.addr == "job-master.ns.svc" and not rep.interfaces  # the last resorts
    assert (rep.versions is None) is (node_len == 5000)  # the bone keeps no versions


def test_mesh_dropped_before_anything_else():
    r = big_report(4)
    r["failure"]["message"] = "short"
    r["warnings"] = []
    r["env"] = {}
    r["rejected"] = r["rejected"][:2]
    text, truncated = REP.cap(r)
    obj = json.loads(text)
    assert truncated and "mesh" not in obj
    assert obj["interfaces"] == r["interfaces"] and obj["rejected"] == r["rejected"]


def test_reasons_are_unique_camelcase_and_cover_the_design_table():
    design = {"MasterAddrLoopback", "MasterAddrUnresolvable", "MasterPortRefused",
              "MasterPortTimeout", "InterfaceNotFound", "InterfaceUnreachable",
              "NoCommonInterface", "EphemeralPortsBlocked", "NCCLVersionMismatch",
              "TorchVersionMismatch", "CUDAVersionMismatch", "DriverVersionMismatch",
              "AllReduceTimeout", "AllReduceWrongResult", "BandwidthBelowThreshold",
              "ProcessGroupInitFailed", "RendezvousTimeout", "ProbeInternalError"}
    assert set(vocabulary.PROBE_FAILURES) == design | {"TorchImportTimeout", "SettingsMismatch",
                                                       "MemlockTooLow", "GIDIndexInvalid",
                                                       "P2PCheckFailed", "PathMTUBlackHole",
                                                       "ConnectionIntercepted"}
    for group in (vocabulary.PROBE_FAILURES, vocabulary.PROBE_WARNINGS, vocabulary.PROBE_REJECTIONS):
        assert len(set(group)) == len(group)
        for x in group:
            assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", x), x
    # two probe reasons are both: a memlock limit below what NCCL registers fails, a finite
    # one above it warns (gpu/rdmalimits.py); NCCL's P2P check: wrong data fails, a pair NCCL
    # could not use warns (gpu/nccldiag.py)
    assert set(vocabulary.PROBE_FAILURES) & set(vocabulary.PROBE_WARNINGS) == {"MemlockTooLow",
                                                                             "P2PCheckFailed"}
    assert set(vocabulary.PROBE_CONDITION_OF) == set(vocabulary.PROBE_FAILURES)


def test_busbw_formula():
    assert busbw_factor(1) == 0.0
    assert busbw_factor(2) == 1.0
    assert busbw_factor(4) == 1.5
    assert busbw_factor(8) == 1.75
    bw = bandwidth(4 * 2**20, 0.002, 4)  # 4 MiB in 2 ms over 4 ranks
    assert bw["algbwGBps"] == pytest.approx(4 * 2**20 / 0.002 / 1e9)
    assert bw["busbwGBps"] == pytest.approx(bw["algbwGBps"] * 1.5)
    assert bandwidth(100, 0.0, 2) == {"algbwGBps": 0.0, "busbwGBps": 0.0}


def test_versions_mismatch_order_and_message():
    peers = {0: {"node": "a", "versions": {"nccl": "2.21.5", "torch": "2.4.0", "cuda": "12.4"}},
             1: {"node": "b", "versions": {"nccl": "2.27.5", "torch": "2.8.0", "cuda": "12.9"}}}
    v = check_versions(peers)
    assert v["reason"] == vocabulary.NCCL_VERSION_MISMATCH
    assert v["message"].startswith("NCCL differs between nodes: a: torch 2.4.0, CUDA 12.4, NCCL 2.21.5; "
                                   "b: torch 2.8.0, CUDA 12.9, NCCL 2.27.5; ")
    peers[1]["versions"]["nccl"] = "2.21.5"
    assert check_versions(peers)["reason"] == vocabulary.TORCH_VERSION_MISMATCH
    peers[1]["versions"]["torch"] = "2.4.0"
    assert check_versions(peers)["reason"] == vocabulary.CUDA_VERSION_MISMATCH
    peers[1]["versions"]["cuda"] = "12.4"
    peers[0]["versions"]["driver"] = "550.1"
    assert check_versions(peers)["reason"] == vocabulary.DRIVER_VERSION_MISMATCH
    peers[1]["versions"]["driver"] = "550.1"
    assert check_versions(peers) is None


def test_nccl_skew_names_the_node_that_left_torchs_build():
    lib = "/opt/nccl-2.28.9/lib/libnccl.so.2"
    peers = {r: {"node": n, "versions": {"torch": "2.8.0", "nccl": v, "ncclBuild": "2.27.3", "ncclLib": p}}
             for r, (n, v, p) in enumerate([("node-a", "2.27.3", "/venv/libnccl.so.2"),
                                            ("node-b", "2.28.9", lib), ("node-c", "2.27.3", None)])}
    v = check_versions(peers)
    assert v["reason"] == vocabulary.NCCL_VERSION_MISMATCH
    assert f"node-b: torch 2.8.0, NCCL 2.28.9 from {lib}; node-c" in v["message"]
    assert "/venv/libnccl.so.2" not in v["message"]  # only the odd node's library is shown
    assert v["message"].endswith("check LD_LIBRARY_PATH/LD_PRELOAD on node-b (or the image's NCCL)")


def test_odd_nodes():
    from disttrain_probe.contract.versions import odd_nodes
    assert odd_nodes({"a": "1", "b": "2", "c": "1"}) == ["b"]          # the minority
    assert odd_nodes({"a": "1", "b": "2"}) == ["a", "b"]               # no majority: all
    assert odd_nodes({"a": "1", "b": "2"}, {"a": "1", "b": "1"}) == ["b"]  # off the build
    assert odd_nodes({"a": "2", "b": "2", "c": "1"}, {"a": "1", "b": "1", "c": "1"}) == ["a", "b"]
    assert odd_nodes({"a": "2", "b": "3"}, {"a": "1", "b": "1"}) == ["a", "b"]  # all off: all


BASE_ENV = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def test_config_env_and_flags():
    c = load([], dict(BASE_ENV, DISTTRAIN_PROBE_PORT_RANGE="40000-41000", NODE_NAME="n1"))
    assert (c.rank, c.world_size, c.master_port, c.node_name) == (1, 2, 29500, "n1")
    assert c.port_range == (40000, 41000) and c.backend == "auto" and c.socket_ifname == "auto"
    assert c.message_size_bytes == 4 * 2**20 and c.iterations == 10 and c.timeout_seconds == 60
    assert c.report_path == "/dev/termination-log"
    c = load(["--rank", "0", "--socket-ifname", "lo", "--timeout-seconds", "5"], BASE_ENV)
    assert c.rank == 0 and c.loopback_requested and c.timeout_seconds == 5


@pytest.mark.parametrize("env,needle", [
    ({}, "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT"),
    (dict(BASE_ENV, RANK="2"), "must be < WORLD_SIZE"),
    (dict(BASE_ENV, MASTER_PORT="x"), "MASTER_PORT"),
    (dict(BASE_ENV, DISTTRAIN_PROBE_BACKEND="mpi"), "auto, nccl or gloo"),
    (dict(BASE_ENV, DISTTRAIN_PROBE_PORT_RANGE="9-1"), "lo <= hi"),
])
def test_config_errors(env, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load([], env)


def test_ifname_spec():
    assert parse_ifname_spec("auto") == ("auto", [])
    assert parse_ifname_spec("^docker,lo") == ("exclude", [("docker", False), ("lo", False)])
    assert parse_ifname_spec("=eth0") == ("include", [("eth0", True)])
    assert parse_port_range("") is None


def test_tracker_splits_budget_and_watchdog_fires():
    fired = []
    t = Tracker(10.0, on_overrun=lambda p, r, m: fired.append((p, r, m)), watchdog=False)
    d = t.begin("inventory")
    assert 2.5 < d.remaining() <= 3.0  # min(5 s, 30 %) of a 10 s total: no torch import here
    d = t.begin("rendezvous", vocabulary.RENDEZVOUS_TIMEOUT, "waiting")
    # the rendezvous (it waits for torch) may use all but the 35 % kept for later phases
    assert 5.5 < d.remaining() < 6.1
    t.hard = time.monotonic() - 1  # pretend the phase overran
    assert t.check() and fired[0][0] == "rendezvous" and fired[0][1] == vocabulary.RENDEZVOUS_TIMEOUT
    assert "waiting" in fired[0][2]
    assert not t.check()  # fires once
    t.finish()


def test_watchdog_thread_fires_on_its_own():
    fired = []
    t = Tracker(1.0, on_overrun=lambda p, r, m: fired.append(p))
    t.begin("collective", vocabulary.ALL_REDUCE_TIMEOUT)
    time.sleep(1.3)
    assert fired == ["collective"]
    t.finish()


@pytest.mark.parametrize("raw,needle", [
    (b"", "empty"),
    ("not json", "not JSON"),
    ("[1,2]", "not an object"),
    ('{"v":2,"ok":true}', "version 2"),
    ('{"ok":true}', "version None"),
    ('{"v":1}', "ok"),
    ('{"v":1,"ok":true,"allreduce":{"bytes":"many"}}', "allreduce.bytes"),
    ("{" + '"v":1,"ok":true,"x":"' + "a" * 5000 + '"}', "4096"),
    (b"\xff\xfe", "not JSON"),
])
def test_parse_report_rejects(raw, needle):
    with pytest.raises(ReportInvalid, match=re.escape(needle)):
        parse_report(raw)


def test_parse_report_accepts_names_and_ignores_extras():
    rep = parse_report('{"v":1,"ok":true,"rank":0,"worldSize":2,"futureField":{"a":1},'
                       '"allreduce":{"bytes":8,"busbwGBps":1.5},"chosen":{"ifname":"eth0"}}')
    assert isinstance(rep, ProbeReport)
    assert rep.world_size == 2 and rep.allreduce.busbw_gbps == 1.5 and rep.chosen.ifname == "eth0"
    assert rep.failure_reason is None
    assert ProbeReport(v=1, ok=False, world_size=3).world_size == 3  # populate_by_name


def test_paths_at_64_ranks_survive_the_cap():
    """The per-path evidence (one character per peer per network) is kept when the report
    is cut: 64 ranks on four networks, everything else oversized."""
    r = big_report(64)
    row = lambda c: "".join("." if p == 3 else c for p in range(64))  # noqa: E731
    r["paths"] = {"10.0.0.0/24": row("o"), "10.1.0.0/24": row("t"), "172.17.0.0/16": row("w"),
                  "ifname:cni0": row("o")}
    r["pathMbps"] = {"10.0.0.0/24": {"2": 9400.0, "4": 9100.0}}
    text, truncated = REP.cap(r)
    obj = json.loads(text)
    assert truncated and len(text.encode()) <= REP.MAX_REPORT_BYTES
    assert obj["paths"] == r["paths"]
    assert parse_report(text).paths == r["paths"]
    # a pathological number of networks is cut to the ones with failures first
    r["paths"] = {f"10.{i}.0.0/24": row("o" if i % 2 else "r") for i in range(300)}
    obj = json.loads(REP.cap(r)[0])
    assert 1 <= len(obj["paths"]) <= 8 and all("r" in v for v in obj["paths"].values())


@pytest.mark.parametrize("limit", [3072, 2457, 2048, 1024, 512, 256])
@pytest.mark.parametrize("n", [1, 8, 64, 300])
def test_the_cap_holds_the_pods_smaller_termination_message_budget(limit, n):
    """A pod of more than 3 containers keeps less than 4096 bytes of each one's message
    (the kubelet shares 12 KiB): the report fits the budget the operator passes."""
    r = big_report(n)
    r.update(ok=True, failure=None, phase="report",
             chosen={"ifname": "enp7s0f1np1", "addr": "10.7.0.1", "subnet": "10.7.0.0/24"})
    text, truncated = REP.cap(r, limit)
    assert truncated and len(text.encode()) <= limit
    rep = parse_report(text)
    assert rep.ok is True
    if limit >= 512:  # what training needs survives any budget the operator passes for up to 24 containers
        assert json.loads(text)["chosen"]["ifname"] == "enp7s0f1np1"


def test_the_budget_follows_the_kubelets_share_and_the_probe_clamps_what_it_is_given():
    from disttrain_probe.contract import probe_env
    from disttrain_probe.contract.report_format import parse_budget, report_budget
    assert [report_budget(n) for n in (0, 1, 3, 4, 5, 12, 48)] == [4096, 4096, 4096, 3072, 2457, 1024, 256]
    assert [parse_budget(x) for x in ("3072", " 2048 ", "99999", "1", "x", None, "")] == \
        [3072, 2048, 4096, 256, 4096, 4096, 4096]
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert load([], env).report_bytes == 4096
    assert load([], {**env, probe_env.REPORT_BYTES: "3072"}).report_bytes == 3072
