"""The node faults of the scenario model (scenario.py: ``Nic.up``, ``FirewallRule.daddr`` and
``oifname``, ``Firewall.output``, ``NodeConfig.sysctls``) against hostile values: what
reaches a shell (netns.py writes the sysctl with ``sh -c``) or an nft script must be
refused by the model, and what the kernel or nft would refuse at ``up`` too; their nft
rendering (firewall.py) and the topology document (topology.py). Pure, but for ``nft -c``
(checks a script, loads nothing) where nft is installed."""
from __future__ import annotations

import hashlib
import json
import shutil
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from localcluster.network import firewall, topology
from localcluster.scenarios import loader, nodeplan
from localcluster.scenarios import scenario as scn

KEY = "net.ipv4.ip_local_port_range"


def node_config(**kw) -> scn.NodeConfig:
    return scn.NodeConfig(**kw)


# -- sysctls: digits and one space, a range the kernel takes ------------------------------
@pytest.mark.parametrize("value", ["20000 29999", "1024 65535", "61000 61000", "40000 49999"])
def test_a_port_range_lo_hi_is_taken(value):
    assert node_config(sysctls={KEY: value}).sysctls == {KEY: value}


@pytest.mark.parametrize("value", [
    "20000 29999; reboot", "$(reboot)", "`id`", '20000" > /etc/passwd; echo "', "20000 29999\n",
    "\n20000 29999", "20000  29999", "20000\t29999", " 20000 29999", "20000 29999 ",
    "20000 29999 30000", "", " ", "-1 5", "0x10 0x20", "1e4 2e4", "20000-29999",
    "２００００ ２９９９９", "٢٠٠٠٠ ٢٩٩٩٩", "20000 29999\x00",
])
def test_anything_but_digits_and_one_space_is_refused(value):
    with pytest.raises(ValidationError, match=KEY.replace(".", r"\.")):
        node_config(sysctls={KEY: value})


@pytest.mark.parametrize("value", [
    "30000 20000",  # lo > hi: EINVAL
    "99999 99999", "65535 65536", "100000 200000",  # past 65535
    "0 0", "1 1023", "80 60999",  # below ip_unprivileged_port_start (1024): EINVAL
    "20000",  # one number: the kernel would keep the old hi, the range would not be the one written
])
def test_a_range_the_kernel_refuses_is_refused_when_the_scenario_loads(value):
    """Refused here, not halfway through `up` when the write in the node's namespace fails."""
    with pytest.raises(ValidationError, match="lo <= hi"):
        node_config(sysctls={KEY: value})


@pytest.mark.parametrize("key", [
    "net.ipv4.ip_forward", "kernel.core_pattern", f"{KEY} ", f" {KEY}", KEY.upper(),
    KEY.replace(".", "/"), f"{KEY}/../../kernel/core_pattern", f"{KEY};id", "",
])
def test_only_the_port_range_key_is_taken(key):
    with pytest.raises(ValidationError):
        node_config(sysctls={key: "20000 29999"})


@pytest.mark.parametrize("value", [20000, ["20000", "29999"], None, 2.5, {"lo": 1}])
def test_a_value_that_is_not_text_is_refused(value):
    with pytest.raises(ValidationError):
        node_config(sysctls={KEY: value})


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=14))
def test_whatever_the_model_takes_is_two_ascii_numbers_in_order(value):
    try:
        cfg = node_config(sysctls={KEY: value})
    except ValidationError:
        return
    lo, hi = cfg.sysctls[KEY].split(" ")
    assert lo.isascii() and hi.isascii() and lo.isdigit() and hi.isdigit()
    assert 1024 <= int(lo) <= int(hi) <= 65535


# -- firewall addresses and names ---------------------------------------------------------
@pytest.mark.parametrize("field", ["saddr", "daddr"])
@pytest.mark.parametrize("addr", [
    "fe80::1%eth0", "fe80::1%x; flush ruleset", "::1%a b",  # an IPv6 zone: nft reads it as junk
    "1.2.3.4/255.255.0.0", "1.2.3.4/0.0.255.255",  # a netmask: nft wants a prefix length
    "10.0.0.1/33", "host", "", "10.0.0.1\n", " 10.0.0.1", "10.0.0.1 drop", "10.0.0.1/ 24",
])
def test_an_address_nft_cannot_read_is_refused(field, addr):
    with pytest.raises(ValidationError, match=field):
        scn.FirewallRule(**{field: addr, "action": "drop"})


