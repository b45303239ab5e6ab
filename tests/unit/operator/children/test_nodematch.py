"""Whether a pod may land on a node (:mod:`disttrain.children.nodematch`), against the rules of
the NodeAffinity and TaintToleration filters as the API reference states them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.children.nodematch import excluded_by, expression_matches

LABELS = {"gpu": "a100", "zone": "z1", "cores": "64"}


def affinity(*terms):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key, op, *values):
    return {"key": key, "operator": op, **({"values": list(values)} if values else {})}


@pytest.mark.parametrize("spec, taints, want", [
    ({}, [], None),
    ({"nodeSelector": {"gpu": "a100"}}, [], None),
    ({"nodeSelector": {"gpu": "h100"}}, [], "nodeSelector gpu=h100"),
    ({"nodeSelector": {"rack": "r1"}}, [], "nodeSelector rack=r1"),
    (affinity({"matchExpressions": [expr("gpu", "In", "h100", "a100")]}), [], None),
    (affinity({"matchExpressions": [expr("gpu", "NotIn", "a100")]}), [], "required nodeAffinity"),
    (affinity({"matchExpressions": [expr("gpu", "NotIn", "a100")]},
              {"matchExpressions": [expr("zone", "Exists")]}), [], None),  # terms are ORed
    (affinity({"matchExpressions": [expr("zone", "Exists"), expr("gpu", "DoesNotExist")]}), [],
     "required nodeAffinity"),  # expressions are ANDed
    (affinity({"matchExpressions": [expr("cores", "Gt", "32")]}), [], None),
    (affinity({"matchExpressions": [expr("cores", "Lt", "32")]}), [], "required nodeAffinity"),
    (affinity({"matchFields": [expr("metadata.name", "In", "node-c")]}), [], None),
    (affinity({"matchFields": [expr("metadata.name", "In", "node-a")]}), [], "required nodeAffinity"),
    (affinity({}), [], "required nodeAffinity"),  # an empty term matches no node
    ({}, [{"key": "gpu", "effect": "PreferNoSchedule"}], None),
    ({}, [{"key": "gpu", "value": "true", "effect": "NoSchedule"}], "taint gpu=true:NoSchedule"),
    ({}, [{"key": "gpu", "effect": "NoExecute"}], "taint gpu:NoExecute"),
    ({"tolerations": [{"key": "gpu", "operator": "Exists"}]}, [{"key": "gpu", "value": "x", "effect": "NoSchedule"}], None),
    ({"tolerations": [{"key": "gpu", "value": "x", "effect": "NoExecute"}]},
     [{"key": "gpu", "value": "x", "effect": "NoSchedule"}], "taint gpu=x:NoSchedule"),  # another effect
    ({"tolerations": [{"operator": "Exists"}]}, [{"key": "a", "effect": "NoSchedule"}], None),
    ({"tolerations": [{"operator": "Equal"}]}, [{"key": "a", "effect": "NoSchedule"}], "taint a:NoSchedule"),
    ({"nodeSelector": "junk", "affinity": 3, "tolerations": "x"}, "y", None),  # unreadable: no constraint
])
def test_excluded_by(spec, taints, want):
    assert excluded_by(spec, "node-c", LABELS, taints) == want


@given(st.text(max_size=8), st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Foo"]),
       st.lists(st.text(max_size=4), max_size=3), st.dictionaries(st.text(max_size=4), st.text(max_size=4)))
def test_in_and_notin_are_complements_and_nothing_raises(key, op, values, labels):
    e = expr(key, op, *values)
    got = expression_matches(e, labels)
    assert isinstance(got, bool)
    if op in ("In", "NotIn"):
        other = expr(key, "NotIn" if op == "In" else "In", *values)
        assert expression_matches(other, labels) is not got
    if op in ("Exists", "DoesNotExist"):
        assert got == ((key in labels) == (op == "Exists"))
