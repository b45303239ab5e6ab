"""Interface choice (pure): table-driven over inventories + mesh results."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import pytest

from disttrain_probe.contract import vocabulary
from disttrain_probe.phases.interfaces import choose, nccl_default
from tests.support import scenario_reports


def iface(name: str, *addrs: str, up: bool = True, speed: Optional[int] = None) -> dict:
    return {"name": name, "addrs": list(addrs), "up": up, "speedMbps": speed, "mtu": 1500,
            "loopback": name == "lo"}


LO = iface("lo", "127.0.0.1/8", "::1/128")
DOCKER = iface("docker0", "172.17.0.1/16", up=False)


def peer(rank: int, *ifaces: dict, node: Optional[str] = None, host_ip: Optional[str] = None,
         route: Optional[dict] = None, master_resolved: Optional[List[str]] = None) -> dict:
    return {"rank": rank, "node": node or f"node-{chr(ord('a') + rank)}",
            "interfaces": list(ifaces), "hostIp": host_ip, "masterRoute": route,
            "masterResolved": master_resolved or ["10.0.0.1"]}


def mesh_of(peers: Dict[int, dict], ok: Callable[[int, int, str], str] = lambda i, j, a: "ok"
            ) -> Dict[int, Dict[int, Dict[str, dict]]]:
    """Every rank dials every peer's every IPv4 address and its range samples (as the probe
    does for every planned pair); ``ok`` decides the result code of both."""
    return scenario_reports.dial_mesh(peers, lambda i, j, ip: scenario_reports.sampled({"r": ok(i, j, ip)}))


def not_docker(i: int, j: int, addr: str) -> str:
    # Dialling 172.17.0.1 lands on the local docker0: nobody listens on the peer's port.
    return "refused" if addr.startswith("172.17.") or addr.startswith("127.") else "ok"


def rej(res: dict, rank: int, ifname: str) -> Optional[dict]:
    return next((x for x in res["rejected"][rank] if x["ifname"] == ifname), None)


THREE_WITH_DOCKER = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24", speed=10000), DOCKER)
                     for r in range(3)}

CASES = [
    # id, peers, mesh-result function, spec, expected failure reason, {rank: chosen ifname}
    ("docker0-duplicate", THREE_WITH_DOCKER, not_docker, "auto", None,
     {0: "eth0", 1: "eth0", 2: "eth0"}),
    ("names-differ-per-node",
     {0: peer(0, LO, iface("enp6s0", "10.1.0.1/24"), DOCKER),
      1: peer(1, LO, iface("enp4s0", "10.1.0.2/24"), DOCKER)},
     not_docker, "auto", None, {0: "enp6s0", 1: "enp4s0"}),
    ("user-choice-missing", THREE_WITH_DOCKER, not_docker, "eth9", vocabulary.INTERFACE_NOT_FOUND, {}),
    ("user-choice-docker0", THREE_WITH_DOCKER, not_docker, "docker0", vocabulary.INTERFACE_UNREACHABLE, {}),
    ("user-choice-honoured",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24", speed=1000),
              iface("eth1", f"10.9.0.{r + 1}/24", speed=100000)) for r in range(2)},
     not_docker, "eth0", None, {0: "eth0", 1: "eth0"}),
    ("exclusion-list",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.9.0.{r + 1}/24"))
      for r in range(2)},
     not_docker, "^eth1,docker", None, {0: "eth0", 1: "eth0"}),
    ("fastest-wins",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24", speed=1000),
              iface("eth1", f"10.9.0.{r + 1}/24", speed=100000)) for r in range(2)},
     not_docker, "auto", None, {0: "eth1", 1: "eth1"}),
    ("host-ip-breaks-tie",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.9.0.{r + 1}/24"),
              host_ip=f"10.9.0.{r + 1}") for r in range(2)},
     not_docker, "auto", None, {0: "eth1", 1: "eth1"}),
    ("one-unreachable-network",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.1.0.{r + 1}/24"))
      for r in range(2)},
     lambda i, j, a: "timeout" if a.startswith("10.1.") and j == 1 else not_docker(i, j, a),
     "auto", None, {0: "eth0", 1: "eth0"}),
    # Dials to rank 2 fail while rank 2's own dials out work: only an inbound filter on
    # node 2 does that (a broken path fails both ways), so it is a firewall verdict.
    ("partially-reachable-only",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24")) for r in range(3)},
     lambda i, j, a: "timeout" if j == 2 else not_docker(i, j, a),
     "auto", vocabulary.EPHEMERAL_PORTS_BLOCKED, {}),
    ("partially-reachable-both-ways",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24")) for r in range(3)},
     lambda i, j, a: "timeout" if 2 in (i, j) else not_docker(i, j, a),
     "auto", vocabulary.NO_COMMON_INTERFACE, {}),
    ("ephemeral-ports-blocked",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), DOCKER) for r in range(2)},
     lambda i, j, a: "refused", "auto", vocabulary.EPHEMERAL_PORTS_BLOCKED, {}),
    ("down-interface",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"),
              iface("eth1", f"10.1.0.{r + 1}/24", up=r == 0, speed=100000)) for r in range(2)},
     not_docker, "auto", None, {0: "eth0", 1: "eth0"}),
    ("loopback-only-auto", {r: peer(r, LO, node="host") for r in range(2)},
     lambda i, j, a: "ok", "auto", vocabulary.NO_COMMON_INTERFACE, {}),
    ("loopback-requested", {r: peer(r, LO, node="host") for r in range(2)},
     lambda i, j, a: "ok", "lo", None, {0: "lo", 1: "lo"}),
    ("routed-pod-network",
     {0: peer(0, LO, iface("eth0", "10.244.1.5/24")), 1: peer(1, LO, iface("eth0", "10.244.2.7/24"))},
     not_docker, "auto", None, {0: "eth0", 1: "eth0"}),
    ("two-nics-one-subnet",
     {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.0.0.{r + 11}/24"))
      for r in range(2)},
     not_docker, "auto", vocabulary.NO_COMMON_INTERFACE, {}),
    ("single-rank", {0: peer(0, LO, iface("eth0", "10.0.0.1/24"), DOCKER)},
     not_docker, "auto", None, {0: "eth0"}),
]


@pytest.mark.parametrize("name,peers,ok,spec,failure,chosen", CASES, ids=[c[0] for c in CASES])
def test_choice_table(name, peers, ok, spec, failure, chosen):
    res = choose(peers, mesh_of(peers, ok), spec, master_port=29500)
    if failure is None:
        assert res["failure"] is None, res["failure"]
        assert {r: c["ifname"] for r, c in res["chosen"].items()} == chosen
    else:
        assert res["failure"] is not None and res["failure"]["reason"] == failure
        assert res["chosen"] == {}
        assert res["failure"]["message"]
    # Every rank computes the same answer from the same inputs.
    assert choose(peers, mesh_of(peers, ok), spec, 29500) == res


def test_docker0_rejected_as_duplicate_with_message():
    res = choose(THREE_WITH_DOCKER, mesh_of(THREE_WITH_DOCKER, not_docker))
    for r in range(3):
        d = rej(res, r, "docker0")
        assert d and d["reason"] == vocabulary.REJ_DUPLICATE_ADDRESS
        assert "172.17.0.1" in d["message"] and "node-a" in d["message"]
        assert rej(res, r, "lo")["reason"] == vocabulary.REJ_LOOPBACK
    assert res["chosen"][1] == {"ifname": "eth0", "addr": "10.0.0.2", "subnet": "10.0.0.0/24"}


def test_interface_not_found_lists_the_nodes_interfaces():
    res = choose(THREE_WITH_DOCKER, mesh_of(THREE_WITH_DOCKER, not_docker), "eth9")
    msg = res["failure"]["message"]
    assert "node-a" in msg and "node-c" in msg and "eth9" in msg
    assert "lo, eth0, docker0" in msg


def test_requested_docker0_suggests_the_working_interface():
    res = choose(THREE_WITH_DOCKER, mesh_of(THREE_WITH_DOCKER, not_docker), "docker0")
    assert "DuplicateAddress" in res["failure"]["message"]
    assert res["failure"]["message"].endswith("set network.socketIfname=eth0")


def test_unreachable_names_the_peer():
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.1.0.{r + 1}/24"))
             for r in range(2)}
    res = choose(peers, mesh_of(peers, lambda i, j, a: "timeout" if a == "10.1.0.2" else "ok"))
    e = rej(res, 0, "eth1")
    assert e["reason"] == vocabulary.REJ_UNREACHABLE
    assert "node-a->node-b 10.1.0.2: timeout" in e["message"] and "node-b" in e["message"]


def test_not_preferred_and_nccl_default_warning():
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24", speed=1000),
                     iface("eth1", f"10.9.0.{r + 1}/24", speed=100000)) for r in range(2)}
    res = choose(peers, mesh_of(peers, not_docker))
    assert rej(res, 0, "eth0")["reason"] == vocabulary.REJ_NOT_PREFERRED
    assert res["ncclDefault"] == {0: "eth0", 1: "eth0"}
    ws = [w["reason"] for w in res["warnings"][0]]
    assert vocabulary.NCCL_DEFAULT_DIFFERS in ws


def test_down_rejected():
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"),
                     iface("eth1", f"10.1.0.{r + 1}/24", up=r == 0)) for r in range(2)}
    res = choose(peers, mesh_of(peers, not_docker))
    assert rej(res, 0, "eth1")["reason"] == vocabulary.REJ_DOWN
    assert "node-b" in rej(res, 0, "eth1")["message"]


def test_loopback_requested_warns():
    peers = {r: peer(r, LO, node="host") for r in range(2)}
    res = choose(peers, mesh_of(peers), "lo")
    assert [w["reason"] for w in res["warnings"][1]] == [vocabulary.LOOPBACK_ONLY]


def test_master_route_and_peer_route_warnings():
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.1.0.{r + 1}/24"),
                     route={"iface": "eth1", "src": f"10.1.0.{r + 1}"}) for r in range(2)}
    mesh = mesh_of(peers, lambda i, j, a: "timeout" if a.startswith("10.1.") else "ok")
    mesh[0][1]["10.0.0.2"]["src"] = "10.0.0.99"  # traffic leaves by another address
    res = choose(peers, mesh)
    assert res["chosen"][1]["ifname"] == "eth0"
    w1 = [w["message"] for w in res["warnings"][1] if w["reason"] == vocabulary.ROUTE_VIA_OTHER_INTERFACE]
    w0 = [w["message"] for w in res["warnings"][0] if w["reason"] == vocabulary.ROUTE_VIA_OTHER_INTERFACE]
    assert any("reaches the master via eth1" in m for m in w1)
    assert not any("master" in m for m in w0)  # rank 0 is the master
    assert any("leave from 10.0.0.99" in m for m in w0)


def test_mixed_families_warning():
    peers = {0: peer(0, LO, iface("eth0", "10.0.0.1/24", "2001:db8::1/64")),
             1: peer(1, LO, iface("eth0", "10.0.0.2/24", "fe80::2/64"))}
    res = choose(peers, mesh_of(peers))
    assert vocabulary.MIXED_ADDRESS_FAMILIES in [w["reason"] for w in res["warnings"][0]]


@pytest.mark.parametrize("ifaces,expected", [
    ([LO, iface("eth0", "10.0.0.1/24"), iface("ib0", "10.5.0.1/24")], "ib0"),
    ([LO, DOCKER, iface("virbr0", "192.168.122.1/24"), iface("enp6s0", "10.0.0.1/24")], "enp6s0"),
    ([LO, DOCKER], "docker0"),
    ([LO], "lo"),
    ([LO, iface("eth1", "fd00::1/64"), iface("eth0", "10.0.0.1/24")], "eth0"),  # IPv4 listed first
    ([], None),
])
def test_nccl_default(ifaces, expected):
    assert nccl_default(ifaces) == expected


def test_scale_plan_is_symmetric_and_bounded():
    from disttrain_probe.phases.connectivity import plan
    assert plan(3, 1) == {0: [1, 2], 1: [0, 2], 2: [0, 1]}
    for world in (33, 64, 257):
        p = plan(world, 12345)
        assert set(p) == set(range(world))
        for i, peers in p.items():
            assert i not in peers and len(peers) <= 6  # ring +-1, +-2 and two random partners
            for j in peers:
                assert i in p[j]
        assert plan(world, 12345) == p  # every rank computes the same plan


def test_choice_with_partial_plan_checks_only_planned_pairs():
    from disttrain_probe.phases.connectivity import plan
    world = 40
    peers = {r: peer(r, LO, iface("eth0", f"10.0.{r // 200}.{r % 200 + 1}/16"), DOCKER)
             for r in range(world)}
    dial = plan(world, 7)
    full = mesh_of(peers, not_docker)
    mesh = {i: {j: full[i][j] for j in dial[i]} for i in range(world)}
    res = choose(peers, mesh, "auto", 29500, dial)
    assert res["failure"] is None and res["chosen"][39]["ifname"] == "eth0"
    # A planned pair that failed still rejects the network.
    j = dial[5][0]
    mesh[5][j][f"10.0.0.{j + 1}"] = {"r": "timeout"}
    res = choose(peers, mesh, "auto", 29500, dial)
    assert res["failure"]["reason"] == vocabulary.NO_COMMON_INTERFACE
    assert f"node-{chr(ord('a') + 5)}" in res["failure"]["message"]


def test_naming_one_of_two_nics_on_a_subnet_resolves_it():
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.0.0.{r + 11}/24"))
             for r in range(2)}
    res = choose(peers, mesh_of(peers), "auto")
    assert res["failure"]["reason"] == vocabulary.NO_COMMON_INTERFACE
    assert "MultipleOnNode" in res["failure"]["message"]
    res = choose(peers, mesh_of(peers), "=eth1")
    assert res["failure"] is None and res["chosen"][0]["ifname"] == "eth1"
    assert rej(res, 0, "eth0")["reason"] == vocabulary.REJ_NOT_REQUESTED


def test_interface_not_found_groups_nodes():
    peers = {0: peer(0, LO, iface("eth0", "10.0.0.1/24")),
             1: peer(1, LO, iface("eth0", "10.0.0.2/24")),
             2: peer(2, LO, iface("eth9", "10.0.0.3/24"))}
    res = choose(peers, mesh_of(peers), "eth9")
    assert res["failure"]["message"].startswith(
        "node-a, node-b: no interface matches socketIfname=eth9 (they have lo, eth0)")


def test_inbound_firewall_on_one_node_is_ephemeral_ports_blocked():
    """Node 1 admits only the master port: every dial to it times out on every network,
    its own dials out work. That is a firewall on node 1, not a missing network."""
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"10.1.0.{r + 1}/24"),
                     DOCKER) for r in range(3)}
    for r in peers:
        peers[r]["portRange"] = [32768, 60999]
    res = choose(peers, mesh_of(peers, lambda i, j, a: "timeout" if j == 1 else not_docker(i, j, a)),
                 "auto", master_port=29500)
    f = res["failure"]
    assert f["reason"] == vocabulary.EPHEMERAL_PORTS_BLOCKED
    # the facts a user acts on come first, so the 400-character condition keeps them
    assert f["message"].startswith("node-b: inbound TCP to its ephemeral ports (net.ipv4."
                                   "ip_local_port_range 32768-60999, where NCCL and gloo listen) is blocked")
    # the diallers are witnesses: said as such, not listed as suspects (a lone one is named)
    assert "nothing from every other node got through" in f["message"] and "29500" in f["message"]
    assert "node-a" not in f["message"] and "node-c" not in f["message"]


def test_blocked_pod_network_is_named_once_with_its_kind():
    """A routed pod network (one subnet per node, grouped by interface name) and a shared
    subnet are named once each, by their interfaces."""
    peers = {r: peer(r, LO, iface("eth0", f"10.244.{r}.5/24"), iface("eth1", f"10.1.0.{r + 1}/24"))
             for r in range(2)}
    for r in peers:
        peers[r]["portRange"] = [32768, 60999]
    res = choose(peers, mesh_of(peers, lambda i, j, a: "timeout" if j == 0 else "ok"),
                 "auto", master_port=29500)
    msg = res["failure"]["message"]
    assert res["failure"]["reason"] == vocabulary.EPHEMERAL_PORTS_BLOCKED
    assert "got through on eth1/eth0, while" in msg and msg.count("eth0") == 1


def test_one_node_unreachable_both_ways_stays_no_common_interface():
    """If the node's own dials out fail too, the path is broken: not a firewall verdict."""
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24")) for r in range(2)}
    res = choose(peers, mesh_of(peers, lambda i, j, a: "timeout"), "auto", master_port=29500)
    assert res["failure"]["reason"] == vocabulary.EPHEMERAL_PORTS_BLOCKED  # all blocked: the old rule
    peers3 = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24")) for r in range(3)}
    res = choose(peers3, mesh_of(peers3, lambda i, j, a: "timeout" if 2 in (i, j) else "ok"),
                 "auto", master_port=29500)
    assert res["failure"]["reason"] == vocabulary.NO_COMMON_INTERFACE


