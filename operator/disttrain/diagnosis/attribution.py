"""Attribution (pure): the smallest explanation the evidence supports.

From the per-path evidence (:mod:`evidence`: each network's dial matrix, each rank's
master-port result, each node's NICs) to a cause that names the node(s) and the fix, or,
when the evidence cannot decide, the candidates that remain and the test that would
decide. Classes, each with its table test (``tests/unit/test_attribution.py``):

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
- ``dns-path``: MASTER_ADDR resolved on some nodes but not on others: the record exists,
  the failing nodes' path to their DNS server (or their resolver configuration) is at fault;
- ``candidates``: anything else: the nodes ranked by failed paths, and the test.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence

from disttrain_probe.contract import vocabulary

from disttrain.diagnosis import evidence as evidence_matrix
from disttrain.diagnosis import messages
from disttrain.diagnosis.findings import Finding, RankInput, is_loopback, relayed
from disttrain.diagnosis.report import Master
from disttrain.diagnosis.verdicts import merged_message

_MASTER_PORT = (vocabulary.MASTER_PORT_TIMEOUT, vocabulary.MASTER_PORT_REFUSED)
_NETWORK = (vocabulary.NO_COMMON_INTERFACE, vocabulary.INTERFACE_UNREACHABLE)


@dataclass(frozen=True)
class Explanation:
    """``kind`` (see the module doc), the node(s) singled out (``culprits``; all candidates
    when undecided), the sentence naming them (``cause``), the ``fix``, and ``decide``:
    the test that would tell the remaining candidates apart ('' when the evidence decides)."""

    kind: str
    culprits: tuple[str, ...]
    cause: str
    fix: str
    decide: str = ""
    pairs: tuple[tuple[str, str], ...] = field(default=())
    groups: tuple[tuple[str, ...], ...] = field(default=())  # islands: the nodes of each group

    def message(self, evidence: str = "", limit: int = messages.LIMIT) -> str:
        """``cause; fix; decide: ...; seen: <evidence>`` within ``limit`` (the probe's own
        words last, shortened, and only when there is room for them)."""
        base = messages.join([self.cause, self.fix, f"decide: {self.decide}" if self.decide else ""], limit)
        room = limit - len(base) - len(messages.SEP) - len("seen: ")
        if evidence and room >= 60 and not base.endswith(messages.ELLIPSIS):
            base += f"{messages.SEP}seen: {messages.cut(evidence, room)}"
        return base


def _pairs_text(pairs: Sequence[tuple[str, str]], most: int = 3) -> str:
    shown = [f"{a}<->{b}" for a, b in pairs[:most]]
    more = f" and {len(pairs) - most} more" if len(pairs) > most else ""
    return ", ".join(shown) + more


def explain_matrix(m: evidence_matrix.Matrix) -> Optional[Explanation]:
    """The smallest explanation of one network's failed dials, None when none failed."""
    n = len(m.nodes)
    idx = range(n)
    fails = m.failures()
    if not fails:
        return None
    where = m.label
    pair_failed, pair_ok = m.pair_failed, m.pair_ok

    # inbound: every failure is a dial *to* D, while D's own dials out to the others work
    targets = sorted({j for _, j in fails})
    if len(targets) < n:
        d_set = set(targets)
        outs_ok = all(any(m.ok(d, j) for j in idx if j not in d_set) and
                      not any(m.failed(d, j) for j in idx if j not in d_set) for d in d_set)
        ins_all_fail = all(not any(m.ok(i, d) for i in idx if i not in d_set) for d in d_set)
        if outs_ok and ins_all_fail:
            names = tuple(m.nodes[d] for d in targets)
            who = messages.node_list(names)
            return Explanation(
                "inbound", names,
                f"no connection to {who} got through on {where}, while {who}'s own connections "
                f"out worked: {who} filters inbound TCP",
                f"open the ephemeral range (net.ipv4.ip_local_port_range) on {who}'s firewall "
                f"to the other nodes, or set network.portRange to the range it admits")
    islands = _islands(m, fails)
    if islands is not None:
        return islands
    # isolated: nodes whose every known pair failed, explaining every failure
    isolated = [x for x in idx if any(pair_failed(x, j) for j in idx if j != x)
                and not any(pair_ok(x, j) for j in idx if j != x)]
    if isolated and len(isolated) < n and all(i in isolated or j in isolated for i, j in fails):
        names = tuple(m.nodes[x] for x in isolated)
        who = messages.node_list(names)
        nic = "/".join(dict.fromkeys(filter(None, (m.ifnames[x] for x in isolated)))) or "NIC"
        return Explanation(
            "isolated", names,
            f"{who} reaches no peer on {where} and no peer reaches it, while the others reach "
            f"each other: {who}'s {nic} (link, address, route or firewall)",
            f"check {who}'s {nic}: ip -s link, ip route get <peer>, its firewall",
            pairs=tuple((m.nodes[i], m.nodes[j]) for i, j in fails if i < j))
    broken = sorted({(min(i, j), max(i, j)) for i, j in fails})
    involved = sorted({x for p in broken for x in p})
    if n > 2 and all(any(pair_ok(x, j) for j in idx if j != x) for x in involved):
        pairs = tuple((m.nodes[a], m.nodes[b]) for a, b in broken)
        names = tuple(m.nodes[x] for x in involved)
        both = "both reach" if len(pairs) == 1 else "each reaches"
        return Explanation(
            "pairs", names,
            f"the path {_pairs_text(pairs)} is blocked on {where} while {both} the other nodes: "
            f"a rule between them",
            "find the rule (a firewall matching the other's address, a security group)",
            _capture_test(pairs[0], m), pairs)
    both_kinds = _inbound_and_pairs(m, fails)
    if both_kinds is not None:
        return both_kinds
    names = tuple(m.nodes[x] for x in sorted(involved, key=lambda x: -sum(
        pair_failed(x, j) for j in idx if j != x)))
    return Explanation(
        "candidates", names,
        f"dials failed on {where} between {_pairs_text([(m.nodes[a], m.nodes[b]) for a, b in broken])}",
        "check those nodes' firewalls and routes",
        _capture_test((m.nodes[broken[0][0]], m.nodes[broken[0][1]]), m),
        tuple((m.nodes[a], m.nodes[b]) for a, b in broken))


