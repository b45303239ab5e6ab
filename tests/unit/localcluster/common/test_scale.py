"""Up to 64 simulated nodes: names beyond node-z and the scenario/cluster address plan
(localcluster/localcluster/common/config.py, scenarios/). Pure: no cluster."""
from __future__ import annotations

import ipaddress
import textwrap

import pytest
import yaml

from localcluster.common import config
from localcluster.network import dnsplan, topology
from localcluster.scenarios import loader, nodeplan
from localcluster.scenarios import scenario as scn


def _parse(text: str) -> scn.Scenario:
    return loader.parse(textwrap.dedent(text), "t.yaml")


def _eth1_at(node: str, address: str) -> str:
    """A scenario whose ``node`` has eth1 at ``address`` (addr/prefix)."""
    return yaml.safe_dump({"nodeOverrides": {node: {"nics": [
        {"name": "eth0", "segment": "mgmt"},
        {"name": "eth1", "segment": "data", "addresses": [address]}]}},
        "expect": {"status": "True"}})


def test_names_go_beyond_z_and_back():
    names = [config.node_name(i) for i in range(config.MAX_NODES)]
    assert names[:26] == [f"node-{c}" for c in "abcdefghijklmnopqrstuvwxyz"]  # unchanged
    assert names[26:29] == ["node-aa", "node-ab", "node-ac"] and names[51:53] == ["node-az", "node-ba"]
    assert names[-1] == "node-bl" and len(set(names)) == config.MAX_NODES == 64
    assert all(config.node_index(n) == i for i, n in enumerate(names))
    assert all(config.node_spec_by_name(n).index == i for i, n in enumerate(names))
    for bad in ("node-", "node-A", "node-1", "nod-a", "node-abcd", "node-a-b"):
        with pytest.raises(ValueError):
            config.node_index(bad)
    with pytest.raises(ValueError):
        config.node_name(-1)


def test_node_specs_cap_at_64_with_distinct_ports_and_addresses():
    specs = config.node_specs(64)
    assert len({s.kubelet_port for s in specs}) == 64
    assert len({s.mgmt_ip for s in specs}) == 64 and specs[-1].mgmt_ip == "10.100.0.74"
    assert max(len(s.netns) for s in specs) <= len("dtj9-node-bl")
    with pytest.raises(ValueError, match="between 1 and 64"):
        config.node_specs(65)


def test_default_topology_of_64_nodes_is_a_sound_plan():
    topos = topology.default_topology(64)
    nics = [ln for t in topos for ln in t.links if ln.segment]
    ips = [ipaddress.ip_interface(a).ip for ln in nics for a in ln.addresses]
    assert len(ips) == len(set(ips)) == 128
    assert all(len(ln.fabric_peer) <= scn.IFNAMSIZ for ln in nics)
    pods = [ipaddress.ip_network(config.pod_cidr(t.index)) for t in topos]
    assert len(set(pods)) == 64
    assert all(p.subnet_of(ipaddress.ip_network(config.POD_NETWORK_CIDR)) for p in pods)
    plan = dnsplan.plan(topos)  # cluster DNS still finds its address above the nodes
    assert set(plan.gateways.values()) == {"10.100.0.254"}
    assert len(plan.pod_routes) == 64
    hosts = topology.peer_hosts(topos)
    assert "10.100.0.74 node-bl" in hosts and "10.101.0.37 node-aa-data" in hosts


def test_a_64_node_scenario_loads_and_65_is_refused():
    sc = _parse("nodes: 64\nexpect: {status: 'True'}\n"
                "nodeOverrides:\n  node-bl: {env: {X: '1'}}\n")
    assert nodeplan.topology(sc)[-1].env == {"X": "1"}
    with pytest.raises(scn.ScenarioError, match="nodes"):
        _parse("nodes: 65\nexpect: {status: 'True'}\n")
    with pytest.raises(scn.ScenarioError, match="nodeOverrides.node-bm: no such node"):
        _parse("nodes: 64\nexpect: {status: 'True'}\nnodeOverrides:\n  node-bm: {}\n")


def test_a_segment_too_small_for_the_nodes_is_named():
    text = """\
        nodes: {n}
        segments:
          mgmt: {{subnet: 10.100.0.0/28}}
          data: {{subnet: 10.101.0.0/24}}
        expect: {{status: "True"}}
        """
    assert len(nodeplan.topology(_parse(text.format(n=4)))) == 4  # hosts .11-.14 fit in a /28
    with pytest.raises(scn.ScenarioError, match=r"segments\.mgmt: 10\.100\.0\.0/28 has no host "
                                                r"\.15 for node-e .*4 node\(s\) fit"):
        _parse(text.format(n=5))


