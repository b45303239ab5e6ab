"""The fault oracle against the hand-written scenarios (scenarios/*.yaml) that the real proving
ground already passes: the grammar's fault of each gives the same verdict and reason, the
scenario's own expectation (with the oracle's fix object) grades right, and the generator
writes the fault's network as the file does."""
from __future__ import annotations

import pytest
import yaml

from disttrain_probe.contract import vocabulary as V
from localcluster import scenariorun
from localcluster.faults import generate, oracle
from localcluster.faults import grammar as G
from localcluster.faults.grade import RIGHT, grade
from localcluster.scenarios import loader

EPH = G.EPHEMERAL
KNOWN = {
    "firewall-master-drop": (G.FirewallFault("*", (), (29500, 29500), "eth0", "drop", "master"), 2),
    "firewall-master-reject": (G.FirewallFault("*", (), (29500, 29500), "eth0", "reject", "master"), 2),
    "firewall-ephemeral": (G.FirewallFault("node-a", (), EPH, None, "drop", "ephemeral"), 2),
    "firewall-ephemeral-partial": (G.FirewallFault("node-a", (), (45000, EPH[1]), None, "drop", "ephemeral"), 2),
    "firewall-ephemeral-port-range": (G.Healthy("port-range", "node-a"), 2),
    "hostname-loopback": (G.NamesFault(("node-a", "node-b"), "hostname"), 2),
    "hostname-loopback-one-node": (G.NamesFault(("node-a",), "hostname"), 2),
    "master-name-stale-hosts": (G.NamesFault(("node-c",), "master-stale"), 3),
    "master-name-split-dns": (G.NamesFault(("node-c",), "master-stale", ("node-c",)), 3),
    "master-addr-loopback": (G.NamesFault(("node-b",), "master-loopback"), 2),
    "islands-forced-interface": (G.IslandsFault((("node-a", "node-b"), ("node-c", "node-d")), True), 4),
    "slow-link": (G.SlowLinkFault("node-c", 200, False), 3),
    "slow-link-refused": (G.SlowLinkFault("node-c", 200, True), 3),
    "mtu-black-hole": (G.MtuFault(("node-b",), 1400, "drop", True), 2),
    "mtu-icmp-passes": (G.MtuFault(("node-b",), 1400, "pass", True), 2),
    "networkpolicy-default-deny": (G.PolicyFault("default-deny"), 2),
    "networkpolicy-labels-not-ports": (G.PolicyFault("rendezvous-only"), 2),
    "networkpolicy-admits-job": (G.PolicyFault("admits-job"), 2),
}
RANKS = {0: "node-a", 1: "node-b"}
# files that do not require the fix's object in the message (the oracle does)
FILE_OMITS_FIX = {"firewall-master-drop", "firewall-master-reject", "firewall-ephemeral-partial"}


def nets(sc) -> dict:
    """node -> NIC name -> its segment's subnet, for the nodes given their own NICs."""
    return {node: {nic.name: sc.segments[nic.segment].subnet for nic in cfg.nics or []}
            for node, cfg in sc.nodeOverrides.items()}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_the_oracle_agrees_with_the_hand_written_scenario(name):
    sc = loader.load(name)
    fault, n = KNOWN[name]
    assert sc.nodes == n
    exp = oracle.expectation(fault, n)
    assert exp.status == sc.expect.status, exp.why
    if sc.expect.reason and exp.reasons:
        assert sc.expect.reason in exp.reasons
    if sc.expect.status == "False":
        assert exp.reasons, "a failure the oracle gives no reason for"
    for bad in exp.never_say:
        assert bad in sc.expect.messageLacks or bad not in " ".join(sc.expect.messageContains)
    # what the file requires is a right verdict to the oracle (with its fix object where the
    # file leaves it out)
    extra = list(exp.fix[:1]) if name in FILE_OMITS_FIX else []
    text = " ".join(scenariorun.substitute(s, RANKS) for s in sc.expect.messageContains + extra)
    reason = sc.expect.reason or (exp.reasons[0] if exp.reasons else V.ALL_CHECKS_PASSED)
    conds = [{"type": V.VALIDATED, "status": sc.expect.status, "reason": reason if sc.expect.status == "False"
              else V.PASSED_WITH_WARNINGS, "message": text},
             {"type": sc.expect.condition, "status": sc.expect.status, "reason": reason, "message": text}]
    g = grade(exp, conds, RANKS, sc.expect.socketIfname or exp.socket_ifname)
    assert g.outcome == RIGHT, g.why


@pytest.mark.parametrize("name", ["mtu-black-hole", "islands-forced-interface", "master-name-split-dns",
                                  "master-name-stale-hosts", "networkpolicy-default-deny",
                                  "networkpolicy-labels-not-ports", "networkpolicy-admits-job",
                                  "hostname-loopback-one-node", "slow-link"])
def test_the_generator_writes_the_fault_as_the_scenario_does(name):
    sc = loader.load(name)
    fault, n = KNOWN[name]
    made = loader.parse(yaml.safe_dump(
        {**generate.scenario_data(fault, n), "expect": sc.expect.model_dump(exclude_defaults=True)}), "g.yaml")
    assert nets(made) == nets(sc)  # segment names may differ, subnets may not
    if name != "islands-forced-interface":
        assert made.nodeOverrides == sc.nodeOverrides
    assert made.routers == sc.routers
    assert made.networkPolicies == sc.networkPolicies
    assert made.defaults == sc.defaults
    assert made.job.get("network", {}) == sc.job.get("network", {})