@pytest.mark.parametrize("field", ["saddr", "daddr"])
@pytest.mark.parametrize("addr", ["10.0.0.1", "10.0.0.5/24", "0.0.0.0/0", "::/0", "2001:db8::1/64",
                                  "::ffff:10.0.0.1", "10.244.3.0/24"])
def test_an_address_or_subnet_is_taken(field, addr):
    assert getattr(scn.FirewallRule(**{field: addr, "action": "drop"}), field) == addr


@pytest.mark.parametrize("saddr,daddr", [("fd00::1/64", "10.101.0.12"), ("10.100.0.11", "2001:db8::/32")])
def test_a_rule_with_an_ipv4_and_an_ipv6_end_is_refused(saddr, daddr):
    """nft refuses ``ip6 saddr ... ip daddr ...`` (conflicting protocols)."""
    with pytest.raises(ValidationError, match="both be IPv4 or both IPv6"):
        scn.FirewallRule(saddr=saddr, daddr=daddr, action="drop")


@pytest.mark.parametrize("name", ['eth1"; drop', "a" * 16, "-eth", "eth 1", "eth1\n", "", "é", 'e"', "eth1;"])
def test_an_oifname_that_could_leave_its_quotes_is_refused(name):
    with pytest.raises(ValidationError, match="oifname"):
        scn.FirewallRule(oifname=name, action="drop")


@pytest.mark.parametrize("up", [None, 2, "maybe", [], {}])
def test_a_nic_up_that_is_no_boolean_is_refused(up):
    with pytest.raises(ValidationError, match="up"):
        scn.Nic(name="eth1", segment="data", up=up)


# -- the nft text of output rules ---------------------------------------------------------
def _chain(text: str, name: str) -> list[str]:
    lines = [ln.strip() for ln in text.splitlines()]
    start = lines.index(f"chain {name} {{")
    return lines[start + 1:lines.index("}", start)]


def test_each_output_rule_field_lands_in_the_output_chain_and_its_pod_twin():
    fw = {"output": [
        {"proto": "tcp", "dport": "32768-60999", "daddr": "10.101.0.12", "oifname": "eth1",
         "state": ["new"], "action": "drop"},
        {"proto": "tcp", "dport": 29500, "daddr": "fd00::2/64", "action": "reject"},
        {"proto": "udp", "daddr": "10.244.1.0/24", "action": "reject"},
    ]}
    text = firewall.render(fw)
    want = ['oifname "eth1" ip daddr 10.101.0.12 tcp dport 32768-60999 ct state new drop',
            "ip6 daddr fd00::2/64 tcp dport 29500 reject with tcp reset",
            "ip daddr 10.244.1.0/24 meta l4proto udp reject"]
    assert _chain(text, "output") == ["type filter hook output priority 0; policy accept;", *want]
    # what the pods send leaves through the pod bridge: the same rules, nothing else held up
    assert _chain(text, "forward_out") == ["type filter hook forward priority 1; policy accept;",
                                           'iifname != "cni0" accept', *want]
    # no input rules: the input chain and its forward twin admit everything
    assert _chain(text, "input") == ["type filter hook input priority 0; policy accept;"]


def test_an_input_only_firewall_renders_as_before():
    fw = {"policy": "drop", "input": [{"proto": "tcp", "dport": 22, "action": "accept"}]}
    text = firewall.render(fw)
    assert "chain output" not in text and "forward_out" not in text
    assert text == firewall.render({**fw, "output": []})


RULES = st.fixed_dictionaries({"action": st.sampled_from(["accept", "drop", "reject"])}, optional={
    "proto": st.sampled_from(["tcp", "udp"]),
    "saddr": st.sampled_from(["10.100.0.11", "10.244.0.0/24", "fd00::1/64"]),
    "daddr": st.sampled_from(["10.101.0.12", "10.244.1.0/24", "2001:db8::/32", "0.0.0.0/0"]),
    "iifname": st.sampled_from(["eth0", "lo"]),
    "oifname": st.sampled_from(["eth1", "cni0", "a.b-c_d"]),
    "state": st.lists(st.sampled_from(["new", "established", "related", "invalid"]), min_size=1,
                      max_size=4, unique=True),
})


def _taken(rule: dict) -> list[dict]:
    """[the rule as the model holds it], or [] when the model refuses it."""
    try:
        return [scn.FirewallRule(**rule).model_dump(exclude_none=True)]
    except ValidationError:
        return []


