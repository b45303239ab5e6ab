"""Per-node results and the network summary of a passing probe (pure).

:func:`node_results` is ``status.nodes``; :func:`network_message` is ``NetworkValidated``'s
message when it passed, one sentence: the chosen interface and why (what it measured
against the runner-up); :func:`not_chosen` is ``status.probe.interfacesNotChosen``: every
interface not chosen, grouped by why, each reason said once.
"""
from __future__ import annotations

import re
from typing import Any, Optional, Sequence

from disttrain.diagnosis import evidence, messages
from disttrain.diagnosis.findings import RankInput
from disttrain_probe.contract import vocabulary


def summarize_ifnames(names: Sequence[Optional[str]]) -> Optional[str]:
    """One NCCL_SOCKET_IFNAME for the printer column: the common name, or a sorted comma
    list when nodes name their NIC differently (NCCL accepts a comma list of prefixes)."""
    distinct = sorted({n for n in names if n})
    return ",".join(distinct) if distinct else None


def socket_ifnames(ranks: Sequence[RankInput]) -> dict[int, Optional[str]]:
    """rank -> the interface its probe chose (None without one)."""
    return {r.rank: (r.report.chosen.ifname if r.report and r.report.chosen else None)
            for r in ranks}


def measured_by_ifname(ranks: Sequence[RankInput]) -> dict[str, float]:
    """Interface name -> the lowest ``measuredMbps`` (Mb/s, the probe's timed transfer on
    that interface's network) any report gives for it; interfaces never measured are absent."""
    out: dict[str, float] = {}
    for r in ranks:
        for i in (r.report.interfaces if r.report else []):
            if i.name and i.measured_mbps is not None:
                out[i.name] = min(out.get(i.name, i.measured_mbps), i.measured_mbps)
    return out


def node_results(ranks: Sequence[RankInput]) -> list[dict[str, Any]]:
    """``status.nodes``: per rank its node, the chosen interface and address, versions, and
    its row of the dial matrix per network (node-local bridges and loopback left out)."""
    keys = {m.key for m in evidence.matrices(ranks)}
    out = []
    for r in ranks:
        rep = r.report
        chosen = rep.chosen if rep else None
        ver = rep.versions if rep else None
        paths = {k: v for k, v in (rep.paths if rep else {}).items() if k in keys}
        out.append({
            "rank": r.rank,
            "name": r.node if r.node != r.pod else (rep.node if rep and rep.node else ""),
            "address": chosen.addr if chosen else None,
            "interface": chosen.ifname if chosen else None,
            "torch": ver.torch if ver else None,
            "cuda": ver.cuda if ver else None,
            "nccl": ver.nccl if ver else None,
            **({"paths": paths} if paths else {}),  # kubectl describe stays short without
            **_local(rep),
        })
    return out


def _local(rep: Any) -> dict[str, Any]:
    """``localRanks`` (processes the probe ran on the node) and its intra-node busbw, only
    with several processes per node."""
    if rep is None or not rep.local_world_size or rep.local_world_size <= 1:
        return {}
    out: dict[str, Any] = {"localRanks": rep.local_world_size}
    if rep.intra_node is not None and rep.intra_node.busbw_gbps is not None:
        out["intraNodeBusBandwidthGBps"] = rep.intra_node.busbw_gbps
    return out


def processes(ranks: Sequence[RankInput]) -> int:
    """Processes per node the probes ran (their ``localWorldSize``; 1 without)."""
    return max([r.report.local_world_size or 1 for r in ranks if r.report] or [1])


def intra_bandwidth(ranks: Sequence[RankInput]) -> Optional[float]:
    """The slowest node's intra-node all-reduce busbw (GB/s), None without one."""
    bw = [r.report.intra_node.busbw_gbps for r in ranks if r.report and r.report.intra_node
          and r.report.intra_node.busbw_gbps is not None]
    return round(min(bw), 4) if bw else None


def bandwidths(ranks: Sequence[RankInput]) -> tuple[Optional[float], Optional[float], Optional[int]]:
    """(busbw, algbw) in GB/s, the minimum over ranks (the slowest rank bounds the
    collective), and the message size in bytes; Nones when no rank timed an all-reduce."""
    ar = [r.report.allreduce for r in ranks if r.report and r.report.allreduce]
    if not ar:
        return None, None, None
    bus = round(min(float(a.busbw_gbps or 0.0) for a in ar), 4)
    alg = round(min(float(a.algbw_gbps or 0.0) for a in ar), 4)
    return bus, alg, (int(ar[0].bytes or 0) or None)


def backend(ranks: Sequence[RankInput]) -> Optional[str]:
    names = {r.report.backend for r in ranks if r.report and r.report.backend}
    return ",".join(sorted(names)) or None


def phase_seconds(ranks: Sequence[RankInput]) -> dict[str, float]:
    """Phase -> the slowest rank's seconds."""
    out: dict[str, float] = {}
    for r in ranks:
        for phase, secs in (r.report.timings if r.report else {}).items():
            if secs is not None:
                out[phase] = round(max(out.get(phase, 0.0), float(secs)), 3)
    return out


