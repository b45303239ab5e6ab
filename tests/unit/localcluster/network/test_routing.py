"""Routed links between segments in scenarios (localcluster/network/routing.py and scenarios/):
the router plan, each node's routes and the refusals, all pure."""
from __future__ import annotations

import textwrap

import pytest

from localcluster.network import routing
from localcluster.scenarios import loader, nodeplan
from localcluster.scenarios import scenario as scn

ROUTED = """
nodes: 3
segments:
  mgmt: {subnet: 10.100.0.0/24}
  data: {subnet: 10.101.0.0/24}
  datb: {subnet: 10.102.0.0/24}
nodeOverrides:
  node-c:
    nics:
      - {name: eth0, segment: mgmt}
      - {name: eth1, segment: datb}
routers:
  - {between: [data, datb], mtu: 1400, icmpFragNeeded: drop}
expect: {status: 'False'}
"""


def parse(text: str) -> scn.Scenario:
    return loader.parse(textwrap.dedent(text), "t.yaml")


def test_a_routed_link_gives_two_routers_and_each_node_a_route_to_the_other_side():
    sc = parse(ROUTED)
    [pair] = routing.plan(sc.routers, {k: v.subnet for k, v in sc.segments.items()}, "dtj-")
    a, b = pair.legs
    assert (pair.mtu, pair.drop_icmp) == (1400, True)
    assert (a.netns, a.segment, a.lan, a.wan, a.peer_wan, a.remote) == (
        "dtj-rt0a", "data", "10.101.0.1/24", "169.254.254.1/30", "169.254.254.2", "10.102.0.0/24")
    assert (b.netns, b.lan, b.remote) == ("dtj-rt0b", "10.102.0.1/24", "10.101.0.0/24")
    topos = {t.name: t for t in nodeplan.topology(sc)}
    assert topos["node-a"].routes == [{"to": "10.102.0.0/24", "via": "10.101.0.1", "dev": "eth1"}]
    assert topos["node-c"].routes == [{"to": "10.101.0.0/24", "via": "10.102.0.1", "dev": "eth1"}]
    assert topos["node-a"].to_json()["routes"] == topos["node-a"].routes


def test_without_routers_a_topology_document_is_unchanged():
    """The node's digest decides whether `up` rebuilds it: no routers, no new key."""
    t = nodeplan.topology(parse("expect: {status: 'True'}\n"))[0]
    assert t.routes == [] and "routes" not in t.to_json()


@pytest.mark.parametrize("routers,error", [
    ("[{between: [data, nope]}]", "unknown segment 'nope'"),
    ("[{between: [data, data]}]", "two different segments"),
    ("[{between: [data, mgmt], mtu: 100}]", "mtu"),
    ("[{between: [data, mgmt], icmp: drop}]", "icmp"),
    ("[" + ", ".join(["{between: [data, mgmt]}"] * 5) + "]", "at most 4"),
])
def test_refused_routers_name_the_field(routers, error):
    with pytest.raises(scn.ScenarioError) as e:
        parse(f"routers: {routers}\nexpect: {{status: 'True'}}\n")
    assert error in str(e.value)


def test_a_nic_on_the_routers_address_is_refused():
    text = ROUTED.replace("      - {name: eth1, segment: datb}",
                          "      - {name: eth1, segment: datb, addresses: [10.102.0.1/24]}")
    with pytest.raises(scn.ScenarioError, match="10.102.0.1 is the address of the router"):
        nodeplan.topology(parse(text))


TWO_SIDES = """
segments:
  mgmt: {subnet: 10.100.0.0/24}
  data: {subnet: 10.101.0.0/24}
  datb: {subnet: %s}
  datc: {subnet: 10.103.0.0/24}
routers: %s
expect: {status: 'True'}
"""


@pytest.mark.parametrize("datb,routers,error", [
    # both routers took 10.101.0.1 and each node routed its own subnet via it
    ("10.101.0.0/24", "[{between: [data, datb]}]", "routers.0.between: data (10.101.0.0/24) and "
     "datb (10.101.0.0/24) overlap"),
    ("10.101.0.0/16", "[{between: [data, datb]}]", "overlap"),
    # two routers on br-data, both with 10.101.0.1
    ("10.102.0.0/24", "[{between: [data, datb]}, {between: [data, datc]}]",
     "routers.1.between: segment data already has a router (routers.0)"),
    ("10.102.0.0/24", "[{between: [data, datb]}, {between: [datb, data]}]", "routers.1.between"),
    # the router's lan address 169.254.254.1/24 is its own wan address
    ("169.254.254.0/24", "[{between: [data, datb]}]", "routers.0.between: datb's subnet "
     "169.254.254.0/24 overlaps the routers' middle links"),
])
def test_routers_that_would_share_an_address_are_refused(datb, routers, error):
    with pytest.raises(scn.ScenarioError) as e:
        parse(TWO_SIDES % (datb, routers))
    assert error in str(e.value)


def test_a_node_on_both_sides_of_a_router_keeps_its_connected_routes():
    """`ip route replace 10.101.0.0/24 via 10.102.0.1` would replace eth1's own route."""
    text = ROUTED.replace("nodeOverrides:", "nodeOverrides:\n  node-b:\n    nics:\n"
                          "      - {name: eth0, segment: mgmt}\n      - {name: eth1, segment: data}\n"
                          "      - {name: eth2, segment: datb}")
    topos = {t.name: t for t in nodeplan.topology(parse(text))}
    assert topos["node-b"].routes == []
    assert topos["node-a"].routes == [{"to": "10.102.0.0/24", "via": "10.101.0.1", "dev": "eth1"}]
