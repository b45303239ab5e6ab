"""Attribution of a MASTER_ADDR failure (pure): the master port some rank could not reach
(``master-path``, ``master-node``, ``master-silent``), a name some rank resolved
differently (``resolution``) or not at all (``dns-path``), and a node with two NICs on
one subnet behind any of them (``two-nics``); the classes of
:mod:`disttrain.diagnosis.attribution`."""
from __future__ import annotations

import ipaddress
from typing import Optional, Sequence

from disttrain.diagnosis import evidence as evidence_matrix
from disttrain.diagnosis import messages
from disttrain.diagnosis.attribution.explanation import Explanation, capture_test
from disttrain.diagnosis.findings import Finding, RankInput
from disttrain.diagnosis.report import Master
from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.paths import is_loopback


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
    """The addresses on ``r``'s interfaces (no prefix) and its pod's (``status.podIPs``:
    known even when the probe has not reported)."""
    return {a.partition("/")[0] for i in (r.report.interfaces if r.report else []) for a in i.addrs} \
        | set(r.pod_ips)


def _source(m: Optional[Master], whose: str, master_addr: str, many: bool = False) -> tuple[str, str]:
    """(`` from its /etc/hosts``-like words for where the node(s) (``many``: several) got
    their answer, the fix); ``whose``: the possessive that names them (``node-a's``,
    ``their``)."""
    source = m.source if m else None
    server = m.server if m else None
    its = "their" if many else "its"
    where = {"hosts": f" from {its} /etc/hosts",
             "dns": f" from {its} DNS server {server}" if server else " from DNS"}.get(source or "", "")
    fix = {"hosts": f"remove or correct the {master_addr} entry in {whose} /etc/hosts",
           "dns": f"correct the {master_addr} record {whose} DNS server{' ' + server if server else ''} "
                  f"answers (or {whose} resolv.conf search and nameserver)"}.get(
        source or "", f"correct {master_addr} in {whose} /etc/hosts or DNS (getent hosts {master_addr})")
    return where, fix


MOST_NAMED = 8  # nodes a resolution verdict lists by name before "and N more"


def _from_hosts(r: RankInput) -> bool:
    """``r`` got its MASTER_ADDR answer from its own /etc/hosts."""
    m = _master(r)
    return bool(m and m.source == "hosts")


def _nobodys(r: RankInput) -> bool:
    """``r``'s host check found no host answering ARP for the address it dialled."""
    m = _master(r)
    return bool(m and m.host_check and m.host_check.arp == "incomplete")


def _is_ip(text: Optional[str]) -> bool:
    try:
        ipaddress.ip_address(text or "")
        return True
    except ValueError:
        return False


