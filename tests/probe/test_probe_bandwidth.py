"""Two ranks in network namespaces with two networks whose veths both report 10000 Mb/s:
``eth0`` (which carries HOST_IP and the route to the master, so it would win a tie) is
rate-limited with a tbf qdisc on both veth ends, ``eth1`` is not. The probe must time a
transfer over each, choose eth1 by measured throughput, report the Mb/s per interface
and say why eth0 lost. Traffic stays inside namespaces the test made.
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

SLOW_MBIT = 300


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True)


@pytest.fixture
def two_networks(request):
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root, iproute2 and tc (network namespaces, qdiscs)")
    tag = f"dtjp-{uuid.uuid4().hex[:6]}"
    names = [f"{tag}-{i}" for i in range(2)]
    fab = f"{tag}-fabric"
    created = []

    def cleanup():
        for ns in reversed(created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    request.addfinalizer(cleanup)
    sh("ip", "netns", "add", fab)
    created.append(fab)
    for br in ("br0", "br1"):
        sh("ip", "-n", fab, "link", "add", br, "type", "bridge")
        sh("ip", "-n", fab, "link", "set", br, "up")
    for i, ns in enumerate(names):
        sh("ip", "netns", "add", ns)
        created.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        for k, (nic, subnet) in enumerate((("eth0", "10.210.0"), ("eth1", "10.211.0"))):
            port = f"p{k}n{i}"
            sh("ip", "-n", fab, "link", "add", port, "type", "veth", "peer", "name", nic, "netns", ns)
            sh("ip", "-n", fab, "link", "set", port, "master", f"br{k}")
            sh("ip", "-n", fab, "link", "set", port, "up")
            sh("ip", "-n", ns, "addr", "add", f"{subnet}.{i + 1}/24", "dev", nic)
            sh("ip", "-n", ns, "link", "set", nic, "up")
            if nic == "eth0":
                for where, dev in ((fab, port), (ns, nic)):
                    sh("tc", "-n", where, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                       f"{SLOW_MBIT}mbit", "burst", "262144", "latency", "50ms")
    return names


def test_faster_network_chosen_by_measurement(two_networks, tmp_path):
    envs = [{"RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": "10.210.0.1", "MASTER_PORT": "29500",
             "NODE_NAME": f"node-{i}", "HOST_IP": f"10.210.0.{i + 1}",
             "DISTTRAIN_PROBE_TIMEOUT_SECONDS": "50", "DISTTRAIN_PROBE_ITERATIONS": "3"}
            for i in range(2)]
    runs = run_ranks(envs, tmp_path, timeout=80,
                     prefix=[["ip", "netns", "exec", ns] for ns in two_networks])
    for run in runs:
        assert run.rc == 0, run.stdout[-3000:] + run.stderr[-3000:]
        rep = parse_report(run.report_text)
        assert rep.chosen.ifname == "eth1" and rep.chosen.subnet == "10.211.0.0/24"
        ifs = {i.name: i for i in rep.interfaces}
        assert ifs["eth0"].speed_mbps == ifs["eth1"].speed_mbps  # the kernel cannot tell them apart
        slow, fast = ifs["eth0"].measured_mbps, ifs["eth1"].measured_mbps
        assert slow is not None and fast is not None
        assert slow < SLOW_MBIT * 1.3 and fast > slow * 1.5, (slow, fast)
        assert ifs["lo"].measured_mbps is None
        lost = next(r for r in rep.rejected if r.ifname == "eth0")
        assert lost.reason == vocabulary.REJ_NOT_PREFERRED
        assert "faster by measurement" in lost.message and "Mb/s measured" in lost.message
        # every rank computed the same network-level numbers
        assert (slow, fast) == tuple(
            {i.name: i.measured_mbps for i in parse_report(runs[0].report_text).interfaces}[n]
            for n in ("eth0", "eth1"))
        assert len(run.report_text.encode()) <= 4096