@pytest.mark.parametrize("subnet, what", [("10.244.3.0/24", "pod network"),
                                          ("10.96.0.0/24", "Service range"),
                                          ("10.240.0.0/12", "pod network")])
def test_segments_may_not_overlap_the_clusters_own_ranges(subnet, what):
    with pytest.raises(scn.ScenarioError, match=f"segments.data: .* overlaps the {what}"):
        _parse(f"segments:\n  mgmt: {{subnet: 10.100.0.0/24}}\n  data: {{subnet: {subnet}}}\n"
               "expect: {status: 'True'}\n")


@pytest.mark.parametrize("text, why", [
    ("nodeOverrides: {node-a: {decoys: [{name: flannel.1, addresses: [10.244.5.0/32]}]}}\n"
     "expect: {status: 'True'}\n",  # another node's pod CIDR (its own would be an overlay)
     "node-a: flannel.1 10.244.5.0/32 overlaps the pod network"),
    (_eth1_at("node-a", "10.96.0.10/24"), r"node-a: eth1 10.96.0.10/24 overlaps the Service range"),
    ("defaults: {decoys: [{name: docker0, addresses: [10.244.0.1/16]}]}\nexpect: {status: 'True'}\n",
     "node-a: docker0 10.244.0.1/16 overlaps the pod network"),
    (_eth1_at("node-b", "10.101.0.11/24"), r"node-b: eth1 10.101.0.11 is also node-a eth1's address"),
])
def test_an_address_plan_the_cluster_cannot_run_is_refused(text, why):
    with pytest.raises(scn.ScenarioError, match=why):
        _parse(text)


def test_an_overlay_in_the_nodes_own_pod_cidr_and_segments_sharing_a_subnet_are_allowed():
    sc = _parse("segments:\n  mgmt: {subnet: 10.100.0.0/24}\n  data: {subnet: 10.101.0.0/24}\n"
                "  iso: {subnet: 10.100.0.0/24}\n"
                "nodeOverrides: {node-b: {decoys: [{name: flannel.1, addresses: [10.244.1.0/32]}]}}\n"
                "expect: {status: 'True'}\n")
    assert "iso" in sc.segments


def test_decoys_may_repeat_their_addresses():
    sc = loader.load("decoy-bridges")  # docker0 172.17.0.1/16 on every node, on purpose
    assert len({ln.addresses[0] for t in nodeplan.topology(sc) for ln in t.links
                if ln.name == "docker0"}) == 1


def test_fabric_interface_names_must_fit_with_long_node_names():
    def nics(i: int) -> dict:
        return {"nics": [{"name": "eth0", "segment": "abcdefg"},
                         {"name": "eth1", "segment": "abcdefg", "addresses": [f"10.100.1.{i + 1}/24"]}]}

    def doc(n: int) -> str:
        return yaml.safe_dump({"nodes": n, "segments": {"abcdefg": {"subnet": "10.100.0.0/24"}},
                               "nodeOverrides": {config.node_name(i): nics(i) for i in range(n)},
                               "expect": {"status": "True"}})

    # eth1's fabric end is abcdefg1-<node>: 15 bytes for node-z, 16 for node-aa
    assert len(nodeplan.topology(_parse(doc(26)))) == 26
    with pytest.raises(scn.ScenarioError, match=r"'abcdefg1-node-aa', is longer than the 15 bytes.*"
                                                r"segment name of at most 6 characters"):
        _parse(doc(27))


def test_neighbour_limits_are_raised_never_lowered(tmp_path):
    """The neighbour tables are shared by every network namespace: 32 simulated nodes
    overflowed the default 1024 entries (a false NoCommonInterface). The limits are raised
    where lower, largest first, and a higher value someone set is kept."""
    from localcluster.network import netns as network
    assert network.neighbour_limits({"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024}) \
        == network.NEIGH_THRESHOLDS
    assert network.neighbour_limits({"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 99999}) \
        == {"gc_thresh1": 4096, "gc_thresh2": 16384}
    for fam, vals in (("ipv4", (128, 512, 1024)), ("ipv6", (8192, 20000, 65536))):
        d = tmp_path / fam / "neigh" / "default"
        d.mkdir(parents=True)
        for k, v in zip(("gc_thresh1", "gc_thresh2", "gc_thresh3"), vals):
            (d / k).write_text(f"{v}\n")
    written = network.ensure_neighbour_capacity(str(tmp_path))
    assert written == {"ipv4.gc_thresh3": 32768, "ipv4.gc_thresh2": 16384, "ipv4.gc_thresh1": 4096}
    assert (tmp_path / "ipv6" / "neigh" / "default" / "gc_thresh2").read_text().strip() == "20000"
    assert network.ensure_neighbour_capacity(str(tmp_path)) == {}  # idempotent
