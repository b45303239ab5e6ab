"""Condition messages: at most 400 characters, cause first, fix last (table tests)."""
import pytest

from disttrain.diagnosis import messages

LONG_EVIDENCE = "; ".join(f"node-{i}->node-{i + 1} 10.0.0.{i}: timeout" for i in range(40))


@pytest.mark.parametrize("text,limit,want", [
    ("short; fix it", 400, "short; fix it"),
    ("a" * 10, 5, "aaaa…"),
    ("cause; e1; e2; fix", 14, "cause; …; fix"),
    ("cause; e1; e2; fix", 17, "cause; e1; …; fix"),
    ("cause; e1; e2; fix", 18, "cause; e1; e2; fix"),
])
def test_bound_table(text, limit, want):
    assert messages.bound(text, limit) == want


def test_bound_keeps_cause_and_fix_of_a_long_probe_message():
    text = f"node-a: eth1 unreachable; {LONG_EVIDENCE}; open TCP 29500 between nodes"
    out = messages.bound(text)
    assert len(out) <= 400
    assert out.startswith("node-a: eth1 unreachable; node-0->node-1")
    assert out.endswith("…; open TCP 29500 between nodes")


def test_bound_cuts_a_single_huge_clause_at_a_word():
    out = messages.bound("word " * 200, 50)
    assert len(out) <= 50 and out.endswith("…") and not out.endswith(" …")


def test_join_adds_parts_in_priority_while_they_fit():
    assert messages.join(["first", None, "second", "third"], 19) == "first; second; …"
    assert messages.join(["first", None, "second", "third"], 20) == "first; second; third"
    assert messages.join(["first", "second"], 400) == "first; second"
    assert messages.join([], 400) == ""
    assert len(messages.join(["x" * 500, "y"])) <= 400


@pytest.mark.parametrize("text,want", [
    ("node-a (rank 1): refused by node-b", ["node-a", "node-b"]),
    ("node-ab is not node-a's twin", ["node-a"]),  # whole names only: node-ab is not node-a
    ("nothing here", []),
])
def test_named_nodes(text, want):
    assert messages.named_nodes(text, ["node-a", "node-b", "node-c"]) == want


def test_node_list_names_a_few_and_counts_the_rest():
    assert messages.node_list(["a", "b", "a"]) == "a, b"
    assert messages.node_list([f"n{i}" for i in range(10)]) == "n0, n1, n2 and 7 more"
