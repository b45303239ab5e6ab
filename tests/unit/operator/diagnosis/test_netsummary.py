"""Network summary (pure): what was chosen, and every interface not chosen, each reason once."""
import pytest

from disttrain.diagnosis import netsummary
from disttrain.diagnosis.findings import ProbeOutcome, typed
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import report, typed_report


def ranks_with(rejected, ifname="eth1"):
    out = []
    for r, node in enumerate(("node-a", "node-b")):
        rep = report(r, node, ifname=ifname)
        rep["rejected"] = rejected
        out.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    return out


DECOYS = [{"ifname": n, "reason": V.REJ_DUPLICATE_ADDRESS,
           "message": f"{n} excluded (same address {a} on node-a, node-b): a node-local bridge"}
          for n, a in (("br-a1", "172.19.0.1"), ("docker0", "172.17.0.1"))]


def test_rejected_clauses_group_by_reason_and_say_each_once():
    rej = {"eth0": (V.REJ_NOT_PREFERRED, "eth0 on 10.100.0.0/24 is usable, but eth1 on 10.101.0.0/24 "
                                         "ranked higher: faster by measurement (9400 vs 950 Mb/s)"),
           "br-a1": (V.REJ_DUPLICATE_ADDRESS, "br-a1 excluded (same address 172.19.0.1 on ...)"),
           "docker0": (V.REJ_DUPLICATE_ADDRESS, "docker0 excluded (same address 172.17.0.1 on ...)"),
           "lo": (V.REJ_LOOPBACK, "lo is loopback")}
    assert netsummary.rejected_clauses(rej) == [
        "eth0 not preferred: faster by measurement (9400 vs 950 Mb/s)",
        "not chosen: eth0 (NotPreferred), br-a1 172.19.0.1, docker0 172.17.0.1 (DuplicateAddress: "
        "the same address on every node), lo (Loopback: never leaves the node)"]


def test_an_interface_chosen_somewhere_is_never_listed_as_rejected():
    rej = [{"ifname": "eth1", "reason": V.REJ_NOT_ON_ALL_NODES, "message": "eth1 on 10.9/24 is missing"},
           *DECOYS]
    assert "eth1" not in netsummary.rejections(ranks_with(rej))
    assert netsummary.network_message(ranks_with(rej)) == "eth1 (10.101.0.0/24) chosen on every node"
    lines = netsummary.not_chosen(ranks_with(rej))
    assert lines[0].startswith("not chosen: br-a1 172.19.0.1, docker0") and "NotOnAllNodes" not in lines[0]


def test_network_message_is_bounded_with_many_interfaces():
    rej = [{"ifname": f"veth{i:04d}", "reason": V.REJ_NO_IPV4, "message": "no IPv4"} for i in range(300)]
    m = netsummary.network_message(ranks_with(rej + DECOYS))
    assert len(m) <= 400 and m.startswith("eth1 (10.101.0.0/24) chosen on every node")


