"""Attribution (pure): evidence -> the smallest explanation, naming node(s) and fix, or the
remaining candidates and the test that would decide. Tables of dial matrices per class."""
from __future__ import annotations

import pytest

from disttrain.diagnosis import attribution, evidence
from disttrain.diagnosis.findings import ProbeOutcome, typed
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import report, typed_report

NODES = ("node-a", "node-b", "node-c", "node-d")


def matrix(n: int, fail, key="10.101.0.0/24", ifname="eth1", code="timeout") -> evidence.Matrix:
    """n ranks, every dial ok unless ``fail(i, j)`` (i dials j)."""
    cells = tuple(tuple(None if i == j else (code if fail(i, j) else "ok") for j in range(n))
                  for i in range(n))
    return evidence.Matrix(key, NODES[:n], (ifname,) * n, cells)


CASES = [
    # name, matrix, kind, culprits, words in the cause
    ("inbound filter on node-c", matrix(3, lambda i, j: j == 2), "inbound", ("node-c",),
     ["no connection to node-c got through", "node-c filters inbound"]),
    ("node-c reaches no one", matrix(3, lambda i, j: 2 in (i, j)), "isolated", ("node-c",),
     ["node-c reaches no peer on eth1 on 10.101.0.0/24", "node-c's eth1"]),
    ("one pair among three", matrix(3, lambda i, j: {i, j} == {0, 2}), "pairs", ("node-a", "node-c"),
     ["the path node-a<->node-c is blocked", "both reach the other nodes"]),
    ("two pairs among four", matrix(4, lambda i, j: {i, j} in ({0, 2}, {1, 3})), "pairs", NODES,
     ["node-a<->node-c, node-b<->node-d"]),
    ("one dropped direction between two", matrix(2, lambda i, j: (i, j) == (0, 1)), "inbound",
     ("node-b",), ["no connection to node-b"]),
    ("both directions between two", matrix(2, lambda i, j: True), "candidates", ("node-a", "node-b"),
     ["dials failed on eth1 on 10.101.0.0/24 between node-a<->node-b"]),
]


@pytest.mark.parametrize("name,m,kind,culprits,words", CASES, ids=[c[0] for c in CASES])
def test_matrix_table(name, m, kind, culprits, words):
    e = attribution.explain_matrix(m)
    assert (e.kind, set(e.culprits)) == (kind, set(culprits)), e
    for w in words:
        assert w in e.cause, e.cause
    assert len(e.message("x" * 1000)) <= 400
    if kind in ("pairs", "candidates"):
        assert e.decide.startswith("tcpdump on ")  # the test that tells the two sides apart


def test_a_clean_matrix_needs_no_explanation():
    assert attribution.explain_matrix(matrix(3, lambda i, j: False)) is None


def test_a_pair_blocked_on_every_network_is_said_once_for_all():
    ms = [matrix(3, lambda i, j: {i, j} == {0, 2}, "10.100.0.0/24", "eth0"),
          matrix(3, lambda i, j: {i, j} == {0, 2})]
    e = attribution.explain_networks(ms)
    assert "blocked on every network (eth0, eth1)" in e.cause and e.culprits == ("node-a", "node-c")
    # differing evidence per network: the first network's explanation
    ms[1] = matrix(3, lambda i, j: j == 1)
    assert attribution.explain_networks(ms).kind == "pairs"


def reports_with_paths(rows: dict[int, dict[str, str]], n=3):
    outs = []
    for r in range(n):
        rep = report(r, NODES[r])
        rep["interfaces"] = [{"name": "eth1", "addrs": [f"10.101.0.{11 + r}/24"], "up": True},
                             {"name": "docker0", "addrs": ["172.17.0.1/16"], "up": True}]
        rep["paths"] = rows.get(r, {})
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=NODES[r], report=typed_report(rep))))
    return outs


def test_matrices_from_reports_leave_out_node_local_bridges():
    ranks = reports_with_paths({0: {"10.101.0.0/24": ".ot", "172.17.0.0/16": ".ww"},
                                1: {"10.101.0.0/24": "o.o"}, 2: {"10.101.0.0/24": "To."}})
    [m] = evidence.matrices(ranks)
    assert m.key == "10.101.0.0/24" and m.ifnames == ("eth1",) * 3
    assert m.cells[0] == (None, "ok", "timeout") and m.cells[2] == ("timeout", "ok", None)
    assert attribution.explain_matrix(m).kind == "pairs"


