"""Pod networking on the proving ground (localcluster/network/podnet.py): per-pod namespaces on the
node's cni0, pod CIDRs routed between nodes, kubelet's /etc/hosts and resolv.conf, safe
sysctls, sandbox teardown."""
from __future__ import annotations

import ipaddress
import json
import subprocess
import time

import pytest

from localcluster.common.config import DNS_SERVICE_IP, UTILITY_IMAGE, node_spec_by_name, pod_cidr
from localcluster.network import podnet
from localcluster.network.netns import list_netns

pytestmark = pytest.mark.e2e

SERVER = r"""
import json, socket
s = socket.socket(); s.bind(("0.0.0.0", 7777)); s.listen()
c, peer = s.accept(); c.sendall(b"hi"); c.close()
print(json.dumps({"peer": peer[0], "hostname": socket.gethostname(),
                  "hosts": open("/etc/hosts").read(), "resolv": open("/etc/resolv.conf").read(),
                  "range": open("/proc/sys/net/ipv4/ip_local_port_range").read().split()}))
"""

CLIENT = r"""
import json, os, socket, time
deadline = time.time() + 30
while True:
    try:
        s = socket.create_connection((os.environ["PEER"], 7777), timeout=2); break
    except OSError:
        if time.time() > deadline: raise
        time.sleep(0.2)
print(json.dumps({"got": s.recv(8).decode(), "sport": s.getsockname()[1]}))
"""


def _pod(ns: str, name: str, node: str, code: str, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": UTILITY_IMAGE,
                                     "command": ["python", "-c", code]}], **spec}}


def _wait_pod(cluster, ns: str, name: str, pred, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    pod = None
    while time.monotonic() < deadline:
        p = cluster.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
        pod = json.loads(p.stdout) if p.returncode == 0 else None
        if pod is not None and pred(pod):
            return pod
        time.sleep(0.3)
    raise AssertionError(f"pod {name}: timed out; last status {json.dumps((pod or {}).get('status'))}")


def _phase(*phases):
    return lambda p: p.get("status", {}).get("phase") in phases


def _logs_json(cluster, ns: str, name: str) -> dict:
    return json.loads(cluster.kubectl("logs", name, "-n", ns).stdout.strip().splitlines()[-1])


def test_pods_on_two_nodes_talk_by_pod_ip_without_nat(cluster, ns):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(
        ns, "server", "node-a", SERVER, hostname="rank0", subdomain="workers",
        securityContext={"sysctls": [{"name": "net.ipv4.ip_local_port_range",
                                      "value": "60000 61000"}]})))
    server = _wait_pod(cluster, ns, "server", lambda p: p.get("status", {}).get("podIP"))
    sip = server["status"]["podIP"]
    assert ipaddress.ip_address(sip) in ipaddress.ip_network(pod_cidr(0))
    assert server["status"]["hostIP"] != sip
    client = _pod(ns, "client", "node-b", CLIENT,
                  securityContext={"sysctls": [{"name": "net.ipv4.ip_local_port_range",
                                                "value": "40000 40100"}]})
    client["spec"]["containers"][0]["env"] = [{"name": "PEER", "value": sip}]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(client))
    server = _wait_pod(cluster, ns, "server", _phase("Succeeded", "Failed"))
    client = _wait_pod(cluster, ns, "client", _phase("Succeeded", "Failed"))
    assert server["status"]["phase"] == client["status"]["phase"] == "Succeeded"
    cip = client["status"]["podIP"]
    assert ipaddress.ip_address(cip) in ipaddress.ip_network(pod_cidr(1))
    s, c = _logs_json(cluster, ns, "server"), _logs_json(cluster, ns, "client")
    assert c["got"] == "hi"
    assert s["peer"] == cip, "the server must see the client's pod IP (routed, not NATed)"
    assert 40000 <= c["sport"] <= 40100, "the client's ephemeral port comes from its sysctl"
    assert s["range"] == ["60000", "61000"]
    # kubelet's hostname, /etc/hosts (FQDN from hostname + subdomain) and resolv.conf
    assert s["hostname"] == "rank0"
    assert f"{sip}\trank0.workers.{ns}.svc.cluster.local\trank0" in s["hosts"]
    assert f"nameserver {DNS_SERVICE_IP}" in s["resolv"]
    assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in s["resolv"]


def test_unsafe_sysctl_fails_the_pod_as_kubelet_does(cluster, ns):
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(
        ns, "unsafe", "node-a", "print(1)",
        securityContext={"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]})))
    pod = _wait_pod(cluster, ns, "unsafe", _phase("Failed", "Succeeded"))
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "SysctlForbidden"
    assert "net.core.somaxconn" in pod["status"]["message"]


def test_net_sysctl_with_host_network_is_refused_at_admission(cluster, ns):
    p = cluster.kubectl("apply", "-f", "-", check=False, input=json.dumps(_pod(
        ns, "hostnet", "node-a", "print(1)", hostNetwork=True,
        securityContext={"sysctls": [{"name": "net.ipv4.ip_local_port_range",
                                      "value": "60000 61000"}]})))
    assert p.returncode != 0 and "hostNetwork" in p.stderr


def _bridge_ports(netns: str) -> set[str]:
    """The veths plugged into the node's pod bridge (one per pod on the pod network)."""
    out = subprocess.run(["ip", "-n", netns, "-j", "link", "show", "master", podnet.BRIDGE],
                         capture_output=True, text=True).stdout
    return {x["ifname"] for x in json.loads(out or "[]")}


def test_deleting_a_pod_removes_its_network_namespace(cluster, ns):
    """The pod's sandbox network goes with it: its veth leaves the node's bridge, and on the
    node agent its named namespace is deleted (a real node's is containerd's, in the node's
    own mount namespace)."""
    node_ns = node_spec_by_name("node-b").netns
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(
        ns, "sleeper", "node-b", "import time; time.sleep(300)")))
    pod = _wait_pod(cluster, ns, "sleeper", _phase("Running"))
    running = _bridge_ports(node_ns)
    assert running, "no veth on the pod bridge while the pod runs"
    pod_ns = f"{node_ns}-p{pod['status']['podIP'].rsplit('.', 1)[1]}"
    agent = pod_ns in list_netns()
    cluster.kubectl("delete", "pod", "sleeper", "-n", ns, "--wait=true", timeout=60)
    deadline = time.monotonic() + 15
    while (len(_bridge_ports(node_ns)) >= len(running) or (agent and pod_ns in list_netns())) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_bridge_ports(node_ns)) == len(running) - 1
    assert pod_ns not in list_netns()
