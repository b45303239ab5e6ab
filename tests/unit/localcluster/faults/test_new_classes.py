"""The generated classes egress (a firewall fault with direction out), nicdown and sysctl
(localcluster/faults/generate.py, grammar.py, oracle.py) over many seeds and indexes: every
case loads and its expectation can be met; an egress rule sits in ``firewall.output`` of the
culprit, by destination address and out-interface, covering the destination's NIC address
and pod CIDR; a NIC down is down on the named nodes only; a node's own port range keeps
clear of the master port and the default range, and the hardened firewall still admits the
master port and the default range on both NICs (rules evaluated here, first match wins)."""
from __future__ import annotations

import ipaddress
from typing import Optional

import pytest

from localcluster.common.config import node_name, pod_cidr
from localcluster.faults import generate
from localcluster.faults import grammar as G
from localcluster.scenarios import nodeplan

NEW = ("firewall", "nicdown", "sysctl")
SEEDS = range(0, 240, 7)
INDEXES = range(12)


@pytest.fixture(scope="module")
def cases() -> list[generate.Case]:
    return [generate.case(seed, i, NEW) for seed in SEEDS for i in INDEXES]


def _index(node: str) -> int:
    return next(i for i in range(generate.MAX_NODES) if node_name(i) == node)


def _fw(case: generate.Case, node: str) -> dict:
    t = {t.name: t for t in nodeplan.topology(case.scenario)}[node]
    return t.firewall or {}


def test_every_case_loads_and_its_expectation_can_be_met(cases):
    kinds = {type(c.fault).CLASS for c in cases}
    assert kinds == set(NEW)
    for c in cases:
        assert c.expectation.inconsistencies() == [], (c.name, c.expectation)
        assert c.scenario.nodes == len(nodeplan.topology(c.scenario))


def _egress(cases) -> list[generate.Case]:
    return [c for c in cases if isinstance(c.fault, G.FirewallFault) and c.fault.direction == "out"]


def test_egress_cases_are_drawn_with_and_without_sources_on_one_nic_or_both(cases):
    eg = _egress(cases)
    assert len(eg) >= 10
    assert any(c.fault.sources for c in eg) and any(not c.fault.sources for c in eg)
    assert any(c.fault.nic for c in eg) and any(not c.fault.nic for c in eg)


def test_an_egress_rule_sits_in_the_culprits_output_chain_only(cases):
    for c in _egress(cases):
        f = c.fault
        for t in nodeplan.topology(c.scenario):
            fw = t.firewall or {}
            if t.name != f.node:
                assert not fw.get("output") and not fw.get("input"), c.name
                continue
            assert fw["output"] and not fw.get("input"), c.name
            for r in fw["output"]:
                assert r.get("saddr") is None and r.get("iifname") is None, r
                assert r["proto"] == "tcp" and r["state"] == ["new"] and r["action"] == f.action
                lo, hi = f.ports
                assert str(r["dport"]) == (str(lo) if lo == hi else f"{lo}-{hi}")
                assert r["oifname"] in ((f.nic,) if f.nic else G.NICS)


def test_an_egress_rule_against_a_peer_covers_its_nic_address_and_its_pod_cidr(cases):
    for c in _egress(cases):
        f = c.fault
        rules = _fw(c, f.node)["output"]
        nics = (f.nic,) if f.nic else G.NICS
        if not f.sources:  # every peer: no destination, one rule per NIC
            assert sorted(r["oifname"] for r in rules) == sorted(nics) and all(r.get("daddr") is None for r in rules)
            continue
        assert all(r.get("daddr") for r in rules)
        for s in f.sources:
            k = _index(s)
            for nic in nics:
                dests = [ipaddress.ip_network(r["daddr"], strict=False) for r in rules if r["oifname"] == nic]
                assert any(ipaddress.ip_address(G.node_ip(nic, k)) in d for d in dests), (c.name, s, nic)
                assert ipaddress.ip_network(pod_cidr(k)) in dests, (c.name, s, nic)
        # and never a bystander's address or pods
        for b in (n for n in (t.name for t in nodeplan.topology(c.scenario)) if n not in f.sources + (f.node,)):
            k = _index(b)
            for r in rules:
                d = ipaddress.ip_network(r["daddr"], strict=False)
                assert not any(ipaddress.ip_address(G.node_ip(nic, k)) in d for nic in G.NICS), (c.name, b)
                assert not d.overlaps(ipaddress.ip_network(pod_cidr(k))), (c.name, b)


