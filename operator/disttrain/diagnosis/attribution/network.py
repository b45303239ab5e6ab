"""Attribution of failed dials between nodes (pure): per network's dial matrix
(:mod:`disttrain.diagnosis.evidence`), the ``down``, ``inbound``, ``islands``, ``isolated``,
``pairs``, ``inbound+pairs`` and ``candidates`` classes of
:mod:`disttrain.diagnosis.attribution`, and one explanation across every network."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from disttrain.diagnosis import evidence as evidence_matrix
from disttrain.diagnosis import messages
from disttrain.diagnosis.attribution.explanation import Explanation, capture_test, pairs_text


def explain_matrix(m: evidence_matrix.Matrix) -> Optional[Explanation]:
    """The smallest explanation of one network's failed dials, None when none failed."""
    n = len(m.nodes)
    idx = range(n)
    fails = m.failures()
    if not fails:
        return None
    where = m.label
    pair_failed, pair_ok = m.pair_failed, m.pair_ok
    down = _down(m, fails)
    if down is not None:
        return down

    # inbound: every failure is a dial *to* D, while D's own dials out to the others work
    targets = sorted({j for _, j in fails})
    if len(targets) < n:
        d_set = set(targets)
        outs_ok = all(any(m.ok(d, j) for j in idx if j not in d_set) and
                      not any(m.failed(d, j) for j in idx if j not in d_set) for d in d_set)
        ins_all_fail = all(not any(m.ok(i, d) for i in idx if i not in d_set) for d in d_set)
        if outs_ok and ins_all_fail:
            names = tuple(m.nodes[d] for d in targets)
            who = messages.node_list(names, messages.MOST_NAMED)
            # the list said once; several nodes are "their"/"each" afterwards
            whose, each = ("their", "each") if len(names) > 1 else (f"{who}'s", who)
            return Explanation(
                "inbound", names,
                f"no connection to {who} got through on {where}, while {whose} own connections "
                f"out worked: {each} filters inbound TCP",
                f"open the ephemeral range (net.ipv4.ip_local_port_range) on {whose} "
                f"firewall{'s' if len(names) > 1 else ''} to the other nodes, or set "
                f"network.portRange to the range {'they admit' if len(names) > 1 else 'it admits'}")
    islands = _islands(m, fails)
    if islands is not None:
        return islands
    # isolated: nodes whose every known pair failed, explaining every failure
    isolated = [x for x in idx if any(pair_failed(x, j) for j in idx if j != x)
                and not any(pair_ok(x, j) for j in idx if j != x)]
    if isolated and len(isolated) < n and all(i in isolated or j in isolated for i, j in fails):
        names = tuple(m.nodes[x] for x in isolated)
        who = messages.node_list(names, messages.MOST_NAMED)
        nic = "/".join(dict.fromkeys(filter(None, (m.ifnames[x] for x in isolated)))) or "NIC"
        many = len(names) > 1
        whose = "their" if many else f"{who}'s"
        return Explanation(
            "isolated", names,
            f"{who} reach{'' if many else 'es'} no peer on {where} and no peer reaches "
            f"{'them' if many else 'it'}, while the others reach each other: {whose} {nic} "
            f"(link, address, route or firewall)",
            f"check {'each one' if many else who}'s {nic}: ip -s link, ip route get <peer>, its firewall",
            pairs=tuple((m.nodes[i], m.nodes[j]) for i, j in fails if i < j))
    broken = sorted({(min(i, j), max(i, j)) for i, j in fails})
    involved = sorted({x for p in broken for x in p})
    if n > 2 and all(any(pair_ok(x, j) for j in idx if j != x) for x in involved):
        pairs = tuple((m.nodes[a], m.nodes[b]) for a, b in broken)
        names = tuple(m.nodes[x] for x in involved)
        both = "both reach" if len(pairs) == 1 else "each reaches"
        return Explanation(
            "pairs", names,
            f"the path {pairs_text(pairs)} is blocked on {where} while {both} the other nodes: "
            f"a rule between them",
            "find the rule (a firewall matching the other's address, a security group)",
            capture_test(pairs[0], m), pairs)
    both_kinds = _inbound_and_pairs(m, fails)
    if both_kinds is not None:
        return both_kinds
    names = tuple(m.nodes[x] for x in sorted(involved, key=lambda x: -sum(
        pair_failed(x, j) for j in idx if j != x)))
    return Explanation(
        "candidates", names,
        f"dials failed on {where} between {pairs_text([(m.nodes[a], m.nodes[b]) for a, b in broken])}",
        "check those nodes' firewalls and routes",
        capture_test((m.nodes[broken[0][0]], m.nodes[broken[0][1]]), m),
        tuple((m.nodes[a], m.nodes[b]) for a, b in broken))


def _down(m: evidence_matrix.Matrix, fails: list[tuple[int, int]]) -> Optional[Explanation]:
    """Nodes that reported their interface on this network down (no carrier), when every
    failed dial has one of them at an end: the link, not a rule. None otherwise."""
    down = [x for x in range(len(m.nodes)) if m.is_down(x)]
    if not down or not all(i in down or j in down for i, j in fails):
        return None
    names = tuple(m.nodes[x] for x in down)
    who = messages.node_list(names, messages.MOST_NAMED)
    nic = "/".join(dict.fromkeys(filter(None, (m.ifnames[x] for x in down)))) or "the NIC"
    many = len(names) > 1
    return Explanation(
        "down", names,
        f"{nic} is down (no carrier) on {who}: every failed dial on {m.label} was to or from "
        f"{'them' if many else 'it'}",
        f"bring {nic} up on {'each one' if many else who} (ip link set {nic} up; check the cable or "
        f"switch port), or set network.socketIfname to an interface up on every node",
        pairs=tuple((m.nodes[i], m.nodes[j]) for i, j in fails if i < j))


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
        return "{" + messages.node_list([m.nodes[x] for x in groups[k]], 8) + "}" + where

    shown = [group_text(k) for k in range(min(len(groups), 4))]
    more = f" and {len(groups) - 4} more" if len(groups) > 4 else ""
    count = {2: "two", 3: "three", 4: "four"}.get(len(groups), str(len(groups)))
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
    who = messages.node_list(names, messages.MOST_NAMED)
    pairs = tuple((m.nodes[a], m.nodes[b]) for a, b in broken)
    many = len(names) > 1
    return Explanation(
        "inbound+pairs", names + tuple(m.nodes[x] for x in involved),
        f"two faults on {m.label}: no connection to {who} got through while "
        f"{'their' if many else 'its'} own connections out worked "
        f"({'each filters' if many else who + ' filters'} inbound TCP), and the path "
        f"{pairs_text(pairs)} is blocked while {'both reach' if len(pairs) == 1 else 'each reaches'} "
        f"the other nodes",
        f"open the ephemeral range on {'their firewalls' if many else who + chr(39) + 's firewall'}; "
        f"find the rule between {pairs_text(pairs, 1)}",
        capture_test(pairs[0], m), pairs)


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
        # a node alone on its subnet has no home matrix (no peer there to dial): its subnet
        # is the one the others' matrices saw it dial from (``evidence._off_subnet``)
        subnets = tuple((h[0].subnets[x] if x < len(h[0].subnets) and h[0].subnets[x] else h[0].key)
                        if h else next((m.subnets[x] for m in group if x < len(m.subnets) and m.subnets[x]),
                                       None) for x, h in enumerate(homes))
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
