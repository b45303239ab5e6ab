"""A firewall over part of the ephemeral range (issue 19): the sampled ports, the
listeners on them, and the verdict from what the ring neighbours saw."""
from __future__ import annotations

import socket

from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain_probe.contract import vocabulary
from disttrain_probe.phases import connectivity as C
from disttrain_probe.phases.interfaces import choose
from disttrain_probe.phases.listeners import Listeners
from disttrain_probe.phases.portrange import partial_blocks, partial_range_failure
from tests.probe.test_choice import LO, iface, mesh_of, peer

RANGE = [32768, 60999]
SAMPLES = C.range_ports(RANGE)


def test_range_ports_cover_both_ends_evenly():
    # a block of 1000 ports anywhere in the default range holds a sample (gen-2-018: 6 samples
    # 5646 ports apart passed a rule over 56726-59970 as Validated=True)
    assert max(b - a for a, b in zip(SAMPLES, SAMPLES[1:])) < 1000
    assert SAMPLES[0] == 32768 and SAMPLES[-1] == 60999 and len(SAMPLES) == C.RANGE_SAMPLES
    gaps = [b - a for a, b in zip(SAMPLES, SAMPLES[1:])]
    assert max(gaps) - min(gaps) <= 1
    assert C.range_ports([40000, 40002]) == [40000, 40001, 40002]
    for bad in (None, [], [5], [60999, 32768], [0, 10], [1, 70000]):
        assert C.range_ports(bad) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_listeners_answer_on_the_sampled_ports_and_skip_one_in_use():
    base = _free_port()
    held = socket.socket()
    held.bind(("127.0.0.1", base))  # in use: the listener takes the next port instead
    try:
        lst = Listeners(3, "n0nce", [iface("lo", "127.0.0.1/8")], [base, base + 100])
        try:
            ports = [p for _a, p in lst.samples]
            assert ports[0] == base + 1  # the next one up
            assert ports[1] in range(base + 93, base + 101)  # the range's top: inward, downwards
            for addr, port in lst.samples:
                assert C.dial(addr, port, 3, "n0nce", 2.0)["r"] == "ok"
        finally:
            lst.close()
    finally:
        held.close()


def three_nodes(blocked_from: int = 45000, node: int = 1, mesh_port_ok: bool = True):
    """Three nodes on eth0; ``node``'s firewall drops its ports >= ``blocked_from``: every
    dialler's samples above it time out; the mesh's own port answers when ``mesh_port_ok``."""
    peers = {r: peer(r, LO, iface("eth0", f"10.0.0.{r + 1}/24")) for r in range(3)}
    for p in peers.values():
        p["portRange"] = RANGE

    def entry(i, j, a):
        if a.startswith("127."):
            return "ok"
        return "timeout" if j == node and not mesh_port_ok else "ok"
    mesh = mesh_of(peers, entry)
    for i, row in mesh.items():
        for j, per in row.items():
            if abs(i - j) in (1, 2):  # ring neighbours of 3 ranks: everyone
                for addr, res in per.items():
                    if not addr.startswith("127."):
                        res["range"] = [[p, "timeout" if j == node and p >= blocked_from else "ok"]
                                        for p in SAMPLES]
    return peers, mesh


def test_upper_part_blocked_on_one_node_is_named_with_the_ports():
    peers, mesh = three_nodes()
    res = choose(peers, mesh, "auto", master_port=29500)
    f = res["failure"]
    assert f["reason"] == vocabulary.EPHEMERAL_PORTS_BLOCKED and res["chosen"] == {}
    m = f["message"]
    ok, bad = [p for p in SAMPLES if p < 45000], [p for p in SAMPLES if p >= 45000]
    assert m.startswith("node-b: part of its ephemeral port range is blocked: every other node reached "
                        f"ports {ok[0]}-{ok[-1]} ({len(ok)} sampled) but not ports {bad[0]}-{bad[-1]} "
                        f"({len(bad)} sampled) on 10.0.0.2"), m
    assert "32768-60999" in m and "node-b's firewall" in m and len(m) <= 400


def test_mesh_port_in_the_blocked_part_still_gets_the_partial_verdict():
    """The kernel put the mesh's port in the blocked part: the network looks unreachable to
    node-b, but the samples show which part of its range answers."""
    peers, mesh = three_nodes(mesh_port_ok=False)
    f = choose(peers, mesh, "auto", master_port=29500)["failure"]
    assert f["message"].startswith("node-b: part of its ephemeral port range is blocked")


def test_whole_range_open_or_whole_node_blocked_is_not_partial():
    peers, mesh = three_nodes(blocked_from=70000)
    res = choose(peers, mesh, "auto", master_port=29500)
    assert res["failure"] is None and res["chosen"]
    peers, mesh = three_nodes(blocked_from=0, mesh_port_ok=False)  # the whole node: not this verdict
    assert partial_blocks(mesh) == {}
    f = choose(peers, mesh, "auto", master_port=29500)["failure"]
    assert f["reason"] == vocabulary.EPHEMERAL_PORTS_BLOCKED and "part of" not in f["message"]


def test_a_starved_peer_is_no_partial_block():
    peers, mesh = three_nodes(blocked_from=70000)
    mesh[0][1]["10.0.0.2"]["range"][-1][1] = "slow"  # connected, no identity in time
    assert partial_range_failure(peers, mesh) is None


RESULTS = st.sampled_from(["ok", "refused", "timeout", "slow", "wrong", "unreachable", None, 7])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 5), st.dictionaries(
    st.integers(0, 5), st.dictionaries(st.sampled_from(["10.0.0.1", "10.0.0.2", "x"]), st.one_of(
        st.none(), st.fixed_dictionaries({"r": RESULTS}, optional={"range": st.one_of(
            st.none(), st.text(max_size=3), st.lists(st.one_of(
                st.tuples(st.integers(0, 70000), RESULTS), st.lists(st.integers(), max_size=3)),
                max_size=8))})), max_size=3), max_size=6), max_size=6))
def test_any_mesh_gives_a_short_verdict_or_none(mesh):
    """Whatever the peers published: no exception, and a verdict names a node whose samples
    were both answered and not."""
    peers = {r: {"node": f"node-{r}", "portRange": RANGE} for r in range(6)}
    f = partial_range_failure(peers, mesh)
    seen = partial_blocks(mesh)
    assert (f is None) == (not seen)
    if f:
        named = set(seen) | {i for s in seen.values() for i in s.by}  # a target, or the one dialler
        assert len(f["message"]) <= 400
        assert any(f["message"].startswith(f"node-{r}:") for r in named), f["message"]