def components(n: int, linked) -> list[list[int]]:
    """The connected components of the graph on ``range(n)`` whose edges are the pairs
    ``(i, j)``, i < j, for which ``linked(i, j)`` holds; each component sorted, components
    ordered by their first member. O(n^2) calls of ``linked``."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i in range(n):
        for j in range(i + 1, n):
            if linked(i, j):
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for x in range(n):
        groups.setdefault(root(x), []).append(x)
    return sorted(groups.values(), key=lambda g: g[0])


def _islands(m: evidence_matrix.Matrix, fails: list[tuple[int, int]]) -> Optional[Explanation]:
    """A partition: the nodes with evidence fall into two or more groups (connected
    components of the pairs that worked) such that every failed dial crosses groups and
    none inside a group failed, and the groups are told apart by more than one lone node
    (at least two groups of two or more nodes, or every group on its own subnet). None
    otherwise (one node alone is ``isolated``)."""
    n = len(m.nodes)
    seen = {x for i, j in fails for x in (i, j)} | {x for x in range(n) for j in range(n)
                                                     if x != j and m.cells[x][j] is not None}
    groups = [kept for g in components(n, m.pair_ok) if (kept := [x for x in g if x in seen])]
    # named by node, not by rank: the message must not depend on where rank 0 landed
    groups = sorted((sorted(g, key=lambda x: m.nodes[x]) for g in groups), key=lambda g: m.nodes[g[0]])
    if len(groups) < 2:
        return None
    group_of = {x: k for k, g in enumerate(groups) for x in g}
    if any(group_of.get(i) == group_of.get(j) for i, j in fails):
        return None
    subnets = [sorted({s for x in g if x < len(m.subnets) and (s := m.subnets[x])}) for g in groups]
    own_subnets = all(len(s) == 1 for s in subnets) and len({s[0] for s in subnets}) == len(groups)
    if sum(len(g) > 1 for g in groups) < 2 and not own_subnets:
        return None
    ifn = "/".join(dict.fromkeys(n for n in m.ifnames if n)) or m.label

    def group_text(k: int) -> str:
        where = f" on {', '.join(subnets[k])}" if subnets[k] else ""
        return "{" + messages.node_list([m.nodes[x] for x in groups[k]], 3) + "}" + where

    shown = [group_text(k) for k in range(min(len(groups), 3))]
    more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
    count = {2: "two", 3: "three"}.get(len(groups), str(len(groups)))
    listed = (" and ".join(shown) if len(shown) == 2 and not more else ", ".join(shown) + more)
    culprits = tuple(m.nodes[x] for g in groups for x in g)
    broken = sorted({(min(i, j), max(i, j)) for i, j in fails})
    return Explanation(
        "islands", culprits,
        f"{ifn} forms {count} networks: {listed}, each reaching only its own, with no route "
        f"between them",
        "choose a network every node shares (network.socketIfname), or route between them",
        pairs=tuple((m.nodes[a], m.nodes[b]) for a, b in broken),
        groups=tuple(tuple(m.nodes[x] for x in g) for g in groups))


def _inbound_and_pairs(m: evidence_matrix.Matrix, fails: list[tuple[int, int]]) -> Optional[Explanation]:
    """Two faults at once, each singled out by its own evidence: node(s) D that no peer
    reaches while their own dials out work (an inbound filter), and, among the other
    failures, pairs blocked both ways whose nodes each reach some other peer (a rule
    between them). None when the failures do not split that way."""
    n = len(m.nodes)
    idx = range(n)
    into = {j for _, j in fails}
    d_set = {d for d in into if not any(m.ok(i, d) for i in idx if i != d)
             and any(m.ok(d, j) for j in idx if j != d)
             and not any(m.failed(d, j) for j in idx if j != d and j not in into)}
    rest = [(i, j) for i, j in fails if j not in d_set and i not in d_set]
    if not d_set or not rest or len(rest) + sum(1 for _, j in fails if j in d_set) != len(fails):
        return None
    broken = sorted({(min(i, j), max(i, j)) for i, j in rest})
    involved = sorted({x for p in broken for x in p})
    if not all(any(m.pair_ok(x, j) for j in idx if j != x and j not in d_set) for x in involved):
        return None
    names = tuple(m.nodes[d] for d in sorted(d_set))
    who = messages.node_list(names)
    pairs = tuple((m.nodes[a], m.nodes[b]) for a, b in broken)
    return Explanation(
        "inbound+pairs", names + tuple(m.nodes[x] for x in involved),
        f"two faults on {m.label}: no connection to {who} got through while its own connections "
        f"out worked ({who} filters inbound TCP), and the path {_pairs_text(pairs)} is blocked "
        f"while {'both reach' if len(pairs) == 1 else 'each reaches'} the other nodes",
        f"open the ephemeral range on {who}'s firewall; find the rule between {_pairs_text(pairs, 1)}",
        _capture_test(pairs[0], m), pairs)


def _capture_test(pair: tuple[str, str], m: Optional[evidence_matrix.Matrix] = None) -> str:
    a, b = pair
    return f"tcpdump on {b}: SYNs from {a} arriving unanswered: {b}'s rule; none: {a}'s or the path"


def _by_interface_name(ms: Sequence[evidence_matrix.Matrix]) -> list[evidence_matrix.Matrix]:
    """One merged matrix per interface name that spans several subnets, each node on one
    of them (eth1 on 10.101.0.0/24 on some nodes, on 10.102.0.0/24 on others): a cell is
    ok when any of the networks' dials between the pair worked, else failed when one
    failed; each node's subnet is the one it has that interface on. The probe keys each
    subnet apart, and a node without an address on a subnet only fails to reach it: the
    groups show when the subnets are taken together."""
    by_name: dict[str, list[evidence_matrix.Matrix]] = {}
    for m in ms:
        names = set(n for n in m.ifnames if n)
        if len(names) == 1 and not m.key.startswith("ifname:"):
            by_name.setdefault(names.pop(), []).append(m)
    out = []
    for name, group in sorted(by_name.items()):
        if len(group) < 2 or len({m.nodes for m in group}) != 1:
            continue
        nodes = group[0].nodes
        n = len(nodes)
        homes = [[m for m in group if m.ifnames[x]] for x in range(n)]
        if any(len(h) > 1 for h in homes):
            continue

        def cell(i: int, j: int) -> Optional[str]:
            seen = [m.cells[i][j] for m in group if m.cells[i][j] is not None]
            return "ok" if "ok" in seen else (seen[0] if seen else None)

        cells = tuple(tuple(None if i == j else cell(i, j) for j in range(n)) for i in range(n))
        subnets = tuple((h[0].subnets[x] if x < len(h[0].subnets) and h[0].subnets[x] else h[0].key)
                        if h else None for x, h in enumerate(homes))
        out.append(evidence_matrix.Matrix(f"ifname:{name}", nodes, tuple(name if h else None for h in homes),
                                          cells, subnets))
    return out


def explain_networks(ms: Sequence[evidence_matrix.Matrix]) -> Optional[Explanation]:
    """One explanation for the failed dials of every network: when they agree on the
    culprits (a pair blocked on every network), said once for all; else the first
    network's."""
    found = [(m, e) for m in ms for e in [explain_matrix(m)] if e is not None]
    if not found:
        return None
    for merged in _by_interface_name(ms):
        islands = _islands(merged, merged.failures())
        if islands is not None:
            return islands
    first = found[0][1]
    if len(found) > 1 and all((e.kind, e.culprits, e.pairs) == (first.kind, first.culprits, first.pairs)
                              for _, e in found):
        labels = ", ".join("/".join(dict.fromkeys(n for n in m.ifnames if n)) or m.key
                           for m, _ in found)
        lone = found[0][0].label
        return replace(first, cause=first.cause.replace(f"on {lone}", f"on every network ({labels})"))
    return first


