"""The compact per-path evidence (paths.py, pure): keys as the interface choice keys
networks, one character per peer, upper case when the kernel used another source."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.contract import paths as P

LISTENERS = {
    0: {"l": [["eth0", "10.100.0.11", 24, 1], ["eth1", "10.101.0.11", 24, 2],
              ["docker0", "172.17.0.1", 16, 3], ["cni0", "10.244.0.1", 24, 4]]},
    1: {"l": [["eth0", "10.100.0.12", 24, 1], ["eth1", "10.101.0.12", 24, 2],
              ["docker0", "172.17.0.1", 16, 3], ["cni0", "10.244.1.1", 24, 4]]},
    2: {"l": [["eth0", "10.100.0.13", 24, 1], ["cni0", "10.244.2.1", 24, 4],
              ["eth9", "192.168.9.1", 24, 5]]},
}


def test_network_keys_follow_the_interface_choice():
    k = P.network_keys(LISTENERS)
    assert k[(0, "10.100.0.11")] == "10.100.0.0/24"
    assert k[(1, "172.17.0.1")] == "172.17.0.0/16"  # the decoy spans nodes as a subnet
    assert k[(2, "10.244.2.1")] == "ifname:cni0"    # one subnet per node: routed, by name
    assert k[(2, "192.168.9.1")] == "192.168.9.0/24"  # on one node only: its subnet


def test_rows_one_character_per_peer():
    results = {"1": {"10.100.0.12": {"r": "ok", "src": "10.100.0.11"},
                     "10.101.0.12": {"r": "ok", "src": "10.100.0.11"},  # left by eth0
                     "172.17.0.1": {"r": "wrong"}, "10.244.1.1": {"r": "ok"}},
               "2": {"10.100.0.13": {"r": "timeout"}, "10.244.2.1": {"r": "refused"},
                     "192.168.9.1": {"r": "unreachable"}}}
    assert P.rows(0, 3, LISTENERS, results) == {
        "10.100.0.0/24": ".ot", "10.101.0.0/24": ".O-", "172.17.0.0/16": ".w-",
        "ifname:cni0": ".or", "192.168.9.0/24": ".-u"}
    assert [P.outcome(c) for c in ".oOtm-"] == [None, "ok", "ok", "timeout", "mixed", None]


def test_several_addresses_of_one_peer_that_disagree_are_mixed():
    lst = {0: {"l": [["eth0", "10.0.0.1", 24, 1]]},
           1: {"l": [["eth0", "10.0.0.2", 24, 1], ["eth1", "10.0.0.3", 24, 2]]}}
    res = {"1": {"10.0.0.2": {"r": "ok"}, "10.0.0.3": {"r": "timeout"}}}
    assert P.rows(0, 2, lst, res) == {"10.0.0.0/24": ".m"}


def test_measured_pairs_per_network():
    res = {"1": {"10.101.0.12": {"r": "ok", "mbps": 9400.04}, "10.100.0.12": {"r": "ok"}}}
    assert P.measured(0, LISTENERS, res) == {"10.101.0.0/24": {"1": 9400.0}}


@pytest.mark.parametrize("addr, want", [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("::1%lo", True),
    ("10.0.0.1", False), ("fe80::1%eth0", False), ("128.0.0.1", False),
    ("127.", False), ("localhost", False), ("", False), (None, False),
])
def test_is_loopback_is_the_one_rule(addr, want):
    # probe (inventory, reachmaster, dial plans) and operator (findings, master, evidence) ask this
    assert P.is_loopback(addr) is want


@given(st.one_of(st.none(), st.text(max_size=40), st.ip_addresses().map(str)))
def test_is_loopback_never_raises(addr):
    assert P.is_loopback(addr) in (True, False)