def _measured_mesh(peers, mbps_by_prefix):
    """mesh_of with ``mbps`` on every ok entry whose address starts with a given prefix."""
    mesh = mesh_of(peers, not_docker)
    for i in mesh:
        for j in mesh[i]:
            for addr, res in mesh[i][j].items():
                for prefix, v in mbps_by_prefix.items():
                    if addr.startswith(prefix) and res["r"] == "ok" and v is not None:
                        res["mbps"] = v(i) if callable(v) else v
    return mesh


def _mgmt_data(speed0=10000, speed1=10000):
    # eth0 carries the nodes' HOST_IP (it would win the tie on routing)
    return {r: peer(r, LO, iface("eth0", f"10.100.0.{r + 11}/24", speed=speed0),
                    iface("eth1", f"10.101.0.{r + 11}/24", speed=speed1), DOCKER,
                    host_ip=f"10.100.0.{r + 11}") for r in range(2)}


def test_measured_throughput_breaks_a_kernel_speed_tie():
    peers = _mgmt_data()
    res = choose(peers, _measured_mesh(peers, {"10.100.": lambda i: 950.0 + i,
                                               "10.101.": lambda i: 9400.0 - i}))
    assert {r: c["ifname"] for r, c in res["chosen"].items()} == {0: "eth1", 1: "eth1"}
    # the slowest measured pair stands for the network, on every rank
    assert res["measured"] == {0: {"eth0": 950.0, "eth1": 9399.0}, 1: {"eth0": 950.0, "eth1": 9399.0}}
    e = rej(res, 1, "eth0")
    assert e["reason"] == vocabulary.REJ_NOT_PREFERRED
    assert "faster by measurement (9399 vs 950 Mb/s measured; the kernel reports 10000 Mb/s for both)" \
        in e["message"]


