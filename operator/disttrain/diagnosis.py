"""Diagnosis (pure): probe reports -> conditions, per-node results and the rendezvous.

Input is one :class:`ProbeOutcome` per node rank: the parsed report (as its camelCase
dict, the wire contract documented in docs/probe-report.md) or why there is none. Output
is a :class:`Diagnosis`: the five check conditions plus the ``Validated`` summary, per-node
results, the interface each rank must use, bandwidth, warnings.

Rules:
- the cause is the failure of the earliest check (docs/conditions.md order: scheduling, master,
  network, versions, collective); a specific reason from any rank beats a generic one
  (rank 0's RendezvousTimeout is usually a peer's MasterAddrLoopback);
- checks before the failing one are True, checks after it Unknown (not reached);
- versions are compared across ranks here as well, so a probe that did not compare them
  still gets a VersionsConsistent verdict;
- warnings (latent faults a passing probe saw) keep their condition True but replace
  its reason and message, and make Validated's reason PassedWithWarnings;
- every false message names the node(s), what was seen and the fix.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Optional

from disttrain_probe import versions  # the probe's own pure table and fixes (stdlib only)

from . import constants as c

# Which check a probe warning reason belongs to (others go to NetworkValidated).
WARNING_CONDITION = {
    "HostnameResolvesToLoopback": c.NETWORK_VALIDATED,
    "NCCLDefaultInterfaceDiffers": c.NETWORK_VALIDATED,
    "RouteViaOtherInterface": c.NETWORK_VALIDATED,
    "MixedAddressFamilies": c.NETWORK_VALIDATED,
    "LoopbackOnly": c.NETWORK_VALIDATED,
    "PortRangeOutsideAllowed": c.NETWORK_VALIDATED,
    "MasterAddrNotLocal": c.MASTER_REACHABLE,
    "TeardownHung": c.COLLECTIVE_VALIDATED,
}

_VERSION_KEYS = (
    ("nccl", c.REASON_NCCL_VERSION_MISMATCH, "NCCL"),
    ("torch", c.REASON_TORCH_VERSION_MISMATCH, "torch"),
    ("cuda", c.REASON_CUDA_VERSION_MISMATCH, "CUDA"),
    ("driver", c.REASON_DRIVER_VERSION_MISMATCH, "driver"),
)


@dataclass
class ProbeOutcome:
    """What the operator observed for one probe pod.

    ``report`` is the validated report as a camelCase dict, or None. ``error`` says why
    there is none (invalid report, container failed without one). ``running``: the probe
    had not finished when the verdict was reached without it (a peer failed before it
    could reach the rendezvous store, so this rank could only wait for its deadline); it
    adds no failure of its own.
    """

    rank: int
    pod: str
    node: Optional[str]
    report: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    error_reason: str = c.REASON_PROBE_REPORT_INVALID
    running: bool = False


@dataclass
class Verdict:
    status: str
    reason: str
    message: str


@dataclass
class Diagnosis:
    """The result of :func:`diagnose`."""

    conditions: dict[str, Verdict]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    socket_ifnames: dict[int, Optional[str]] = field(default_factory=dict)
    master_addr: Optional[str] = None
    backend: Optional[str] = None
    message_size_bytes: Optional[int] = None
    alg_bandwidth_gbps: Optional[float] = None
    bus_bandwidth_gbps: Optional[float] = None
    phase_seconds: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def validated(self) -> bool:
        return self.conditions[c.VALIDATED].status == "True"


# Rejections whose reason is worth a sentence in a passing NetworkValidated message (a decoy
# bridge, a NIC that is down or unreachable); Loopback/NoIPv4/NotRequested speak for themselves.
EXPLAINED_REJECTIONS = ("DuplicateAddress", "Unreachable", "Down", "MultipleOnNode", "NotOnAllNodes")


def _node_label(o: ProbeOutcome) -> str:
    return o.node or (o.report or {}).get("node") or o.pod


def summarize_ifnames(names: list[Optional[str]]) -> Optional[str]:
    """One NCCL_SOCKET_IFNAME for the printer column: the common name, or a sorted comma
    list when nodes name their NIC differently (NCCL accepts a comma list of prefixes)."""
    distinct = sorted({n for n in names if n})
    if not distinct:
        return None
    return ",".join(distinct)


def measured_by_ifname(outcomes: list[ProbeOutcome]) -> dict[str, float]:
    """Interface name -> the lowest ``measuredMbps`` (Mb/s, the probe's timed transfer on
    that interface's network) any report gives for it; interfaces never measured are absent."""
    out: dict[str, float] = {}
    for o in outcomes:
        for i in (o.report or {}).get("interfaces") or []:
            v = i.get("measuredMbps")
            if i.get("name") and isinstance(v, (int, float)):
                out[i["name"]] = min(out.get(i["name"], float(v)), float(v))
    return out


def _is_loopback(addr: Optional[str]) -> bool:
    try:
        return addr is not None and ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def _failure_rank(reason: str) -> tuple[int, int]:
    ctype = c.REASON_CONDITION.get(reason)
    order = c.CHECK_CONDITIONS.index(ctype) if ctype else len(c.CHECK_CONDITIONS)
    return (1 if reason in c.GENERIC_REASONS else 0, order)


def _version_mismatch(outcomes: list[ProbeOutcome]) -> Optional[Verdict]:
    """The first of NCCL, torch, CUDA, driver that differs between the reports (a node
    without the value is left out), with the per-node table and the fix; None if none."""
    rows = {_node_label(o): (o.report.get("versions") or {}) for o in outcomes if o.report}
    for key, reason, label in _VERSION_KEYS:
        seen = {n: str(v[key]) for n, v in rows.items() if v.get(key)}
        if len(set(seen.values())) > 1:
            expected = {n: str(rows[n]["ncclBuild"]) for n in seen if rows[n].get("ncclBuild")} \
                if key == "nccl" else {}
            odd = versions.odd_nodes(seen, expected)
            lib_for = tuple(odd) if key == "nccl" else ()
            return Verdict(
                "False",
                reason,
                f"{label} differs between nodes: {versions.table(rows, lib_for)}; {versions.fix_for(key, odd)}",
            )
    return None


def diagnose(outcomes: list[ProbeOutcome], master_addr: Optional[str]) -> Diagnosis:
    """Turn every rank's probe outcome into conditions (see the module docstring).

    ``outcomes`` holds one entry per node rank (all ranks finished). ``master_addr`` is
    the address the probes were given as MASTER_ADDR (rank 0's node address).
    """
    outcomes = sorted(outcomes, key=lambda o: o.rank)
    conds: dict[str, Verdict] = {
        c.PROBES_SCHEDULED: Verdict("True", c.REASON_PROBES_SCHEDULED, "every probe pod ran"),
    }
    diag = Diagnosis(conditions=conds, master_addr=master_addr)

    # 1. Collect failures: invalid/missing reports, then probe-reported failures.
    failures: list[tuple[str, str, str]] = []  # (reason, node, message)
    for o in outcomes:
        if o.report is None:
            if not o.running:
                failures.append((o.error_reason, _node_label(o), o.error or "no report"))
            continue
        f = o.report.get("failure")
        if not o.report.get("ok") and f:
            failures.append((f.get("reason") or c.REASON_PROBE_FAILED, _node_label(o), f.get("message") or ""))
        elif not o.report.get("ok"):
            failures.append((c.REASON_PROBE_FAILED, _node_label(o), "probe reported not ok"))
        elif not (o.report.get("chosen") or {}).get("ifname"):
            # A passing report must say which interface this rank validated: without it the
            # training pod would get no NCCL_SOCKET_IFNAME, the very fault the probe exists
            # to prevent (a report cut down to its verdict, or a foreign probe).
            failures.append((c.REASON_PROBE_REPORT_INVALID, _node_label(o), (
                f"{o.pod}: the report passed but names no chosen interface"
                f"{' (truncated)' if o.report.get('truncated') else ''}; training would start "
                "without NCCL_SOCKET_IFNAME: set network.socketIfname, or read the probe log "
                "(probe.keepPods: Always)")))
    if not failures and _is_loopback(master_addr):
        failures.append(
            (
                c.REASON_MASTER_ADDR_LOOPBACK,
                _node_label(outcomes[0]) if outcomes else "rank 0",
                f"MASTER_ADDR {master_addr} is a loopback address; other nodes cannot reach it",
            )
        )
    mismatch = _version_mismatch(outcomes)
    if mismatch:
        # Every report's versions are here: one table for all nodes replaces the probes'
        # own (identical or relayed) messages for that reason.
        failures = [f for f in failures if f[0] != mismatch.reason] + [(mismatch.reason, "", mismatch.message)]

    for reason, node, msg in failures:
        diag.failures.append(f"{node}: {reason}: {msg}" if node and not msg.startswith(node) else f"{reason}: {msg}")

    # 2. Warnings from passing reports.
    warn_by_type: dict[str, list[tuple[str, str]]] = {}
    for o in outcomes:
        for w in (o.report or {}).get("warnings") or []:
            reason = w.get("reason") or "Warning"
            msg = w.get("message") or ""
            text = msg if msg.startswith(_node_label(o)) else f"{_node_label(o)}: {msg}"
            warn_by_type.setdefault(WARNING_CONDITION.get(reason, c.NETWORK_VALIDATED), []).append(
                (reason, text)
            )
            if text not in diag.warnings:
                diag.warnings.append(text)

    # 3. Per-node results and interface choice (what training will use).
    for o in outcomes:
        r = o.report or {}
        chosen = r.get("chosen") or {}
        versions = r.get("versions") or {}
        diag.nodes.append(
            {
                "rank": o.rank,
                "name": o.node or r.get("node") or "",
                "address": chosen.get("addr"),
                "interface": chosen.get("ifname"),
                "torch": versions.get("torch"),
                "cuda": versions.get("cuda"),
                "nccl": versions.get("nccl"),
            }
        )
        diag.socket_ifnames[o.rank] = chosen.get("ifname")
    ar = [(o.report or {}).get("allreduce") for o in outcomes]
    ar = [a for a in ar if a]
    if ar:
        # The slowest rank bounds the collective: report the minimum bandwidth.
        diag.bus_bandwidth_gbps = round(min(float(a.get("busbwGBps") or 0.0) for a in ar), 4)
        diag.alg_bandwidth_gbps = round(min(float(a.get("algbwGBps") or 0.0) for a in ar), 4)
        diag.message_size_bytes = int(ar[0].get("bytes") or 0) or None
    backends = {(o.report or {}).get("backend") for o in outcomes} - {None}
    diag.backend = ",".join(sorted(backends)) or None
    for o in outcomes:
        for phase, secs in ((o.report or {}).get("timings") or {}).items():
            if secs is not None:
                diag.phase_seconds[phase] = round(max(diag.phase_seconds.get(phase, 0.0), float(secs)), 3)

    # 4. Conditions.
    if failures:
        failures.sort(key=lambda f: _failure_rank(f[0]))
        cause_reason = failures[0][0]
        cause_type = c.REASON_CONDITION.get(cause_reason)
        # Global verdicts (choice, versions) arrive identically from every rank: say them
        # once, unprefixed; a message seen on one node only is prefixed with that node.
        by_msg: dict[str, list[str]] = {}
        for r, n, m in failures:
            if r == cause_reason:
                by_msg.setdefault(m, []).append(n)
        message = "; ".join(
            m if (len(nodes) > 1 or not nodes[0] or m.startswith(nodes[0])) else f"{nodes[0]}: {m}"
            for m, nodes in by_msg.items()
        )
        if cause_reason in (c.REASON_MASTER_PORT_TIMEOUT, c.REASON_MASTER_PORT_REFUSED) and outcomes:
            # The dialling ranks report; the fault (a firewall, nothing listening) is on the
            # master's node, which their messages only know by address: name it.
            master_node = outcomes[0].node or (outcomes[0].report or {}).get("node")
            if master_node and outcomes[0].rank == 0 and master_node not in message:
                where = f"MASTER_ADDR {master_addr}" if master_addr else "MASTER_ADDR"
                message += (f"; {where} is {master_node} (rank 0, where the rendezvous "
                            f"listens): check {master_node}'s firewall for the master port")
        if cause_type is None:
            # Not tied to one check (invalid report, crashed probe): checks stay Unknown.
            for ctype in c.CHECK_CONDITIONS[1:]:
                conds[ctype] = Verdict("Unknown", c.REASON_NOT_REACHED, "no usable probe report")
        else:
            idx = c.CHECK_CONDITIONS.index(cause_type)
            for ctype in c.CHECK_CONDITIONS[1:]:
                i = c.CHECK_CONDITIONS.index(ctype)
                if i < idx:
                    conds[ctype] = Verdict("True", c.PASS_REASON[ctype], "passed on every node")
                elif i == idx:
                    conds[ctype] = Verdict("False", cause_reason, message)
                else:
                    conds[ctype] = Verdict(
                        "Unknown", c.REASON_NOT_REACHED, f"not checked: {cause_type} is False"
                    )
        conds[c.VALIDATED] = Verdict("False", cause_reason, message)
        return diag

    ifnames = summarize_ifnames(list(diag.socket_ifnames.values()))
    chosen_msgs = []
    rejected = {}
    why_not = {}
    explained = {}  # decoys and broken NICs: say why each was not used
    for o in outcomes:
        for rj in (o.report or {}).get("rejected") or []:
            rejected.setdefault(rj.get("ifname"), rj.get("reason"))
            if rj.get("reason") == "NotPreferred" and rj.get("message"):
                why_not.setdefault(rj.get("ifname"), rj["message"])
            elif rj.get("reason") in EXPLAINED_REJECTIONS and rj.get("message"):
                explained.setdefault(rj.get("ifname"), rj["message"])
    subnets = sorted({((o.report or {}).get("chosen") or {}).get("subnet") or "?" for o in outcomes})
    headline = f"{ifnames} ({', '.join(subnets)}) chosen on every node"
    measured = measured_by_ifname(outcomes)
    chosen_names = {n for n in diag.socket_ifnames.values() if n}
    mine = [v for k, v in measured.items() if k in chosen_names]
    not_preferred = {rj.get("ifname") for o in outcomes for rj in (o.report or {}).get("rejected") or []
                     if rj.get("reason") == "NotPreferred"}
    others = {k: v for k, v in measured.items() if k in not_preferred and k not in chosen_names}
    if mine and others:
        headline += (f": {min(mine):.0f} Mb/s measured vs "
                     + ", ".join(f"{k} {v:.0f} Mb/s" for k, v in sorted(others.items(), key=lambda kv: -kv[1])))
    chosen_msgs.append(headline)
    if rejected:
        chosen_msgs.append(
            "rejected: " + ", ".join(f"{k} ({v})" for k, v in sorted(rejected.items()) if k)
        )
    # each rejected decoy / broken NIC once, in the probe's words, then usable alternatives
    chosen_msgs.extend(dict.fromkeys(explained[k] for k in sorted(explained) if k))
    chosen_msgs.extend(why_not.values())  # usable alternatives: say why they lost
    versions0 = ((outcomes[0].report or {}).get("versions") or {}) if outcomes else {}
    vmsg = ", ".join(
        f"{label} {versions0.get(key)}"
        for key, label in (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"))
        if versions0.get(key)
    )
    conds[c.MASTER_REACHABLE] = Verdict(
        "True",
        c.REASON_MASTER_REACHABLE,
        f"every rank reached {master_addr}:{((outcomes[0].report or {}).get('master') or {}).get('port') if outcomes else ''}",
    )
    conds[c.NETWORK_VALIDATED] = Verdict("True", c.REASON_INTERFACE_SELECTED, "; ".join(chosen_msgs))
    conds[c.VERSIONS_CONSISTENT] = Verdict(
        "True", c.REASON_VERSIONS_MATCH, f"same on every node: {vmsg or 'versions unknown'}"
    )
    conds[c.COLLECTIVE_VALIDATED] = Verdict(
        "True",
        c.REASON_ALLREDUCE_PASSED,
        f"all-reduce correct over {len(outcomes)} ranks ({diag.backend}); busbw "
        f"{diag.bus_bandwidth_gbps} GB/s, algbw {diag.alg_bandwidth_gbps} GB/s at "
        f"{diag.message_size_bytes} bytes",
    )
    for ctype, warns in warn_by_type.items():
        conds[ctype] = Verdict(
            "True", warns[0][0], conds[ctype].message + "; warning: " + "; ".join(t for _, t in warns)
        )
    if diag.warnings:
        conds[c.VALIDATED] = Verdict(
            "True", c.REASON_PASSED_WITH_WARNINGS, "passed, but: " + "; ".join(diag.warnings)
        )
    else:
        conds[c.VALIDATED] = Verdict(
            "True",
            c.REASON_ALL_CHECKS_PASSED,
            f"{len(outcomes)} nodes validated; NCCL_SOCKET_IFNAME={ifnames}; "
            f"MASTER_ADDR={master_addr}; busbw {diag.bus_bandwidth_gbps} GB/s",
        )
    return diag