def test_a_nic_broken_on_one_node_is_named_in_the_passing_summary():
    """eth0 works everywhere; node-c's eth1 reaches no one: eth0 is chosen and the
    summary says whose eth1 is broken, not just 'Unreachable'."""
    outs = []
    for r, node in enumerate(("node-a", "node-b", "node-c")):
        rep = report(r, node, ifname="eth0")
        rep["chosen"]["subnet"] = "10.100.0.0/24"
        rep["interfaces"] = [{"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "up": True},
                             {"name": "eth1", "addrs": [f"10.101.0.{11 + r}/24"], "up": True}]
        rep["rejected"] = [{"ifname": "eth1", "reason": V.REJ_UNREACHABLE, "message": "unreachable: ..."}]
        eth1 = "".join("." if p == r else ("t" if 2 in (r, p) else "o") for p in range(3))
        rep["paths"] = {"10.100.0.0/24": "".join("." if p == r else "o" for p in range(3)),
                        "10.101.0.0/24": eth1}
        outs.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    m = netsummary.network_message(outs)
    assert "eth1 unreachable: node-c reaches no peer on eth1 on 10.101.0.0/24" in m
    assert netsummary.node_results(outs)[2]["paths"] == {"10.100.0.0/24": "oo.", "10.101.0.0/24": "tt."}


def test_not_on_every_node_names_the_nodes_that_lack_the_interface():
    """The probe says which nodes lack the network ("... is missing on node-c"); the
    summary carries those names instead of 'not on every node'."""
    rej = [{"ifname": "eth2", "reason": V.REJ_NOT_ON_ALL_NODES,
            "message": "eth2 on 10.102.0.0/24 is missing on node-c, node-d and 3 more"},
           {"ifname": "ib0", "reason": V.REJ_NOT_ON_ALL_NODES, "message": "ib0 absent"}]
    assert ("not chosen: eth2 missing on node-c, node-d and 3 more, ib0 not on every node "
            "(NotOnAllNodes)") in netsummary.not_chosen(ranks_with(rej))[0]


# what the probe's ranking (disttrain_probe/phases/ranking.py) wrote for eth1 in the demo
DEMO_CRITERION = ("equal speed (10000 Mb/s); measured 16944 vs 13398 Mb/s, at or above the 10000 Mb/s the kernel "
                  "reports; it carries the nodes' own address / route to the master on 2 of 2 nodes vs 0; set "
                  "network.socketIfname to choose the other; ranked below eth0 on 10.100.0.0/24")


def _demo(measured=True):
    """The demo's healthy run: eth0 chosen, eth1 the runner-up, loopback and a bridge."""
    out = []
    for r, node in enumerate(("node-a", "node-b")):
        rep = report(r, node, ifname="eth0")
        rep["chosen"]["subnet"] = "10.100.0.0/24"
        rep["interfaces"] = [{"name": "eth0", "addrs": [f"10.100.0.{11 + r}/24"], "up": True},
                             {"name": "eth1", "addrs": [f"10.101.0.{11 + r}/24"], "up": True}]
        if measured:
            rep["interfaces"][0]["measuredMbps"], rep["interfaces"][1]["measuredMbps"] = 16944.0, 13398.0
        rep["rejected"] = [{"ifname": "eth1", "reason": V.REJ_NOT_PREFERRED, "message": DEMO_CRITERION},
                           {"ifname": "lo", "reason": V.REJ_LOOPBACK, "message": "lo is loopback"}, *DECOYS]
        out.append(typed(ProbeOutcome(rank=r, pod=f"p{r}", node=node, report=typed_report(rep))))
    return out


def test_the_healthy_verdict_is_one_sentence_the_rest_goes_to_the_status():
    """The demo's NetworkValidated repeated itself and was cut twice; now it is the choice
    and the criterion that decided (routing: the speeds were equal within the kernel's cap),
    and every interface not chosen is a line of status.probe.interfacesNotChosen."""
    assert netsummary.network_message(_demo()) == (
        "eth0 (10.100.0.0/24) chosen on every node over eth1: it carries the nodes' own address / route to the "
        "master on 2 of 2 nodes vs 0 (equal speed (10000 Mb/s), measured 16944 vs 13398 Mb/s, at or above the "
        "10000 Mb/s the kernel reports)")
    lines = netsummary.not_chosen(_demo())
    assert lines[0] == "eth1 not preferred: " + DEMO_CRITERION.rpartition("; ranked below ")[0]
    assert lines[1] == ("not chosen: eth1 (NotPreferred), br-a1 172.19.0.1, docker0 172.17.0.1 (DuplicateAddress: "
                        "the same address on every node), lo (Loopback: never leaves the node)")


@pytest.mark.parametrize("criterion,said", [
    ("faster by measurement (16944 vs 1000 Mb/s measured; the kernel reports 10000 Mb/s for both)",
     ": 16944 Mb/s measured vs eth1 13398 Mb/s"),
    ("faster (slowest link 25000 vs 10000 Mb/s)", " over eth1: faster (slowest link 25000 vs 10000 Mb/s)"),
    ("equal on speed; measured 16944 vs 13398 Mb/s, less than 1.5x apart and routing; first by name (set "
     "network.socketIfname to choose)",
     " over eth1: first by name (equal on speed, measured 16944 vs 13398 Mb/s, less than 1.5x apart and routing)"),
])
def test_the_verdict_names_the_criterion_that_decided(criterion, said):
    ranks = _demo()
    for r in ranks:
        r.report.rejected[0].message = f"{criterion}; ranked below eth0 on 10.100.0.0/24"
    assert netsummary.network_message(ranks) == "eth0 (10.100.0.0/24) chosen on every node" + said


def test_without_measurements_the_verdict_says_the_criterion_all_the_same():
    m = netsummary.network_message(_demo(measured=False))
    assert m.startswith("eth0 (10.100.0.0/24) chosen on every node over eth1: it carries the nodes' own address")
    assert len(m) <= 400 and "not chosen" not in m and "Loopback" not in m


def test_the_deciding_criterion_is_never_a_cut_advice():
    """Seen in generated cases: "chosen on every node over eth1: set n... (equal speed ...)":
    a long NotPreferred message cut at 400 characters left the start of the probe's "set
    network.socketIfname" advice as if it were the deciding criterion."""
    pad = "; ".join(f"equal criterion {i} ({'x' * 20})" for i in range(12))
    why = (f"{pad}; it carries the nodes' own address / route to the master on 2 of 2 nodes vs 0; "
           "set network.socketIfname: eth1 to use eth1 anyway")
    rej = [{"ifname": "eth1", "reason": V.REJ_NOT_PREFERRED,
            "message": f"{why}; ranked below eth0 on 10.100.0.0/24, though eth1 on 10.101.0.0/24 is usable"}]
    m = netsummary.network_message(ranks_with(rej, ifname="eth0"))
    assert "set n" not in m and len(m) <= 400, m
    assert m.startswith("eth0 (10.101.0.0/24) chosen on every node over eth1: it carries the nodes' own address"), m