def _two_nics_on(r: RankInput, addr: Optional[str]) -> Optional[tuple[str, list[tuple[str, str]]]]:
    """(subnet, its NICs) when ``addr`` lies on a subnet where this node has two NICs."""
    dual = evidence_matrix.multi_nic(r)
    s = evidence_matrix.subnet_of(addr, list(dual))
    return (s, dual[s]) if s else None


def _two_nics(r: RankInput, dual: tuple[str, list[tuple[str, str]]], addr: Optional[str],
              used: Optional[str], cause: str) -> Explanation:
    """The ``two-nics`` explanation for node ``r``: ``cause`` is formatted with ``nics``
    (``<subnet> (eth0 a, eth1 b)``) and ``used`` (the NIC its traffic leaves by: ``used``,
    else the one holding ``addr``, else the first)."""
    subnet, nics = dual
    used = used if used in {n for n, _ in nics} else next((n for n, a in nics if a == addr), nics[0][0])
    other = next(((n, a) for n, a in nics if n != used), None)
    alt = f"{other[0]}'s {other[1]}" if other else "another NIC's address"
    listed = f"{subnet} ({', '.join(f'{n} {a}' for n, a in nics)})"
    return Explanation(
        "two-nics", (r.node,), cause.format(nics=listed, used=used),
        f"give each NIC its own subnet (or take {used} off {subnet}) and advertise the "
        f"address peers reach ({alt}) as {r.node}'s InternalIP",
        f"arping -I {used} from {r.node} to a peer: no answer means {used} reaches no one")


