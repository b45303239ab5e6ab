"""The simulated nodes can reach each other and nothing else.

From inside a node's network namespace, every address of the machine's real interfaces
(and public/private addresses) has no route: `ip route get` fails and a TCP connect fails
at once with ENETUNREACH, so no packet ever leaves. The peer node's NICs are reachable.
The cluster DNS namespace is held to the same rule, and its 127.0.0.1 is its own (the
apiserver on the root namespace's loopback is not there).
"""
from __future__ import annotations

import ipaddress
import json
import subprocess
import sys

import pytest

from localcluster.common.config import APISERVER_PORT, DNS_NS, NODE_NS_PREFIX, node_spec_by_name

pytestmark = pytest.mark.e2e

OUTSIDE = ["1.1.1.1", "8.8.8.8", "10.0.0.1", "192.168.1.1", "172.16.0.1", "2606:4700::1111"]

PROBE = r"""
import errno, json, socket, sys, time
out = {}
for addr in json.loads(sys.argv[1]):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    t = time.monotonic()
    try:
        s.connect((addr, 443))
        out[addr] = ["connected", 0.0]
    except OSError as e:
        out[addr] = [errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__,
                     time.monotonic() - t]
    finally:
        s.close()
print(json.dumps(out))
"""


def _root_addresses() -> list[str]:
    out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    addrs = []
    for link in json.loads(out):
        for a in link.get("addr_info", []):
            ip = ipaddress.ip_address(a["local"])
            if ip.is_loopback or ip.is_link_local:
                continue
            addrs.append(str(ip))
    return addrs


def _in_ns(ns: str, *cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def targets(cluster) -> list[str]:
    return _root_addresses() + OUTSIDE


def test_root_namespace_has_no_cluster_interface(cluster):
    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    assert "10.100." not in out and "10.101." not in out, out


@pytest.mark.parametrize("node_index", [0, 1])
def test_no_default_route_in_node(cluster, node_index):
    ns = f"{NODE_NS_PREFIX}{cluster.node_names[node_index]}"
    for fam in ("-4", "-6"):
        out = subprocess.run(["ip", "-n", ns, fam, "route", "show", "default"],
                             capture_output=True, text=True, check=True).stdout
        assert out.strip() == "", f"{ns} has a default route: {out}"


def test_outside_addresses_have_no_route(cluster, targets):
    ns = f"{NODE_NS_PREFIX}{cluster.node_names[0]}"
    assert targets, "expected at least the public test addresses"
    for addr in targets:
        p = _in_ns(ns, "ip", "route", "get", addr)
        assert p.returncode != 0, f"{ns} has a route to {addr}: {p.stdout}"
        assert "unreachable" in p.stderr.lower(), p.stderr


def test_outside_addresses_connect_fails_immediately(cluster, targets):
    ns = f"{NODE_NS_PREFIX}{cluster.node_names[0]}"
    p = _in_ns(ns, sys.executable, "-c", PROBE, json.dumps(targets), timeout=60)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    for addr in targets:
        err, elapsed = res[addr]
        assert err == "ENETUNREACH", f"connect {addr} from {ns}: {err}"
        assert elapsed < 0.5, f"connect {addr} took {elapsed:.2f}s (a packet left?)"


def test_peer_node_nics_reachable(cluster):
    a, b = (f"{NODE_NS_PREFIX}{n}" for n in cluster.node_names[:2])
    server = subprocess.Popen(
        ["ip", "netns", "exec", b, sys.executable, "-c",
         "import socket\n"
         "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.bind(('0.0.0.0', 29999)); s.listen(4); print('ready', flush=True)\n"
         "for _ in range(2):\n"
         "    c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        peer = node_spec_by_name(cluster.node_names[1])
        peers = {"eth0": peer.mgmt_ip, "eth1": peer.data_ip}
        for nic, ip in peers.items():
            p = _in_ns(a, sys.executable, "-c",
                       "import socket,sys; s=socket.create_connection((sys.argv[1], 29999), 3);"
                       "print(s.recv(64).decode())", ip, timeout=30)
            assert p.returncode == 0, f"{a} -> {b} {nic} {ip}: {p.stderr}"
            # the source address is a.'s NIC on the same subnet
            assert p.stdout.strip().rsplit(".", 1)[0] == ip.rsplit(".", 1)[0], p.stdout
        server.wait(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_decoy_docker0_listed_first_with_same_address(cluster):
    seen = []
    for n in cluster.node_names[:2]:
        out = json.loads(subprocess.run(["ip", "-n", f"{NODE_NS_PREFIX}{n}", "-j", "addr", "show"],
                                        capture_output=True, text=True, check=True).stdout)
        names = [link["ifname"] for link in out if link["ifname"] in ("docker0", "eth0", "eth1")]
        assert names == ["docker0", "eth0", "eth1"], names
        d = next(link for link in out if link["ifname"] == "docker0")
        assert "UP" in d["flags"] and d.get("operstate") == "UP", d
        seen.append([a["local"] for a in d["addr_info"] if a["family"] == "inet"])
    assert seen[0] == seen[1] == ["172.17.0.1"]


def test_dns_namespace_has_no_default_route(cluster):
    for fam in ("-4", "-6"):
        out = subprocess.run(["ip", "-n", DNS_NS, fam, "route", "show", "default"],
                             capture_output=True, text=True, check=True).stdout
        assert out.strip() == "", f"{DNS_NS} has a default route: {out}"


def test_dns_namespace_cannot_reach_outside(cluster, targets):
    for addr in targets:
        p = _in_ns(DNS_NS, "ip", "route", "get", addr)
        assert p.returncode != 0, f"{DNS_NS} has a route to {addr}: {p.stdout}"
    p = _in_ns(DNS_NS, sys.executable, "-c", PROBE, json.dumps(targets), timeout=60)
    assert p.returncode == 0, p.stderr
    for addr, (err, elapsed) in json.loads(p.stdout).items():
        assert err == "ENETUNREACH", f"connect {addr} from {DNS_NS}: {err}"
        assert elapsed < 0.5, f"connect {addr} took {elapsed:.2f}s (a packet left?)"


def test_dns_namespace_loopback_is_its_own(cluster):
    p = _in_ns(DNS_NS, sys.executable, "-c",
               "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3)",
               str(APISERVER_PORT), timeout=30)
    assert p.returncode != 0 and "ConnectionRefused" in p.stderr, p.stderr