def master_case(results: dict[int, str], rank0_nics=None, dialler_nics=None):
    """Rank 0 on node-a; per rank >= 1 'ok', 'timeout', 'refused' or 'running'."""
    outs = []
    for r in range(1 + len(results)):
        rep = report(r, NODES[r])
        rep["interfaces"] = [{"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "up": True}]
        rep["master"] = {"addr": "10.100.0.11", "port": 29500, "resolved": ["10.100.0.11"],
                         "route": {"iface": "eth0", "src": f"10.100.0.{11 + r}"}}
        if r == 0 and rank0_nics:
            rep["interfaces"] = rank0_nics
        if r and dialler_nics:
            rep["interfaces"] = dialler_nics(r)
        st = results.get(r)
        running = st == "running"
        if st == "ok":
            rep["master"]["connected"] = "10.100.0.11"
        elif st in ("timeout", "refused"):
            rep.update(ok=False, chosen=None, failure={
                "reason": V.MASTER_PORT_TIMEOUT if st == "timeout" else V.MASTER_PORT_REFUSED,
                "phase": "rendezvous", "message": f"{NODES[r]} (rank {r}): dial {st}"})
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=NODES[r],
                                       report=None if running else typed_report(rep), running=running)))
    return outs


MASTER_CASES = [
    ("some ranks got through", {1: "ok", 2: "timeout"}, "master-path", {"node-c", "node-a"},
     ["node-c could not reach MASTER_ADDR 10.100.0.11 (node-a, rank 0) on TCP 29500 while node-b did",
      "not node-a's firewall"]),
    ("a rank still running got past the dial", {1: "running", 2: "timeout"}, "master-path",
     {"node-c", "node-a"}, ["while node-b did"]),
    ("no rank got through", {1: "timeout", 2: "timeout"}, "master-node", {"node-a"},
     ["no rank reached MASTER_ADDR 10.100.0.11 (node-a, rank 0)", "node-a's firewall drops it"]),
    ("refused everywhere", {1: "refused", 2: "refused"}, "master-node", {"node-a"},
     ["node-a's firewall rejects it"]),
]


@pytest.mark.parametrize("name,results,kind,culprits,words", MASTER_CASES, ids=[c[0] for c in MASTER_CASES])
def test_master_table(name, results, kind, culprits, words):
    e = attribution.explain_master(master_case(results), "10.100.0.11", 29500)
    assert (e.kind, set(e.culprits)) == (kind, culprits), e
    for w in words:
        assert w in e.cause, e.cause


def test_one_dialling_rank_leaves_two_candidates_and_says_what_decides():
    e = attribution.explain_master(master_case({1: "timeout"}), "10.100.0.11", 29500)
    assert e.kind == "master-node" and "or the path node-b->node-a" in e.cause
    assert e.decide == "tcpdump on node-a: SYNs from node-b arriving unanswered: node-a's rule; none: node-b's or the path"


