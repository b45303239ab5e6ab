"""Nodes that resolve MASTER_ADDR elsewhere, each from its own source (issue 31): whatever
the node count, which ranks answer oddly and where each got its answer (its /etc/hosts, a
DNS server, unknown), the verdict names exactly those nodes, and each one's fix points at
its own source, never at rank 0 or a firewall."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from disttrain.diagnosis import attribution
from disttrain.diagnosis.findings import Finding, ProbeOutcome, typed
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import report, typed_report

NAMES = tuple(f"node-{c}" for c in "abcdefgh")
MASTER = "master.train"
SOURCES = [("hosts", None), ("dns", "10.96.0.10"), ("dns", "10.0.0.53"), (None, None)]


def case(n: int, odd: dict[int, tuple[tuple, str]]):
    """``n`` ranks, rank r on NAMES[r] holding 10.100.0.(11+r); ``odd``: rank -> ((source,
    server), answer) for the ranks that resolved MASTER elsewhere and timed out dialling it;
    every other rank resolved rank 0's address and reached it."""
    outs = []
    for r in range(n):
        rep = report(r, NAMES[r])
        rep["interfaces"] = [{"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "up": True}]
        m = {"addr": MASTER, "port": 29500, "resolved": ["10.100.0.11"],
             "route": {"iface": "eth0", "src": f"10.100.0.{11 + r}"}}
        if r in odd:
            (source, server), answer = odd[r]
            m.update(resolved=[answer], source=source, server=server)
            rep.update(ok=False, chosen=None, failure={"reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
                                                       "message": f"{NAMES[r]} (rank {r}): dial timeout"})
        elif r:
            m["connected"] = "10.100.0.11"
        rep["master"] = m
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=NAMES[r], report=typed_report(rep))))
    return outs


def own_fix(fix: str, node: str) -> str:
    """The clause of ``fix`` that names ``node``."""
    [clause] = [c for c in fix.split("; ") if node in c]
    return clause


SOURCE_WORDS = {"hosts": "entry in", "dns": "record", None: "/etc/hosts or DNS"}


@given(st.integers(3, 8).flatmap(lambda n: st.tuples(
    st.just(n),
    st.dictionaries(st.integers(1, n - 1), st.tuples(st.sampled_from(SOURCES),
                                                      st.sampled_from(["10.100.0.99", "10.100.0.98", "127.0.1.1"])),
                    min_size=1, max_size=n - 2))))
def test_each_odd_answer_is_named_with_its_own_source(arg):
    n, odd = arg
    outs = case(n, odd)
    e = attribution.explain_resolution(outs, MASTER)
    assert e is not None and e.kind == "resolution"
    assert set(e.culprits) == {NAMES[r] for r in odd}
    for r, ((source, server), answer) in odd.items():
        assert answer in e.cause
    firsts = {}
    for r in sorted(odd):  # each source's first node leads its fix (a long list ends "and N more")
        firsts.setdefault(odd[r][0], r)
    for (source, server), r in firsts.items():
        # one source among several nodes: its one fix says "their", the cause having named them
        clause = e.fix if len(firsts) == 1 else own_fix(e.fix, NAMES[r])
        assert SOURCE_WORDS[source] in clause and (server is None or server in clause), (r, source, e.fix)
    first = min(odd)
    cause = Finding(V.MASTER_PORT_TIMEOUT, NAMES[first], f"{NAMES[first]} (rank {first}): dial timeout")
    msg, named, kind = attribution.explain(cause, [cause], outs, MASTER)
    assert kind == "resolution" and set(named) == {NAMES[r] for r in odd}
    assert len(msg) <= 400 and "firewall" not in msg and "node-a's" not in e.fix


def test_a_stale_hosts_entry_and_a_dns_answer_get_two_fixes():
    outs = case(4, {1: (("hosts", None), "10.100.0.99"), 3: (("dns", "10.96.0.10"), "10.100.0.98")})
    e = attribution.explain_resolution(outs, MASTER)
    assert e.cause.startswith("node-b resolved MASTER_ADDR master.train to 10.100.0.99 from its /etc/hosts "
                              "and node-d to 10.100.0.98 from its DNS server 10.96.0.10, addresses node-a "
                              "(rank 0) does not hold")
    assert e.fix == ("remove or correct the master.train entry in node-b's /etc/hosts; correct the "
                     "master.train record node-d's DNS server 10.96.0.10 answers (or node-d's resolv.conf "
                     "search and nameserver)")