def explain_resolution(ranks: Sequence[RankInput], master_addr: Optional[str]) -> Optional[Explanation]:
    """Nodes that resolved the MASTER_ADDR name to an address rank 0 does not hold, while
    rank 0 holds what the other nodes got: a stale /etc/hosts entry or a DNS answer that
    differs on those nodes (rank 0's own node may be one of them). Every rank that
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
    if not wrong or not failed or not set(failed) <= set(wrong) or (0 in wrong and not right):
        return None  # rank 0 among the odd ones: only other ranks' answers that it holds decide
    # a rank still running when the verdict came got past its dial: it reached rank 0
    reached = [i for i, s in evidence_matrix.master_results(ranks).items()
               if s in ("ok", "running") and i not in right and i not in wrong]
    nobody = [i for i in wrong if _nobodys(ranks[i])]
    master = ranks[0].node
    if not (set(right) - {0}) and not reached and len(ranks) > 2 \
            and not all(_from_hosts(ranks[i]) or i in nobody for i in wrong):
        # only rank 0 vouches for its address and the odd answers could be an address that
        # forwards to it (a Service VIP): only a node's own /etc/hosts, or an address no host
        # answers ARP for, makes their answer the wrong one; otherwise two candidates remain
        return _forwarded_or_stale(ranks, wrong, first, master, master_addr, held)
    rep0 = ranks[0].report
    if right:
        good = first[0] if 0 in right else first[right[0]]
    elif rep0 and rep0.host_ip in held:
        good = rep0.host_ip
    else:
        good = next((a for a in sorted(held) if not is_loopback(a)), sorted(held)[0])
    names = tuple(ranks[i].node for i in wrong)
    who = messages.node_list(names, MOST_NAMED)
    others = [ranks[i].node for i in right if i != 0]
    agree = f", which {messages.node_list(others)} resolved" if others else ""
    if reached:
        agree += f"{' and' if agree else ', which'} {messages.node_list([ranks[i].node for i in reached])} reached"
    # each odd answer with its own node's source: a stale /etc/hosts on one node and a DNS
    # server's answer on another are two fixes, each where that node got its answer
    by_source: dict[tuple[Optional[str], Optional[str]], list[int]] = {}
    for i in wrong:
        m = _master(ranks[i])
        by_source.setdefault((m.source if m else None, m.server if m else None), []).append(i)
    said: list[str] = []
    fixes: list[str] = []
    for group in by_source.values():
        gwho = messages.node_list([ranks[i].node for i in group], MOST_NAMED)
        # said once in full; one group's fix says "their" (several) rather than the list again
        whose = "their" if len(by_source) == 1 and len(group) > 1 else f"{gwho}'s"
        where, fix = _source(_master(ranks[group[0]]), whose, master_addr, len(group) > 1)
        said.append(f"{gwho}{' resolved MASTER_ADDR ' + master_addr if not said else ''} to "
                    f"{', '.join(dict.fromkeys(first[i] for i in group))}{where}")
        fixes.append(fix)
    what = "an address" if len(said) == 1 and len(set(first[i] for i in wrong)) == 1 else "addresses"
    if nobody and not agree:
        what += " no host answers ARP for and"
    return Explanation(
        "resolution", names,
        f"{' and '.join(said)}, {what} {master} (rank 0) does not hold; {master} holds {good}{agree}: "
        f"{'their' if len(names) > 1 else who + chr(39) + 's'} name resolution" + ("" if 0 in wrong else f", not {master}"),
        messages.SEP.join(fixes))


def _forwarded_or_stale(ranks: Sequence[RankInput], wrong: list[int], first: dict[int, str],
                        master: str, master_addr: str, held: set[str]) -> Explanation:
    """Every failing rank dialled an answer rank 0 does not hold, and only rank 0 vouches
    for its own: a stale record, or an address meant to forward to rank 0 (a Service VIP)
    that does not. Names the odd nodes and rank 0 as the candidates, never its firewall."""
    who = messages.node_list([ranks[i].node for i in wrong], MOST_NAMED)
    answers = ", ".join(dict.fromkeys(first[i] for i in wrong))
    mine = ", ".join(a for a in sorted(held) if not is_loopback(a)) or sorted(held)[0]
    return Explanation(
        "resolution", tuple([ranks[i].node for i in wrong] + [master]),
        f"{who} resolved MASTER_ADDR {master_addr} to {answers}, which {master} (rank 0) does not "
        f"hold (it holds {mine}): a stale record, or a Service address that does not forward to "
        f"{master}; not {master}'s firewall",
        f"make {master_addr} answer {master}'s address, or fix the Service",
        f"getent hosts {master_addr} on {ranks[wrong[0]].node} and on {master}")


def own_resolution(ranks: Sequence[RankInput], master_addr: Optional[str]) -> list[Finding]:
    """Rank 0's node resolved the MASTER_ADDR name to an address rank 0 does not hold
    (its interfaces, its pod's addresses) while every other rank that resolved it got an
    address rank 0 holds and reached it: rank 0's own resolution differs. The probe passes
    (rank 0 serves on every address), but torch's store client on rank 0 dials MASTER_ADDR
    too, so training would hang there: a ``MasterAddrResolvesElsewhere`` failure naming rank 0's
    node, its answer, where it got it and the fix. [] otherwise (e.g. a Service VIP every
    node resolves alike: the probe's warning stays a warning)."""
    if len(ranks) < 2 or ranks[0].rank != 0 or not master_addr or _is_ip(master_addr):
        return []
    held = _held(ranks[0])
    m0 = _master(ranks[0])
    if not held or m0 is None or not m0.resolved or m0.resolved[0] in held:
        return []
    others = [(r, m) for r in ranks[1:] if (m := _master(r)) and m.resolved]
    if not others or any(m.resolved[0] not in held or not m.connected for _, m in others):
        return []
    node = ranks[0].node
    where, fix = _source(m0, f"{node}'s", master_addr)
    good = others[0][1].resolved[0]
    return [Finding(vocabulary.MASTER_ADDR_RESOLVES_ELSEWHERE, node, (
        f"{node} (rank 0) resolved MASTER_ADDR {master_addr} to {m0.resolved[0]}{where}, an "
        f"address it does not hold; {messages.node_list([r.node for r, _ in others])} resolved "
        f"it to {good}, {node}'s, and reached it: rank 0's own store client dials MASTER_ADDR "
        f"too, so training would hang on {node}; {fix}"))]


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
            capture_test((ranks[failed[0]].node, master)), pairs)
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
        decide = capture_test((who, master))  # one dialler: its own path is the other candidate
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
