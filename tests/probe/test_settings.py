"""NCCL/gloo settings that must agree across nodes, and settings that hurt (pure)."""
from disttrain_probe.contract import settings as S
from disttrain_probe.contract import vocabulary


def peers(*per_node):
    return {r: {"node": f"node-{chr(97 + r)}", "settings": s} for r, s in enumerate(per_node)}


def test_only_the_must_agree_variables_are_kept():
    assert S.of({"NCCL_PROTO": "Simple", "NCCL_DEBUG": "INFO", "PATH": "/bin"}) == {"NCCL_PROTO": "Simple"}


def test_a_setting_on_one_node_only_names_that_node_with_a_table():
    m = S.mismatch(peers({}, {"NCCL_PROTO": "Simple"}, {}))
    assert m["reason"] == vocabulary.SETTINGS_MISMATCH
    assert m["message"].startswith("NCCL_PROTO differs between nodes (node-a, node-c: NCCL_PROTO "
                                   "unset; node-b: NCCL_PROTO=Simple)")
    assert m["message"].endswith("(check the env of node-b: the template, the image, the node)")
    assert S.mismatch(peers({"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Ring"})) is None
    # two nodes, no majority: the one that sets it is named (unset is NCCL's own default)
    two = S.mismatch(peers({}, {"NCCL_PROTO": "Simple"}))
    assert two["message"].endswith("(check the env of node-b: the template, the image, the node)")
    both = S.mismatch(peers({"NCCL_PROTO": "LL"}, {"NCCL_PROTO": "Simple"}))
    assert "check the env of node-a, node-b" in both["message"]
    assert S.mismatch(peers({}, {})) is None


def test_risky_settings():
    w = S.risky("node-a", {"NCCL_IB_DISABLE": "1"}, ["mlx5_0"], "eth1")
    assert [x["reason"] for x in w] == [vocabulary.RISKY_SETTING] and "mlx5_0" in w[0]["message"]
    assert S.risky("node-a", {"NCCL_IB_DISABLE": "1"}, [], "eth1") == []  # no RDMA: harmless
    # read as NCCL's strtoll reads it: any nonzero number turns IB off, 0 or none does not
    for on in (" 1", "0x1", "2", "1abc"):
        assert "NCCL_IB_DISABLE=" in S.risky("node-a", {"NCCL_IB_DISABLE": on}, ["mlx5_0"], "eth1")[0]["message"]
    for off in ("0", "00", "", "no"):
        assert S.risky("node-a", {"NCCL_IB_DISABLE": off}, ["mlx5_0"], "eth1") == []
    w = S.risky("node-a", {"NCCL_SOCKET_IFNAME": "eth0"}, [], "eth1")
    assert "sets NCCL_SOCKET_IFNAME=eth0, not the validated eth1" in w[0]["message"]
    assert S.risky("node-a", {"NCCL_SOCKET_IFNAME": "=eth1"}, [], "eth1") == []