def _master(r: RankInput) -> Optional[Master]:
    """The master block of the rank's report (None without a report or the block)."""
    return r.report.master if r.report else None


def explain_unresolvable(ranks: Sequence[RankInput], master_addr: Optional[str]) -> Optional[Explanation]:
    """Who is to blame for a MASTER_ADDR name some rank could not resolve while others did
    (the record exists: that node's path to its DNS server), or that a node with two NICs
    on one subnet could not resolve (its traffic leaves by the NIC that reaches no one).
    None when no rank failed to resolve, or the evidence says nothing more than the probe."""
    def failed_here(r: RankInput) -> bool:
        f = r.report.failure if r.report else None
        return bool(f and f.reason == vocabulary.MASTER_ADDR_UNRESOLVABLE)

    failed = [r for r in ranks if failed_here(r)]
    if not failed:
        return None
    got = [r for r in ranks if (m := _master(r)) and m.resolved]
    first = _master(got[0]) if got else None  # with its resolved addresses when got
    name = f"MASTER_ADDR {master_addr}" if master_addr else "MASTER_ADDR"
    also = (f" while {messages.node_list([r.node for r in got])} resolved it to "
            f"{first.resolved[0]}" if first and first.resolved else "")
    for r in failed:
        m = _master(r)
        dns = m.dns if m else None
        dual = _two_nics_on(r, dns.src if dns else None)
        if dual is None and not got:
            continue
        multi = evidence_matrix.multi_nic(r)
        if dual is None and multi:  # no route evidence: the two NICs remain the likely cause
            dual = next(iter(multi.items()))
        if dual:
            server = f"its DNS server {dns.server}" if dns and dns.server else "its DNS server"
            return _two_nics(r, dual, dns.src if dns else None, dns.iface if dns else None,
                             f"{r.node} could not resolve {name}{also} ({server} did not "
                             f"answer): {r.node} has two NICs on {{nics}} and its traffic leaves "
                             f"by {{used}}, which likely reaches no one (not a firewall, not the "
                             f"DNS record)")
    if not got:
        return None
    # a rank that resolved another name of this job has a working DNS path: its own words
    # (rank 0's record was late) stand
    failed = [r for r in failed if not ((m := _master(r)) and m.peer_name)]
    if not failed:
        return None
    who = messages.node_list([r.node for r in failed])
    dns = next((m.dns for r in failed if (m := _master(r)) and m.dns), None)
    server = dns.server if dns and dns.server else "its DNS server"
    by = f" (by {dns.iface})" if dns and dns.iface else ""
    return Explanation(
        "dns-path", tuple(r.node for r in failed),
        f"{who} could not resolve {name}{also}: the record exists, {who}'s path to {server}{by} "
        f"or its resolver configuration fails",
        f"check {who}'s route and firewall to {server} (UDP and TCP 53) and /etc/resolv.conf",
        f"nslookup {master_addr or '<MASTER_ADDR>'} {server} on {failed[0].node}")


