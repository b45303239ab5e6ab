"""Keeping a pod off nodes (children/podbase.py: avoid_nodes), as a restart after a stall
verdict does: a required nodeAffinity NotIn on kubernetes.io/hostname in every term."""
from __future__ import annotations

import copy

import pytest

from disttrain.children.podbase import avoid_nodes, require_node_affinity

NOT_IN = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-b", "node-c"]}


@pytest.mark.parametrize("spec,terms", [
    ({}, [{"matchExpressions": [NOT_IN]}]),
    # the template's own terms are ORed: each must still leave the nodes out
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-x"]}]}]}}}},
     [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}, NOT_IN]},
      {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-x"]}], "matchExpressions": [NOT_IN]}]),
])
def test_every_term_leaves_the_nodes_out(spec, terms):
    spec = copy.deepcopy(spec)
    avoid_nodes(spec, ["node-b", "node-c"])
    got = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert got == terms


def test_no_nodes_no_change_and_a_pin_keeps_its_exclusion():
    spec: dict = {"nodeSelector": {"a": "b"}}
    avoid_nodes(spec, [])
    assert spec == {"nodeSelector": {"a": "b"}}
    require_node_affinity(spec, "node-a")
    avoid_nodes(spec, ["node-b"])
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [e["operator"] for e in term["matchExpressions"]] == ["In", "NotIn"]
