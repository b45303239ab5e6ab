"""Four ranks, each in its own network namespace, joined by a bridge in a fabric namespace.

Every rank namespace also has a decoy docker0 (172.17.0.1/16, the same on every "node",
kept up by a veth port) and an ``eth0`` on 10.250.0.0/24 that goes nowhere: NCCL
left alone would pick that eth0. The probe must choose the veth (named enp6s0 on two
nodes and enp4s0 on the others), reject docker0 as DuplicateAddress and eth0 as
Unreachable, and run a correct all-reduce. Traffic stays inside namespaces the test made.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
from probe_helpers import run_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary

pytestmark = pytest.mark.netns

N = 4


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True)


def have_netns() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.fixture
def fabric(request):
    if not have_netns():
        pytest.skip("needs root and iproute2 (network namespaces)")
    tag = f"dtjp-{uuid.uuid4().hex[:6]}"
    names = [f"{tag}-{i}" for i in range(N)]
    fab = f"{tag}-fabric"
    created = []

    def cleanup():
        for ns in reversed(created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    request.addfinalizer(cleanup)

    sh("ip", "netns", "add", fab)
    created.append(fab)
    sh("ip", "-n", fab, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", fab, "link", "set", "br0", "up")
    ifnames = {}
    for i, ns in enumerate(names):
        sh("ip", "netns", "add", ns)
        created.append(ns)
        nic = "enp6s0" if i < 2 else "enp4s0"
        ifnames[i] = nic
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        # The decoy eth0 first, so it has the lowest index (NCCL's default pick).
        # (veth pairs with both ends in the node: the kernel here has no dummy driver)
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0x")
        sh("ip", "-n", ns, "addr", "add", f"10.250.0.{i + 1}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0x", "up")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", fab, "link", "add", f"p{i}", "type", "veth", "peer", "name", nic,
           "netns", ns)
        sh("ip", "-n", fab, "link", "set", f"p{i}", "master", "br0")
        sh("ip", "-n", fab, "link", "set", f"p{i}", "up")
        sh("ip", "-n", ns, "addr", "add", f"10.200.0.{i + 1}/24", "dev", nic)
        sh("ip", "-n", ns, "link", "set", nic, "up")
        sh("ip", "-n", ns, "link", "add", "docker0", "type", "bridge")
        sh("ip", "-n", ns, "addr", "add", "172.17.0.1/16", "dev", "docker0")
        sh("ip", "-n", ns, "link", "add", "vethd0", "type", "veth", "peer", "name", "vethd0p")
        sh("ip", "-n", ns, "link", "set", "vethd0", "master", "docker0")
        sh("ip", "-n", ns, "link", "set", "vethd0", "up")
        sh("ip", "-n", ns, "link", "set", "vethd0p", "up")
        sh("ip", "-n", ns, "link", "set", "docker0", "up")
    return names, ifnames


def test_four_ranks_in_namespaces_choose_the_veth(fabric, tmp_path):
    names, ifnames = fabric
    envs = [{"RANK": str(i), "WORLD_SIZE": str(N), "MASTER_ADDR": "10.200.0.1",
             "MASTER_PORT": "29500", "NODE_NAME": f"node-{i}", "POD_NAME": f"probe-{i}",
             "HOST_IP": f"10.200.0.{i + 1}", "DISTTRAIN_PROBE_TIMEOUT_SECONDS": "50",
             "DISTTRAIN_PROBE_ITERATIONS": "5"} for i in range(N)]
    prefix = [["ip", "netns", "exec", ns] for ns in names]
    runs = run_ranks(envs, tmp_path, timeout=80, prefix=prefix)
    for run in runs:
        i = run.rank
        assert run.rc == 0, run.stdout[-3000:] + run.stderr[-3000:]
        rep = parse_report(run.report_text)
        assert rep.ok and rep.failure is None and rep.node == f"node-{i}"
        assert rep.chosen.ifname == ifnames[i]
        assert rep.chosen.addr == f"10.200.0.{i + 1}" and rep.chosen.subnet == "10.200.0.0/24"
        rej = {r.ifname: r for r in rep.rejected}
        assert rej["docker0"].reason == vocabulary.REJ_DUPLICATE_ADDRESS
        assert "172.17.0.1" in rej["docker0"].message
        assert rej["eth0"].reason == vocabulary.REJ_UNREACHABLE
        assert rej["lo"].reason == vocabulary.REJ_LOOPBACK
        assert rep.nccl_default_ifname == "eth0"
        assert vocabulary.NCCL_DEFAULT_DIFFERS in [w.reason for w in rep.warnings]
        if i:
            assert rep.master.route.iface == ifnames[i]
        a = rep.allreduce
        assert a.correct is True and a.bytes == 4 * 2**20
        assert a.busbw_gbps > 0
        assert a.busbw_gbps == pytest.approx(a.algbw_gbps * 1.5, rel=0.01)  # 2(n-1)/n, n=4
        assert len(run.report_text.encode()) <= 4096
        full = run.full
        ok_peers = {m["peer"] for m in full["mesh"] if m["r"] == "ok"}
        assert ok_peers == set(range(N)) - {i}
        # docker0 of a peer is this node's own docker0: never counted as reaching the peer.
        assert all(m["r"] != "ok" for m in full["mesh"] if m["addr"] == "172.17.0.1")


def test_peer_in_unreachable_namespace_is_reported(fabric, tmp_path):
    """Rank 3's link to the fabric is down: it cannot reach the master (MasterPortTimeout),
    and the others stop waiting at their rendezvous deadline naming rank 3."""
    names, _ = fabric
    fab = names[0].rsplit("-", 1)[0] + "-fabric"
    sh("ip", "-n", fab, "link", "set", "p3", "down")
    envs = [{"RANK": str(i), "WORLD_SIZE": str(N), "MASTER_ADDR": "10.200.0.1",
             "MASTER_PORT": "29500", "NODE_NAME": f"node-{i}",
             "DISTTRAIN_PROBE_TIMEOUT_SECONDS": "20", "DISTTRAIN_PROBE_ITERATIONS": "2"}
            for i in range(N)]
    runs = run_ranks(envs, tmp_path, timeout=40, prefix=[["ip", "netns", "exec", ns] for ns in names])
    reps = {r.rank: parse_report(r.report_text) for r in runs}
    for r in runs:
        assert r.rc == 1 and r.seconds < 20 + 3, (r.rank, r.seconds)
    assert reps[3].failure.reason == vocabulary.MASTER_PORT_TIMEOUT
    assert reps[3].failure.phase == "rendezvous"
    for i in range(3):
        assert reps[i].failure.reason == vocabulary.RENDEZVOUS_TIMEOUT
        assert "rank(s) 3 never arrived" in reps[i].failure.message


def test_lower_range_blocked_from_one_peer_that_is_no_ring_neighbour(fabric, tmp_path):
    """Issue 31: node-0's firewall drops new TCP from node-2 (not its ring neighbour) to the
    lower part of its ephemeral range. Every rank samples every peer's range, so the choice
    fails with EphemeralPortsBlocked naming node-0 and the pair, whichever port the mesh drew."""
    names, _ = fabric
    for rule in (["add", "table", "inet", "dtjp"],
                 ["add", "chain", "inet", "dtjp", "in", "{ type filter hook input priority 0 ; }"],
                 ["add", "rule", "inet", "dtjp", "in", "ip", "saddr", "10.200.0.3", "tcp", "dport",
                  "32768-44999", "ct", "state", "new", "drop"]):
        sh("ip", "netns", "exec", names[0], "nft", *rule)
    envs = [{"RANK": str(i), "WORLD_SIZE": str(N), "MASTER_ADDR": "10.200.0.1",
             "MASTER_PORT": "29500", "NODE_NAME": f"node-{i}", "POD_NAME": f"probe-{i}",
             "HOST_IP": f"10.200.0.{i + 1}", "DISTTRAIN_PROBE_TIMEOUT_SECONDS": "40",
             "DISTTRAIN_PROBE_ITERATIONS": "2"} for i in range(N)]
    runs = run_ranks(envs, tmp_path, timeout=70, prefix=[["ip", "netns", "exec", ns] for ns in names])
    for run in runs:
        rep = parse_report(run.report_text)
        assert not rep.ok and rep.failure is not None, (run.rank, run.stderr[-2000:])
        assert rep.failure.reason == vocabulary.EPHEMERAL_PORTS_BLOCKED, rep.failure.message
        assert rep.failure.message.startswith(
            "node-0: part of its ephemeral port range is blocked to node-2"), rep.failure.message
        assert "node-1:" not in rep.failure.message and "node-3:" not in rep.failure.message
