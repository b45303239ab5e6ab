"""The ``down`` class and the turned capture test (attribution/network.py, explanation.py)
and ``Matrix.down`` (evidence.py) on dial matrices and reports nobody wrote by hand:
random node counts (2-12), cells, down flags, interface names and subnets, and reports whose
interfaces say up true, false or nothing, with names repeated."""
from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain.diagnosis import evidence
from disttrain.diagnosis.attribution import network
from disttrain.diagnosis.findings import ProbeOutcome, typed
from tests.support.fixtures import report, typed_report

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
CELLS = st.sampled_from(["ok", "timeout", "refused", None])
IFNAMES = st.one_of(st.none(), st.sampled_from(["eth0", "eth1", "ens5f0np0", "x" * 15]),
                    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=15))
SUBNETS = st.one_of(st.none(), st.sampled_from(["10.101.0.0/24", "10.102.0.0/24", "10.100.0.0/24"]))
CAPTURE = re.compile(r"tcpdump on (\S+): SYNs from (\S+) arriving unanswered")


@st.composite
def matrices(draw, down=None) -> evidence.Matrix:
    n = draw(st.integers(2, 12))
    nodes = tuple(f"node-{chr(97 + i)}" for i in range(n))
    cells = tuple(tuple(None if i == j else draw(CELLS) for j in range(n)) for i in range(n))
    ifnames = tuple(draw(st.lists(IFNAMES, min_size=n, max_size=n)))
    subnets = tuple(draw(st.lists(SUBNETS, min_size=n, max_size=n)))
    flags = tuple(draw(st.lists(st.booleans(), min_size=n, max_size=n))) if down is None else down
    key = draw(st.sampled_from(["10.101.0.0/24", "ifname:eth1"]))
    return evidence.Matrix(key, nodes, ifnames, cells, subnets, flags)


def _with(m: evidence.Matrix, down: tuple) -> evidence.Matrix:
    return evidence.Matrix(m.key, m.nodes, m.ifnames, m.cells, m.subnets, down)


@SETTINGS
@given(matrices())
def test_explain_matrix_never_raises_and_stays_within_the_message_limit(m):
    e = network.explain_matrix(m)
    assert (e is None) == (not m.failures())
    if e is not None:
        assert e.kind and e.culprits and set(e.culprits) <= set(m.nodes)
        assert len(e.message()) <= 400 and len(e.message("seen " * 200)) <= 400


@SETTINGS
@given(matrices())
def test_down_only_when_every_failure_touches_a_down_node_and_names_only_down_nodes(m):
    e = network.explain_matrix(m)
    fails = m.failures()
    covered = bool(fails) and any(m.down) and all(m.is_down(i) or m.is_down(j) for i, j in fails)
    assert (e is not None and e.kind == "down") == covered
    if covered:
        assert set(e.culprits) == {m.nodes[x] for x in range(len(m.nodes)) if m.is_down(x)}
        for x in range(len(m.nodes)):  # a node that is up is never named, even in passing
            if not m.is_down(x):
                assert not re.search(rf"\b{m.nodes[x]}\b", e.cause + e.fix), (m.nodes[x], e)
        assert "firewall" not in e.message()
        assert {tuple(sorted(p)) for p in e.pairs} <= {tuple(sorted((m.nodes[i], m.nodes[j]))) for i, j in fails}


@SETTINGS
@given(matrices())
def test_no_node_down_behaves_as_no_flags_at_all(m):
    n = len(m.nodes)
    none, false = _with(m, ()), _with(m, (False,) * n)
    assert network.explain_matrix(none) == network.explain_matrix(false)
    e = network.explain_matrix(none)
    assert e is None or e.kind != "down"
    assert network.explain_networks([none]) == network.explain_networks([false])


@SETTINGS
@given(matrices())
def test_flags_shorter_or_longer_than_the_nodes_do_not_break_it(m):
    n = len(m.nodes)
    for down in ((True,), (True,) * (n + 3), m.down[: n // 2]):
        e = network.explain_matrix(_with(m, down))
        if e is not None and e.kind == "down":
            assert all(m.nodes.index(c) < len(down) and down[m.nodes.index(c)] for c in e.culprits)


@SETTINGS
@given(matrices(down=()))
def test_the_capture_test_names_a_direction_that_failed(m):
    e = network.explain_matrix(m)
    if e is None or not e.decide:
        return
    assert e.kind in ("pairs", "inbound+pairs", "candidates")
    target, source = CAPTURE.match(e.decide).groups()
    assert m.failed(m.nodes.index(source), m.nodes.index(target)), (e.decide, m.cells)


# -- evidence.matrices: which ranks said their interface is down --------------------------
ADDRS = ["10.101.0.11/24", "10.101.0.12/24", "10.102.0.13/24", "10.100.0.11/24", "172.17.0.1/16",
         "fd00::1/64", "not-an-address", "127.0.0.1/8"]
KEYS = ["10.101.0.0/24", "10.102.0.0/24", "10.100.0.0/24", "172.17.0.0/16", "ifname:eth1", "fd00::/64",
        "127.0.0.0/8", "bogus"]
INTERFACES = st.fixed_dictionaries({"name": st.sampled_from(["eth0", "eth1", "docker0"]),
                                    "addrs": st.lists(st.sampled_from(ADDRS), max_size=3),
                                    "up": st.sampled_from([None, True, False])})


@st.composite
def ranks(draw) -> list:
    n = draw(st.integers(2, 8))
    out = []
    for r in range(n):
        node = f"node-{chr(97 + r)}"
        if draw(st.integers(0, 9)) == 0:  # no report from this rank
            out.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=None)))
            continue
        rep = report(r, node)
        rep["interfaces"] = draw(st.lists(INTERFACES, max_size=5))
        rep["paths"] = draw(st.dictionaries(st.sampled_from(KEYS), st.text(alphabet="owcrtue.-m", max_size=n + 2),
                                            max_size=3))
        out.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    return out


@SETTINGS
@given(ranks())
def test_a_rank_is_down_exactly_when_it_said_its_interface_there_is_down(rs):
    ms = evidence.matrices(rs)
    for m in ms:
        assert m.down == () or (len(m.down) == len(m.nodes) and any(m.down))
        for i, r in enumerate(rs):
            said = bool(r.report and m.ifnames[i] and any(
                itf.name == m.ifnames[i] and itf.up is False for itf in r.report.interfaces))
            assert m.is_down(i) == said, (m.key, i, m.ifnames[i])
        e = network.explain_matrix(m)
        assert e is None or len(e.message()) <= 400
    e = network.explain_networks(ms)
    assert e is None or len(e.message("x" * 500)) <= 400


def _ranks(up_b) -> list:
    """Three ranks on eth1; every dial to or from node-b timed out; node-b says eth1 is
    ``up_b``."""
    rows = {0: ".to", 1: "t.t", 2: "ot."}
    out = []
    for r, node in enumerate(("node-a", "node-b", "node-c")):
        rep = report(r, node)
        rep["interfaces"] = [{"name": "eth1", "addrs": [f"10.101.0.{11 + r}/24"], "up": up_b if r == 1 else True}]
        rep["paths"] = {"10.101.0.0/24": rows[r]}
        out.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    return out


def test_only_up_false_is_down_unknown_and_up_are_not():
    for up, kind in ((False, "down"), (None, "isolated"), (True, "isolated")):
        [m] = evidence.matrices(_ranks(up))
        assert m.down == ((False, True, False) if up is False else ())
        e = network.explain_matrix(m)
        assert (e.kind, e.culprits) == (kind, ("node-b",)), e
