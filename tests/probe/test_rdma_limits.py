"""RDMA limits on recorded sysfs trees from public reports: the locked-memory limit
(MemlockTooLow) and the RoCE GID index (GIDIndexInvalid), and GID tables that differ per
pod (no SettingsMismatch)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.contract import settings as S
from disttrain_probe.contract import vocabulary
from disttrain_probe.gpu import hardware, rdma, rdmalimits

ACTIVE_ROCE = ("4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)", "Ethernet")
ZERO = rdma.ZERO_GID
# entry: index -> (gid, type, netdev); an index mapped to None is an empty (all-zero) slot
Table = Dict[int, Optional[Tuple[str, str, str]]]

# NVIDIA/nccl#1573 (show_gids in a macvlan pod): mlx5_0 port 1 holds entries 4-7 only;
# reading gid_attrs/types/<i> of the empty ones fails (EINVAL), so no file is written here.
NCCL_1573: Table = {
    0: None, 1: None, 2: None, 3: None,
    4: ("fe80:0000:0000:0000:a4ed:ccff:fe8b:1994", "IB/RoCE v1", "net1"),
    5: ("fe80:0000:0000:0000:a4ed:ccff:fe8b:1994", "RoCE v2", "net1"),
    6: ("0000:0000:0000:0000:0000:ffff:0a98:000c", "IB/RoCE v1", "net1"),
    7: ("0000:0000:0000:0000:0000:ffff:0a98:000c", "RoCE v2", "net1"),
}
# k8snetworkplumbingwg/multus-cni#1100: two pods on one RoCE fabric, the same mlx5_4 port,
# one with entries 4-5 (172.20.1.1), the other with 6-7 (172.20.1.2).
MULTUS_1100_A: Table = {i: None for i in range(4)} | {
    4: ("0000:0000:0000:0000:0000:ffff:ac14:0101", "IB/RoCE v1", "net1"),
    5: ("0000:0000:0000:0000:0000:ffff:ac14:0101", "RoCE v2", "net1")}
MULTUS_1100_B: Table = {i: None for i in range(6)} | {
    6: ("0000:0000:0000:0000:0000:ffff:ac14:0102", "IB/RoCE v1", "net1"),
    7: ("0000:0000:0000:0000:0000:ffff:ac14:0102", "RoCE v2", "net1")}
ULIMIT_8192_KIB = 8192 << 10  # NVIDIA/nccl-tests#206: `ulimit -l` was 8192 -> ibv_reg_mr ENOMEM


def make_roce(root: Path, dev: str, table: Table, state=ACTIVE_ROCE) -> None:
    """A fake /sys/class/infiniband/<dev> with one port and its GID table, as Linux writes it."""
    p = root / dev / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (p / sub).mkdir(parents=True)
    for name, text in zip(("state", "phys_state", "rate", "link_layer"), state):
        (p / name).write_text(text + "\n")
    for i, entry in table.items():
        (p / "gids" / str(i)).write_text((entry[0] if entry else ZERO) + "\n")
        if entry:
            (p / "gid_attrs" / "types" / str(i)).write_text(entry[1] + "\n")
            (p / "gid_attrs" / "ndevs" / str(i)).write_text(entry[2] + "\n")


def inventory(root: Path, soft: Optional[int] = None, ipc_lock: bool = False) -> dict:
    """What hardware.collect gives a pod with these RDMA devices and this memlock limit."""
    return {"rdma": rdma.devices(str(root)), "ibverbs": ["/usr/lib/libibverbs.so.1"],
            "memlock": {"softBytes": soft, "hardBytes": soft, "ipcLock": ipc_lock}}


def test_gid_table_of_a_macvlan_pod_is_read_with_its_empty_slots_skipped(tmp_path):
    make_roce(tmp_path, "mlx5_0", NCCL_1573)
    [dev] = rdma.devices(str(tmp_path))
    gids = dev["ports"][0]["gids"]
    assert [g["index"] for g in gids] == [4, 5, 6, 7]
    assert gids[0] == {"index": 4, "gid": "fe80:0000:0000:0000:a4ed:ccff:fe8b:1994",
                       "type": "IB/RoCE v1", "family": "link-local", "address": None,
                       "netdev": "net1"}
    assert gids[3]["family"] == "IPv4" and gids[3]["address"] == "10.152.0.12"
    assert gids[3]["type"] == "RoCE v2" and dev["ports"][0]["gidsTruncated"] is False


def test_a_gid_index_that_differs_per_pod_is_no_skew_but_an_empty_one_fails(tmp_path):
    """multus-cni#1100: index 5 in pod A and 7 in pod B are each right; the "settings must
    agree" rule would have called them skew. NVIDIA/nccl#718: the same index 5 in the pod
    whose table holds 6-7 fails with 'ibv_modify_qp ... No such device'."""
    a, b = tmp_path / "a", tmp_path / "b"
    make_roce(a, "mlx5_4", MULTUS_1100_A)
    make_roce(b, "mlx5_4", MULTUS_1100_B)
    env_a, env_b = {"NCCL_IB_GID_INDEX": "5"}, {"NCCL_IB_GID_INDEX": "7"}
    assert rdmalimits.check(inventory(a), env_a, "node-a", "nccl") == rdmalimits.Limits()
    assert rdmalimits.check(inventory(b), env_b, "node-b", "nccl") == rdmalimits.Limits()
    assert S.mismatch({0: {"node": "node-a", "settings": S.of(env_a)},
                       1: {"node": "node-b", "settings": S.of(env_b)}}) is None
    wrong = rdmalimits.check(inventory(b), env_a, "node-b", "nccl").failure
    assert wrong is not None and wrong["reason"] == vocabulary.GID_INDEX_INVALID
    msg = wrong["message"]
    assert msg.startswith("node-b: NCCL_IB_GID_INDEX=5 selects an empty GID on mlx5_4:1 "
                          "(mlx5_4:1 holds GIDs 6,7; 7 is RoCE v2 172.20.1.2)")
    assert "unset NCCL_IB_GID_INDEX" in msg and len(msg) <= 400


def test_gid_index_is_not_checked_where_nccl_will_not_open_the_port(tmp_path):
    make_roce(tmp_path, "mlx5_4", MULTUS_1100_B)
    hw = inventory(tmp_path)
    wrong = {"NCCL_IB_GID_INDEX": "5"}
    assert rdmalimits.check(hw, wrong, "n", "gloo").failure is None
    for off in ({"NCCL_IB_DISABLE": "1"}, {"NCCL_NET": "Socket"}, {"NCCL_IB_HCA": "^mlx5_4"},
                {"NCCL_IB_HCA": "=mlx5_40"}, {"NCCL_IB_HCA": "mlx5_4:2"},
                {"NCCL_IB_GID_INDEX": "-1"}, {"NCCL_IB_GID_INDEX": ""}):
        assert rdmalimits.check(hw, {**wrong, **off}, "n", "nccl").failure is None, off
    assert rdmalimits.check(dict(hw, ibverbs=[]), wrong, "n", "nccl").failure is None
    for on in ({"NCCL_IB_HCA": "mlx5"}, {"NCCL_IB_HCA": "=mlx5_4:1"}, {"NCCL_IB_HCA": "^mlx5_0"}):
        assert rdmalimits.check(hw, {**wrong, **on}, "n", "nccl").failure is not None, on


def test_a_link_local_or_roce_v1_gid_is_a_risky_setting(tmp_path):
    make_roce(tmp_path, "mlx5_0", NCCL_1573)
    for index, shown in (("5", "RoCE v2 link-local"), ("6", "IB/RoCE v1 10.152.0.12")):
        limits = rdmalimits.check(inventory(tmp_path), {"NCCL_IB_GID_INDEX": index}, "n", "nccl")
        [w] = limits.warnings
        assert limits.failure is None and w["reason"] == vocabulary.RISKY_SETTING
        assert f"mlx5_0:1 ({shown})" in w["message"]
    assert rdmalimits.check(inventory(tmp_path), {"NCCL_IB_GID_INDEX": "7"}, "n", "nccl") == \
        rdmalimits.Limits()


def test_memlock_below_what_nccl_registers_fails_naming_the_ports(tmp_path):
    make_roce(tmp_path, "mlx5_0", NCCL_1573)
    limits = rdmalimits.check(inventory(tmp_path, ULIMIT_8192_KIB), {}, "node-a", "nccl")
    assert limits.failure is not None and limits.failure["reason"] == vocabulary.MEMLOCK_TOO_LOW
    msg = limits.failure["message"]
    assert msg.startswith("node-a: the locked-memory limit (ulimit -l) is 8 MiB and the container "
                          "lacks CAP_IPC_LOCK, while NCCL will register its buffers on RDMA "
                          "port(s) mlx5_0:1")
    assert "Cannot allocate memory" in msg and "IPC_LOCK" in msg and len(msg) <= 400
    # the capability exempts it; unlimited is fine; a large finite limit only warns
    assert rdmalimits.check(inventory(tmp_path, ULIMIT_8192_KIB, True), {}, "n", "nccl") == \
        rdmalimits.Limits()
    assert rdmalimits.check(inventory(tmp_path, None), {}, "n", "nccl") == rdmalimits.Limits()
    big = rdmalimits.check(inventory(tmp_path, 1 << 30), {}, "n", "nccl")
    assert big.failure is None and [w["reason"] for w in big.warnings] == [vocabulary.MEMLOCK_TOO_LOW]
    assert "1 GiB" in big.warnings[0]["message"]
    # no port NCCL will use: nothing to say, whatever the limit
    assert rdmalimits.check(inventory(tmp_path, 65536), {"NCCL_IB_DISABLE": "1"}, "n", "nccl") == \
        rdmalimits.Limits()
    make_roce(tmp_path / "down", "mlx5_0", NCCL_1573, ("1: DOWN",) + ACTIVE_ROCE[1:])
    assert rdmalimits.check(inventory(tmp_path / "down", 65536), {}, "n", "nccl") == rdmalimits.Limits()


def test_memlock_first_when_both_fail(tmp_path):
    make_roce(tmp_path, "mlx5_4", MULTUS_1100_B)
    limits = rdmalimits.check(inventory(tmp_path, 65536), {"NCCL_IB_GID_INDEX": "5"}, "n", "nccl")
    assert limits.failure["reason"] == vocabulary.MEMLOCK_TOO_LOW
    assert "64 KiB" in limits.failure["message"]


def test_memlock_reads_cap_ipc_lock_from_proc_status(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCapEff:\t00000000a80425fb\n")  # Docker's default set
    assert hardware.memlock(str(status))["ipcLock"] is False
    status.write_text("CapEff:\t00000000a80465fb\n")  # the same with IPC_LOCK added
    assert hardware.memlock(str(status))["ipcLock"] is True
    assert hardware.memlock(str(tmp_path / "none"))["ipcLock"] is None
    status.write_text("CapEff:\tzz\n")
    assert hardware.memlock(str(status))["ipcLock"] is None
    mine = hardware.memlock()
    assert all(v is None or (isinstance(v, int) and v >= 0)
               for v in (mine["softBytes"], mine["hardBytes"]))


@given(st.dictionaries(st.integers(0, 300), st.one_of(
           st.none(), st.tuples(st.sampled_from(["0000:0000:0000:0000:0000:ffff:0a00:0001",
                                                 "fe80:0000:0000:0000:0000:0000:0000:0001",
                                                 "2001:0db8:0000:0000:0000:0000:0000:0001",
                                                 "not-a-gid"]),
                                st.sampled_from(["IB/RoCE v1", "RoCE v2", ""]),
                                st.sampled_from(["net1", ""]))), max_size=40),
       st.one_of(st.none(), st.integers(-2, 300).map(str), st.text(max_size=4)))
def test_generated_gid_tables_fail_exactly_when_the_index_is_empty(table, index):
    """Any table (sparse, past the read cap, odd text) and any NCCL_IB_GID_INDEX: the check
    fails exactly when the index is a number the table read whole has no entry at."""
    with tempfile.TemporaryDirectory() as d:
        make_roce(Path(d), "mlx5_0", table)
        hw = inventory(Path(d))
    port = hw["rdma"][0]["ports"][0]
    assert len(port["gids"]) <= rdma.MAX_GIDS_KEPT
    env = {} if index is None else {"NCCL_IB_GID_INDEX": index}
    limits = rdmalimits.check(hw, env, "n", "nccl")
    filled = {i for i, e in table.items() if e}
    read_whole = not port["gidsTruncated"]
    number = None if index is None else rdmalimits.nccl_int(index)  # NCCL reads "010" as 8
    expect_fail = number is not None and 0 <= number < 10 ** 9 and read_whole and number not in filled
    assert (limits.failure is not None) == expect_fail
    assert all(len(m["message"]) <= 400 for m in [*limits.warnings, *([limits.failure] if
                                                                     limits.failure else [])])


@pytest.mark.parametrize("spec,port1,port2", [
    (None, True, True), ("", True, True),
    ("^", False, False), ("^=", False, False),  # NCCL: the empty list matches all, ^ inverts it
    ("=", True, True), (",,", True, True),  # an empty list: every device
    (":1", True, True), ("^:1", False, False),  # an entry without a name is skipped
    ("mlx5", True, True), ("^mlx5", False, False), ("=mlx5", False, False),
    ("=mlx5_0:1", True, False), ("^=mlx5_0:1", False, True), ("mlx5_0:1,mlx5_1", True, False),
])
def test_nccl_ib_hca_selects_as_nccl_parses_it(spec, port1, port2):
    assert (rdmalimits.hca_selected(spec, "mlx5_0", 1),
            rdmalimits.hca_selected(spec, "mlx5_0", 2)) == (port1, port2)


def test_memlock_is_not_failed_when_nccl_ib_hca_excludes_every_port(tmp_path):
    make_roce(tmp_path, "mlx5_0", NCCL_1573)
    hw = inventory(tmp_path, ULIMIT_8192_KIB)
    assert rdmalimits.check(hw, {"NCCL_IB_HCA": "^"}, "n", "nccl") == rdmalimits.Limits()
    assert rdmalimits.check(hw, {"NCCL_IB_HCA": "="}, "n", "nccl").failure is not None


@pytest.mark.parametrize("value,number", [
    ("1", 1), (" 2", 2), ("+1", 1), ("-1", -1), ("0x10", 16), ("010", 8), ("08", 0), ("1abc", 1),
    ("", None), ("true", None), ("9" * 5000, None), ("9" * 20, None)])
def test_integer_variables_read_as_ncclloadparam_reads_them(value, number):
    assert rdmalimits.nccl_int(value) == number


def test_nccl_ib_disable_and_gid_index_are_numbers_to_nccl(tmp_path):
    make_roce(tmp_path, "mlx5_0", NCCL_1573)  # entries 4-7
    hw = inventory(tmp_path, ULIMIT_8192_KIB)
    # any nonzero NCCL_IB_DISABLE turns IB off: no memory registered, nothing to fail
    assert rdmalimits.check(hw, {"NCCL_IB_DISABLE": "2"}, "n", "nccl") == rdmalimits.Limits()
    # strtoll(base 0): "010" is entry 8 (empty), "07" is entry 7 (RoCE v2 IPv4)
    hw = inventory(tmp_path)
    assert rdmalimits.check(hw, {"NCCL_IB_GID_INDEX": "07"}, "n", "nccl") == rdmalimits.Limits()
    failure = rdmalimits.check(hw, {"NCCL_IB_GID_INDEX": "010"}, "n", "nccl").failure
    assert failure is not None and "NCCL_IB_GID_INDEX=8 " in failure["message"]
    assert rdmalimits.check(hw, {"NCCL_IB_GID_INDEX": "0x7"}, "n", "nccl") == rdmalimits.Limits()
