"""Cluster DNS: CoreDNS (built from its Go module) answers for Services and pods on the
kube-dns ClusterIP, asked from inside the nodes' network namespaces (and from a pod's own
namespace when pods have one)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from localcluster.common.config import DNS_NS, DNS_SERVICE_IP, NODE_NS_PREFIX, UTILITY_IMAGE
from localcluster.network import netns as network

pytestmark = pytest.mark.e2e


def _query(netns: str, name: str, qtype: str = "A") -> dict:
    p = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "localcluster.network.dns",
                        "query", name, "--type", qtype, "--server", DNS_SERVICE_IP],
                       capture_output=True, text=True, timeout=30)
    assert p.stdout.strip(), p.stderr
    out = json.loads(p.stdout)
    assert "error" not in out, f"query {name} from {netns}: {out['error']}"
    return out


def _addresses(r: dict) -> list[str]:
    return sorted(a["data"] for a in r["answers"] if a["type"] == "A")


def _wait_for(netns: str, name: str, want: list[str], timeout: float = 45) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = _query(netns, name)
        if r["rcode"] == "NOERROR" and _addresses(r) == want:
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} from {netns}: want {want}, last answer {r}")
        time.sleep(0.5)


def _pod_netns(ip: str) -> str | None:
    """The namespace that holds pod address ``ip`` when pods have their own network."""
    nodes = {f"{NODE_NS_PREFIX}node-{c}" for c in "abcdefghijklmnopqrstuvwxyz"}
    for ns in network.our_netns():
        if ns in nodes or ns == DNS_NS or ns.endswith("-fabric"):
            continue
        out = subprocess.run(["ip", "-n", ns, "-4", "-o", "addr", "show"], capture_output=True,
                             text=True).stdout
        if f" {ip}/" in out:
            return ns
    return None


@pytest.fixture
def headless(cluster, ns):
    """A headless Service `web` and a pod `web-0` (hostname web-0, subdomain web)."""
    docs = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                  "selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "web-0", "namespace": ns, "labels": {"app": "web"}},
         "spec": {"hostname": "web-0", "subdomain": "web", "restartPolicy": "Never",
                  "terminationGracePeriodSeconds": 1,
                  "containers": [{"name": "main", "image": UTILITY_IMAGE,
                                  "command": ["python", "-c", "import time; time.sleep(600)"]}]}},
    ]
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                           "items": docs}))
    deadline = time.monotonic() + 60
    while True:
        pod = json.loads(cluster.kubectl("get", "pod", "web-0", "-n", ns, "-o", "json").stdout)
        ip = pod.get("status", {}).get("podIP")
        if ip:
            return ns, ip
        assert time.monotonic() < deadline, f"web-0 got no podIP: {pod.get('status')}"
        time.sleep(0.3)


def test_kubernetes_and_kube_dns_services_resolve(cluster):
    node = f"{NODE_NS_PREFIX}{cluster.node_names[0]}"
    r = _query(node, "kubernetes.default.svc.cluster.local")
    assert r["rcode"] == "NOERROR" and _addresses(r) == ["10.96.0.1"], r
    r = _query(node, "kube-dns.kube-system.svc.cluster.local")
    assert _addresses(r) == [DNS_SERVICE_IP], r
    svc = json.loads(cluster.kubectl("get", "service", "kube-dns", "-n", "kube-system",
                                     "-o", "json").stdout)
    assert svc["spec"]["clusterIP"] == DNS_SERVICE_IP
    assert {(p["port"], p["protocol"]) for p in svc["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}


def test_headless_service_and_pod_hostname_resolve_from_every_node(cluster, headless):
    ns, ip = headless
    for node in cluster.node_names[:2]:
        netns = f"{NODE_NS_PREFIX}{node}"
        r = _wait_for(netns, f"web.{ns}.svc.cluster.local", [ip])
        assert all(a["ttl"] <= 5 for a in r["answers"]), r  # small TTLs: new pods show fast
        _wait_for(netns, f"web-0.web.{ns}.svc.cluster.local", [ip])
        r = _query(netns, f"wrong-name.{ns}.svc.cluster.local")
        assert r["rcode"] == "NXDOMAIN" and not r["answers"], r
        r = _query(netns, f"web-1.web.{ns}.svc.cluster.local")
        assert r["rcode"] == "NXDOMAIN", r


def test_pod_in_its_own_network_namespace_resolves(cluster, headless):
    """With pod networking the query leaves from the pod CIDR, so the answer must come
    back over the DNS namespace's route to that node's pod CIDR."""
    ns, ip = headless
    name = f"web-0.web.{ns}.svc.cluster.local"
    pod_ns = _pod_netns(ip)
    if pod_ns is not None:  # a node agent's pod: its namespace is named
        _wait_for(pod_ns, name, [ip])
        return
    # A real node's pod (containerd's namespace): ask from inside it, with its resolv.conf.
    cluster.kubectl("wait", "--for=condition=Ready", "pod/web-0", "-n", ns, "--timeout=60s", timeout=70)
    deadline = time.monotonic() + 45
    while True:
        p = cluster.kubectl("exec", "web-0", "-n", ns, "--", "python", "-c",
                            f"import socket; print(socket.gethostbyname({name!r}))", check=False)
        if p.returncode == 0 and p.stdout.strip() == ip:
            break
        assert time.monotonic() < deadline, f"{name} from inside web-0: {p.stdout} {p.stderr}"
        time.sleep(0.5)


def test_names_outside_the_cluster_do_not_exist(cluster):
    """No upstream: NXDOMAIN at once (a resolver says "name not known", not "try again")."""
    node = f"{NODE_NS_PREFIX}{cluster.node_names[0]}"
    for name in ("example.com", "web-0.wrong-subdomain", "node-b"):
        t = time.monotonic()
        r = _query(node, name)
        assert r["rcode"] == "NXDOMAIN" and not r["answers"], (name, r)
        assert time.monotonic() - t < 5
    r = _query(node, "11.0.100.10.in-addr.arpa", "PTR")  # a node address: no Service's
    assert r["rcode"] == "NXDOMAIN", r
