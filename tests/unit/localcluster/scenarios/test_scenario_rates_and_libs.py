"""Scenario NIC rate limits (rateMbit -> tbf), a node-local DNS's records, {nccl:VERSION}
library tokens and their on-demand install (altlibs), and the socketIfname expectation."""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from localcluster import scenariorun
from localcluster.network import netns as network
from localcluster.network import nodedns, topology
from localcluster.nodes.realnode.nodeconfig import kubelet_config
from localcluster.scenarios import altlibs, loader, nodeplan
from localcluster.scenarios import scenario as scn


def parse(text: str) -> scn.Scenario:
    return loader.parse(textwrap.dedent(text), "t.yaml")


def test_rate_limit_reaches_the_link_and_unset_keeps_the_old_document():
    sc = parse("""
        defaults:
          nics:
            - {name: eth0, segment: mgmt, rateMbit: 1000}
            - {name: eth1, segment: data}
        expect: {status: 'True'}
        """)
    a, _ = nodeplan.topology(sc)
    eth0, eth1 = a.links[1], a.links[2]
    assert (eth0.name, eth0.rate_mbit, eth1.rate_mbit) == ("eth0", 1000, None)
    doc = a.to_json()
    assert doc["links"][1]["rate_mbit"] == 1000
    # an unlimited link serializes as before (same topology digest: no needless rebuild)
    assert "rate_mbit" not in doc["links"][2]
    assert topology.NodeTopology.from_json(doc).links[1].rate_mbit == 1000
    assert topology.NodeTopology.from_json(doc).links[2].rate_mbit is None


def test_rate_limit_errors_name_the_line():
    with pytest.raises(scn.ScenarioError, match=r"t.yaml:4: defaults.nics.0.rateMbit"):
        parse("""
            defaults:
              nics:
                - {name: eth0, segment: mgmt, rateMbit: 0}
            expect: {status: 'True'}
            """)


def test_node_dns_records_reach_one_node_and_its_kubelet():
    sc = parse("""
        nodes: 2
        nodeOverrides:
          node-b:
            dns: {records: {ddp-digits-0.ddp-digits: 10.100.0.99}}
        expect: {status: 'True'}
        """)
    a, b = nodeplan.topology(sc)
    assert a.dns_records == {} and "dns_records" not in a.to_json()  # same digest as before
    assert topology.NodeTopology.from_json(b.to_json()).dns_records == {
        "ddp-digits-0.ddp-digits": "10.100.0.99"}
    assert nodedns.server_for(a.dns_records) == "10.96.0.10"
    assert nodedns.server_for(b.dns_records) == nodedns.NODE_LOCAL_DNS == "169.254.20.10"
    text = nodedns.render_corefile(b.dns_records)
    assert "bind 169.254.20.10" in text and "forward . 10.96.0.10" in text and "fallthrough" in text
    assert '"{{ .Name }} 1 IN A 10.100.0.99"' in text
    # the name as given and under any namespace's search suffix, nothing else (CoreDNS: RE2)
    pattern = re.search(r'match "([^"]+)"', text).group(1)
    for q, hit in [("ddp-digits-0.ddp-digits.", True), ("ddp-digits-0.ddp-digits.ns-1.svc.cluster.local.", True),
                   ("ddp-digits-0.ddp-digits.svc.cluster.local.", True), ("ddp-digits-0xddp-digits.", False),
                   ("ddp-digits-1.ddp-digits.ns.svc.cluster.local.", False), ("x.ddp-digits-0.ddp-digits.", False)]:
        assert bool(re.match(pattern, q)) == hit, q
    with pytest.raises(ValueError):
        nodedns.render_corefile({'a" b': "10.0.0.1"})
    cfg = kubelet_config(Path("/n"), scn_spec(), Path("/ca"), {"serving_crt": "c", "serving_key": "k"},
                                  nodedns.server_for(b.dns_records))
    assert cfg["clusterDNS"] == ["169.254.20.10"]


def scn_spec():
    from localcluster.common.config import node_spec_by_name
    return node_spec_by_name("node-b")


@pytest.mark.parametrize("records,field", [
    ("{}", "nodeOverrides.node-b.dns.records"),
    ("{master: not-an-ip}", "is not an IP address"),
    ("{'a b': 10.0.0.1}", "is not a DNS name"),
])
def test_node_dns_records_are_checked(records, field):
    with pytest.raises(scn.ScenarioError, match=field):
        parse(f"""
            nodes: 2
            nodeOverrides:
              node-b:
                dns: {{records: {records}}}
            expect: {{status: 'True'}}
            """)