def test_measured_within_margin_is_a_tie_and_routing_decides():
    peers = _mgmt_data()
    res = choose(peers, _measured_mesh(peers, {"10.100.": 1000.0, "10.101.": 1400.0}))
    assert res["chosen"][0]["ifname"] == "eth0"
    msg = rej(res, 0, "eth1")["message"]
    assert "measured 1000 vs 1400 Mb/s, less than 2x apart" in msg and "own address / route" in msg


def test_measurements_above_the_kernel_speed_tie():
    """Unlimited veths report 10000 Mb/s and move 13-21 Gb/s depending on CPU noise: above
    the line rate a measurement says nothing about the link, so they tie (routing decides)."""
    peers = _mgmt_data()
    res = choose(peers, _measured_mesh(peers, {"10.100.": 6500.0, "10.101.": 20790.0}))
    assert res["chosen"][0]["ifname"] == "eth0"
    assert "measured 6500 vs 20790 Mb/s, less than 2x apart once capped at the kernel's 10000 Mb/s" \
        in rej(res, 0, "eth1")["message"]
    res = choose(peers, _measured_mesh(peers, {"10.100.": 13709.0, "10.101.": 20790.0}))
    assert res["chosen"][0]["ifname"] == "eth0"
    assert "measured 13709 vs 20790 Mb/s, at or above the 10000 Mb/s the kernel reports" \
        in rej(res, 0, "eth1")["message"]


