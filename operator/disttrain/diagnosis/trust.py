"""Which probe reports count as evidence (pure).

A probe report is untrusted input: it comes from a process running in the user's image on
a node. :func:`parse_report <disttrain.diagnosis.report.parse_report>` checks its shape; this module
checks that it is the report of the pod that wrote it and that it does not contradict
itself, before :func:`disttrain.diagnosis.diagnose.diagnose` reads it:

- identity: ``rank`` equals the pod's node-rank label, ``worldSize`` the job's numNodes,
  ``localWorldSize`` the job's processes per node (required when that is more than one;
  ``rank``/``worldSize`` count probe pods, i.e. nodes, the process world is their product),
  ``jobUid`` the job's UID, ``attempt`` the probe attempt of the pod, ``pod`` the pod's
  name and ``node`` its node, when the report gives them (the probe echoes each one the
  operator passed in); ``master`` is the address and port the operator gave that rank.
  A report that fails any of these is ``ProbeReportInvalid`` naming the rank and field:
  it may be another job's report (a pod of a deleted job with the same name) or a
  foreign program's output;
- consistency: ``ok: true`` with a ``failure`` is invalid; a passing report must be in
  phase ``report`` (the probe passes only there), carry its ``master`` block with an
  integer ``port``, not say ``master.joined: false`` (absent: an older probe, accepted)
  nor ``final: false`` (the pessimistic report written before a phase), and an
  all-reduce that is marked correct with finite bandwidths (an incorrect all-reduce is
  ``AllReduceWrongResult`` whatever ``ok`` says); with several processes per node also the
  intra-node all-reduce, and no local rank that did not pass (:func:`local_ranks_problem`);
- threshold: the operator compares every rank's busbw with
  ``spec.probe.minBusBandwidthGBps`` itself (``BandwidthBelowThreshold``), so a probe that
  skipped or misread the threshold cannot validate a slow cluster.

The result is the report to diagnose (possibly turned into a failing one) or an error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from disttrain.diagnosis.report import Failure, ProbeReport
from disttrain_probe.contract import vocabulary


@dataclass(frozen=True)
class Expected:
    """What the operator knows about the pod that wrote a report.

    ``master_addr`` None means the operator did not fix it in advance (rank 0 learns its own
    address from the downward API), so it is not compared."""

    rank: int
    world_size: int
    job_uid: str
    attempt: int
    pod: str
    node: Optional[str]
    master_addr: Optional[str]
    master_port: int
    min_busbw_gbps: float = 0.0
    # numProcPerNode: with more than one, the report must say so (localWorldSize) and a pass
    # must carry the intra-node all-reduce and every local rank's pass.
    local_world_size: int = 1


@dataclass(frozen=True)
class Checked:
    """The outcome: ``report`` to diagnose (maybe rewritten as a failure), or ``error``
    (a ProbeReportInvalid message naming the rank)."""

    report: Optional[ProbeReport]
    error: Optional[str] = None


def _short(v: Any) -> str:
    """``v`` as a message shows it: repr, at most 40 characters."""
    return repr(v[:40] if isinstance(v, str) else v)[:44]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def identity_problem(report: ProbeReport, exp: Expected) -> Optional[str]:
    """The first field in which ``report`` is not the report of the pod ``exp`` describes,
    as "<field> is X, expected Y"; None when it matches."""
    checks: list[tuple[str, Any, Any, bool]] = [
        ("rank", report.rank, exp.rank, True),
        ("worldSize", report.world_size, exp.world_size, True),
        ("jobUid", report.job_uid, exp.job_uid, True),
        ("attempt", report.attempt, exp.attempt, True),
        ("pod", report.pod, exp.pod, False),
        ("node", report.node, exp.node, False),
        ("localWorldSize", report.local_world_size, exp.local_world_size,
         exp.local_world_size > 1),
    ]
    for field, got, want, required in checks:
        if want is None or (got is None and not required):
            continue
        if got != want:
            return f"{field} is {got!r}, expected {want!r}"
    port = report.master.port if report.master else None
    if port is not None and port != exp.master_port:
        return f"master.port is {port!r}, expected {exp.master_port}"
    addr = report.master.addr if report.master else None
    if exp.master_addr is not None and addr is not None and addr != exp.master_addr:
        return f"master.addr is {addr!r}, expected {exp.master_addr!r}"
    return None


def local_ranks_problem(report: ProbeReport, exp: Expected, who: str) -> Optional[Checked]:
    """A passing report of a pod with several processes: its intra-node all-reduce must be
    there, correct, with a finite busbw, and no local rank may have failed or lie outside
    0..localWorldSize-1; unless the report was cut (``truncated``: then only the failing ones
    are listed) every local rank must be listed. The work is bounded by the report's size
    (at most 4096 bytes), never by ``exp.local_world_size``; a message names at most 8
    local ranks. The Checked to return instead, or None."""
    intra = report.intra_node
    if intra is None:
        return Checked(None, f"{who}: the report passed without the intra-node all-reduce of its "
                             f"{exp.local_world_size} local ranks")
    if intra.correct is not True:
        return Checked(_as_failure(report, vocabulary.ALL_REDUCE_WRONG_RESULT, (
            f"{exp.node or exp.pod}: the all-reduce among its {exp.local_world_size} local ranks "
            f"was wrong (correct={intra.correct!r}) although the probe reported ok; check "
            "the node's GPUs and their links (nvidia-smi topo -m, nvidia-smi -q for ECC errors)")))
    if intra.busbw_gbps is None or not _finite(intra.busbw_gbps) or intra.busbw_gbps < 0:
        return Checked(None, f"{who}: the report passed with intra-node bus bandwidth "
                             f"{intra.busbw_gbps!r}, not a finite number of GB/s")
    entries = report.local_ranks
    bad = [e.local_rank for e in entries if e.ok is not True]
    if bad:
        shown = ", ".join(str(b) for b in bad[:SHOWN]) + (" ..." if len(bad) > SHOWN else "")
        return Checked(None, f"{who}: the report says ok but local rank(s) {shown} did not "
                             "pass: it contradicts itself")
    n = exp.local_world_size
    listed = {e.local_rank for e in entries}
    outside = sorted(k for k in listed if not 0 <= k < n)
    if outside:
        return Checked(None, f"{who}: the report lists local rank {str(outside[0])[:20]}, outside "
                             f"0..{n - 1} (localWorldSize {n}): it contradicts itself")
    if len(listed) < n and not report.truncated:
        shown = ", ".join(str(k) for k in first_missing(listed, n))
        more = " ..." if n - len(listed) > SHOWN else ""
        return Checked(None, f"{who}: the report passed without the outcome of local rank(s) "
                             f"{shown}{more} of {n}")
    return None


SHOWN = 8  # local ranks a message lists


def first_missing(listed: set[Any], n: int, limit: int = SHOWN) -> list[int]:
    """The first ``limit`` of 0..n-1 not in ``listed``, ascending. Work is bounded by
    ``len(listed) + limit`` steps, not by ``n`` (a number from the spec or the report: it
    may be large). Pure; never raises."""
    out: list[int] = []
    k = 0
    while len(out) < limit and k < n:
        if k not in listed:
            out.append(k)
        k += 1
    return out


def _pass_master_problem(report: ProbeReport) -> Optional[str]:
    """Why a report that says ``ok`` cannot be the probe's pass, from its ``master`` block and
    ``final`` (docs/probe-report.md): the block with an integer ``port`` (the probe always
    writes the MASTER_PORT it was given), ``master.joined`` not false (a rank that never
    joined rank 0's store cannot have passed; absent in an older probe's report, which is
    accepted), and not the pessimistic report (``final: false``) written before a phase.
    None when none of these is wrong."""
    master = report.master
    if master is None:
        return "without its master block (the MASTER_ADDR and port it reached)"
    port = master.port
    if port is None:
        return f"with master.port {_short(port)}, not the MASTER_PORT it was given"
    if master.joined is False:
        return "although master.joined is false (it never joined rank 0's store)"
    if report.final is False:
        return "in a pessimistic report (final: false, written before a phase)"
    return None


def _as_failure(report: ProbeReport, reason: str, message: str) -> ProbeReport:
    """A copy of ``report`` turned into a failure (the parsed report is left as it is)."""
    return report.model_copy(update={
        "ok": False, "failure": Failure(reason=reason, phase="collective", message=message)})


def check(report: ProbeReport, exp: Expected) -> Checked:
    """Check one parsed report (:func:`disttrain.diagnosis.report.parse_report`'s model)
    against what the operator expects."""
    who = f"rank {exp.rank} ({exp.pod} on {exp.node or 'an unknown node'})"
    problem = identity_problem(report, exp)
    if problem:
        return Checked(None, f"{who}: the report is not this pod's: {problem}; it is ignored "
                             "(another job's or an older attempt's report, or not the probe)")
    failure = report.failure
    if report.ok and failure:
        return Checked(None, f"{who}: the report says ok but also reports the failure "
                             f"{failure.reason!r}: it contradicts itself")
    if not report.ok:
        return Checked(report)
    if report.phase != "report":
        return Checked(None, f"{who}: the report passed in phase {_short(report.phase)}: "
                             "a probe passes only in its last phase, 'report'; it is not the probe's")
    master_problem = _pass_master_problem(report)
    if master_problem:
        return Checked(None, f"{who}: the report passed {master_problem}: it is not the probe's")
    ar = report.allreduce
    if ar is None:
        return Checked(None, f"{who}: the report passed without an all-reduce result")
    if ar.correct is not True:
        return Checked(_as_failure(report, vocabulary.ALL_REDUCE_WRONG_RESULT, (
            f"{exp.node or exp.pod}: the all-reduce result was wrong (correct="
            f"{ar.correct!r}) although the probe reported ok; check the GPUs and NCCL "
            "on this node (nvidia-smi -q for ECC errors), then run the job again")))
    busbw = ar.busbw_gbps
    if busbw is None or not _finite(busbw) or busbw < 0:
        return Checked(None, f"{who}: the report passed with bus bandwidth {busbw!r}, not a "
                             "finite number of GB/s")
    if exp.local_world_size > 1:
        local = local_ranks_problem(report, exp, who)
        if isinstance(local, Checked):
            return local
    if exp.min_busbw_gbps > 0 and busbw < exp.min_busbw_gbps:
        return Checked(_as_failure(report, vocabulary.BANDWIDTH_BELOW_THRESHOLD, (
            f"{exp.node or exp.pod}: all-reduce busbw {busbw:.4g} GB/s is below "
            f"spec.probe.minBusBandwidthGBps={exp.min_busbw_gbps:g}; check the chosen "
            "interface's link speed, or lower the threshold")))
    return Checked(report)