def test_tbf_arguments():
    assert network.tbf_args(1000) == ["tbf", "rate", "1000mbit", "burst", "262144", "latency", "50ms"]
    # a fast link gets 2 ms of burst (bytes): 40 Gb/s -> 10 MB
    assert network.tbf_args(40000)[4] == str(40000 * 1_000_000 // 8 // 500)


def test_nccl_token_expands_to_the_cache_and_is_validated(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTTRAIN_CACHE", str(tmp_path))
    sc = parse("""
        nodeOverrides:
          node-b:
            env: {LD_PRELOAD: "{nccl:2.28.9}/libnccl.so.2", NCCL_DEBUG: INFO}
            libraryPaths: ["{nccl:2.26.2.post1}"]
        expect: {status: 'True'}
        """)
    a, b = nodeplan.topology(sc)
    assert a.env == {} and a.library_paths == []
    assert b.env["LD_PRELOAD"] == f"{tmp_path}/nccl-2.28.9/nvidia/nccl/lib/libnccl.so.2"
    assert b.env["NCCL_DEBUG"] == "INFO"
    assert b.library_paths == [f"{tmp_path}/nccl-2.26.2.post1/nvidia/nccl/lib"]
    assert scn.required_nccl(sc) == ["2.26.2.post1", "2.28.9"]
    with pytest.raises(scn.ScenarioError, match=r"t.yaml:4: nodeOverrides.node-b.env: .*not an NCCL release"):
        parse("""
            nodeOverrides:
              node-b:
                env: {LD_PRELOAD: "{nccl:latest}/libnccl.so.2"}
            expect: {status: 'True'}
            """)


FAKE_PIP = """
import sys, pathlib
args = sys.argv[1:]
target = pathlib.Path(args[args.index("--target") + 1])
spec = args[-1]
log = pathlib.Path(__file__).with_suffix(".log")
log.write_text(log.read_text() + spec + "\\n" if log.exists() else spec + "\\n")
if spec.endswith("==2.28.9"):
    lib = target / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"ELF")
    sys.exit(0)
print("ERROR: No matching distribution found for " + spec, file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture
def fake_pip(tmp_path, monkeypatch):
    """sys.executable -m pip ... runs a stand-in that installs only 2.28.9."""
    fake = tmp_path / "fakepy.py"
    fake.write_text(FAKE_PIP)
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {fake} \"$@\"\n")  # drop "-m pip"
    wrapper.chmod(0o755)
    monkeypatch.setattr(altlibs.sys, "executable", str(wrapper))
    cache = tmp_path / "cache"
    monkeypatch.setenv("DISTTRAIN_CACHE", str(cache))
    return cache, fake.with_suffix(".log")


def test_ensure_nccl_installs_once(fake_pip):
    cache, log = fake_pip
    d = altlibs.ensure_nccl("2.28.9")
    assert d == cache / "nccl-2.28.9" / "nvidia" / "nccl" / "lib" and (d / "libnccl.so.2").is_file()
    assert altlibs.ensure_nccl("2.28.9") == d
    assert log.read_text().splitlines() == ["nvidia-nccl-cu12==2.28.9"]  # pip ran once
    assert sorted(p.name for p in cache.iterdir()) == ["nccl-2.28.9"]  # no temp dir left


def test_ensure_nccl_failure_is_clear_and_leaves_nothing(fake_pip):
    cache, _ = fake_pip
    with pytest.raises(altlibs.AltLibError) as e:
        altlibs.ensure_nccl("2.99.1")
    msg = str(e.value)
    assert "cannot install NCCL 2.99.1" in msg and "nvidia-nccl-cu12==2.99.1" in msg
    assert "No matching distribution" in msg and "PIP_INDEX_URL" in msg
    assert list(cache.iterdir()) == []


def test_ensure_for_scenario(fake_pip):
    sc = parse("""
        nodeOverrides:
          node-b: {env: {LD_PRELOAD: "{nccl:2.28.9}/libnccl.so.2"}}
        expect: {status: 'True'}
        """)
    said = []
    assert altlibs.ensure_for(sc, say=said.append) == [scn.nccl_dir("2.28.9")]
    assert said and "installing NCCL 2.28.9" in said[0]
    assert altlibs.ensure_for(parse("expect: {status: 'True'}\n")) == []


def _job(ifname, phase="Running"):
    return {"status": {"phase": phase, "rendezvous": {"socketIfname": ifname}, "conditions": [
        {"type": "NetworkValidated", "status": "True", "reason": "InterfaceSelected",
         "message": "eth1 (10.101.0.0/24) chosen on every node"}]}}


def test_check_socket_ifname():
    e = scn.Expect(condition="NetworkValidated", status="True", socketIfname="eth1", phase="Succeeded")
    assert scenariorun.check(_job("eth1", "Succeeded"), e, {}) == (True, "")
    verdict, why = scenariorun.check(_job("eth0", "Running"), e, {})
    assert verdict is False and "socketIfname is eth0, expected eth1" in why
    assert scenariorun.check(_job(None, "Running"), e, {})[0] is None  # not known yet
    assert scenariorun.check(_job(None, "Succeeded"), e, {})[0] is False