def test_noise_cannot_chain_past_a_network_in_between():
    """A routed pod network (speed unknown) measured between two veths: one tier, no winner
    by measurement, although the outer two are 1.5x apart."""
    from disttrain_probe.phases.ranking import measured_tiers
    assert measured_tiers({"a": 13709.0, "b": 15915.0, "c": 20790.0}) == {"a": 0, "b": 0, "c": 0}
    assert measured_tiers({"eth0": 1004.0, "cni0": 762.0, "eth1": 13436.0}) == {
        "eth1": 0, "eth0": 1, "cni0": 1}
    assert measured_tiers({"x": 100.0, "y": 50.0, "z": 24.0}) == {"x": 0, "y": 1, "z": 2}
    assert measured_tiers({}) == {}


def test_kernel_speeds_that_differ_win_over_measurement():
    peers = _mgmt_data(speed0=25000, speed1=10000)
    res = choose(peers, _measured_mesh(peers, {"10.100.": 900.0, "10.101.": 9000.0}))
    assert res["chosen"][0]["ifname"] == "eth0"
    assert "faster (slowest link 25000 vs 10000 Mb/s)" in rej(res, 0, "eth1")["message"]


def test_unknown_kernel_speed_leaves_it_to_measurement():
    peers = _mgmt_data(speed0=1000, speed1=None)  # eth1 reports nothing (virtio, bond)
    res = choose(peers, _measured_mesh(peers, {"10.100.": 940.0, "10.101.": 5000.0}))
    assert res["chosen"][1]["ifname"] == "eth1"
    assert "the kernel's link speeds do not rank them" in rej(res, 1, "eth0")["message"]
    # without a measurement, the known 1000 Mb/s no longer beats "unknown": routing decides
    res = choose(peers, mesh_of(peers, not_docker))
    assert res["chosen"][1]["ifname"] == "eth0" and res["measured"] == {0: {}, 1: {}}


