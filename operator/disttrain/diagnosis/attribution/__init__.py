"""Attribution (pure): the smallest explanation the evidence supports.

From the per-path evidence (:mod:`evidence`: each network's dial matrix, each rank's
master-port result, each node's NICs) to a cause that names the node(s) and the fix, or,
when the evidence cannot decide, the candidates that remain and the test that would
decide. :func:`explain` is the entry; the classes between nodes live in :mod:`.network`,
those of MASTER_ADDR in :mod:`.master`, the result in :mod:`.explanation`. Classes, each
with its table test
(``tests/unit/operator/diagnosis/attribution/test_attribution.py``):

- ``down``: nodes that reported the network's interface down (no carrier), every failed
  dial at one of them: the link, not a rule;
- ``inbound``: a node no peer can reach while its own dials out work: its firewall;
- ``islands``: the nodes fall into groups that reach each other and no one outside their
  group (two subnets behind one interface name, no route between them): a partition of
  the network, not a firewall;
- ``isolated``: a node that reaches no one and no one reaches (on a network): its NIC,
  route or firewall; when its other NICs work, that one NIC;
- ``pairs``: one pair or a set of pairs broken while both nodes work with others: a path
  rule between them;
- ``master-path``: the master port unreachable from some ranks only: their path to rank
  0, not rank 0's firewall;
- ``master-node``: no rank reached the master port while rank 0's host answers on other
  ports: rank 0's firewall (with one dialling rank and no such answer, the path is the
  other candidate);
- ``master-silent``: rank 0's host answers ARP but no TCP port (its replies are lost: two
  NICs on one subnet, a route, a rule dropping everything), or nobody answers ARP for
  MASTER_ADDR (the address is on a NIC the others' network does not reach): not a
  firewall for the master port;
- ``two-nics``: a node with two NICs on one subnet, its traffic leaving by the one that
  failed (to the master, or to its DNS server when MASTER_ADDR did not resolve there):
  which NIC, and which address to advertise instead;
- ``resolution``: nodes disagree about MASTER_ADDR: some resolved it to an address rank 0
  does not hold while rank 0 holds the one the others got: those nodes' hosts entry or
  DNS answer, not rank 0;
  (and :func:`own_resolution`: rank 0's own node resolved it elsewhere while every other
  rank got rank 0's address: a failure although the probe passed, since rank 0's store
  client dials MASTER_ADDR too);
- ``dns-path``: MASTER_ADDR resolved on some nodes but not on others: the record exists,
  the failing nodes' path to their DNS server (or their resolver configuration) is at fault;
- ``candidates``: anything else: the nodes ranked by failed paths, and the test.
"""
from __future__ import annotations

from typing import Optional, Sequence

from disttrain.diagnosis import evidence as evidence_matrix
from disttrain.diagnosis import messages
from disttrain.diagnosis.attribution.explanation import Explanation
from disttrain.diagnosis.attribution.master import (
    explain_master,
    explain_resolution,
    explain_unresolvable,
    own_resolution,
)
from disttrain.diagnosis.attribution.network import components, explain_matrix, explain_networks
from disttrain.diagnosis.checkconditions import merged_message
from disttrain.diagnosis.findings import Finding, RankInput, relayed
from disttrain_probe.contract import vocabulary

_MASTER_PORT = (vocabulary.MASTER_PORT_TIMEOUT, vocabulary.MASTER_PORT_REFUSED)
_NETWORK = (vocabulary.NO_COMMON_INTERFACE, vocabulary.INTERFACE_UNREACHABLE)


def explain(cause: Finding, found: Sequence[Finding], ranks: Sequence[RankInput],
            master_addr: Optional[str]) -> tuple[str, list[str], Optional[str]]:
    """The failing check's message for ``cause`` (one of ``found``; at most
    :data:`messages.LIMIT`), the node(s) it singles out, and the :class:`Explanation`
    kind when the evidence explained it (None: the probe's own words)."""
    nodes = [r.node for r in ranks]
    probe_words = merged_message(found, cause.reason)
    expl: Optional[Explanation] = None
    if cause.reason in _MASTER_PORT:
        port = next((r.report.master.port for r in ranks if r.report and r.report.master
                     and r.report.master.port), None)
        expl = explain_resolution(ranks, master_addr) or explain_master(ranks, master_addr, port)
    elif cause.reason == vocabulary.MASTER_ADDR_UNRESOLVABLE:
        expl = explain_unresolvable(ranks, master_addr)
    elif cause.reason in _NETWORK:
        expl = explain_networks(evidence_matrix.matrices(ranks))
    if expl is not None:
        return expl.message(probe_words), list(expl.culprits), expl.kind
    named = culprits(probe_words, nodes) or ([cause.node] if cause.node else [])
    if len(named) == 1 and probe_words.startswith(named[0]):  # each node that reported its own
        first = next((f.message for f in found if f.reason == cause.reason), "")
        named += [f.node for f in found if f.reason == cause.reason and f.node
                  and f.node not in named and f.message != first and not relayed(f)]
    return probe_words, named, None


def culprits(message: str, nodes: Sequence[str]) -> list[str]:
    """The node(s) a message singles out: the one it starts with (``node-a: ...``,
    ``node-a (rank 1): ...``, ``node-a local rank 1: ...``), else those its last clause (the fix) names, else all it
    names."""
    for n in nodes:
        if n and (message.startswith(n + ":") or message.startswith(n + " (")
                  or message.startswith(n + " local rank ")):
            return [n]
    parts = messages.clauses(message)
    return (messages.named_nodes(parts[-1], nodes) if parts else []) or messages.named_nodes(message, nodes)


__all__ = ["Explanation", "components", "culprits", "explain", "explain_master", "explain_resolution", "explain_unresolvable", "explain_matrix",
           "explain_networks", "own_resolution"]