@st.composite
def firewalls(draw) -> dict:
    rules = []
    for r in draw(st.lists(RULES, max_size=4)):
        if "proto" in r and draw(st.booleans()):
            r["dport"] = draw(st.sampled_from([29500, "32768-60999", "1-65535"]))
        rules += _taken(r)
    inputs = [x for r in draw(st.lists(RULES, max_size=2)) for x in _taken(r)]
    return scn.Firewall(policy=draw(st.sampled_from(["accept", "drop"])), input=inputs,
                        output=rules).model_dump(exclude_none=True)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(firewalls())
def test_every_output_rule_is_rendered_once_in_each_output_chain(fw):
    text = firewall.render(fw)
    want = [firewall.render_rule(r) for r in fw["output"]]
    if not want:
        assert "chain output" not in text
        return
    assert _chain(text, "output")[1:] == want
    assert _chain(text, "forward_out")[2:] == want
    for r, line in zip(fw["output"], want):
        for key in ("daddr", "saddr"):
            if r.get(key):
                assert f"{'ip6' if ':' in r[key] else 'ip'} {key} {r[key]} " in line
        if r.get("oifname"):
            assert line.startswith(f'{"iifname " + chr(34) + r["iifname"] + chr(34) + " " if r.get("iifname") else ""}'
                                   f'oifname "{r["oifname"]}" ')
        assert line.endswith(r["action"] + (" with tcp reset" if r["action"] == "reject" and r.get("proto") == "tcp"
                                            else ""))
    # the input policy never leaks into the output chains (they always accept by default)
    assert _chain(text, "output")[0].endswith("policy accept;")
    assert _chain(text, "forward_out")[0].endswith("policy accept;")


@pytest.mark.skipif(shutil.which("nft") is None, reason="needs nft (nft -c checks a script, loads nothing)")
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(firewalls())
def test_nft_reads_every_firewall_the_model_takes(fw):
    try:
        firewall.check(fw)
    except firewall.FirewallError as e:
        if "Operation not permitted" in str(e) or "Permission denied" in str(e):
            pytest.skip("nft -c needs CAP_NET_ADMIN here")
        raise


# -- the topology document ----------------------------------------------------------------
def parse(text: str) -> scn.Scenario:
    return loader.parse(textwrap.dedent(text), "t.yaml")


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def test_defaults_leave_the_document_without_the_new_keys():
    """The topology document (whose digest decides whether `up` rebuilds a node) of a
    scenario that sets none of the new fields is what it was before them."""
    plain = parse("expect: {status: 'True'}\n")
    said = parse("""
        defaults:
          nics: [{name: eth0, segment: mgmt, up: true}, {name: eth1, segment: data, up: true}]
          sysctls: {}
          firewall: {input: [{proto: tcp, dport: 22, action: accept}], output: []}
        expect: {status: 'True'}
        """)
    for t in nodeplan.topology(plain):  # the keys the document had before up and sysctls
        doc = t.to_json()
        assert set(doc) == {"name", "index", "links", "internal_ip", "hosts", "firewall", "env",
                            "library_paths", "pythonpath", "gpus"}
        assert all(set(ln) == {"name", "addresses", "mtu", "segment", "fabric_peer"} for ln in doc["links"])
    a, b = nodeplan.topology(plain)[0], nodeplan.topology(said)[0]
    da, db = a.to_json(), b.to_json()
    assert "sysctls" not in db and all("up" not in ln for ln in db["links"])
    assert db["links"] == da["links"]


def test_up_and_sysctls_round_trip_and_change_the_digest():
    sc = parse(f"""
        nodes: 3
        nodeOverrides:
          node-b:
            nics: [{{name: eth0, segment: mgmt}}, {{name: eth1, segment: data, up: false}}]
            sysctls: {{{KEY}: "20000 29999"}}
        expect: {{status: 'True'}}
        """)
    a, b, c = nodeplan.topology(sc)
    assert [ln.up for ln in b.links if ln.segment] == [True, False]
    assert b.sysctls == {KEY: "20000 29999"} and a.sysctls == {} == c.sysctls
    doc = b.to_json()
    assert [ln.get("up", True) for ln in doc["links"]] == [True, True, False]
    assert doc["sysctls"] == {KEY: "20000 29999"}
    back = topology.NodeTopology.from_json(json.loads(json.dumps(doc)))
    assert back == b and back.to_json() == doc
    assert topology.NodeTopology.from_json(a.to_json()) == a
    plain = nodeplan.topology(parse("nodes: 3\nexpect: {status: 'True'}\n"))
    assert _digest(a.to_json()) == _digest(plain[0].to_json())
    assert _digest(doc) != _digest(plain[1].to_json())