# Order in which rejected interfaces are listed: real alternatives first, noise last.
_REJECTION_ORDER = (vocabulary.REJ_NOT_PREFERRED, vocabulary.REJ_UNREACHABLE, vocabulary.REJ_DOWN, vocabulary.REJ_MULTIPLE_ON_NODE,
                    vocabulary.REJ_NOT_ON_ALL_NODES, vocabulary.REJ_POD_NETWORK_DEVICE, vocabulary.REJ_DUPLICATE_ADDRESS,
                    vocabulary.REJ_NOT_REQUESTED,
                    vocabulary.REJ_LOOPBACK, vocabulary.REJ_NO_IPV4)
# Which reason says most about an interface rejected on several networks (cni0: its own
# /24 is NotOnAllNodes, the routed pod network PodNetworkDevice).
_REJECTION_ORDER_TELLING = (vocabulary.REJ_NOT_PREFERRED, vocabulary.REJ_POD_NETWORK_DEVICE, vocabulary.REJ_UNREACHABLE,
                            vocabulary.REJ_DOWN, vocabulary.REJ_MULTIPLE_ON_NODE, vocabulary.REJ_DUPLICATE_ADDRESS,
                            vocabulary.REJ_NOT_ON_ALL_NODES, vocabulary.REJ_NOT_REQUESTED, vocabulary.REJ_LOOPBACK,
                            vocabulary.REJ_NO_IPV4)
_REJECTION_WORDS = {
    vocabulary.REJ_DUPLICATE_ADDRESS: "the same address on every node",
    vocabulary.REJ_MULTIPLE_ON_NODE: "two NICs on one subnet",
    vocabulary.REJ_POD_NETWORK_DEVICE: "pod network, rides on the NICs",
    vocabulary.REJ_DOWN: "link down",
    vocabulary.REJ_LOOPBACK: "never leaves the node",
}


def rejections(ranks: Sequence[RankInput]) -> dict[str, tuple[str, str]]:
    """ifname -> (reason, the probe's message) for every interface some rank did not
    choose, first rank first; an interface chosen on some node is never listed."""
    chosen = {r.report.chosen.ifname for r in ranks if r.report and r.report.chosen}
    out: dict[str, tuple[str, str]] = {}
    order = {x: i for i, x in enumerate(_REJECTION_ORDER_TELLING)}
    for r in ranks:
        for rj in (r.report.rejected if r.report else []):
            if not rj.ifname or rj.ifname in chosen:
                continue
            have = out.get(rj.ifname)
            if have is None or order.get(rj.reason, 99) < order.get(have[0], 99):
                out[rj.ifname] = (rj.reason, rj.message or "")
    return out


def _criterion(message: str, limit: int = 110) -> str:
    """Which ranking criterion decided, from a NotPreferred message ("<why>; ranked below
    ...", or an older probe's "... ranked higher: <why>"), at most ``limit`` characters."""
    _, sep, why = message.partition("ranked higher: ")
    if not sep:
        why = message.rpartition("; ranked below ")[0] or message
    return messages.cut(" ".join(why.split()), limit)


def _decisive(message: str) -> str:
    """The criterion that ranked the choice above the runner-up, from the runner-up's
    NotPreferred message, with what did not decide in parentheses: ``it carries the nodes'
    own address / route to the master on 2 of 2 nodes vs 0 (equal speed (10000 Mb/s),
    measured 16944 vs 13398 Mb/s, ...)``; the probe's "set network.socketIfname" advice is
    left out (the choice passed)."""
    # the advice is left out before any cut: a cut "set n..." would read as a criterion
    parts = [c.strip() for c in _criterion(message, 4000).split("; ")
             if c.strip() and not c.strip().startswith("set network.socketIfname")]
    if not parts:
        return "ranked first"
    last = re.sub(r"\s*\(set network\.socketIfname[^)]*\)$", "", parts[-1])
    return messages.cut(last + (f" ({', '.join(parts[:-1])})" if len(parts) > 1 else ""), 400)


def _duplicate_addr(message: str) -> str:
    m = re.search(r"same address (\S+)", message)
    return f" {m.group(1)}" if m else ""


def _missing_on(message: str) -> str:
    """`` missing on node-c`` from the probe's NotOnAllNodes message ("eth1 on 10.101.0.0/24
    is missing on node-c"; the probe names at most a few nodes, then "and N more"), else
    `` not on every node`` (an older probe's message)."""
    m = re.search(r"is missing on (.+?)\s*$", message)
    return f" missing on {messages.cut(m.group(1), 80)}" if m else " not on every node"