def test_master_address_on_one_of_two_nics_on_a_subnet_is_not_a_firewall():
    """node-a's InternalIP (MASTER_ADDR) lives on eth0, which reaches nobody; eth1 is on the
    same subnet: the message names both NICs, the address to advertise, and no firewall."""
    nics = [{"name": "eth0", "addrs": ["10.100.0.11/24"], "up": True},
            {"name": "eth1", "addrs": ["10.100.0.21/24"], "up": True}]
    e = attribution.explain_master(master_case({1: "timeout"}, rank0_nics=nics), "10.100.0.11", 29500)
    assert e.kind == "two-nics" and e.culprits == ("node-a",)
    assert "node-a has two NICs on 10.100.0.0/24 (eth0 10.100.0.11, eth1 10.100.0.21)" in e.cause
    assert "leaves by eth0" in e.cause and "not a firewall" in e.cause
    assert "advertise the address peers reach (eth1's 10.100.0.21)" in e.fix
    # the same node as a dialler: its route to the master leaves by the NIC that fails
    dual = lambda r: [{"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "up": True},  # noqa: E731
                      {"name": "eth1", "addrs": [f"10.100.0.{21 + r}/24"], "up": True}]
    e = attribution.explain_master(master_case({1: "timeout"}, dialler_nics=dual), "10.100.0.11", 29500)
    assert e.kind == "two-nics" and e.culprits == ("node-b",) and "eth1's 10.100.0.22" in e.fix


def test_no_master_failure_no_explanation():
    assert attribution.explain_master(master_case({1: "ok", 2: "ok"}), "10.100.0.11", 29500) is None


@pytest.mark.parametrize("check,kind,words", [
    ({"port": 1, "r": "refused", "arp": "complete"}, "master-node", ["node-a's firewall drops it"]),
    ({"port": 1, "r": "timeout", "arp": "complete"}, "master-silent",
     ["node-a answered ARP for 10.100.0.11 but no TCP port answers node-b", "two NICs on one subnet",
      "not a firewall for TCP 29500 alone"]),  # and the decide test fits: see below
    ({"port": 1, "r": "unreachable", "arp": "incomplete"}, "master-silent",
     ["no host answers ARP for 10.100.0.11 (node-a, rank 0) from node-b", "not a firewall"]),
])
def test_the_master_host_check_tells_a_port_filter_from_lost_replies(check, kind, words):
    """When the master port fails, the dialler tries another port of the host and reads its
    ARP entry: a host that resets port 1 filters the master port alone (a firewall); one
    that answers ARP but no port loses its replies (not a port firewall)."""
    from disttrain.diagnosis.report import HostCheck
    ranks = master_case({1: "timeout"})
    ranks[1].report.master.host_check = HostCheck(**check)
    e = attribution.explain_master(ranks, "10.100.0.11", 29500)
    assert e.kind == kind and e.culprits == ("node-a",)
    for w in words:
        assert w in e.cause, e.cause
    if check["r"] == "refused":
        assert e.decide == ""  # the host answered elsewhere: the port filter is decided
    assert "…" not in e.message() and len(e.message()) <= 400


def unresolved_case(dual_dns_src: str | None = "10.100.0.11"):
    """Two ranks; node-a has eth0 10.100.0.11 and eth1 10.100.0.21 on one subnet and could not
    resolve MASTER_ADDR (its DNS server's route leaves by eth0); node-b resolved it."""
    outs = []
    for r in range(2):
        node = NODES[r]
        rep = report(r, node)
        rep["interfaces"] = [{"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "up": True}]
        rep["master"] = {"addr": "j-0.j", "port": 29500, "resolved": ["10.100.0.12"]}
        if node == "node-a":
            rep["interfaces"].append({"name": "eth1", "addrs": ["10.100.0.21/24"], "up": True})
            rep["master"] = {"addr": "j-0.j", "port": 29500, "resolved": []}
            if dual_dns_src:
                rep["master"]["dns"] = {"server": "10.96.0.10", "iface": "eth0", "src": dual_dns_src}
            rep.update(ok=False, chosen=None, failure={
                "reason": V.MASTER_ADDR_UNRESOLVABLE, "phase": "rendezvous",
                "message": f"node-a (rank {r}): MASTER_ADDR=j-0.j does not resolve"})
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    return outs


@pytest.mark.parametrize("src", ["10.100.0.11", None])
def test_a_name_that_resolves_elsewhere_on_a_two_nic_node_names_the_nics_not_dns(src):
    """Seen in CI: gang-scheduled probes use rank 0's DNS name; node-a (two NICs on one
    subnet) could not reach its DNS server. The verdict names the NICs, not the record."""
    e = attribution.explain_unresolvable(unresolved_case(src), "j-0.j")
    assert e.kind == "two-nics" and e.culprits == ("node-a",)
    assert "node-a could not resolve MASTER_ADDR j-0.j while node-b resolved it to 10.100.0.12" in e.cause
    assert "two NICs on 10.100.0.0/24 (eth0 10.100.0.11, eth1 10.100.0.21)" in e.cause
    assert "leaves by eth0" in e.cause and "not a firewall" in e.cause
    assert "eth1's 10.100.0.21" in e.fix


def test_a_name_that_resolves_elsewhere_blames_the_dns_path_of_the_failing_node():
    outs = unresolved_case()
    outs[0].report.interfaces.pop()  # node-a has one NIC: no two-NIC explanation
    e = attribution.explain_unresolvable(outs, "j-0.j")
    assert e.kind == "dns-path" and e.culprits == ("node-a",)
    assert "the record exists" in e.cause and "10.96.0.10 (by eth0)" in e.cause
    assert e.decide == "nslookup j-0.j 10.96.0.10 on node-a"


def test_a_rank_that_resolved_another_name_of_the_job_is_not_blamed_on_its_dns_path():
    """Seen at 32 nodes (bench-scale, gang probes on 2 cores): rank 0's record came late and
    some ranks gave up on it; a rank whose own name resolved has a working DNS path, so the
    'record exists, your DNS path fails' verdict would name the wrong culprit."""
    outs = unresolved_case()
    outs[0].report.interfaces.pop()
    outs[0].report.master.peer_name = "j-1.j"
    assert attribution.explain_unresolvable(outs, "j-0.j") is None  # the probe's own words stand


def test_a_name_no_rank_resolved_on_single_nic_nodes_is_left_to_the_probe():
    outs = unresolved_case()
    outs[0].report.interfaces.pop()
    outs[1].report.master.resolved.clear()
    assert attribution.explain_unresolvable(outs, "j-0.j") is None
    assert attribution.explain_unresolvable(master_case({1: "ok"}), "10.100.0.11") is None


def test_a_refused_master_port_is_never_called_lost_replies():
    """Seen in make bench-diagnosis (firewall-master-reject, gang-scheduled probes): the
    dial was refused (a reset came back) but the host check, run at the deadline with no
    time left, read 'timeout'; the verdict said the replies were lost. A refusal is an
    answer: the port is rejected."""
    from disttrain.diagnosis.report import HostCheck
    ranks = master_case({1: "refused"})
    ranks[1].report.master.host_check = HostCheck(port=1, r="timeout", arp="complete")
    e = attribution.explain_master(ranks, "10.100.0.11", 29500)
    assert e.kind == "master-node" and e.culprits == ("node-a",)
    assert "node-a's firewall rejects it" in e.cause and "replies are lost" not in e.cause


def test_a_refusal_while_rank_0s_beacon_answers_is_the_firewall_not_nothing_listening():
    """Gang-scheduled probes start together: a refused master port alone leaves 'nothing
    listens there' open. When rank 0's probe answered on its beacon port (bound after the
    master port) the candidate is gone; without the beacon, both stay."""
    from disttrain.diagnosis.report import HostCheck
    ranks = master_case({1: "refused"})
    ranks[1].report.master.host_check = HostCheck(port=29501, r="ok", arp="complete", listening=True)
    e = attribution.explain_master(ranks, "10.100.0.11", 29500)
    assert e.kind == "master-node" and e.culprits == ("node-a",) and e.decide == ""
    assert "node-a's firewall (or a NetworkPolicy) rejects it" in e.cause
    assert "nothing listens" not in e.cause and "answers on TCP 29501" in e.cause
    assert len(e.message("x" * 500)) <= 400
    ranks[1].report.master.host_check = HostCheck(port=1, r="refused", arp="complete")
    assert "or nothing listens there" in attribution.explain_master(ranks, "10.100.0.11", 29500).cause
    # a silent dialler beside the refused one: the beacon does not decide for it
    ranks = master_case({1: "refused", 2: "timeout"})
    ranks[1].report.master.host_check = HostCheck(port=29501, r="ok", listening=True)
    assert "rank 0's probe listens there" not in attribution.explain_master(ranks, "10.100.0.11", 29500).cause


def test_at_1024_ranks_the_planned_dials_name_one_bad_node_and_one_bad_pair():
    """Beyond what the machine hosts (issue 11): the probe's plan for 1024 ranks (<= 6 dials
    per rank) and the attribution of its results, with a fault injected. A node whose
    inbound TCP is blocked is named alone (inbound); a pair blocked both ways while each
    reaches its other peers is named as that pair. With both at once each is singled out by
    its own evidence, and both are named (inbound+pairs)."""
    from disttrain_probe.phases.connectivity import plan

    n = 1024
    nodes = tuple(f"n{r:04d}" for r in range(n))
    dial = plan(n, 20261201)

    def matrix(fault):
        cells = [[None] * n for _ in range(n)]
        for i, peers in dial.items():
            for j in peers:
                cells[i][j] = fault(i, j)
        return evidence.Matrix("10.0.0.0/16", nodes, ("eth0",) * n, tuple(tuple(r) for r in cells))

    bad, a = 700, 100
    b = dial[a][-1]  # a planned partner of rank 100
    one_node = attribution.explain_matrix(matrix(lambda i, j: "timeout" if j == bad else "ok"))
    assert one_node.kind == "inbound" and one_node.culprits == ("n0700",)
    one_pair = attribution.explain_matrix(matrix(lambda i, j: "timeout" if {i, j} == {a, b} else "ok"))
    assert one_pair.culprits == tuple(sorted((nodes[a], nodes[b])))
    assert one_pair.pairs == ((nodes[min(a, b)], nodes[max(a, b)]),)
    assert f"the path {nodes[min(a, b)]}<->{nodes[max(a, b)]} is blocked" in one_pair.cause
    both = attribution.explain_matrix(matrix(lambda i, j: "timeout" if j == bad or {i, j} == {a, b} else "ok"))
    assert both.kind == "inbound+pairs"
    assert both.culprits == ("n0700",) + tuple(sorted((nodes[a], nodes[b])))
    assert both.pairs == ((nodes[min(a, b)], nodes[max(a, b)]),)
    msg = both.message()
    assert len(msg) <= 400 and "n0700 filters inbound TCP" in msg
    assert f"the path {nodes[min(a, b)]}<->{nodes[max(a, b)]} is blocked" in msg
    # a second node that reaches no one at all is no longer two clean faults: candidates
    worse = attribution.explain_matrix(matrix(lambda i, j: "timeout" if j == bad or {i, j} == {a, b}
                                    or 5 in (i, j) else "ok"))
    assert worse.kind != "inbound+pairs"


# -- islands: groups that reach only each other (issue 19) ---------------------------------

def test_two_islands_are_a_partition_not_a_firewall():
    m = matrix(4, lambda i, j: (i < 2) != (j < 2))
    e = attribution.explain_matrix(m)
    assert e.kind == "islands" and e.groups == (("node-a", "node-b"), ("node-c", "node-d"))
    assert "eth1 forms two networks: {node-a, node-b} and {node-c, node-d}" in e.cause
    assert "firewall" not in e.message("x" * 1000)
    assert "network.socketIfname" in e.fix


def test_islands_from_reports_name_each_group_s_subnet():
    """Four nodes whose eth1 sits on two subnets (the probe groups eth1 by name: a routed
    network): each pair reaches only its own subnet. The verdict names both groups with
    their subnets and no firewall."""
    outs = []
    for r, node in enumerate(NODES):
        net = 101 if r < 2 else 102
        rep = report(r, node, ifname="eth0")
        rep["interfaces"] = [{"name": "eth1", "addrs": [f"10.{net}.0.{11 + r}/24"], "up": True}]
        rep["paths"] = {"ifname:eth1": "".join("." if p == r else ("o" if (p < 2) == (r < 2) else "t")
                                               for p in range(4))}
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    e = attribution.explain_networks(evidence.matrices(outs))
    assert e.kind == "islands"
    assert ("eth1 forms two networks: {node-a, node-b} on 10.101.0.0/24 and {node-c, node-d} on "
            "10.102.0.0/24") in e.cause
    assert "firewall" not in e.message()


def test_two_nodes_on_their_own_subnets_are_islands_but_on_one_subnet_stay_candidates():
    both_fail = matrix(2, lambda i, j: True, key="ifname:eth1")
    apart = evidence.Matrix(both_fail.key, both_fail.nodes, both_fail.ifnames, both_fail.cells,
                            ("10.101.0.0/24", "10.102.0.0/24"))
    assert attribution.explain_matrix(apart).kind == "islands"
    same = evidence.Matrix(both_fail.key, both_fail.nodes, both_fail.ifnames, both_fail.cells,
                           ("10.101.0.0/24", "10.101.0.0/24"))
    assert attribution.explain_matrix(same).kind == "candidates"


def test_components_of_a_graph():
    edges = {(0, 1), (2, 3), (3, 4)}
    assert attribution.components(6, lambda i, j: (i, j) in edges) == [[0, 1], [2, 3, 4], [5]]


# -- nodes that disagree about a name (issue 19) --------------------------------------------

def resolution_case(answers: dict, source=None, server=None, failed=(2,)):
    """MASTER_ADDR master.train; rank 0 (node-a) holds 10.100.0.11; ``answers``: rank ->
    the address it resolved; ranks in ``failed`` timed out at the master port."""
    outs = master_case({r: ("timeout" if r in failed else "ok") for r in answers if r})
    for o in outs:
        m = o.report.master if o.report else None
        if m is None:
            continue
        object.__setattr__(m, "addr", "master.train")
        object.__setattr__(m, "resolved", [answers[o.rank]])
        if o.rank in failed:
            object.__setattr__(m, "source", source)
            object.__setattr__(m, "server", server)
    return outs


@pytest.mark.parametrize("source,server,where,fix", [
    ("hosts", None, "from its /etc/hosts", "remove or correct the master.train entry in node-c's /etc/hosts"),
    ("dns", "10.96.0.10", "from its DNS server 10.96.0.10", "correct the master.train record node-c's DNS server 10.96.0.10"),
    (None, None, "", "correct master.train in node-c's /etc/hosts or DNS"),
])
def test_a_node_that_resolves_the_master_elsewhere_is_named_and_rank_0_left_alone(source, server, where, fix):
    outs = resolution_case({0: "10.100.0.11", 1: "10.100.0.11", 2: "10.100.0.99"}, source, server)
    e = attribution.explain_resolution(outs, "master.train")
    assert e.kind == "resolution" and e.culprits == ("node-c",)
    assert (f"node-c resolved MASTER_ADDR master.train to 10.100.0.99{' ' + where if where else ''}, "
            f"an address node-a (rank 0) does not hold; node-a holds 10.100.0.11, which node-b resolved") in e.cause
    assert "not node-a" in e.cause and "InternalIP" not in e.message()
    assert e.fix.startswith(fix)
    # through explain(): the master-port failure gets this verdict, not rank 0's firewall
    from disttrain.diagnosis.findings import Finding
    cause = Finding(V.MASTER_PORT_TIMEOUT, "node-c", "node-c (rank 2): dial timeout")
    msg, named, kind = attribution.explain(cause, [cause], outs, "master.train")
    assert (kind, named) == ("resolution", ["node-c"]) and len(msg) <= 400


@pytest.mark.parametrize("answers,failed,master", [
    ({0: "10.100.0.99", 1: "10.100.0.99", 2: "10.100.0.99"}, (1, 2), "master.train"),  # everyone agrees
    ({0: "10.100.0.11", 1: "10.100.0.11", 2: "10.100.0.99"}, (1,), "master.train"),    # a failure it cannot explain
    ({0: "10.100.0.11", 1: "10.100.0.11", 2: "10.100.0.99"}, (2,), "10.100.0.11"),     # an address, no name
])
def test_resolution_is_not_blamed_without_the_evidence(answers, failed, master):
    assert attribution.explain_resolution(resolution_case(answers, failed=failed), master) is None


def test_only_rank_0_vouching_leaves_a_stale_record_and_a_forwarding_address_as_candidates():
    """Two of three nodes dialled 10.100.0.99, which node-a (rank 0) does not hold, from an
    answer of unknown source, and no ARP evidence: a stale record or a Service VIP that
    forwards nowhere; both named with what decides, never node-a's firewall. Their own
    /etc/hosts, or no host answering ARP for it, decides: their answer is stale."""
    outs = resolution_case({0: "10.100.0.11", 1: "10.100.0.99", 2: "10.100.0.99"}, failed=(1, 2))
    e = attribution.explain_resolution(outs, "master.train")
    assert e.culprits == ("node-b", "node-c", "node-a") and e.decide.startswith("getent hosts master.train")
    assert "not node-a's firewall" in e.cause and "a Service" in e.cause
    for i in (1, 2):
        object.__setattr__(outs[i].report.master, "source", "hosts")
    e = attribution.explain_resolution(outs, "master.train")
    assert e.culprits == ("node-b", "node-c") and not e.decide
    assert e.fix.startswith("remove or correct the master.train entry in their /etc/hosts")


def test_rank_0_unreported_and_a_peer_still_running_are_evidence_enough():
    """As on the proving ground: node-c failed at the master port before the others
    reported; rank 0 (node-a) is still serving and node-b still running past its dial.
    Rank 0's pod address and node-b's progress are the evidence: node-c's resolution."""
    from dataclasses import replace

    outs = resolution_case({0: "10.100.0.11", 1: "10.100.0.11", 2: "10.100.0.99"}, "hosts")
    outs[0] = replace(outs[0], report=None, running=True, pod_ips=("10.100.0.11",))
    outs[1] = replace(outs[1], report=None, running=True)
    e = attribution.explain_resolution(outs, "master.train")
    assert e is not None and e.culprits == ("node-c",)
    assert "node-a holds 10.100.0.11, which node-b reached" in e.cause
    assert e.fix.startswith("remove or correct the master.train entry in node-c's /etc/hosts")
    # without rank 0's pod address nothing tells the stale answer from rank 0's
    outs[0] = replace(outs[0], pod_ips=())
    assert attribution.explain_resolution(outs, "master.train") is None


def own_case(rank0_answer: str, others: str = "10.100.0.11", connected: bool = True, source="hosts"):
    """Three ranks, MASTER_ADDR master.train, rank 0 on node-a (10.100.0.11): rank 0
    resolved ``rank0_answer``, the others ``others`` (and reached it when ``connected``)."""
    outs = resolution_case({0: rank0_answer, 1: others, 2: others}, failed=())
    for o in outs:
        m = o.report.master
        object.__setattr__(m, "connected", others if (o.rank and connected) else None)
        if o.rank == 0:
            object.__setattr__(m, "source", source)
    return outs


def test_rank_0_own_node_resolving_elsewhere_fails_naming_it():
    [f] = attribution.own_resolution(own_case("10.100.0.99"), "master.train")
    assert f.reason == V.MASTER_ADDR_RESOLVES_ELSEWHERE and f.node == "node-a"
    assert f.message.startswith("node-a (rank 0) resolved MASTER_ADDR master.train to 10.100.0.99 from "
                                "its /etc/hosts, an address it does not hold; node-b, node-c resolved it "
                                "to 10.100.0.11, node-a's, and reached it")
    assert "remove or correct the master.train entry in node-a's /etc/hosts" in f.message
    assert len(f.message) <= 400
    from disttrain.api import constants
    from disttrain.diagnosis.diagnose import diagnose

    d = diagnose([ProbeOutcome(rank=r.rank, pod=r.pod, node=r.node, report=r.report)
                  for r in own_case("10.100.0.99")], "master.train")
    mr = d.conditions[constants.MASTER_REACHABLE]
    assert (mr.status, mr.reason) == ("False", V.MASTER_ADDR_RESOLVES_ELSEWHERE) and not d.validated


@pytest.mark.parametrize("rank0,others,connected,master", [
    ("10.100.0.11", "10.100.0.11", True, "master.train"),   # everyone agrees, rank 0 holds it
    ("10.96.5.5", "10.96.5.5", True, "master.train"),       # a Service VIP every node resolves alike
    ("10.100.0.99", "10.100.0.11", False, "master.train"),  # the others did not reach it
    ("10.100.0.99", "10.100.0.11", True, "10.100.0.99"),    # an address, not a name
])
def test_own_resolution_needs_the_other_ranks_evidence(rank0, others, connected, master):
    assert attribution.own_resolution(own_case(rank0, others, connected), master) == []


def test_two_nodes_the_dialler_that_resolved_elsewhere_is_named():
    outs = resolution_case({0: "10.100.0.11", 1: "10.100.0.99"}, "hosts", failed=(1,))
    e = attribution.explain_resolution(outs, "master.train")
    assert e.culprits == ("node-b",) and "node-a holds 10.100.0.11:" in e.cause


def test_islands_on_two_subnets_keyed_apart_are_seen_together():
    """As the probe keys them on a real cluster: eth1 on 10.101.0.0/24 (node-a, node-b) and
    on 10.102.0.0/24 (node-c, node-d) are two networks; on each, the two nodes without an
    address there fail to reach the two that have one. Taken one at a time that reads
    'node-c, node-d reach no peer'; together it is two islands."""
    outs = []
    for r, node in enumerate(NODES):
        net = 101 if r < 2 else 102
        rep = report(r, node, ifname="eth1")
        rep["interfaces"] = [{"name": "eth1", "addrs": [f"10.{net}.0.{11 + r}/24"], "up": True}]
        rep["paths"] = {
            "10.101.0.0/24": "".join("." if p == r else ("o" if r < 2 else "u") if p < 2 else "-"
                                     for p in range(4)),
            "10.102.0.0/24": "".join("." if p == r else ("o" if r >= 2 else "u") if p >= 2 else "-"
                                     for p in range(4))}
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    ms = evidence.matrices(outs)
    assert attribution.explain_matrix(ms[0]).kind == "isolated"  # one network alone misleads
    e = attribution.explain_networks(ms)
    assert e.kind == "islands", e
    assert ("eth1 forms two networks: {node-a, node-b} on 10.101.0.0/24 and {node-c, node-d} on "
            "10.102.0.0/24") in e.cause and "firewall" not in e.message()


def test_islands_are_named_by_node_whatever_the_ranks():
    """On the proving ground node-d got rank 2 and the verdict read {node-d, node-c}: the
    groups are listed by node name, so the message does not depend on the placement."""
    nodes = ("node-a", "node-d", "node-c", "node-b")  # rank order
    side = {"node-a": 0, "node-b": 0, "node-c": 1, "node-d": 1}
    cells = tuple(tuple(None if i == j else ("ok" if side[nodes[i]] == side[nodes[j]] else "timeout")
                        for j in range(4)) for i in range(4))
    e = attribution.explain_matrix(evidence.Matrix("ifname:eth1", nodes, ("eth1",) * 4, cells))
    assert e.groups == (("node-a", "node-b"), ("node-c", "node-d"))
    assert "{node-a, node-b} and {node-c, node-d}" in e.cause


@pytest.mark.parametrize("n, alone", [(3, 0), (5, 2), (8, 7), (2, 1)])
def test_one_node_on_a_subnet_of_its_own_is_an_island_not_a_broken_nic(n, alone):
    """Found by the fault generator (seed 7, case 2): eth1 of every node but one on
    10.101.0.0/24, the odd one's on 10.102.0.0/24, no route between. The probe keys the
    others' eth1 by their subnet (the odd node fails to reach them there) and the odd node's
    by name: its subnet, read from its own eth1, makes two islands, not 'node-c's NIC (link,
    address, route or firewall)'. Whatever the node count and the odd node's rank."""
    nodes = tuple(f"node-{c}" for c in "abcdefgh"[:n])
    outs = []
    for r, node in enumerate(nodes):
        net = 102 if r == alone else 101
        rep = report(r, node, ifname="eth1")
        rep["interfaces"] = [{"name": "eth1", "addrs": [f"10.{net}.0.{11 + r}/24"], "up": True}]
        rep["paths"] = {"10.101.0.0/24": "".join(
            "." if p == r else "-" if p == alone else ("u" if r == alone else "o") for p in range(n))}
        if r != alone:
            rep["paths"]["ifname:eth1"] = "".join("." if p == r else "u" if p == alone else "-" for p in range(n))
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    e = attribution.explain_networks(evidence.matrices(outs))
    assert e.kind == "islands", e  # at 2 nodes too: every group on a subnet of its own
    assert "firewall" not in e.message()
    assert all(x in e.cause for x in nodes + ("10.101.0.0/24", "10.102.0.0/24")), e.cause
    assert "{" + nodes[alone] + "} on 10.102.0.0/24" in e.cause


@pytest.mark.parametrize("n, odd", [(4, (0, 1)), (3, (0,)), (4, (0, 3)), (4, (0, 1, 2))])
def test_rank_0_s_own_stale_entry_is_named_with_the_others(n, odd):
    """Found by the fault generator on the direct path (seed 1, case 46): MASTER_ADDR resolves
    to 10.100.0.99 from /etc/hosts on rank 0's node and others; the rest resolve rank 0's
    address. The odd nodes' files are the fault, rank 0's among them; never a firewall."""
    answers = {r: "10.100.0.99" if r in odd else "10.100.0.11" for r in range(n)}
    failed = tuple(r for r in odd if r != 0) or (n - 1,)
    if failed == (n - 1,):
        answers[n - 1] = "10.100.0.99"
    outs = resolution_case(answers, "hosts", failed=failed)
    e = attribution.explain_resolution(outs, "master.train")
    assert e is not None
    named = {outs[r].node for r, a in answers.items() if a == "10.100.0.99"}
    assert set(e.culprits) == named and "10.100.0.99" in e.cause and "/etc/hosts" in e.fix
    assert "firewall" not in e.cause + e.fix and f", not {outs[0].node}" not in e.cause


@pytest.mark.parametrize("n,down", [(2, (1,)), (3, (0,)), (4, (1, 3)), (4, (2,))])
def test_a_node_whose_interface_is_down_is_the_link_not_a_firewall(n, down):
    """Whatever the node count and whichever nodes: the nodes that said their NIC is down
    are named, with the link as the cause; a node that only dialled them is not."""
    base = matrix(n, lambda i, j: i in down or j in down)
    m = evidence.Matrix(base.key, base.nodes, base.ifnames, base.cells, (), tuple(x in down for x in range(n)))
    e = attribution.explain_matrix(m)
    assert (e.kind, set(e.culprits)) == ("down", {NODES[x] for x in down}), e
    text = e.message()
    assert "is down (no carrier)" in text and "firewall" not in text
    assert all(NODES[x] not in e.cause for x in range(n) if x not in down)


def test_a_down_interface_does_not_explain_failures_between_other_nodes():
    # node-b is down, but node-a<->node-c fails too: the link explains only part of it
    base = matrix(3, lambda i, j: 1 in (i, j) or {i, j} == {0, 2})
    m = evidence.Matrix(base.key, base.nodes, base.ifnames, base.cells, (), (False, True, False))
    assert attribution.explain_matrix(m).kind != "down"


def test_the_capture_test_follows_the_direction_that_failed():
    # only node-c's dials to node-a fail (an egress rule on node-c, or node-a's inbound rule)
    m = matrix(3, lambda i, j: (i, j) == (2, 0))
    e = attribution.explain_matrix(m)
    assert e.decide.startswith("tcpdump on node-a: SYNs from node-c"), e.decide
    back = matrix(3, lambda i, j: (i, j) == (0, 2))
    assert attribution.explain_matrix(back).decide.startswith("tcpdump on node-c: SYNs from node-a")
