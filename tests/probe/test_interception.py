"""Connections a proxy intercepts (a service-mesh sidecar): accepted, then closed before the
peer's probe answers. The beacon's reply (pure sockets on loopback), the dial outcome, and
two ranks in network namespaces where rank 1's outbound TCP is redirected to a local proxy
the way Istio's init container does it (nat OUTPUT, REDIRECT to 15001), so the TCPStore
handshake gets ``got 0 bytes`` (kubeflow/trainer#2794)."""
from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from probe_helpers import run_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary
from disttrain_probe.phases import connectivity, masterstore

TOKEN = b"disttrain-beacon-xyz\n"


def server(mode: str) -> int:
    """A one-thread TCP server on loopback: ``token`` sends TOKEN, ``close`` accepts and
    closes, ``reset`` accepts and resets (SO_LINGER 0), ``junk`` sends other bytes."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)

    def serve() -> None:
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            if mode == "token":
                c.sendall(TOKEN)
            elif mode == "junk":
                c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            elif mode == "reset":
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return s.getsockname()[1]


@pytest.mark.parametrize("mode,want", [("token", "token"), ("close", "closed"), ("reset", "closed"),
                                       ("junk", "other")])
def test_the_beacons_reply_tells_rank_0_from_an_intercepting_proxy(mode, want):
    port = server(mode)
    for _ in range(20):  # a reset may reach connect() itself: the same answer either way
        assert masterstore.beacon_reply("127.0.0.1", port, TOKEN, 2.0) == want
        assert masterstore.closed_on_connect("127.0.0.1", port, 0.5) is (want == "closed")


def test_no_connection_is_none():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert masterstore.beacon_reply("127.0.0.1", port, TOKEN, 1.0) == "none"


@pytest.mark.parametrize("mode,want", [("close", "closed"), ("reset", "closed"), ("junk", "wrong")])
def test_a_mesh_dial_accepted_and_closed_is_closed_not_a_wrong_host(mode, want):
    got = connectivity.dial("127.0.0.1", server(mode), 1, "nonce", 2.0)
    assert got["r"] == want


PROXY = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 15001)); s.listen(64); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.close()   # no upstream: accept, then close (Envoy without a route)
"""


@pytest.fixture
def sidecar(request):
    """Two namespaces on one veth pair (10.77.0.1 rank 0, 10.77.0.2 rank 1); in rank 1's,
    nat OUTPUT redirects TCP to 10.77.0.1 (all ports but those in ``request.param``) to a
    proxy on 15001 that accepts and closes."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("needs root, iproute2 and nft (network namespaces)")
    tag = f"dtji-{uuid.uuid4().hex[:6]}"
    ns = [f"{tag}-0", f"{tag}-1"]
    procs: list[subprocess.Popen] = []

    def cleanup():
        for p in procs:
            p.kill()
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
    request.addfinalizer(cleanup)
    for n in ns:
        subprocess.run(["ip", "netns", "add", n], check=True)
        subprocess.run(["ip", "-n", n, "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "-n", ns[0], "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
                    "netns", ns[1]], check=True)
    for i, n in enumerate(ns):
        subprocess.run(["ip", "-n", n, "addr", "add", f"10.77.0.{i + 1}/24", "dev", "eth0"], check=True)
        subprocess.run(["ip", "-n", n, "link", "set", "eth0", "up"], check=True)
    excluded = ", ".join(str(p) for p in (15001, *request.param))
    rules = (f"table ip mesh {{\n chain output {{\n  type nat hook output priority -100;\n"
             f"  ip daddr 10.77.0.1 tcp dport != {{ {excluded} }} redirect to :15001\n }}\n}}\n")
    subprocess.run(["ip", "netns", "exec", ns[1], "nft", "-f", "-"], input=rules, text=True, check=True)
    p = subprocess.Popen(["ip", "netns", "exec", ns[1], sys.executable, "-c", PROXY],
                         stdout=subprocess.PIPE, text=True)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return ns


def run_pair(ns, tmp_path, timeout_seconds: str = "25"):
    envs = [{"RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": "10.77.0.1", "MASTER_PORT": "29500",
             "NODE_NAME": f"node-{'ab'[i]}", "DISTTRAIN_PROBE_BEACON_PORT": "29501",
             "DISTTRAIN_PROBE_TIMEOUT_SECONDS": timeout_seconds, "DISTTRAIN_PROBE_ITERATIONS": "3"}
            for i in range(2)]
    return run_ranks(envs, tmp_path, timeout=int(timeout_seconds) + 30,
                     prefix=[["ip", "netns", "exec", n] for n in ns])


@pytest.mark.netns
@pytest.mark.parametrize("sidecar", [()], indirect=True)
def test_a_sidecar_intercepting_every_port_is_named_not_another_service(sidecar, tmp_path):
    t0 = time.monotonic()
    runs = run_pair(sidecar, tmp_path)
    rep = parse_report(runs[1].report_text)
    assert rep.failure is not None, runs[1].stderr[-2000:]
    assert rep.failure.reason == vocabulary.CONNECTION_INTERCEPTED, rep.failure.message
    msg = rep.failure.message
    assert "node-b (rank 1): connections to 10.77.0.1 (MASTER_PORT 29500 and port 29501)" in msg
    assert "sidecar" in msg and "another service" not in msg and "firewall" not in msg
    assert len(msg) <= 400 and time.monotonic() - t0 < 60
    # told within seconds, not at the rendezvous deadline (run_ranks waits for rank 0 first)
    assert rep.timings["total"] < 10, rep.timings


@pytest.mark.netns
@pytest.mark.parametrize("sidecar", [(29500, 29501, "32768-60999")], indirect=True)
def test_a_sidecar_that_excludes_the_jobs_ports_validates(sidecar, tmp_path):
    """The proxy still captures every other port (Istio's excludeOutboundPorts)."""
    for run in run_pair(sidecar, tmp_path, timeout_seconds="40"):
        rep = parse_report(run.report_text)
        assert run.rc == 0 and rep.ok, (rep.failure, run.stderr[-2000:])


@pytest.mark.netns
@pytest.mark.parametrize("sidecar", [(29500, 29501)], indirect=True)
def test_a_sidecar_that_excludes_only_the_master_port_is_named_at_the_mesh(sidecar, tmp_path):
    """The rendezvous works; every dial to an ephemeral port is intercepted: named as such in
    the connectivity choice (NetworkValidated), not as a firewall on the ephemeral range."""
    runs = run_pair(sidecar, tmp_path, timeout_seconds="40")
    reps = [parse_report(r.report_text) for r in runs]
    assert all(r.failure is not None for r in reps), [r.stderr[-1500:] for r in runs]
    assert {r.failure.reason for r in reps} == {vocabulary.CONNECTION_INTERCEPTED}, [r.failure for r in reps]
    assert vocabulary.check_of(reps[0].failure.reason, reps[0].failure.phase) == vocabulary.NETWORK_VALIDATED
    msg = reps[0].failure.message
    assert msg.startswith("node-b: connections to the ephemeral ports of node-a on eth0"), msg
    assert "accepted and then closed" in msg and "firewall" not in msg and len(msg) <= 400