def test_a_network_left_unmeasured_is_not_beaten_by_measurement():
    peers = _mgmt_data()
    res = choose(peers, _measured_mesh(peers, {"10.100.": None, "10.101.": 9000.0}))
    assert res["chosen"][0]["ifname"] == "eth0"  # routing, not a one-sided number
    assert res["measured"][0] == {"eth1": 9000.0}


def test_lo_across_nodes_is_not_a_firewall_verdict():
    """socketIfname=lo on ranks of different nodes: lo never leaves a node, so say that
    and name the NIC that works, rather than blaming a firewall for the failed dials."""
    two = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24")) for r in range(2)}
    res = choose(two, mesh_of(two, lambda i, j, a: "refused" if a.startswith("127.") else "ok"),
                 "lo", master_port=29500)
    assert res["failure"]["reason"] == vocabulary.INTERFACE_UNREACHABLE
    assert "lo is loopback" in res["failure"]["message"] and "socketIfname=eth0" in res["failure"]["message"]
    res = choose(two, mesh_of(two, not_docker), "lo,eth0", master_port=29500)
    assert {r: c["ifname"] for r, c in res["chosen"].items()} == {0: "eth0", 1: "eth0"}
    assert not any(w["reason"] == vocabulary.LOOPBACK_ONLY for ws in res["warnings"].values() for w in ws)