def _held(r: RankInput) -> set[str]:
    """The addresses on ``r``'s interfaces (no prefix)."""
    return {a.partition("/")[0] for i in (r.report.interfaces if r.report else []) for a in i.addrs}


def _is_ip(text: Optional[str]) -> bool:
    try:
        ipaddress.ip_address(text or "")
        return True
    except ValueError:
        return False


def explain_resolution(ranks: Sequence[RankInput], master_addr: Optional[str]) -> Optional[Explanation]:
    """Nodes that resolved the MASTER_ADDR name to an address rank 0 does not hold, while
    rank 0 holds what the other nodes got (or is the only other node): a stale /etc/hosts
    entry or a DNS answer that differs on those nodes; rank 0 is fine. Every rank that
    failed at the master port must be among them (the smallest explanation of all the
    failures). None otherwise, or when MASTER_ADDR is an address."""
    if not ranks or ranks[0].rank != 0 or not master_addr or _is_ip(master_addr):
        return None
    held = _held(ranks[0])
    if not held:
        return None
    first = {i: m.resolved[0] for i, r in enumerate(ranks) if (m := _master(r)) and m.resolved}
    wrong = [i for i, a in first.items() if a not in held]
    right = [i for i, a in first.items() if a in held]
    failed = [i for i, s in evidence_matrix.master_results(ranks).items() if s in ("timeout", "refused")]
    if not wrong or 0 in wrong or not failed or not set(failed) <= set(wrong):
        return None
    if not (set(right) - {0}) and len(ranks) > 2:
        return None  # only rank 0 itself vouches for its address: the record may be what's wrong
    master = ranks[0].node
    rep0 = ranks[0].report
    if right:
        good = first[0] if 0 in right else first[right[0]]
    elif rep0 and rep0.host_ip in held:
        good = rep0.host_ip
    else:
        good = next((a for a in sorted(held) if not is_loopback(a)), sorted(held)[0])
    names = tuple(ranks[i].node for i in wrong)
    who = messages.node_list(names)
    got = ", ".join(dict.fromkeys(first[i] for i in wrong))
    m = _master(ranks[wrong[0]])
    source = m.source if m else None
    server = m.server if m else None
    where = {"hosts": " from its /etc/hosts",
             "dns": f" from its DNS server {server}" if server else " from DNS"}.get(source or "", "")
    others = [ranks[i].node for i in right if i != 0]
    agree = f", which {messages.node_list(others)} resolved" if others else ""
    fix = {"hosts": f"remove or correct the {master_addr} entry in {who}'s /etc/hosts",
           "dns": f"correct the {master_addr} record {who}'s DNS server{' ' + server if server else ''} "
                  f"answers (or {who}'s resolv.conf search and nameserver)"}.get(
        source or "", f"correct {master_addr} in {who}'s /etc/hosts or DNS (getent hosts {master_addr})")
    return Explanation(
        "resolution", names,
        f"{who} resolved MASTER_ADDR {master_addr} to {got}{where}, an address {master} (rank 0) "
        f"does not hold; {master} holds {good}{agree}: {who}'s name resolution, not {master}",
        fix)