def test_a_nic_down_is_down_on_the_named_nodes_only_and_eth0_stays_up(cases):
    downs = [c for c in cases if isinstance(c.fault, G.NicDownFault)]
    assert len(downs) >= 10 and any(c.fault.forced for c in downs) and any(not c.fault.forced for c in downs)
    for c in downs:
        topos = nodeplan.topology(c.scenario)
        assert 1 <= len(c.fault.nodes) < len(topos)
        for t in topos:
            up = {ln.name: ln.up for ln in t.links if ln.segment}
            assert up == {"eth0": True, "eth1": t.name not in c.fault.nodes}, (c.name, t.name, up)
        forced = (c.scenario.job.get("network") or {}).get("socketIfname")
        assert forced == ("eth1" if c.fault.forced else None)
        e = c.expectation
        if c.fault.forced:
            assert set(e.must_name) == set(c.fault.nodes) | {"eth1"} and "firewall" in e.never_say
            assert not set(e.must_not_name) & set(c.fault.nodes)
        else:
            assert (e.status, e.socket_ifname, e.broken_ifnames) == ("True", "eth0", ("eth1",))


def _verdict(rules: list[dict], *, iif: str, dport: int, state: str = "new", saddr: Optional[str] = None,
             policy: str = "accept") -> str:
    """What an input chain of ``rules`` does with a TCP packet (first match wins)."""
    for r in rules:
        if r.get("iifname") not in (None, iif) or r.get("proto") not in (None, "tcp"):
            continue
        if r.get("state") and state not in r["state"]:
            continue
        if r.get("saddr") and (saddr is None or ipaddress.ip_address(saddr) not in
                               ipaddress.ip_network(r["saddr"], strict=False)):
            continue
        if r.get("dport") is not None:
            lo, _, hi = str(r["dport"]).partition("-")
            if not int(lo) <= dport <= int(hi or lo):
                continue
        return r["action"]
    return policy


def test_a_nodes_own_range_keeps_clear_of_the_master_port_and_the_default_range(cases):
    ranges = [c for c in cases if isinstance(c.fault, G.PortRangeFault)]
    assert len(ranges) >= 10
    assert any(c.fault.hardened for c in ranges) and any(not c.fault.hardened for c in ranges)
    assert any(c.fault.ports[1] < G.MASTER_PORT for c in ranges) and any(c.fault.ports[0] > G.EPHEMERAL[1]
                                                                         for c in ranges)
    for c in ranges:
        lo, hi = c.fault.ports
        assert 1024 <= lo <= hi <= 65535
        assert not lo <= G.MASTER_PORT <= hi, c.name
        assert hi < G.EPHEMERAL[0] or lo > G.EPHEMERAL[1], c.name
        for t in nodeplan.topology(c.scenario):
            want = {"net.ipv4.ip_local_port_range": f"{lo} {hi}"} if t.name == c.fault.node else {}
            assert t.sysctls == want, (c.name, t.name)


def test_the_hardened_firewall_admits_the_master_port_and_the_default_range_and_drops_the_nodes_own(cases):
    for c in (c for c in cases if isinstance(c.fault, G.PortRangeFault)):
        lo, hi = c.fault.ports
        for t in nodeplan.topology(c.scenario):
            fw = t.firewall
            if not c.fault.hardened:
                assert fw is None, c.name
                continue
            rules, policy = fw["input"], fw.get("policy", "accept")
            assert not fw.get("output")
            for nic in G.NICS:
                for port in (G.MASTER_PORT, *G.EPHEMERAL, (G.EPHEMERAL[0] + G.EPHEMERAL[1]) // 2):
                    assert _verdict(rules, iif=nic, dport=port, policy=policy) == "accept", (c.name, nic, port)
                for port in (lo, hi):  # the node's own listeners: new connections dropped
                    assert _verdict(rules, iif=nic, dport=port, policy=policy) == "drop", (c.name, nic, port)
                    # replies to its own dials still come in
                    assert _verdict(rules, iif=nic, dport=port, state="established", policy=policy) == "accept"
            assert _verdict(rules, iif="lo", dport=lo, policy=policy) == "accept"  # a node's own dials
