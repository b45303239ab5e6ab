"""The fault generator (localcluster/faults/generate.py): every generated case is a scenario
the loader accepts, round-trips through YAML, and carries the oracle's expectation as its
``expect``; a case is the same for the same seed and index; every class is drawn, with node
counts 2-8 and culprits anywhere."""
from __future__ import annotations

import collections

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from localcluster.faults import generate, grammar, oracle
from localcluster.scenarios import loader

SEEDS = st.integers(min_value=0, max_value=10**6)
INDEXES = st.integers(min_value=0, max_value=999)
CLASSES = st.lists(st.sampled_from(sorted(grammar.CLASSES)), min_size=1, max_size=3, unique=True)


@given(SEEDS, INDEXES, CLASSES)
def test_every_generated_case_loads_and_round_trips(seed, i, classes):
    c = generate.case(seed, i, classes)
    assert type(c.fault).CLASS in classes and c.name.endswith(type(c.fault).CLASS)
    again = loader.parse(c.text, f"{c.name}.yaml")  # the file as written loads
    assert again == c.scenario
    dumped = yaml.safe_dump(c.scenario.model_dump(mode="json", exclude_defaults=True))
    assert loader.parse(dumped, f"{c.name}.yaml") == c.scenario
    assert 2 <= c.scenario.nodes <= 8
    assert c.scenario.job.get("numNodes") == c.scenario.nodes  # every node takes part
    assert c.scenario.expect == c.expectation.expect()
    assert c.scenario.description.startswith(f"generated (seed {seed}, case {i},")


@given(SEEDS, INDEXES)
def test_a_case_is_the_same_for_the_same_seed_and_index(seed, i):
    a, b = generate.case(seed, i), generate.case(seed, i)
    assert (a.fault, a.text) == (b.fault, b.text)


def test_cases_differ_and_cover_every_class_node_count_and_culprit():
    cs = generate.cases(7, 300)
    assert len({c.text for c in cs}) > 280
    classes = collections.Counter(type(c.fault).CLASS for c in cs)
    assert set(classes) == set(grammar.CLASSES) and min(classes.values()) >= 15, classes
    assert {c.scenario.nodes for c in cs} == set(range(2, 9))
    culprits = {c.fault.node for c in cs if isinstance(c.fault, grammar.FirewallFault) and c.fault.target == "ephemeral"}
    assert len(culprits) >= 6  # not always node-a
    spans = {c.fault.ports for c in cs if isinstance(c.fault, grammar.FirewallFault)}
    assert any(lo > grammar.EPHEMERAL[0] for lo, _ in spans) and any(hi > grammar.EPHEMERAL[1] for _, hi in spans)
    assert any(lo < grammar.EPHEMERAL[0] for lo, _ in spans)


def test_an_unknown_class_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown fault class.*firewall"):
        generate.case(1, 0, ["firewal"])


def test_a_firewall_fault_is_written_as_rules_on_the_culprit_only_by_interface():
    f = grammar.FirewallFault("node-c", ("node-a",), (32768, 40000), None, "reject", "ephemeral")
    d = generate.scenario_data(f, 4)
    assert list(d["nodeOverrides"]) == ["node-c"]
    rules = d["nodeOverrides"]["node-c"]["firewall"]["input"]
    assert {(r["iifname"], r["saddr"]) for r in rules} == {("eth0", "10.100.0.11"), ("eth1", "10.101.0.11")}
    assert all(r["dport"] == "32768-40000" and r["action"] == "reject" and r["state"] == ["new"] for r in rules)


def test_a_master_port_rule_sits_on_every_node_since_the_scheduler_places_rank_0():
    f = grammar.FirewallFault("*", (), (29500, 29500), "eth0", "drop", "master")
    d = generate.scenario_data(f, 3)
    assert d["defaults"]["firewall"]["input"] == [{"proto": "tcp", "dport": 29500, "iifname": "eth0",
                                                   "action": "drop"}]
    assert "nodeOverrides" not in d


def test_each_odd_name_answer_comes_from_its_own_nodes_source():
    f = grammar.NamesFault(("node-a", "node-c"), "master-stale", ("node-c",))
    over = generate.scenario_data(f, 3)["nodeOverrides"]
    assert over["node-a"] == {"hosts": [f"{grammar.STALE_ADDRESS} {grammar.MASTER_NAME}"]}
    assert over["node-c"] == {"dns": {"records": {grammar.MASTER_NAME: grammar.STALE_ADDRESS}}}
    assert "node-b" not in over


def test_a_combination_adds_the_hostname_line_to_the_nodes_own_lines():
    first = grammar.NamesFault(("node-b",), "master-stale")
    d = generate.scenario_data(grammar.Combo(first, grammar.NamesFault(("node-a", "node-b"), "hostname")), 3)
    assert d["nodeOverrides"]["node-b"]["hosts"] == [f"{grammar.STALE_ADDRESS} {grammar.MASTER_NAME}",
                                                     "127.0.1.1 {node}"]
    assert d["nodeOverrides"]["node-a"] == {"hosts": ["127.0.1.1 {node}"]}


def test_islands_put_each_group_on_its_own_segment():
    f = grammar.IslandsFault((("node-a", "node-c"), ("node-b",), ("node-d",)), True)
    d = generate.scenario_data(f, 4)
    assert d["segments"]["isl1"]["subnet"] == "10.102.0.0/24" and d["segments"]["isl2"]["subnet"] == "10.103.0.0/24"
    assert d["nodeOverrides"]["node-b"]["nics"][1]["segment"] == "isl1"
    assert d["nodeOverrides"]["node-d"]["nics"][1]["segment"] == "isl2"
    assert "node-a" not in d["nodeOverrides"] and d["job"]["network"] == {"socketIfname": "eth1"}


@given(SEEDS, INDEXES)
def test_the_expectation_written_is_the_oracles_for_the_fault(seed, i):
    c = generate.case(seed, i)
    assert c.expectation == oracle.expectation(c.fault, c.scenario.nodes)
