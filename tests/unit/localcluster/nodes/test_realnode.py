"""localcluster's real nodes without a cluster: the egress proxy the apiserver dials, the
shared torch tree added to job templates, and the node configuration facts that real
kubelets and containerd need on this machine kind (tests/e2e/test_real_nodes.py runs them)."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from localcluster.cluster import egress
from localcluster.common.config import node_spec_by_name
from localcluster.nodes import processes
from localcluster.nodes.realnode.base import SANDBOX_IMAGE
from localcluster.nodes.realnode.nodeconfig import cni_conflist, containerd_config, kubelet_config
from localcluster.nodes.realnode.sitetree import HOST_MOUNT_ROOT, SITE_BIN, TORCH_MOUNT, site_env_and_mounts, site_spec


def test_egress_proxy_relays_a_connect_and_refuses_garbage(tmp_path):
    """The apiserver's egress selector speaks HTTP CONNECT over a unix socket; a target
    outside every node namespace is dialled from here."""
    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen(1)
    port = echo.getsockname()[1]

    def serve_echo():
        c, _ = echo.accept()
        c.sendall(c.recv(100).upper())
        c.close()
    threading.Thread(target=serve_echo, daemon=True).start()
    threading.Thread(target=egress.serve, args=(tmp_path,), daemon=True).start()
    path = egress.socket_path(tmp_path)
    for _ in range(500):  # up to 10 s on a loaded machine
        if path.is_socket():
            break
        time.sleep(0.02)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    assert s.recv(100).startswith(b"HTTP/1.1 200")
    s.sendall(b"hello kubelet")
    assert s.recv(100) == b"HELLO KUBELET"
    s.close()
    bad = socket.socket(socket.AF_UNIX)
    bad.connect(str(path))
    bad.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert bad.recv(100).startswith(b"HTTP/1.1 502")
    bad.close()
    assert "udsName: " + str(path) in egress.config_yaml(tmp_path)


def test_egress_picks_the_namespace_that_holds_the_address(tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": {
        "node-a": {"internalIP": "10.100.0.11", "nics": {"eth1": "10.101.0.11"}},
        "node-b": {"internalIP": "10.100.0.12", "nics": {}}}}))
    a, b = node_spec_by_name("node-a").netns, node_spec_by_name("node-b").netns
    assert egress.netns_for(tmp_path, "10.100.0.11") == a
    assert egress.netns_for(tmp_path, "10.101.0.11") == a
    assert egress.netns_for(tmp_path, "10.244.1.7") == b  # node-b's pod CIDR
    assert egress.netns_for(tmp_path, "127.0.0.1") is None
    assert egress.netns_for(tmp_path, "localhost") is None  # a name: dialled from here
    assert egress.netns_for(tmp_path / "nowhere", "10.100.0.11") is None


def test_site_spec_gives_every_container_the_nodes_software_and_env(tmp_path):
    """The node's base OCI spec: the torch tree read-only on PYTHONPATH, the scenario's
    env (an NCCL preload), library paths and pythonpath, each host directory they name
    mounted read-only at its own path; the default spec's own env and mounts kept."""
    from localcluster.common.config import REPO_ROOT
    from localcluster.network.topology import NodeTopology
    nccl = tmp_path / "nccl-2.28.9" / "lib"
    nccl.mkdir(parents=True)
    (nccl / "libnccl.so.2").write_text("")
    topo = NodeTopology(name="node-b", index=1, links=[], internal_ip="10.100.0.12",
                        env={"LD_PRELOAD": f"{nccl}/libnccl.so.2", "NCCL_DEBUG": "INFO"},
                        library_paths=[str(tmp_path / "missing")], pythonpath=["tests/e2e/images"])
    tree = tmp_path / "torch"
    env, mounts = site_env_and_mounts(topo, tree)
    inside = HOST_MOUNT_ROOT  # found on real nodes: a path under /root is unreadable there
    assert env["PYTHONPATH"] == f"{TORCH_MOUNT}:{inside}{REPO_ROOT / 'tests/e2e/images'}"
    assert env["LD_PRELOAD"] == f"{inside}{nccl}/libnccl.so.2"
    assert env["LD_LIBRARY_PATH"] == str(tmp_path / "missing") and env["NCCL_DEBUG"] == "INFO"
    assert mounts[0] == (str(tree), TORCH_MOUNT)
    assert mounts[1] == (str(REPO_ROOT / "localcluster/images/site-bin/torchrun"), "/usr/local/bin/torchrun")
    assert Path(mounts[1][0]).stat().st_mode & 0o111  # executable
    assert (str(nccl), f"{inside}{nccl}") in mounts
    assert (str(REPO_ROOT / "tests/e2e/images"), f"{inside}{REPO_ROOT / 'tests/e2e/images'}") in mounts
    assert not any(m[0] == str(tmp_path / "missing") for m in mounts)  # nothing to mount
    default = {"process": {"env": ["PATH=/usr/bin", "PYTHONPATH=/x"]},
               "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}]}
    spec = site_spec(default, env, mounts)
    assert spec["process"]["env"][0] == "PATH=/usr/bin" and "PYTHONPATH=/x" not in spec["process"]["env"]
    assert f"PYTHONPATH={env['PYTHONPATH']}" in spec["process"]["env"]
    assert spec["mounts"][0]["destination"] == "/proc" and default["mounts"][1:] == []  # pure
    assert {"destination": TORCH_MOUNT, "type": "bind", "source": str(tree),
            "options": ["rbind", "ro"]} in spec["mounts"]
    # A node with no scenario: the torch tree alone.
    env, mounts = site_env_and_mounts(None, tree)
    assert env == {"PYTHONPATH": TORCH_MOUNT} and mounts[0] == (str(tree), TORCH_MOUNT)
    assert len(mounts) == 1 + len(SITE_BIN)


def test_node_configuration_carries_what_this_machine_kind_needs(tmp_path):
    """No CAP_SYS_RESOURCE (restrict_oom_score_adj), cgroup v1 (failCgroupV1: false), no
    registry (the pause image built here, no image GC), one cgroup root per node."""
    spec = node_spec_by_name("node-b")
    toml = containerd_config(tmp_path, tmp_path / "root")
    assert "restrict_oom_score_adj = true" in toml and f'sandbox_image = "{SANDBOX_IMAGE}"' in toml
    assert f'Root = "{tmp_path}/runc"' in toml and f'address = "{tmp_path}/containerd.sock"' in toml
    cfg = kubelet_config(tmp_path, spec, Path("/ca"), {"serving_crt": "c", "serving_key": "k"})
    assert cfg["failCgroupV1"] is False and cfg["cgroupRoot"] == f"/{spec.netns}"
    assert cfg["imageGCHighThresholdPercent"] == 100 and cfg["authentication"]["anonymous"]["enabled"] is False
    yaml.safe_dump(cfg)  # serializable as the kubelet's --config
    cni = cni_conflist(tmp_path, spec.index)
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == "cni0" and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}
    assert [p["type"] for p in cni["plugins"]] == ["bridge", "portmap"]