def explain_master(ranks: Sequence[RankInput], master_addr: Optional[str],
                   port: Optional[int]) -> Optional[Explanation]:
    """Who is to blame for a MASTER_ADDR port that some rank could not reach (None when no
    rank failed there, or rank 0 is unknown)."""
    if not ranks or ranks[0].rank != 0:
        return None
    res = evidence_matrix.master_results(ranks)
    failed = [i for i, s in res.items() if s in ("timeout", "refused")]
    if not failed:
        return None
    reached = [i for i, s in res.items() if s in ("ok", "running")]
    master = ranks[0].node
    p = f"TCP {port}" if port else "the master port"
    shown = f"MASTER_ADDR {master_addr} ({master}, rank 0)" if master_addr else f"{master} (rank 0)"
    who = messages.node_list([ranks[i].node for i in failed])
    # two NICs on one subnet: on rank 0 (MASTER_ADDR's NIC), or on a failing dialler's route
    cands = [(ranks[0], master_addr, "MASTER_ADDR")]
    for i in failed:
        m = _master(ranks[i])
        route = m.route if m else None
        cands.append((ranks[i], route.src if route else None, "where it sends from"))
    for r, addr, what in cands:
        dual = _two_nics_on(r, addr)
        if dual:
            return _two_nics(r, dual, addr, None,
                             f"{r.node} has two NICs on {{nics}} and {who} could not reach "
                             f"{shown} on {p}: {r.node}'s traffic leaves by {{used}} ({addr}, "
                             f"{what}), which likely reaches no peer; not a firewall")
    if reached:
        got = messages.node_list([ranks[i].node for i in reached])
        pairs = tuple((ranks[i].node, master) for i in failed)
        return Explanation(
            "master-path", tuple([ranks[i].node for i in failed] + [master]),
            f"{who} could not reach {shown} on {p} while {got} did: the path {who}<->{master} is "
            f"blocked (a rule on either node, or {who}'s route), not {master}'s firewall for the port",
            "find the rule (a firewall matching the other's address, a security group)",
            _capture_test((ranks[failed[0]].node, master)), pairs)
    checks = [h for i in failed if (m := _master(ranks[i])) and (h := m.host_check)]
    # A refusal is an answer (a reset came back from the host or a rule on the way): the
    # replies are not lost, whatever a late host check saw.
    dropped = all(res[i] == "timeout" for i in failed)
    if dropped and checks and all(h.r in ("timeout", "unreachable", "error") for h in checks):
        if all(h.arp == "complete" for h in checks):
            port_s = f"TCP {checks[0].port}"
            return Explanation(
                "master-silent", (master,),
                f"{master} answered ARP for {master_addr} but no TCP port answers {who} ({p}, "
                f"{port_s}): its replies are lost, not a firewall for {p} alone: two NICs on one "
                f"subnet on {master}, a route, or a rule dropping all from {who}",
                f"one NIC per subnet on {master}, its InternalIP on the NIC its peers reach",
                f"ip route get <{who}'s address> on {master} names the NIC replies leave by")
        if any(h.arp == "incomplete" for h in checks):
            return Explanation(
                "master-silent", (master,),
                f"no host answers ARP for {master_addr} ({master}, rank 0) from {who}: the address "
                f"is on a NIC of {master} that {who}'s network does not reach, or {master} is "
                f"down; not a firewall",
                f"make {master}'s InternalIP (MASTER_ADDR) an address on the network its peers share")
    decide = ""
    if len(res) == 1 and not any(h.r in ("refused", "ok") for h in checks):
        decide = _capture_test((who, master))  # one dialler: its own path is the other candidate
    tried = ", ".join(f"{ranks[i].node} {res[i]}" for i in failed[:4]) + (
        f" and {len(failed) - 4} more" if len(failed) > 4 else "")
    answers = next((f" (the host answers on TCP {h.port})" for h in checks if h.r in ("refused", "ok")), "")
    beacon = next((h for h in checks if h.listening), None)
    if beacon is not None and all(res[i] == "refused" for i in failed):
        # rank 0's probe answered on its beacon port, bound after the master port: it listens
        return Explanation(
            "master-node", (master,),
            f"no rank reached {shown} on {p} ({tried}): {master}'s firewall (or a NetworkPolicy) "
            f"rejects it; rank 0's probe listens there (it answers on TCP {beacon.port}, bound "
            f"after {p})",
            f"open {p} to the other nodes on {master}'s firewall")
    return Explanation(
        "master-node", (master,),
        f"no rank reached {shown} on {p} ({tried}): {master}'s firewall "
        f"{'rejects' if all(res[i] == 'refused' for i in failed) else 'drops'} it{answers}, or "
        f"nothing listens there" + (f"; or the path {who}->{master}" if decide else ""),
        f"open {p} to the other nodes on {master}'s firewall", decide)


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
           "explain_networks"]
