"""The fault oracle (localcluster/faults/oracle.py): from the fault alone, what a right verdict
holds. Consistent (never requires what it forbids, never trains on what the fault breaks),
a look-alike validates, and the ``expect`` a regression scenario carries is met by a right
verdict (``scenariorun.check``) exactly when the grader calls it right."""
from __future__ import annotations

from typing import Optional

from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.contract import vocabulary as V
from localcluster import scenariorun
from localcluster.common.config import node_name
from localcluster.faults import generate, grade, oracle
from localcluster.faults import grammar as G

SEEDS = st.integers(min_value=0, max_value=10**6)
INDEXES = st.integers(min_value=0, max_value=999)
RANK_NODES = {0: "node-b", 1: "node-a"}


def right_job(exp: oracle.Expectation, rank_nodes: dict[int, str]) -> dict:
    """A job status a right verdict would leave: the first acceptable reason, a message
    naming every required string and the first fix object."""
    text = " ".join(scenariorun.substitute(s, rank_nodes) for s in exp.must_name + exp.fix[:1]) or "fine"
    reason = exp.reasons[0] if exp.reasons else (V.ALL_CHECKS_PASSED if exp.status == "True" else V.PROBE_FAILED)
    conds = [{"type": V.VALIDATED, "status": exp.status, "reason": reason, "message": text}]
    if exp.condition != V.VALIDATED:
        conds.append({"type": exp.condition, "status": exp.status, "reason": reason, "message": text})
    ifname: Optional[str] = exp.socket_ifname or next(n for n in G.NICS if n not in exp.broken_ifnames)
    return {"status": {"conditions": conds, "phase": "Succeeded" if exp.status == "True" else "Failed",
                       "rendezvous": {"socketIfname": ifname}}}


@given(SEEDS, INDEXES)
def test_the_oracle_is_consistent(seed, i):
    c = generate.case(seed, i)
    exp = c.expectation
    assert exp.inconsistencies() == []
    nodes = {node_name(k) for k in range(c.scenario.nodes)}
    named = {s for s in exp.must_name + exp.must_not_name if s.startswith("node-")}
    assert named <= nodes, f"names a node the cluster lacks: {named - nodes}"
    assert not set(exp.must_name) & set(exp.must_not_name)
    if isinstance(c.fault, G.Healthy) or (isinstance(c.fault, G.PolicyFault) and c.fault.shape == "admits-job"):
        assert exp.status == "True" and not exp.broken_ifnames and not exp.reasons
    if exp.status == "True":
        assert exp.socket_ifname not in exp.broken_ifnames


@given(SEEDS, INDEXES)
def test_a_right_verdict_meets_the_written_expect_and_grades_right(seed, i):
    c = generate.case(seed, i)
    job = right_job(c.expectation, RANK_NODES)
    conds = job["status"]["conditions"]
    assert scenariorun.check(job, c.scenario.expect, RANK_NODES) == (True, "")
    g = grade.grade(c.expectation, conds, RANK_NODES, job["status"]["rendezvous"]["socketIfname"])
    assert g.outcome == grade.RIGHT, g.why


def test_no_firewall_is_ever_blamed_where_the_fault_has_none():
    for c in generate.cases(3, 200):
        if isinstance(c.fault, (G.IslandsFault, G.MtuFault, G.PolicyFault, G.SlowLinkFault)) or (
                isinstance(c.fault, G.NamesFault) and c.fault.what != "hostname"):
            assert oracle.FIREWALL in c.expectation.never_say or c.expectation.status == "True", c.name
        assert not (oracle.FIREWALL in c.expectation.never_say and isinstance(c.fault, G.FirewallFault))


def test_a_firewall_on_a_subset_of_sources_names_the_culprit_and_sources_not_the_bystanders():
    f = G.FirewallFault("node-c", ("node-a", "node-d"), (40000, 60999), None, "drop", "ephemeral")
    exp = oracle.expectation(f, 5)
    assert exp.status == "False" and V.EPHEMERAL_PORTS_BLOCKED in exp.reasons
    assert exp.must_name == ("node-c", "node-a", "node-d") and exp.must_not_name == ("node-b", "node-e")


def test_with_two_nodes_the_lone_peer_may_be_named_it_is_a_suspect_too():
    """Two nodes: node-b's inbound rule against node-a and node-a's outbound rule to node-b
    look the same to every probe, and the verdict must name node-a for the second
    (tests/unit/operator/diagnosis/test_portrange_pairs.py: the pair); so the first may name it
    too. A bystander in a bigger cluster still may not be named."""
    for sources in ((), ("node-a",)):
        f = G.FirewallFault("node-b", sources, (46395, 60999), None, "drop", "ephemeral")
        exp = oracle.expectation(f, 2)
        assert exp.must_not_name == () and "node-b" in exp.must_name
        msg = ("node-b: part of its ephemeral port range is blocked: node-a reached ports 32768 but not "
               "ports 60999 on 10.101.0.12; open the whole range to the other nodes on node-b's firewall")
        conds = [{"type": V.VALIDATED, "status": "False", "reason": V.EPHEMERAL_PORTS_BLOCKED, "message": msg}]
        assert grade.grade(exp, conds).outcome == grade.RIGHT
    f = G.FirewallFault("node-b", (), (46395, 60999), None, "drop", "ephemeral")
    assert oracle.expectation(f, 3).must_not_name == ("node-a", "node-c")