def test_nodes_are_real_unless_fake_gpus_need_the_agent(monkeypatch):
    monkeypatch.delenv("DISTTRAIN_NODE_RUNTIME", raising=False)
    assert processes.choose_runtime(None, False) == ("containerd", "")
    runtime, why = processes.choose_runtime(None, True)
    assert runtime == "agent" and "lighter mode" in why and "device plugin" in why
    assert processes.choose_runtime("containerd", True) == ("containerd", "")  # named: `up` refuses it
    assert processes.choose_runtime("agent", False) == ("agent", "")
    monkeypatch.setenv("DISTTRAIN_NODE_RUNTIME", "containerd")
    assert processes.choose_runtime(None, True) == ("containerd", "")
    monkeypatch.setenv("DISTTRAIN_NODE_RUNTIME", "docker")
    with pytest.raises(ValueError, match="node runtime must be one of"):
        processes.choose_runtime(None, False)


def test_a_restarted_node_is_ready_only_after_a_fresh_heartbeat():
    """A Node object keeps saying Ready from before its kubelet restarted: `up` waits for a
    heartbeat at or after the start (whole seconds, as the API writes them)."""
    node = {"status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                      {"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": "2026-12-02T15:00:10Z"}]}}
    start = 1796223610.7  # 2026-12-02T15:00:10.7Z
    assert processes.node_ready(node) and processes.node_ready(node, start)
    assert not processes.node_ready(node, start + 1)
    node["status"]["conditions"][1]["lastHeartbeatTime"] = "garbage"
    assert processes.node_ready(node) and not processes.node_ready(node, start)
    assert not processes.node_ready({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert not processes.node_ready({})
