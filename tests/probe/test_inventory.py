"""Inventory: the iproute2 path and the /proc + ioctl fallback agree on this machine."""
from __future__ import annotations

import shutil

import pytest

from disttrain_probe import inventory as inv


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
    assert inv.is_loopback("127.0.1.1") and inv.is_loopback("::1") and not inv.is_loopback("10.0.0.1")
    assert "127.0.0.1" in inv.resolve("localhost")
    assert inv.ipv4_addrs({"addrs": ["10.0.0.1/24", "fe80::1/64"]}) == [("10.0.0.1", 24)]
    assert inv.ipv6_global({"addrs": ["10.0.0.1/24", "fe80::1/64", "2001:db8::1/64"]}) == ["2001:db8::1"]
