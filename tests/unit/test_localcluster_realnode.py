"""localcluster's real nodes without a cluster: the egress proxy the apiserver dials, the
shared torch tree added to job templates, and the node configuration facts that real
kubelets and containerd need on this machine kind (tests/e2e/test_real_nodes.py runs them)."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import yaml

from localcluster import egress, realnode
from localcluster.config import node_spec_by_name


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


def test_torch_tree_goes_into_every_container_once(tmp_path):
    job = {"kind": "DistTrainingJob", "spec": {"template": {"spec": {
        "containers": [{"name": "trainer", "env": [{"name": "PYTHONPATH", "value": "/old"}]}],
        "volumes": [{"name": "script", "configMap": {"name": "s"}}]}}}}
    once = realnode.with_torch_tree(job, tmp_path)
    twice = realnode.with_torch_tree(once, tmp_path)
    assert once == twice and job["spec"]["template"]["spec"]["volumes"][0]["name"] == "script"
    spec = once["spec"]["template"]["spec"]
    assert spec["volumes"][-1] == {"name": realnode.TORCH_VOLUME,
                                   "hostPath": {"path": str(tmp_path), "type": "Directory"}}
    ctr = spec["containers"][0]
    assert ctr["volumeMounts"] == [{"name": realnode.TORCH_VOLUME, "mountPath": realnode.TORCH_MOUNT,
                                    "readOnly": True}]
    assert ctr["env"] == [{"name": "PYTHONPATH", "value": realnode.TORCH_MOUNT}]
    ptj = {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
        "Master": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}},
        "Worker": {"template": {"spec": {"containers": [{"name": "pytorch"}]}}}}}}
    out = realnode.with_torch_tree(ptj, tmp_path)
    for r in out["spec"]["pytorchReplicaSpecs"].values():
        assert r["template"]["spec"]["containers"][0]["env"][0]["value"] == realnode.TORCH_MOUNT
    cm = {"kind": "ConfigMap", "data": {"a": "b"}}
    assert realnode.with_torch_tree(cm, tmp_path) == cm


def test_node_configuration_carries_what_this_machine_kind_needs(tmp_path):
    """No CAP_SYS_RESOURCE (restrict_oom_score_adj), cgroup v1 (failCgroupV1: false), no
    registry (the pause image built here, no image GC), one cgroup root per node."""
    spec = node_spec_by_name("node-b")
    toml = realnode.containerd_config(tmp_path, tmp_path / "root")
    assert "restrict_oom_score_adj = true" in toml and f'sandbox_image = "{realnode.SANDBOX_IMAGE}"' in toml
    assert f'Root = "{tmp_path}/runc"' in toml and f'address = "{tmp_path}/containerd.sock"' in toml
    cfg = realnode.kubelet_config(tmp_path, spec, Path("/ca"), {"serving_crt": "c", "serving_key": "k"})
    assert cfg["failCgroupV1"] is False and cfg["cgroupRoot"] == f"/{spec.netns}"
    assert cfg["imageGCHighThresholdPercent"] == 100 and cfg["authentication"]["anonymous"]["enabled"] is False
    yaml.safe_dump(cfg)  # serializable as the kubelet's --config
    cni = realnode.cni_conflist(tmp_path, spec.index)
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == "cni0" and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"][0][0] == {"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}
    assert [p["type"] for p in cni["plugins"]] == ["bridge", "portmap"]
