"""Cluster DNS (localcluster/network/dns.py): Corefile, address choice, the plan, DNS messages.
All pure; a real UDP round trip on the loopback checks :func:`dnsquery.query`."""
from __future__ import annotations

import socket
import struct
import textwrap
import threading

import pytest

from localcluster.common.config import DNS_SERVICE_IP, pod_cidr
from localcluster.network import dns, dnsplan, dnsquery, topology
from localcluster.scenarios import loader, nodeplan


def test_corefile_has_kubernetes_small_ttls_and_no_forwarding():
    text = dns.render_corefile("/s/dns/coredns.kubeconfig")
    assert text.startswith("cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {\n")
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in text
    assert "kubeconfig /s/dns/coredns.kubeconfig localcluster" in text
    assert "pods insecure" in text and "ttl 1\n" in text
    assert "cache 5 {" in text and "denial 9984 5 1" in text and "success 9984 5 1" in text
    assert "health 127.0.0.1:8080" in text and "ready 127.0.0.1:8181" in text
    for word in ("forward", "fallthrough", "proxy"):
        assert word not in text
    # everything else: NXDOMAIN from its own block
    rest = text[text.index("\n.:53 {"):]
    assert "template ANY ANY {" in rest and "rcode NXDOMAIN" in rest and "kubernetes" not in rest
    assert text.count("{") == text.count("}") == 5


def test_corefile_rejects_negative_ttl():
    with pytest.raises(ValueError):
        dns.render_corefile("k", record_ttl=-1)


@pytest.mark.parametrize("subnet,used,want", [
    ("10.100.0.0/24", [], "10.100.0.254"),
    ("10.100.0.0/24", ["10.100.0.254/24", "10.100.0.253"], "10.100.0.252"),
    ("192.168.7.16/28", ["192.168.7.30/28"], "192.168.7.29"),
    ("10.0.0.0/31", [], "10.0.0.1"),
])
def test_pick_address_highest_free_host(subnet, used, want):
    assert dnsplan.pick_address(subnet, used) == want


def test_pick_address_full_subnet_and_ipv6():
    with pytest.raises(ValueError, match="no free address"):
        dnsplan.pick_address("10.0.0.0/30", ["10.0.0.1", "10.0.0.2"])
    with pytest.raises(ValueError, match="IPv4"):
        dnsplan.pick_address("fd00::/64", [])


def test_plan_default_topology():
    p = dnsplan.plan(topology.default_topology(3))
    assert p.attachments == (dnsplan.Attachment("mgmt", ("10.100.0.254/24",)),)
    assert p.attachments[0].ifname == "eth-mgmt" and p.attachments[0].fabric_peer == "mgmt-dns"
    assert p.gateways == {"node-a": "10.100.0.254", "node-b": "10.100.0.254",
                          "node-c": "10.100.0.254"}
    assert p.pod_routes == {"node-a": (pod_cidr(0), "10.100.0.11"),
                            "node-b": (pod_cidr(1), "10.100.0.12"),
                            "node-c": (pod_cidr(2), "10.100.0.13")}
    assert dnsplan.Plan.from_json(p.to_json()) == p


def test_plan_follows_internal_ip_segment_and_avoids_used_addresses():
    sc = loader.parse(textwrap.dedent("""
        description: InternalIP on a custom segment; node-b takes the last host
        nodes: 2
        segments:
          fast: {subnet: 10.50.0.0/24}
          data: {subnet: 10.101.0.0/24}
        defaults:
          nics:
            - {name: ens1, segment: fast}
            - {name: eth1, segment: data}
        nodeOverrides:
          node-b:
            nics:
              - {name: ens1, segment: fast, addresses: [10.50.0.254/24]}
              - {name: eth1, segment: data}
        expect: {status: "True", phase: Succeeded}
        """), "t.yaml")
    p = dnsplan.plan(nodeplan.topology(sc))
    assert p.attachments == (dnsplan.Attachment("fast", ("10.50.0.253/24",)),)
    assert set(p.gateways.values()) == {"10.50.0.253"}
    assert p.pod_routes["node-b"] == (pod_cidr(1), "10.50.0.254")


def test_plan_two_segments_when_internal_ips_differ():
    topos = topology.default_topology(2)
    # node-b's first NIC on the data segment: its InternalIP is there
    b = topos[1]
    nics = [ln for ln in b.links if ln.segment]
    b.links = [ln for ln in b.links if not ln.segment] + [nics[1], nics[0]]
    b.internal_ip = nics[1].addresses[0].split("/")[0]
    p = dnsplan.plan(topos)
    assert [a.segment for a in p.attachments] == ["mgmt", "data"]
    assert p.gateways == {"node-a": "10.100.0.254", "node-b": "10.101.0.254"}


