"""Path MTU black holes: the bisection (pure), the verdict from a mesh (pure), and two ranks
in network namespaces joined by two routers through a 1400-byte middle link, whose ICMP
"fragmentation needed" is dropped (a black hole: PathMTUBlackHole) or passed (path MTU
discovery works: the probe passes). Traffic stays inside namespaces the test made."""
from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from probe_helpers import run_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary
from disttrain_probe.phases import interfaces, pathmtu
from localcluster.network import routing


@pytest.mark.parametrize("path_mtu", [576, 1000, 1400, 1499])
def test_search_finds_the_largest_packet_that_passes(path_mtu):
    tried = []

    def passes(mss):
        tried.append(mss)
        return mss + pathmtu.HEADERS <= path_mtu

    assert pathmtu.search(passes, 1500, float("inf")) == {"passes": path_mtu, "lost": path_mtu + 1}
    assert len(tried) <= 12  # two ends, then a bisection of 924 sizes


def test_search_explains_only_an_mtu_fault():
    assert pathmtu.search(lambda mss: False, 1500, float("inf")) is None  # nothing large passes
    assert pathmtu.search(lambda mss: True, 1500, float("inf")) is None  # the full size passes now
    assert pathmtu.search(lambda mss: mss < 1000, 1500, 0.0) is None  # no time left: no guess



def test_search_gives_no_verdict_it_did_not_see():
    flaky = iter([True, False])  # an MTU of 576 or less leaves nothing to bisect
    assert pathmtu.search(lambda mss: next(flaky), 576, float("inf")) is None


def test_search_never_claims_a_size_lost_that_it_did_not_try():
    tried = []

    def passes(mss):
        tried.append(mss)
        time.sleep(0.06)
        return True

    result = pathmtu.search(passes, 1500, time.monotonic() + 0.05)
    assert result is None and tried == [pathmtu.MIN_MSS]

def mesh_with_hole(addrs):
    ok = {"r": "ok", "ms": 0.4}
    return {0: {1: {addrs[1]: dict(ok, pmtu={"passes": 1400, "lost": 1401}), "10.100.0.12": ok}},
            1: {0: {addrs[0]: ok, "10.100.0.11": ok}}}


PEERS = {r: {"node": f"node-{'ab'[r]}", "interfaces": [
    {"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "mtu": 1500},
    {"name": "eth1", "addrs": [f"10.10{1 + r}.0.{11 + r}/24"], "mtu": 1500}]} for r in (0, 1)}


def test_the_verdict_names_the_path_the_mtus_the_size_and_the_fix():
    addrs = {0: "10.101.0.11", 1: "10.102.0.12"}
    picks = {r: {"ifname": "eth1", "addr": a} for r, a in addrs.items()}
    f = pathmtu.black_hole_failure(PEERS, mesh_with_hole(addrs), picks)
    assert f is not None and f["reason"] == vocabulary.PATH_MTU_BLACK_HOLE
    assert f["message"].startswith("node-b -> node-a on eth1: packets of 1401 bytes are lost, "
                                   "1400 pass (both interfaces at MTU 1500)")
    assert "set eth1's MTU to 1400 on every node" in f["message"]
    assert "firewall" not in f["message"] and len(f["message"]) <= 400
    # the hole is on another network than the chosen one: nothing to say
    other = {r: {"ifname": "eth0", "addr": f"10.100.0.{11 + r}"} for r in (0, 1)}
    assert pathmtu.black_hole_failure(PEERS, mesh_with_hole(addrs), other) is None



def test_a_black_holed_network_passed_over_says_why():
    """eth0 and eth1 equally fast, eth1 loses full-size packets: eth0 is chosen and eth1's
    rejection names the black hole, not the ranking."""
    peers = {r: {"node": f"node-{'ab'[r]}", "interfaces": [
        {"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "mtu": 1500, "up": True},
        {"name": "eth1", "addrs": [f"10.101.0.{11 + r}/24"], "mtu": 1500, "up": True}]} for r in (0, 1)}
    ok = {"r": "ok", "ms": 0.4}
    mesh = {0: {1: {"10.101.0.12": dict(ok, pmtu={"passes": 1400, "lost": 1401}), "10.100.0.12": ok}},
            1: {0: {"10.101.0.11": ok, "10.100.0.11": ok}}}
    got = interfaces.choose(peers, mesh)
    assert got["failure"] is None and got["chosen"][0]["ifname"] == "eth0"
    [rej] = [x for x in got["rejected"][0] if x["ifname"] == "eth1"]
    assert rej["reason"] == vocabulary.REJ_NOT_PREFERRED
    assert "loses full-size packets" in rej["message"] and "1401 bytes are lost" in rej["message"]


@pytest.mark.parametrize("peers,picks", [
    ({}, {0: {"addr": "10.101.0.11"}}),  # the receiver made no pick
    ({}, {0: {"addr": "10.101.0.11"}, 1: "eth1"}),  # a pick that is not a mapping
    ({0: "node-a", 1: ["node-b"]}, {0: {"addr": "10.101.0.11"}}),  # peers that are not either
    ({0: {"interfaces": ["eth1", {"addrs": "10.101.0.11"}, {"addrs": ["10.101.0.11/24"], "mtu": True}]}},
     {0: {"addr": "10.101.0.11"}}),
])
def test_odd_peers_and_picks_from_other_ranks_do_not_raise(peers, picks):
    mesh = {1: {0: {"10.101.0.11": {"pmtu": {"passes": 1400, "lost": 1401}}}}}
    f = pathmtu.black_hole_failure(peers, mesh, picks)
    assert f is not None and "1401 bytes are lost" in f["message"] and len(f["message"]) <= 400


@pytest.mark.parametrize("pick,pmtu", [
    ({"ifname": "eth1"}, {"passes": 1400, "lost": 1401}),  # no address chosen: str(None) matched
    ({"addr": "None"}, {"passes": True, "lost": 1401}),
    ({"addr": "None"}, {"passes": 1500, "lost": 1400}),
])
def test_no_verdict_without_a_pmtu_entry_on_a_chosen_address(pick, pmtu):
    mesh = {1: {0: {"None": {"pmtu": pmtu}}}}
    assert pathmtu.black_hole_failure({}, mesh, {0: pick}) is None

@given(st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=8)),
                    lambda inner: st.dictionaries(st.one_of(st.integers(0, 3), st.text(max_size=12)),
                                                  inner, max_size=4), max_leaves=30))
