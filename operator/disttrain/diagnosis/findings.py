"""What the probe reports say, typed (pure): failures, warnings, the cause, version skew.

The operator hands :mod:`disttrain.diagnosis.diagnose` one :class:`ProbeOutcome` per rank (the
:class:`~disttrain.diagnosis.report.ProbeReport` that ``parse_report`` returned, or why there
is none). :func:`typed` turns each into a :class:`RankInput` (the report as it is, no second
validation); the functions below are small and pure,
each with its table test in ``tests/unit/operator/diagnosis/test_findings.py``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from disttrain.diagnosis.report import ProbeReport
from disttrain_probe.contract import settings as psettings  # the probe's pure comparisons (stdlib)
from disttrain_probe.contract import versions as pversions
from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.paths import is_loopback


@dataclass
class ProbeOutcome:
    """What the operator observed for one probe pod.

    ``report`` is the parsed and checked report (the model), or None.
    ``error`` says why there is none (invalid report, container failed without one).
    ``running``: the probe had not finished when the verdict was reached without it (a
    peer failed before it could reach the rendezvous store, so this rank could only wait
    for its deadline); it adds no failure of its own. ``pod_ips``: the pod's addresses
    (``status.podIPs``; with hostNetwork the node's), what the job's DNS names resolve to
    even when the probe has not reported.
    """

    rank: int
    pod: str
    node: Optional[str]
    report: Optional[ProbeReport] = None
    error: Optional[str] = None
    error_reason: str = vocabulary.PROBE_REPORT_INVALID
    running: bool = False
    pod_ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankInput:
    """One rank's outcome over the typed report: ``node`` is the name messages use (the
    pod's node, else the report's, else the pod's name)."""

    rank: int
    pod: str
    node: str
    report: Optional[ProbeReport]
    error: Optional[str] = None
    error_reason: str = vocabulary.PROBE_REPORT_INVALID
    running: bool = False
    pod_ips: tuple[str, ...] = ()  # status.podIPs (ProbeOutcome)


@dataclass(frozen=True)
class Finding:
    """A failure or warning: its ``reason`` (vocabulary), the reporting ``node`` ('' for a
    verdict about all nodes) and the message as written (cause; evidence; fix)."""

    reason: str
    node: str
    message: str
    phase: str = ""  # the probe phase a reported failure came from ('' otherwise)

    @property
    def check(self) -> Optional[str]:
        """The check this finding is the cause of (:func:`vocabulary.check_of`)."""
        return vocabulary.check_of(self.reason, self.phase or None)

    @property
    def text(self) -> str:
        """The message, prefixed with the node unless it already starts with it."""
        if not self.node or self.message.startswith(self.node):
            return self.message
        return f"{self.node}: {self.message}"


def typed(o: ProbeOutcome) -> RankInput:
    """``o`` as the diagnosis reads it: the node named (the pod's, else the report's, else
    the pod's name)."""
    node = o.node or (o.report.node if o.report else None) or o.pod
    return RankInput(o.rank, o.pod, node, o.report, o.error, o.error_reason, o.running, tuple(o.pod_ips))


def is_failure_reason(name: Optional[str]) -> bool:
    """A reason the vocabulary knows as a failure (conditions only ever carry those)."""
    r = vocabulary.get(name or "")
    return bool(r and vocabulary.FAILURE in r.kinds)


def is_warning_reason(name: Optional[str]) -> bool:
    r = vocabulary.get(name or "")
    return bool(r and vocabulary.WARNING in r.kinds)


def rank_failure(r: RankInput) -> Optional[Finding]:
    """This rank's own failure: no report (unless it was still running), a failed report,
    or a passing report that names no chosen interface (training would start without
    NCCL_SOCKET_IFNAME: a report cut down to its verdict, or a foreign probe)."""
    rep = r.report
    if rep is None:
        return None if r.running else Finding(
            r.error_reason if is_failure_reason(r.error_reason) else vocabulary.PROBE_FAILED, r.node,
            (r.error or "").strip() or f"{r.pod}: no report")
    if not rep.ok:
        if rep.failure:
            reason, message = rep.failure.reason, rep.failure.message or ""
            if not is_failure_reason(reason):  # a newer or foreign probe: keep its words
                reason, message = vocabulary.PROBE_FAILED, f"{reason or 'no reason'}: {message}"
            if not message.strip():
                message = (f"{r.pod} failed in {rep.failure.phase or rep.phase or 'an unknown phase'} "
                           f"without a message; read its log (probe.keepPods: Always)")
            return Finding(reason, r.node, message, rep.failure.phase or "")
        return Finding(vocabulary.PROBE_FAILED, r.node, "probe reported not ok")
    if not (rep.chosen and rep.chosen.ifname):
        return Finding(vocabulary.PROBE_REPORT_INVALID, r.node, (
            f"{r.pod}: the report passed but names no chosen interface"
            f"{' (truncated)' if rep.truncated else ''}; training would start without "
            "NCCL_SOCKET_IFNAME: set network.socketIfname, or read the probe log "
            "(probe.keepPods: Always)"))
    return None


_VERSION_KEYS = (
    ("nccl", vocabulary.NCCL_VERSION_MISMATCH, "NCCL"),
    ("torch", vocabulary.TORCH_VERSION_MISMATCH, "torch"),
    ("cuda", vocabulary.CUDA_VERSION_MISMATCH, "CUDA"),
    ("driver", vocabulary.DRIVER_VERSION_MISMATCH, "driver"),
)
VERSION_TABLE_MAX = 260  # characters of per-node table in the message; beyond, odd nodes only


def version_mismatch(ranks: Sequence[RankInput]) -> Optional[Finding]:
    """The first of NCCL, torch, CUDA, driver that differs between the reports (a node
    without the value is left out), with the per-node table (only the odd nodes and a
    count of the others when the whole table is long) and the fix; None if none."""
    rows = {r.node: r.report.versions.model_dump(by_alias=True) for r in ranks
            if r.report and r.report.versions}
    for key, reason, label in _VERSION_KEYS:
        seen = {n: str(v[key]) for n, v in rows.items() if v.get(key)}
        if len(set(seen.values())) <= 1:
            continue
        expected = ({n: str(rows[n]["ncclBuild"]) for n in seen if rows[n].get("ncclBuild")}
                    if key == "nccl" else {})
        odd = pversions.odd_nodes(seen, expected)
        lib_for = tuple(odd) if key == "nccl" else ()
        table = pversions.table(rows, lib_for)
        if len(table) > VERSION_TABLE_MAX:
            others = sorted(n for n in rows if n not in odd)
            values = sorted({seen[n] for n in others if n in seen})
            table = (pversions.table({n: rows[n] for n in odd}, lib_for)
                     + f"; {len(others)} other node(s): {label} {', '.join(values) or 'unknown'}")
        return Finding(reason, "", f"{label} differs between nodes: {table}; "
                                   f"{pversions.fix_for(key, odd)}")
    return None


def settings_mismatch(ranks: Sequence[RankInput]) -> Optional[Finding]:
    """The first must-agree NCCL/gloo variable that differs between the reports (the probe's
    own table, disttrain_probe.contract.settings), None when they agree or none reported settings."""
    peers = {r.rank: {"node": r.node, "settings": r.report.settings} for r in ranks if r.report}
    if not any(p["settings"] for p in peers.values()):
        return None
    m = psettings.mismatch(peers)
    return Finding(m["reason"], "", m["message"]) if m else None


def failures(ranks: Sequence[RankInput], master_addr: Optional[str]) -> list[Finding]:
    """Every failure: each rank's own, a loopback MASTER_ADDR when nothing else failed, and
    one cross-node version table that replaces the probes' own (identical or relayed)
    messages for that reason; failures a rank only passed on from a peer (:func:`relayed`)
    after the ranks' own, so the first of a reason is the rank it happened on."""
    out = [f for f in (rank_failure(r) for r in ranks) if f is not None]
    if not out and is_loopback(master_addr):
        out.append(Finding(vocabulary.MASTER_ADDR_LOOPBACK, ranks[0].node if ranks else "rank 0",
                           f"MASTER_ADDR {master_addr} is a loopback address; other nodes "
                           f"cannot reach it; use rank 0's node address"))
    for mismatch in (version_mismatch(ranks), settings_mismatch(ranks)):
        if mismatch:
            out = [f for f in out if f.reason != mismatch.reason] + [mismatch]
    # a rank's own failure before what another rank passed on (it only waited for that one)
    return sorted(out, key=relayed)


_RELAYED = re.compile(r"^peer \S+ \(rank \d+\) failed in \S+: ")


def relayed(f: Finding) -> bool:
    """The finding only passes on another rank's failure (``peer node-b (rank 1) failed in
    collective: ...``, what a probe reports when a peer's abort stopped it)."""
    return bool(_RELAYED.match(f.message))


def failure_order(reason: str, phase: Optional[str] = None) -> tuple[int, int]:
    """Sort key of a failure reason (from ``phase``): specific before generic, then by its
    check's order (reasons of no check last)."""
    check = vocabulary.check_of(reason, phase)
    order = vocabulary.CHECK_CONDITIONS.index(check) if check else len(vocabulary.CHECK_CONDITIONS)
    return (1 if vocabulary.is_generic(reason) else 0, order)


def cause(found: Sequence[Finding]) -> Optional[Finding]:
    """The failure that is the cause: the earliest check's, a specific reason before a
    generic one (rank 0's RendezvousTimeout is usually a peer's MasterAddrLoopback)."""
    return min(found, key=lambda f: failure_order(f.reason, f.phase or None)) if found else None


def warnings(ranks: Sequence[RankInput]) -> list[Finding]:
    """Every warning of every report, in rank order."""
    return [Finding(w.reason or "Warning", r.node, w.message or "")
            for r in ranks if r.report for w in r.report.warnings]


def warning_check(reason: str) -> str:
    """The check condition a warning keeps True with its reason (NetworkValidated for a
    reason the vocabulary does not know: a newer probe)."""
    return vocabulary.check_of(reason) or vocabulary.NETWORK_VALIDATED


__all__ = ["Finding", "ProbeOutcome", "RankInput", "cause", "failure_order", "failures",
           "rank_failure", "relayed", "typed", "version_mismatch", "warning_check",
           "warnings"]
