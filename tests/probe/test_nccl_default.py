"""NCCL's own interface choice (ncclGetUniqueId with NCCL_DEBUG=INFO, no GPU) against the
probe's re-implemented rule (the fallback when no libnccl is loaded), on every scenario's
node interfaces: for each scenario in scenarios/, node-a's interfaces (decoy bridges
first, then its NICs, then the pod bridge cni0 every node agent adds) are built in a
scratch network namespace, and both must name the same interface; NCCL must also take an
explicit NCCL_SOCKET_IFNAME=<the probe's choice> there."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from localcluster.network import topology
from localcluster.scenarios import loader, nodeplan

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
ASK = ("import json, sys; from disttrain_probe.phases import inventory, interfaces, ncclcheck; "
       "ifs = inventory.list_interfaces(); lib = sys.argv[1]; "
       "rule = interfaces.nccl_default(ifs); "
       "print(json.dumps({'rule': rule, 'nccl': ncclcheck.bootstrap_interface(lib), "
       "'with': ncclcheck.bootstrap_interface(lib, '=' + rule) if rule else None, "
       "'names': [i['name'] for i in ifs]}))")


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True)


def libnccl() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; from disttrain_probe.phases import ncclcheck; "
                          "print(ncclcheck.loaded_library() or '')"], capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def lib():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (network namespaces)")
    path = libnccl()
    if not path:
        pytest.skip("torch has no libnccl here (CPU-only build): the rule is all there is")
    return path


def build(ns: str, fab: str, topo: topology.NodeTopology) -> None:
    """The node's links as network/netns.py makes them: decoy bridges (kept up by a veth port)
    first, NICs as veths whose other end sits in ``fab``, then cni0 (the pod bridge)."""
    sh("ip", "netns", "add", ns)
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    for k, ln in enumerate(x for x in topo.links if x.segment is None):
        sh("ip", "-n", ns, "link", "add", ln.name, "type", "bridge")
        for a in ln.addresses:
            sh("ip", "-n", ns, "addr", "add", a, "dev", ln.name)
        port = f"vd{k}"
        sh("ip", "-n", ns, "link", "add", port, "type", "veth", "peer", "name", port + "p")
        sh("ip", "-n", ns, "link", "set", port, "master", ln.name)
        for dev in (port, port + "p", ln.name):
            sh("ip", "-n", ns, "link", "set", dev, "up")
    for k, ln in enumerate(x for x in topo.links if x.segment is not None):
        peer = f"{ns[-6:]}f{k}"
        sh("ip", "-n", fab, "link", "add", peer, "type", "veth", "peer", "name", ln.name, "netns", ns)
        for a in ln.addresses:
            sh("ip", "-n", ns, "addr", "add", a, *(["nodad"] if ":" in a else []), "dev", ln.name)
        sh("ip", "-n", fab, "link", "set", peer, "up")
        sh("ip", "-n", ns, "link", "set", ln.name, "up")
    sh("ip", "-n", ns, "link", "add", "cni0", "type", "bridge")
    sh("ip", "-n", ns, "addr", "add", "10.244.0.1/24", "dev", "cni0")
    sh("ip", "-n", ns, "link", "set", "cni0", "up")


@pytest.mark.parametrize("name", loader.all_names())
def test_nccl_and_the_rule_agree_on_every_scenario(lib, name):
    topo = nodeplan.topology(loader.load(name))[0]
    tag = uuid.uuid4().hex[:6]
    ns, fab = f"dtjp-{tag}-n", f"dtjp-{tag}-f"
    sh("ip", "netns", "add", fab)
    try:
        build(ns, fab, topo)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "GLOO_"))}
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", ASK, lib],
                             capture_output=True, text=True, cwd=str(ROOT), env=env, timeout=60)
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "netns", "del", fab], capture_output=True)
    assert got["nccl"]["ifname"] == got["rule"], (name, got)
    assert got["with"]["ifname"] == got["rule"], (name, got)  # NCCL takes an explicit choice
