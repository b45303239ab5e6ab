"""NetworkPolicies enforced for real (localcluster/cluster/netpol.py: kube-network-policies as a
DaemonSet on the real nodes): two pods on two nodes, on the pod network, and what a
default-deny ingress policy and an allow rule for the client's labels on one port do."""
from __future__ import annotations

import json
import time

import pytest

from localcluster.cluster import netpol
from localcluster.common.config import UTILITY_IMAGE

pytestmark = pytest.mark.e2e

OPEN, CLOSED = 7001, 7002  # the server listens on both; the allow rule names OPEN only

SERVER = r"""
import socket, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen()
    while True:
        c, _ = s.accept(); c.sendall(b"hi"); c.close()
for p in (%d, %d):
    threading.Thread(target=serve, args=(p,)).start()
""" % (OPEN, CLOSED)

# One TCP connect, 2 s at most: "open", "timeout" (dropped) or the error's name.
CONNECT = r"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).recv(2); print("open")
except socket.timeout:
    print("timeout")
except OSError as e:
    print(type(e).__name__)
"""


def _pod(ns: str, name: str, node: str, role: str, command: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"role": role}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": UTILITY_IMAGE, "command": command}]}}


def _policy(name: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
            "spec": spec}


def _running(cluster, ns: str, names: list[str], timeout: float = 60) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        pods = {p["metadata"]["name"]: p for p in json.loads(cluster.kubectl(
            "get", "pods", "-n", ns, "-o", "json").stdout)["items"]}
        if all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names):
            return pods
        assert time.monotonic() < deadline, {n: pods.get(n, {}).get("status") for n in names}
        time.sleep(0.3)


def _connect(cluster, ns: str, pod: str, ip: str, port: int) -> str:
    out = cluster.kubectl("exec", "-n", ns, pod, "--", "python", "-c", CONNECT, ip, str(port))
    return out.stdout.strip()


def _until(cluster, ns: str, pod: str, ip: str, port: int, want: str, timeout: float = 20) -> float:
    """Seconds until a connect from ``pod`` to ip:port says ``want`` (fails after ``timeout``)."""
    t0 = time.monotonic()
    while (got := _connect(cluster, ns, pod, ip, port)) != want:
        assert time.monotonic() - t0 < timeout, f"{pod} -> {ip}:{port}: {got}, expected {want}"
    return time.monotonic() - t0


def test_policies_are_enforced_between_pods_on_two_nodes(cluster, ns):
    netpol.ensure(say=lambda *_: None)
    pods = [_pod(ns, "server", "node-a", "server", ["python", "-c", SERVER]),
            _pod(ns, "client", "node-b", "client", ["sleep", "3600"]),
            _pod(ns, "intruder", "node-b", "intruder", ["sleep", "3600"])]
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(p) for p in pods))
    got = _running(cluster, ns, ["server", "client", "intruder"])
    sip = got["server"]["status"]["podIP"]
    assert sip != got["server"]["status"]["hostIP"] != got["client"]["status"]["hostIP"]
    _until(cluster, ns, "client", sip, OPEN, "open")  # no policy yet: the server is up

    netpol.apply_policies([_policy("default-deny-ingress", {"podSelector": {},
                                                            "policyTypes": ["Ingress"]})], ns)
    denied_after = _until(cluster, ns, "client", sip, OPEN, "timeout")

    netpol.apply_policies([_policy("allow-client", {
        "podSelector": {"matchLabels": {"role": "server"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                     "ports": [{"protocol": "TCP", "port": OPEN}]}]})], ns)
    allowed_after = _until(cluster, ns, "client", sip, OPEN, "open")
    assert _connect(cluster, ns, "client", sip, CLOSED) == "timeout"
    assert _connect(cluster, ns, "intruder", sip, OPEN) == "timeout"
    print(f"deny took effect after {denied_after:.1f}s, allow after {allowed_after:.1f}s")