def test_ipv6_only_nics_are_named_as_the_reason():
    """IPv6-only NICs are never IPv4 candidates: say so, rather than only 'lo is loopback'."""
    v6 = {r: peer(r, LO, iface("eth0", f"fd00::{r + 1}/64", f"fe80::{r + 1}/64")) for r in range(2)}
    for spec in ("auto", "eth0"):
        msg = choose(v6, mesh_of(v6), spec, master_port=29500)["failure"]["message"]
        assert "eth0 on node-a, node-b: only IPv6 (global) addresses" in msg, msg
    mixed = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24"), iface("eth1", f"fd00::{r + 1}/64"))
             for r in range(2)}
    assert choose(mixed, mesh_of(mixed, not_docker), "auto", master_port=29500)["failure"] is None


def _with_cni0(pod_speed=None):
    """hostNetwork: each node also has the pod bridge cni0 on its own /24 (routed)."""
    peers = _mgmt_data()
    for r, p in peers.items():
        p["interfaces"].append(iface("cni0", f"10.244.{r}.1/24", speed=pod_speed))
    return peers


def test_pod_network_bridge_is_never_chosen_while_a_nic_joins_the_nodes():
    """The demo's flake: cni0 (speed unknown, never capped) measured 26662 Mb/s against
    eth0's 22660 capped at its 10000: cni0 won by 'measurement'. Now it is rejected once,
    as a pod-network device, and the capping is consistent."""
    peers = _with_cni0()
    res = choose(peers, _measured_mesh(peers, {"10.100.": 22660.0, "10.101.": 21000.0,
                                               "10.244.": 26662.0}))
    assert {r: c["ifname"] for r, c in res["chosen"].items()} == {0: "eth0", 1: "eth0"}
    for r in (0, 1):
        reasons = [x["reason"] for x in res["rejected"][r] if x["ifname"] == "cni0"]
        assert vocabulary.REJ_POD_NETWORK_DEVICE in reasons
        assert not any(x["ifname"] == "eth0" for x in res["rejected"][r])  # chosen, not rejected
    # with only the pod network joining the nodes, it is used
    only = {r: peer(r, LO, iface("cni0", f"10.244.{r}.1/24")) for r in range(2)}
    assert choose(only, mesh_of(only))["chosen"][0]["ifname"] == "cni0"