def test_any_mesh_gives_a_bounded_verdict_or_none(mesh):
    picks = {r: {"ifname": "eth1", "addr": f"10.101.0.{11 + r}"} for r in range(4)}
    f = pathmtu.black_hole_failure(PEERS, mesh if isinstance(mesh, dict) else {}, picks)
    assert f is None or (f["reason"] == vocabulary.PATH_MTU_BLACK_HOLE and len(f["message"]) <= 400)


def sh(*args: str, stdin: str | None = None) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True, input=stdin)


@pytest.fixture
def routed(request):
    """Two node namespaces whose eth1 sit on two segments joined by routers through a
    1400-byte middle link (localcluster.network.routing, as the proving ground builds it); eth0 on
    a shared segment carries the rendezvous. Parametrized by icmpFragNeeded."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("needs root, iproute2 and nft (network namespaces, routers)")
    tag = f"dtjp-{uuid.uuid4().hex[:6]}-"
    fab, nodes = tag + "fab", [tag + "n0", tag + "n1"]
    subnets = {"mgmt": "10.220.0.0/24", "data": "10.221.0.0/24", "datb": "10.222.0.0/24"}
    pairs = routing.plan([routing.RoutedLink(between=("data", "datb"), mtu=1400,
                                             icmpFragNeeded=request.param)], subnets, tag)
    created = [fab] + nodes + [leg.netns for leg in pairs[0].legs]

    def cleanup():
        for ns in reversed(created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    request.addfinalizer(cleanup)
    sh("ip", "netns", "add", fab)
    for seg in subnets:
        sh("ip", "-n", fab, "link", "add", f"br-{seg}", "type", "bridge")
        sh("ip", "-n", fab, "link", "set", f"br-{seg}", "up")
    for i, ns in enumerate(nodes):
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        for nic, seg in (("eth0", "mgmt"), ("eth1", ("data", "datb")[i])):
            port = f"{nic}n{i}"
            sh("ip", "-n", fab, "link", "add", port, "type", "veth", "peer", "name", nic, "netns", ns)
            sh("ip", "-n", fab, "link", "set", port, "master", f"br-{seg}")
            sh("ip", "-n", fab, "link", "set", port, "up")
            net = ipaddress.ip_network(subnets[seg])
            sh("ip", "-n", ns, "addr", "add", f"{net.network_address + 11 + i}/24", "dev", nic)
            sh("ip", "-n", ns, "link", "set", nic, "up")
        for r in routing.node_routes(pairs, {"eth1": ("data", "datb")[i]}):
            sh("ip", "-n", ns, "route", "replace", r["to"], "via", r["via"], "dev", r["dev"])
    routing.ensure(pairs, fab, [], tag)
    return nodes


def run_pair(nodes, tmp_path):
    envs = [{"RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": "10.220.0.11", "MASTER_PORT": "29500",
             "NODE_NAME": f"node-{'ab'[i]}", "DISTTRAIN_PROBE_SOCKET_IFNAME": "eth1",
             "DISTTRAIN_PROBE_TIMEOUT_SECONDS": "50", "DISTTRAIN_PROBE_ITERATIONS": "3"}
            for i in range(2)]
    return run_ranks(envs, tmp_path, timeout=80, prefix=[["ip", "netns", "exec", ns] for ns in nodes])


@pytest.mark.netns
@pytest.mark.parametrize("routed", ["drop", "pass"], indirect=True)
def test_a_middle_link_black_hole_is_named_and_discovered_path_mtu_passes(routed, request, tmp_path):
    """drop: every rank fails with PathMTUBlackHole naming the size that passes; pass: path
    MTU discovery shrinks the segments and the probe validates eth1."""
    black_hole = request.node.callspec.params["routed"] == "drop"
    for run in run_pair(routed, tmp_path):
        rep = parse_report(run.report_text)
        assert run.rc == (1 if black_hole else 0), (rep.failure, run.stderr[-2000:])
        if black_hole:
            assert rep.failure is not None and rep.failure.reason == vocabulary.PATH_MTU_BLACK_HOLE
            # the search brackets the path's 1400 bytes (exactly, given the time: 1401 / 1400)
            m = re.search(r"on eth1: packets of (\d+) bytes are lost, (\d+) pass", rep.failure.message)
            assert m and int(m.group(2)) <= 1400 < int(m.group(1)), rep.failure.message
            assert f"set eth1's MTU to {m.group(2)} on every node" in rep.failure.message
            assert "both interfaces at MTU 1500" in rep.failure.message
        else:
            assert rep.chosen is not None and rep.chosen.ifname == "eth1"