def rejected_clauses(rej: dict[str, tuple[str, str]],
                     culprits: Optional[dict[str, str]] = None, limit: int = 110) -> list[str]:
    """One clause per runner-up (NotPreferred: the criterion that decided, at most ``limit``
    characters) and per unreachable interface whose culprit the evidence names
    (``culprits``: ifname -> a short explanation), then one ``not chosen: ...`` clause
    grouping every interface not chosen by reason (each reason said once)."""
    culprits = culprits or {}
    details = [f"{ifn} not preferred: {_criterion(msg, limit)}" for ifn, (reason, msg) in rej.items()
               if reason == vocabulary.REJ_NOT_PREFERRED]
    details += [f"{ifn} unreachable: {culprits[ifn]}" for ifn, (reason, _) in rej.items()
                if reason == vocabulary.REJ_UNREACHABLE and ifn in culprits]
    groups: dict[str, list[str]] = {}
    for ifn, (reason, msg) in rej.items():
        label = ifn + (_duplicate_addr(msg) if reason == vocabulary.REJ_DUPLICATE_ADDRESS
                       else _missing_on(msg) if reason == vocabulary.REJ_NOT_ON_ALL_NODES else "")
        groups.setdefault(reason, []).append(label)
    order = {r: i for i, r in enumerate(_REJECTION_ORDER)}
    parts = []
    for reason in sorted(groups, key=lambda x: order.get(x, len(order))):
        words = _REJECTION_WORDS.get(reason)
        parts.append(f"{', '.join(groups[reason])} ({reason}{': ' + words if words else ''})")
    return details + (["not chosen: " + ", ".join(parts)] if parts else [])


NOT_CHOSEN_LINES = 32  # status.probe.interfacesNotChosen holds at most this many lines
NOT_CHOSEN_LINE = 400  # characters per line


def not_chosen(ranks: Sequence[RankInput]) -> list[str]:
    """``status.probe.interfacesNotChosen`` of a passing probe: every interface not chosen
    and why, one line per runner-up (the criterion that decided, in full), per unreachable
    interface whose culprit the evidence names, then the rest grouped by reason; at most
    :data:`NOT_CHOSEN_LINES` lines of :data:`NOT_CHOSEN_LINE` characters."""
    lines = rejected_clauses(rejections(ranks), unreachable_culprits(ranks), limit=NOT_CHOSEN_LINE)
    return [messages.cut(x, NOT_CHOSEN_LINE) for x in lines[:NOT_CHOSEN_LINES]]


def network_message(ranks: Sequence[RankInput]) -> str:
    """NetworkValidated's message when it passed, one sentence of at most
    :data:`messages.LIMIT` characters: the chosen interface and why (what it measured
    against the runner-up, else the criterion that ranked it first), and an interface
    unreachable because of a named node (a latent fault). Every other interface not chosen,
    and why, is in :func:`not_chosen` (``status.probe.interfacesNotChosen``, ``explain``)."""
    ifnames = summarize_ifnames(list(socket_ifnames(ranks).values()))
    subnets = sorted({(r.report.chosen.subnet or "?") for r in ranks if r.report and r.report.chosen})
    head = f"{ifnames} ({', '.join(subnets) or '?'}) chosen on every node"
    measured = measured_by_ifname(ranks)
    chosen_names = {n for n in socket_ifnames(ranks).values() if n}
    rej = rejections(ranks)
    mine = [v for k, v in measured.items() if k in chosen_names]
    runners = {k: msg for k, (reason, msg) in rej.items() if reason == vocabulary.REJ_NOT_PREFERRED}
    others = {k: v for k, v in measured.items() if k in runners}
    runner = max(runners, key=lambda k: (others.get(k, -1.0), -list(runners).index(k)), default=None)
    by_measure = runner is None or _criterion(runners[runner], 400).startswith("faster by measurement")
    if mine and others and by_measure:
        head += (f": {min(mine):.0f} Mb/s measured vs "
                 + ", ".join(f"{k} {v:.0f} Mb/s" for k, v in sorted(others.items(), key=lambda kv: -kv[1])))
    elif runner is not None:
        head += f" over {runner}: {_decisive(runners[runner])}"
    elif mine:
        head += f": {min(mine):.0f} Mb/s measured"
    culprits = unreachable_culprits(ranks)
    faults = [f"{ifn} unreachable: {culprits[ifn]}" for ifn, (reason, _) in rej.items()
              if reason == vocabulary.REJ_UNREACHABLE and ifn in culprits]
    return messages.join([head, *faults], messages.LIMIT)


def unreachable_culprits(ranks: Sequence[RankInput]) -> dict[str, str]:
    """ifname -> what the dial matrix of its network singles out (a NIC broken on one node,
    a node filtering inbound, a blocked pair), for the networks with failed dials."""
    from disttrain.diagnosis.attribution import explain_matrix  # attribution builds on this module's neighbours

    out: dict[str, str] = {}
    for m in evidence.matrices(ranks):
        e = explain_matrix(m)
        if e is None:
            continue
        for ifn in dict.fromkeys(n for n in m.ifnames if n):
            out.setdefault(ifn, messages.cut(e.cause.partition(", while")[0], 110))
    return out


__all__ = ["backend", "bandwidths", "measured_by_ifname", "network_message", "node_results",
           "not_chosen", "phase_seconds", "rejected_clauses", "rejections", "socket_ifnames", "summarize_ifnames"]
