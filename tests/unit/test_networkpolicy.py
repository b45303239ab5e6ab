"""NetworkPolicy evaluation (:mod:`disttrain.diagnosis.networkpolicy`): the API's semantics
for traffic between one job's pods, one row per rule shape, and generated policies that
never raise and never blame without certainty."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from disttrain.diagnosis import networkpolicy as np_

NS = "ml"
JOB = {"disttrain.dev/job-name": "j", "app": "train"}
A = np_.PodView("j-probe-0", dict(JOB, **{"disttrain.dev/node-rank": "0"}), ("10.244.1.5",),
                {"rdzv": (29500, "TCP")})
B = np_.PodView("j-probe-1", dict(JOB, **{"disttrain.dev/node-rank": "1"}), ("10.244.2.5",),
                {"rdzv": (29500, "TCP")})
RDZV = np_.Need(29500, 29500, "the rendezvous port")
EPH = np_.Need(32768, 60999, "the ephemeral range")


def policy(name: str, selector: dict | None = None, types=None, ingress=None, egress=None) -> dict:
    spec: dict = {"podSelector": {} if selector is None else selector}
    if types is not None:
        spec["policyTypes"] = types
    if ingress is not None:
        spec["ingress"] = ingress
    if egress is not None:
        spec["egress"] = egress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": NS}, "spec": spec}


FROM_JOB = [{"podSelector": {"matchLabels": {"disttrain.dev/job-name": "j"}}}]
DENY_ALL = policy("default-deny", types=["Ingress"])
ONLY_RDZV = policy("train-peers", {"matchLabels": {"app": "train"}},
                   ingress=[{"from": FROM_JOB, "ports": [{"port": 29500}]}])


def blocks(*policies, needs=(RDZV, EPH)):
    return [(b.need.what, b.direction, b.policies, b.admitted)
            for b in np_.blocked(list(policies), [A, B], NS, list(needs))]


@pytest.mark.parametrize("name,policies,want", [
    ("no policy: nothing isolated", [], []),
    ("default-deny ingress drops everything, egress untouched", [DENY_ALL],
     [("the rendezvous port", "ingress", ("default-deny",), ()),
      ("the ephemeral range", "ingress", ("default-deny",), ())]),
    ("a policy for the job's pods on the rendezvous port only: the ephemeral range dropped",
     [ONLY_RDZV], [("the ephemeral range", "ingress", ("train-peers",), ((29500, 29500),))]),
    ("another policy adds the range (endPort): policies add up, nothing dropped",
     [ONLY_RDZV, policy("eph", {}, ingress=[{"from": FROM_JOB, "ports": [{"port": 32768, "endPort": 60999}]}])],
     []),
    ("a range that stops short is named with what it admits",
     [policy("short", {}, ingress=[{"from": FROM_JOB, "ports": [{"port": 29500}, {"port": 32768, "endPort": 40000}]}])],
     [("the ephemeral range", "ingress", ("short",), ((29500, 29500), (32768, 40000)))]),
    ("a named port resolves against the destination's container ports",
     [policy("named", {}, ingress=[{"from": FROM_JOB, "ports": [{"port": "rdzv"}]}])],
     [("the ephemeral range", "ingress", ("named",), ((29500, 29500),))]),
    ("a malformed policy (no podSelector, a spec that is a list) isolates nothing",
     [{"metadata": {"name": "bad"}, "spec": {"policyTypes": ["Ingress"]}}, {"metadata": {"name": "x"}, "spec": []}], []),
    ("an empty rule admits everything", [DENY_ALL, policy("open", {}, ingress=[{}])], []),
    ("a rule from other pods only admits nothing of the job's",
     [policy("web", {}, ingress=[{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}])],
     [("the rendezvous port", "ingress", ("web",), ()), ("the ephemeral range", "ingress", ("web",), ())]),
    ("a policy selecting other pods isolates none of the job's",
     [policy("web-only", {"matchLabels": {"app": "web"}}, types=["Ingress"])], []),
    ("matchExpressions: NotIn the job's app selects nothing of it",
     [policy("not-train", {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["train"]}]},
             types=["Ingress"])], []),
    ("the job's namespace by its name label admits",
     [policy("ns", {}, ingress=[{"from": [{"namespaceSelector": {"matchLabels": {
         "kubernetes.io/metadata.name": NS}}}]}])], []),
    ("a namespace label the operator cannot read: undecided, never blamed",
     [policy("team", {}, ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]}])], []),
    ("another namespace by name: the job's pods are not admitted",
     [policy("other-ns", {}, ingress=[{"from": [{"namespaceSelector": {"matchLabels": {
         "kubernetes.io/metadata.name": "web"}}}]}])],
     [("the rendezvous port", "ingress", ("other-ns",), ()), ("the ephemeral range", "ingress", ("other-ns",), ())]),
    ("an ipBlock holding the pod network admits; one with the pods in except does not",
     [policy("cidr", {}, ingress=[{"from": [{"ipBlock": {"cidr": "10.244.0.0/16"}}]}])], []),
    ("ipBlock except",
     [policy("cidr-x", {}, ingress=[{"from": [{"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.1.0/24"]}}],
                                    "ports": [{"port": 1, "endPort": 65535}]}])],
     [("the rendezvous port", "ingress", ("cidr-x",), ()), ("the ephemeral range", "ingress", ("cidr-x",), ())]),
    ("UDP only admits no TCP",
     [policy("udp", {}, ingress=[{"from": FROM_JOB, "ports": [{"protocol": "UDP"}]}])],
     [("the rendezvous port", "ingress", ("udp",), ()), ("the ephemeral range", "ingress", ("udp",), ())]),
    ("default-deny egress with DNS only: the job's dials are dropped on the way out",
     [policy("deny-egress", types=["Egress"], egress=[{"ports": [{"port": 53, "protocol": "UDP"}]}])],
     [("the rendezvous port", "egress", ("deny-egress",), ()), ("the ephemeral range", "egress", ("deny-egress",), ())]),
    ("egress rules without policyTypes make it an egress policy too",
     [policy("both", {}, ingress=[{}], egress=[{"to": FROM_JOB}])], []),
])
def test_blocked(name, policies, want):
    assert blocks(*policies) == want


def test_the_message_names_the_policy_the_ports_and_the_fix_and_no_firewall():
    found = np_.blocked([ONLY_RDZV], [A, B], NS, [RDZV, EPH])
    text = np_.message(found, NS, {"disttrain.dev/job-name": "j"})
    assert len(text) <= 400
    assert text.startswith("NetworkPolicy train-peers in namespace ml drops TCP 32768-60999")
    assert "it admits only 29500" in text and "firewall" not in text
    assert "{disttrain.dev/job-name: j}" in text


LABELS = st.dictionaries(st.sampled_from(["app", "disttrain.dev/job-name", "team", "x"]),
                         st.sampled_from(["train", "j", "web", ""]), max_size=3)
JUNK = st.recursive(st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=3),
                    max_leaves=12)
SELECTOR = st.fixed_dictionaries({}, optional={
    "matchLabels": LABELS, "matchExpressions": st.lists(st.fixed_dictionaries({
        "key": st.sampled_from(["app", "team", "x"]),
        "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Bogus"]),
        "values": st.lists(st.sampled_from(["train", "web"]), max_size=2)}), max_size=2)})
PEER = st.fixed_dictionaries({}, optional={"podSelector": SELECTOR, "namespaceSelector": SELECTOR,
                                          "ipBlock": st.fixed_dictionaries({"cidr": st.sampled_from(
                                              ["10.244.0.0/16", "10.0.0.0/8", "bad", "::/0"])})})
PORT = st.fixed_dictionaries({}, optional={"port": st.one_of(st.integers(-1, 70000), st.sampled_from(["rdzv", "x"])),
                                          "endPort": st.integers(-1, 70000),
                                          "protocol": st.sampled_from(["TCP", "UDP", "SCTP"])})
RULE = st.fixed_dictionaries({}, optional={"from": st.lists(PEER, max_size=3), "to": st.lists(PEER, max_size=3),
                                          "ports": st.lists(PORT, max_size=3)})
POLICY = st.builds(lambda sel, types, ing, eg: policy("p", sel, types, ing, eg), SELECTOR,
                   st.none() | st.lists(st.sampled_from(["Ingress", "Egress", "Other"]), max_size=2),
                   st.none() | st.lists(RULE, max_size=3), st.none() | st.lists(RULE, max_size=3))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(POLICY | JUNK, max_size=4))
def test_generated_policies_never_raise_and_a_block_is_certain(policies):
    found = np_.blocked(policies, [A, B], NS, [RDZV, EPH])
    for b in found:
        assert b.policies and all(lo <= hi for lo, hi in b.admitted)
        # certain: adding a policy that admits everything between the job's pods clears it
    opened = policies + [policy("all-in", {}, ingress=[{}]), policy("all-out", {}, types=["Egress"], egress=[{}])]
    assert np_.blocked(opened, [A, B], NS, [RDZV, EPH]) == []
    if found:
        assert len(np_.message(found, NS, JOB)) <= 400


@settings(max_examples=200, deadline=None, derandomize=True)
@given(JUNK)
def test_any_pod_object_reads_without_raising(obj):
    v = np_.PodView.of(obj)
    assert isinstance(v.labels, dict) and len(v.ips) <= 4
