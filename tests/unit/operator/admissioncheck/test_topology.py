"""A topology assignment as domains (:mod:`disttrain.admissioncheck.topology`): both of
Kueue's shapes, the compressed v1beta2 slices and v1beta1's domains, and the pod -> domain
order."""
import pytest

from disttrain.admissioncheck.topology import Domain, Unreadable, domains, selector_of_pod

HOST = "kubernetes.io/hostname"
RACK = "example.com/rack"


def test_v1beta2_prefix_roots_and_universal_counts_expand_to_one_domain_per_root():
    got = domains({"levels": [HOST], "slices": [{"domainCount": 3, "valuesPerLevel": [
        {"individual": {"prefix": "node-", "suffix": ".z", "roots": ["a", "b", "c"]}}],
        "podCounts": {"universal": 1}}]}, "f")
    assert got == [Domain({HOST: "node-a.z"}, 1), Domain({HOST: "node-b.z"}, 1), Domain({HOST: "node-c.z"}, 1)]


def test_v1beta2_universal_value_and_individual_counts_across_two_levels_and_slices():
    got = domains({"levels": [RACK, HOST], "slices": [
        {"domainCount": 2, "valuesPerLevel": [{"universal": "r1"}, {"individual": {"roots": ["n1", "n2"]}}],
         "podCounts": {"individual": [2, 1]}},
        {"domainCount": 1, "valuesPerLevel": [{"universal": "r2"}, {"universal": "n9"}],
         "podCounts": {"universal": 4}}]}, "f")
    assert got == [Domain({RACK: "r1", HOST: "n1"}, 2), Domain({RACK: "r1", HOST: "n2"}, 1),
                   Domain({RACK: "r2", HOST: "n9"}, 4)]


def test_v1beta1_domains():
    got = domains({"levels": [RACK], "domains": [{"values": ["r1"], "count": 3}]}, "f")
    assert got == [Domain({RACK: "r1"}, 3)]


@pytest.mark.parametrize("bad, where", [
    ({"levels": [HOST], "slices": [{"domainCount": 2, "valuesPerLevel": [{"individual": {"roots": ["a"]}}],
                                     "podCounts": {"universal": 1}}]}, "f.slices[0].valuesPerLevel[0].individual.roots"),
    ({"levels": [HOST], "slices": [{"domainCount": 1, "valuesPerLevel": [],
                                     "podCounts": {"universal": 1}}]}, "f.slices[0].valuesPerLevel"),
    ({"levels": [HOST], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "a"}],
                                     "podCounts": {"individual": [1, 2]}}]}, "f.slices[0].podCounts.individual"),
    ({"levels": [HOST], "slices": [{"domainCount": -1}]}, "f.slices[0].domainCount"),
    ({"levels": "x", "slices": []}, "f.levels"),
    ({"levels": [RACK], "domains": [{"values": ["r1", "r2"], "count": 1}]}, "f.domains[0].values"),
    ({"levels": [RACK]}, "f.domains"),
])
def test_a_shape_kueue_does_not_write_names_its_field(bad, where):
    with pytest.raises(Unreadable) as e:
        domains(bad, "f")
    assert e.value.field == where


def test_pods_fill_domains_in_order_each_for_its_count():
    doms = [Domain({HOST: "a"}, 2), Domain({HOST: "b"}, 1)]
    assert [selector_of_pod(doms, i) for i in range(4)] == [{HOST: "a"}, {HOST: "a"}, {HOST: "b"}, {}]