def test_plan_one_segment_per_subnet_so_dns_never_has_two_nics_on_one():
    """two-nics-one-subnet: node-a's InternalIP is on an isolated segment that shares the
    management subnet. DNS on both would answer node-b by the isolated NIC (seen in CI:
    node-b could not resolve). It joins the segment with more nodes only; node-a routes to
    that address, unreachable from its isolated NIC, as on a real node."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[4]
    sc = loader.load(str(root / "scenarios" / "two-nics-one-subnet.yaml"))
    p = dnsplan.plan(nodeplan.topology(sc))
    assert [a.segment for a in p.attachments] == ["mgmt"]
    assert p.gateways == {"node-a": "10.100.0.254", "node-b": "10.100.0.254"}


def test_plan_internal_ip_on_no_nic():
    topos = topology.default_topology(1)
    topos[0].internal_ip = "192.0.2.1"
    with pytest.raises(ValueError, match="on none of its NICs"):
        dnsplan.plan(topos)


def test_build_query_wire_format():
    q = dnsquery.build_query("web.default.svc.cluster.local.", "A", qid=0x1234)
    assert q[:12] == struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    assert q[12:] == (b"\x03web\x07default\x03svc\x07cluster\x05local\x00"
                      + struct.pack("!HH", 1, 1))
    with pytest.raises(ValueError):
        dnsquery.build_query("a..b")
    with pytest.raises(ValueError):
        dnsquery.build_query("x" * 64 + ".local")
    with pytest.raises(ValueError):
        dnsquery.build_query("a.local", "BOGUS")


def _response(query: bytes, rcode: int = 0, answers: list[tuple[int, bytes]] = ()) -> bytes:
    qid = struct.unpack_from("!H", query)[0]
    out = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, len(answers), 0, 0) + query[12:]
    for rtype, rdata in answers:  # owner name: a pointer to the question (offset 12)
        out += b"\xc0\x0c" + struct.pack("!HHIH", rtype, 1, 1, len(rdata)) + rdata
    return out


def test_parse_response_a_srv_ptr_and_compression():
    q = dnsquery.build_query("web.ns.svc.cluster.local", "A", qid=7)
    srv = struct.pack("!HHH", 0, 100, 80) + b"\x05web-0\xc0\x0c"
    r = dnsquery.parse_response(_response(q, 0, [(1, socket.inet_aton("10.244.0.5")),
                                            (33, srv), (12, b"\xc0\x0c"),
                                            (28, socket.inet_pton(socket.AF_INET6, "fd00::1"))]))
    assert r["id"] == 7 and r["rcode"] == "NOERROR" and not r["truncated"]
    assert [a["type"] for a in r["answers"]] == ["A", "SRV", "PTR", "AAAA"]
    assert r["answers"][0] == {"name": "web.ns.svc.cluster.local.", "type": "A", "ttl": 1,
                               "data": "10.244.0.5"}
    assert r["answers"][1]["data"] == "0 100 80 web-0.web.ns.svc.cluster.local."
    assert r["answers"][2]["data"] == "web.ns.svc.cluster.local."
    assert r["answers"][3]["data"] == "fd00::1"
    assert dnsquery.parse_response(_response(q, 3))["rcode"] == "NXDOMAIN"


def test_parse_response_rejects_garbage():
    with pytest.raises(ValueError):
        dnsquery.parse_response(b"\x00\x01")
    q = dnsquery.build_query("a.local")
    with pytest.raises(ValueError):
        dnsquery.parse_response(_response(q, 0, [(1, b"\x01\x02\x03\x04")])[:-2])
    loop = struct.pack("!HHHHHH", 1, 0x8180, 1, 0, 0, 0) + b"\xc0\x0c"
    with pytest.raises(ValueError):
        dnsquery.parse_response(loop)


def test_query_round_trip_on_loopback():
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    srv.settimeout(5)

    def serve():
        data, peer = srv.recvfrom(512)
        srv.sendto(b"\xff\xff" + b"junk", peer)  # another query's id: ignored
        srv.sendto(_response(data, 0, [(1, socket.inet_aton(DNS_SERVICE_IP))]), peer)

    t = threading.Thread(target=serve)
    t.start()
    try:
        r = dnsquery.query("kube-dns.kube-system.svc.cluster.local", server="127.0.0.1",
                      port=srv.getsockname()[1], timeout=5)
    finally:
        t.join()
        srv.close()
    assert r["rcode"] == "NOERROR" and r["answers"][0]["data"] == DNS_SERVICE_IP


def test_query_times_out():
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(TimeoutError):
            dnsquery.query("x.local", server="127.0.0.1", port=srv.getsockname()[1], timeout=0.2)
    finally:
        srv.close()