def test_an_interface_is_never_both_chosen_and_rejected():
    # cni0's per-node /24s are NotOnAllNodes as subnets, while cni0 (routed) is chosen
    peers = {r: peer(r, LO, iface("cni0", f"10.244.{r}.1/24")) for r in range(2)}
    res = choose(peers, mesh_of(peers))
    assert res["chosen"][0]["ifname"] == "cni0"
    assert all(x["ifname"] != "cni0" for r in (0, 1) for x in res["rejected"][r])


def test_unknown_link_speed_means_no_capping_for_anyone():
    """Capping eth0 at its 10000 but not bond0 (speed unknown) would let bond0 win on CPU noise."""
    peers = _mgmt_data()
    for r, p in peers.items():
        p["interfaces"][2] = iface("bond0", f"10.101.0.{r + 11}/24", speed=None)
    res = choose(peers, _measured_mesh(peers, {"10.100.": 22660.0, "10.101.": 26662.0}))
    assert res["chosen"][0]["ifname"] == "eth0"  # a tie: HOST_IP decides


def test_measurements_decide_only_beyond_their_own_noise():
    """The faster network must be 2x faster at its best and its typical round (the middle of
    three) must still beat the slower one's best by 1.5x; otherwise routing decides."""
    from disttrain_probe.phases.ranking import measured_tiers
    assert measured_tiers({"a": 2500.0, "b": 1000.0}) == {"a": 0, "b": 1}
    assert measured_tiers({"a": 2500.0, "b": 1000.0}, lows={"a": 1600.0}) == {"a": 0, "b": 1}
    assert measured_tiers({"a": 2500.0, "b": 1000.0}, lows={"a": 1400.0}) == {"a": 0, "b": 0}
    peers = _mgmt_data()
    mesh = _measured_mesh(peers, {"10.100.": 1000.0, "10.101.": 2500.0})
    for i in mesh:
        for j in mesh[i]:
            for addr, res in mesh[i][j].items():
                if "mbps" in res:
                    res["mbpsLow"] = res["mbps"] * 0.4  # the typical round: 40 % of the best
    res = choose(peers, mesh)
    assert res["chosen"][0]["ifname"] == "eth0"  # 2.5x at best, 1.0x typically: routing decides
    assert "within the measurements' own noise (typical rounds 400 vs 1000 Mb/s)" in \
        rej(res, 0, "eth1")["message"]


def test_the_healthy_case_under_load_still_decides():
    """eth1 (unlimited, 10000 Mb/s line rate) moved 13000 at best and 2000 typically on a
    loaded machine; eth0 (rate-limited) 900 steadily: 2000 >= 1.5 x 900, eth1 wins."""
    peers = _mgmt_data()
    mesh = _measured_mesh(peers, {"10.100.": 900.0, "10.101.": 13000.0})
    for i in mesh:
        for j in mesh[i]:
            for addr, res in mesh[i][j].items():
                if "mbps" in res:
                    res["mbpsLow"] = 2000.0 if addr.startswith("10.101.") else 890.0
    assert choose(peers, mesh)["chosen"][0]["ifname"] == "eth1"


def test_typical_round_is_the_middle_one():
    from disttrain_probe.phases.connectivity import typical
    assert typical([500.0, 9000.0, 8000.0]) == 8000.0  # one starved round does not count
    assert typical([9000.0, 500.0]) == 500.0
    assert typical([700.0]) == 700.0