def test_a_rule_on_one_nic_lets_the_job_train_on_the_other_and_forcing_the_blocked_one_fails():
    on_eth1 = G.FirewallFault("node-b", (), (32768, 60999), "eth1", "drop", "ephemeral")
    exp = oracle.expectation(on_eth1, 3)
    assert (exp.status, exp.socket_ifname, exp.broken_ifnames) == ("True", "eth0", ("eth1",))
    forced = oracle.expectation(G.FirewallFault("node-b", (), (32768, 60999), "eth1", "drop", "ephemeral",
                                                "eth1"), 3)
    assert forced.status == "False" and forced.must_name == ("node-b",)


def test_the_master_port_rule_names_rank_0s_node_through_the_placement():
    exp = oracle.expectation(G.FirewallFault("*", (), (29500, 29500), "eth0", "reject", "master"), 4)
    assert exp.reasons == (V.MASTER_PORT_REFUSED,) and "{node:0}" in exp.must_name


def test_name_faults_name_each_odd_node_and_its_source_never_a_firewall():
    exp = oracle.expectation(G.NamesFault(("node-b", "node-d"), "master-stale", ("node-b", "node-d")), 4)
    assert exp.status == "False" and {"node-b", "node-d", G.STALE_ADDRESS} <= set(exp.must_name)
    assert exp.fix == (G.NODE_DNS,) and "firewall" in exp.never_say
    assert set(exp.reasons) == {V.MASTER_PORT_TIMEOUT, V.MASTER_ADDR_RESOLVES_ELSEWHERE}
    mixed = oracle.expectation(G.NamesFault(("node-b", "node-d"), "master-stale", ("node-d",)), 4)
    assert {"/etc/hosts", G.NODE_DNS} <= set(mixed.must_name) and mixed.fix == ()  # a fix for each
    assert oracle.expectation(G.NamesFault(("node-c",), "master-stale"), 3).fix == ("/etc/hosts",)
    warn = oracle.expectation(G.NamesFault(("node-a",), "hostname"), 3)
    assert (warn.status, warn.reasons, warn.must_not_name) == ("True", (V.HOSTNAME_LOOPBACK,), ("node-b", "node-c"))


def test_islands_forced_name_every_group_and_chosen_train_on_the_shared_network():
    f = G.IslandsFault((("node-a",), ("node-b", "node-c")), True)
    exp = oracle.expectation(f, 3)
    assert {"node-a", "node-b", "node-c", "10.101.0.0/24", "10.102.0.0/24"} <= set(exp.must_name)
    chosen = oracle.expectation(G.IslandsFault(f.groups, False), 3)
    assert (chosen.status, chosen.socket_ifname, chosen.broken_ifnames) == ("True", "eth0", ("eth1",))


def test_an_inconsistent_expectation_is_caught():
    bad = oracle.Expectation(V.VALIDATED, "False", ("NoSuchReason",), ("node-a<->node-b",), ("node-b",),
                             never_say=("firewall",), fix=("firewall",))
    found = bad.inconsistencies()
    assert any("node-a<->node-b" in s for s in found) and any("NoSuchReason" in s for s in found)
    assert any("every fix" in s for s in found)
    assert oracle.Expectation(V.VALIDATED, "True", socket_ifname="eth1", broken_ifnames=("eth1",)).inconsistencies()


@given(SEEDS, INDEXES)
def test_the_written_expect_refuses_a_verdict_the_grader_refuses(seed, i):
    """A right verdict that also names a node that only waited, or says what it must never
    say, fails both the regression file's ``expect`` and the grade."""
    c = generate.case(seed, i)
    for bad in c.expectation.must_not_name + c.expectation.never_say:
        job = right_job(c.expectation, RANK_NODES)
        for cond in job["status"]["conditions"]:
            cond["message"] += f" and {bad}"
        ok, why = scenariorun.check(job, c.scenario.expect, RANK_NODES)
        assert ok is False and bad in why
        g = grade.grade(c.expectation, job["status"]["conditions"], RANK_NODES,
                        job["status"]["rendezvous"]["socketIfname"])
        assert g.outcome in (grade.HALF, grade.WRONG)


def test_a_combination_keeps_the_failure_and_adds_the_warning_to_a_pass():
    hostname = G.NamesFault(("node-a", "node-c"), "hostname")
    fw = G.FirewallFault("node-b", ("node-c",), (32768, 50000), None, "reject", "ephemeral")
    assert oracle.expectation(G.Combo(fw, hostname), 4) == oracle.expectation(fw, 4)
    chosen = oracle.expectation(G.Combo(G.IslandsFault((("node-a",), ("node-b", "node-c")), False), hostname), 3)
    assert (chosen.condition, chosen.status, chosen.socket_ifname, chosen.broken_ifnames) == (
        V.NETWORK_VALIDATED, "True", "eth0", ("eth1",))
    assert {"node-a", "node-c", "127.0.1.1"} <= set(chosen.must_name)
