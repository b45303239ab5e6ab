"""A stale MASTER_ADDR answer on some nodes (pure, generated): whichever node the scheduler
gives rank 0, however many nodes there are and wherever each odd node got its answer
(/etc/hosts or its DNS server), the verdict names every odd node, the address they got and
where they got it, and never rank 0's firewall or InternalIP. The class behind the CI
failure of regression/gen-1-080 (rank 0 landed on the one node that resolved right)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.api import constants
from disttrain.diagnosis.diagnose import diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import node_name, report, typed_report

NAME = "ddp-0.ddp"
STALE = "10.100.0.99"


def address(node: int) -> str:
    return f"10.100.0.{11 + node}"


def outcomes(placement: list[int], stale: dict[int, str], arp: bool) -> list[ProbeOutcome]:
    """Rank r on node ``placement[r]``; ``stale``: node -> where its stale answer came from
    (hosts or dns); the others resolve rank 0's address and reach it; a rank > 0 with a
    stale answer timed out at the master port (``arp``: its host check saw no ARP answer)."""
    own = address(placement[0])
    outs = []
    for r, node in enumerate(placement):
        rep = report(r, node_name(node), world_size=len(placement))
        rep["interfaces"] = [{"name": "eth0", "addrs": [f"{address(node)}/24"], "up": True}]
        m = {"addr": NAME, "port": 29500, "resolved": [own], "source": "dns", "server": "10.96.0.10",
             "route": {"iface": "eth0", "src": address(node)}}
        if node in stale:
            m.update(resolved=[STALE], source=stale[node])
        if r and node in stale:
            m["hostCheck"] = {"port": 22, "r": "timeout", "arp": "incomplete" if arp else None}
            rep.update(ok=False, chosen=None, allreduce=None, failure={
                "reason": V.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
                "message": f"{node_name(node)} (rank {r}): connection to MASTER_ADDR {NAME}:29500 timed out"})
        elif r:
            m["connected"] = own
        rep["master"] = m
        outs.append(ProbeOutcome(rank=r, pod=f"p{r}", node=node_name(node), report=typed_report(rep)))
    return outs


@st.composite
def stale_cases(draw):
    n = draw(st.integers(2, 6))
    placement = draw(st.permutations(range(n)))
    odd = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1))  # someone resolves right
    sources = {node: draw(st.sampled_from(["hosts", "dns"])) for node in sorted(odd)}
    return list(placement), sources, draw(st.booleans())


@settings(max_examples=300, deadline=None)
@given(stale_cases())
def test_every_node_with_a_stale_answer_is_named_wherever_rank_0_lands(case):
    placement, stale, arp = case
    d = diagnose(outcomes(placement, stale, arp), NAME)
    mr = d.conditions[constants.MASTER_REACHABLE]
    msg = mr.message
    assert mr.status == "False" and not d.validated, msg
    assert len(msg) <= 400
    for node in stale:
        assert node_name(node) in msg, msg
    assert STALE in msg
    assert "firewall" not in msg.replace(f"not {node_name(placement[0])}'s firewall", ""), msg
    assert "InternalIP" not in msg, msg
    rank0_stale = placement[0] in stale
    decided = rank0_stale or arp or all(src == "hosts" for src in stale.values()) or len(placement) == 2 \
        or len(stale) < len(placement) - 1
    if decided:  # the evidence singles out the odd nodes: each told where it got its answer
        if "hosts" in stale.values():
            assert "/etc/hosts" in msg, msg
        if "dns" in stale.values():
            assert "DNS" in msg, msg
        assert "decide:" not in msg, msg
    else:  # only rank 0 vouches and nothing says the answer is no one's: both candidates, and the test
        assert "decide: getent hosts" in msg, msg