@pytest.mark.parametrize("spec, names, missing", [
    ("eth2", ["lo", "eth0", "eth1"], True),            # the job names an interface this node lacks
    ("eth2", ["lo", "eth0", "eth2"], False),
    ("eth", ["lo", "eth0"], False),                    # NCCL matches by prefix
    ("=eth", ["lo", "eth0"], True),                    # ... unless the list starts with '='
    ("ib0,eth1", ["lo", "eth1"], False),
    ("^docker", ["lo", "docker0"], False),             # exclusion: decided on the mesh, not here
    ("auto", [], False),
    ("eth9", [], True),
])
def test_a_named_interface_this_node_lacks_is_decided_at_the_inventory(spec, names, missing):
    from disttrain_probe.phases.interfaces import missing_here
    msg = missing_here("node-b", spec, [{"name": n} for n in names])
    assert (msg is not None) == missing
    if missing:
        assert msg.startswith(f"node-b: no interface matches socketIfname={spec} (it has ")
        assert (", ".join(names) or "none") in msg and len(msg) <= 400


def test_a_network_with_a_path_mtu_black_hole_gives_way_or_fails_when_forced():
    """eth1 (faster by link speed, so preferred) loses full-size packets node-b -> node-a;
    eth0 carries everything. Left to choose, the probe takes eth0; forced onto eth1, it
    fails with PathMTUBlackHole."""
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24", speed=1000),
                     iface("eth1", f"10.9.0.{r + 1}/24", speed=100000)) for r in range(2)}
    mesh = mesh_of(peers, not_docker)
    mesh[0][1]["10.9.0.2"]["pmtu"] = {"passes": 1400, "lost": 1401}
    auto = choose(peers, mesh)
    assert auto["failure"] is None and auto["chosen"][0]["ifname"] == "eth0"
    forced = choose(peers, mesh, "eth1")
    assert forced["failure"]["reason"] == vocabulary.PATH_MTU_BLACK_HOLE
    assert forced["failure"]["message"].startswith("node-b -> node-a on eth1: packets of 1401")
    del mesh[0][1]["10.9.0.2"]["pmtu"]
    assert choose(peers, mesh)["chosen"][0]["ifname"] == "eth1"  # without the hole, eth1 wins


@pytest.mark.parametrize("n", [2, 3, 5])
def test_islands_of_one_node_each_are_not_a_firewall(n):
    """eth1 on a subnet of its own on every node (found by the fault generator, seed 34): no
    pair connects there, and each dial left by eth0 (the route's source is the dialler's eth0
    address). That is no path over eth1, not a firewall on the ephemeral ports; the same
    dials leaving from eth1's own address stay the firewall verdict."""
    peers = {r: peer(r, LO, iface("eth0", f"10.100.0.{r + 11}/24"), iface("eth1", f"10.{101 + r}.0.{r + 11}/24"))
             for r in range(n)}
    for r in peers:
        peers[r]["portRange"] = [32768, 60999]

    def mesh(src_of):
        m = mesh_of(peers, lambda i, j, a: "timeout" if a.startswith("10.1") and not a.startswith("10.100.") else "ok")
        for i in m:
            for j in m[i]:
                for addr, res in m[i][j].items():
                    if not addr.startswith("10.100."):
                        res["src"] = src_of(i)
        return m

    res = choose(peers, mesh(lambda i: f"10.100.0.{i + 11}"), "eth1", master_port=29500)
    assert res["failure"]["reason"] in (vocabulary.INTERFACE_UNREACHABLE, vocabulary.NO_COMMON_INTERFACE), res["failure"]
    assert "firewall" not in res["failure"]["message"]
    # no route at all (a node without a default route: ENETUNREACH, no route source)
    noroute = mesh(lambda i: "")
    for i in noroute:
        for j in noroute[i]:
            for addr, r in noroute[i][j].items():
                if not addr.startswith("10.100."):
                    r.update(r="unreachable", noroute=True)
                    r.pop("src")
    res = choose(peers, noroute, "eth1", master_port=29500)
    assert res["failure"]["reason"] in (vocabulary.INTERFACE_UNREACHABLE, vocabulary.NO_COMMON_INTERFACE), res["failure"]
    assert "firewall" not in res["failure"]["message"]
    assert all(f"10.{101 + r}.0.0/24" in res["failure"]["message"] for r in range(min(n, 3)))
    res = choose(peers, mesh(lambda i: f"10.{101 + i}.0.{i + 11}"), "eth1", master_port=29500)
    assert res["failure"]["reason"] == vocabulary.EPHEMERAL_PORTS_BLOCKED
