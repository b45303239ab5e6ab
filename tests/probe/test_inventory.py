"""Inventory: the iproute2 path and the /proc + ioctl fallback agree on this machine."""
from __future__ import annotations

import shutil

import pytest

from disttrain_probe.phases import inventory as inv


def test_ioctl_fallback_matches_ip_json():
    if shutil.which("ip") is None:
        pytest.skip("iproute2 not installed")
    a = inv.list_interfaces()
    b = inv._from_ioctl()
    assert [i["name"] for i in a] == [i["name"] for i in b]
    for x, y in zip(a, b):
        assert x["mtu"] == y["mtu"] and x["loopback"] == y["loopback"]
        v4a = [p for p in x["addrs"] if ":" not in p]
        v4b = [p for p in y["addrs"] if ":" not in p]
        assert v4b == v4a[:1]  # ioctl sees the primary IPv4 address only
        assert {p for p in x["addrs"] if ":" in p} == {p for p in y["addrs"] if ":" in p}
    lo = next(i for i in a if i["name"] == "lo")
    assert lo["loopback"] and "127.0.0.1/8" in lo["addrs"] and lo["up"]


def test_route_get_both_ways():
    ifs = inv.list_interfaces()
    assert inv.route_get("127.0.0.1", ifs) == {"iface": "lo", "src": "127.0.0.1"}
    assert inv.route_get("127.0.0.1", ifs, use_ip=False) == {"iface": "lo", "src": "127.0.0.1"}


def test_misc():
    pr = inv.port_range()
    assert pr is None or (1 <= pr[0] <= pr[1] <= 65535)
    assert "127.0.0.1" in inv.resolve("localhost")
    assert inv.ipv4_addrs({"addrs": ["10.0.0.1/24", "fe80::1/64"]}) == [("10.0.0.1", 24)]
    assert inv.ipv6_global({"addrs": ["10.0.0.1/24", "fe80::1/64", "2001:db8::1/64"]}) == ["2001:db8::1"]


def test_nccl_version_code_decoding():
    assert inv.nccl_version_string(22809) == "2.28.9"
    assert inv.nccl_version_string(22703) == "2.27.3"
    assert inv.nccl_version_string(21005) == "2.10.5"
    assert inv.nccl_version_string(2708) == "2.7.8"  # before 2.9: major*1000
    assert inv.nccl_version_string(0) is None and inv.nccl_version_string(-1) is None


def test_loaded_nccl_reads_the_library_in_the_process_not_torchs_build(tmp_path):
    """A stand-in libnccl.so.2 whose ncclGetVersion says 2.28.9, loaded the way LD_PRELOAD
    or the dynamic linker would: loaded_nccl() must report it and its path."""
    import subprocess
    import sys
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    src = tmp_path / "fake.c"
    src.write_text("int ncclGetVersion(int *v) { *v = 22809; return 0; }\n")
    lib = tmp_path / "libnccl.so.2"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    code = ("import ctypes, os, sys; ctypes.CDLL(sys.argv[1], mode=os.RTLD_GLOBAL); "
            "from disttrain_probe.phases import inventory as inv; print(inv.loaded_nccl())")
    out = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == repr(("2.28.9", str(lib)))
    none = subprocess.run([sys.executable, "-c", "from disttrain_probe.phases import inventory as inv; "
                           "print(inv.loaded_nccl())"], capture_output=True, text=True, check=True)
    assert none.stdout.strip() == "(None, None)"  # nothing loaded (torch not imported)


def test_a_preloaded_libnccl_wins_over_torchs_own_copy(tmp_path):
    """LD_PRELOAD of another libnccl.so.2 beside torch's: two copies are mapped and NCCL's
    calls bind to the preloaded one (on an H200 NCCL logged 2.32.6 while the first mapped
    copy, torch's, said 2.28.9); the inventory must report the preloaded one."""
    import os
    import subprocess
    import sys
    torch = pytest.importorskip("torch")
    if inv.torch_nccl_build(torch) is None or shutil.which("cc") is None:
        pytest.skip("this torch build has no NCCL, or no C compiler")
    src = tmp_path / "fake.c"
    src.write_text("int ncclGetVersion(int *v) { *v = 23206; return 0; }\n")
    # its own soname, so torch still loads its libnccl.so.2 (mapped lower: found first in
    # /proc/self/maps) while ncclGetVersion binds to the preloaded stand-in
    lib = tmp_path / "libnccl.so.2.32.6"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2.32.6", "-o", str(lib),
                    str(src)], check=True)
    code = ("import torch; from disttrain_probe.phases import inventory as inv; "
            "print(inv.loaded_nccl(), sorted({ln.split()[-1].rsplit('/', 1)[-1] for ln in "
            "open('/proc/self/maps') if '/libnccl.so' in ln}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, LD_PRELOAD=str(lib))).stdout.strip()
    assert out == f"{('2.32.6', os.path.realpath(lib))!r} ['libnccl.so.2', 'libnccl.so.2.32.6']"


def test_versions_report_nccl_without_a_gpu():
    torch = pytest.importorskip("torch")
    if inv.torch_nccl_build(torch) is None:
        pytest.skip("this torch build has no NCCL")
    v = inv.versions()
    # this venv's torch loads the libnccl of its nvidia-nccl wheel: the version it was built with
    assert v["nccl"] == v["ncclBuild"] and v["nccl"].count(".") == 2
    assert v["ncclLib"].endswith("libnccl.so.2")


def test_hosts_entry_reads_the_hosts_file_as_glibc_does(tmp_path):
    from disttrain_probe.phases.inventory import hosts_entry

    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n# 10.0.0.1 master.train (commented)\n"
                     "10.100.0.99\tother  Master.Train.  # stale\n10.100.0.11 master.train\n")
    assert hosts_entry("master.train", str(hosts)) == "10.100.0.99"  # the first line naming it
    assert hosts_entry("MASTER.TRAIN", str(hosts)) == "10.100.0.99"
    assert hosts_entry("nobody", str(hosts)) is None
    assert hosts_entry("master.train", str(tmp_path / "missing")) is None


def test_the_rendezvous_says_where_the_master_s_answer_came_from(monkeypatch):
    from disttrain_probe.phases import reachmaster

    monkeypatch.setattr(reachmaster, "hosts_entry", lambda name: "10.0.0.9" if name == "in-hosts" else None)
    monkeypatch.setattr(reachmaster, "nameserver", lambda: "10.96.0.10")
    assert reachmaster._answer_source("in-hosts") == {"source": "hosts"}
    assert reachmaster._answer_source("master.train") == {"source": "dns", "server": "10.96.0.10"}
    monkeypatch.setattr(reachmaster, "nameserver", lambda: None)
    assert reachmaster._answer_source("master.train") == {"source": "dns"}
