"""Diagnosis (pure): probe reports -> conditions, per-node results and the rendezvous.

Input is one :class:`ProbeOutcome` per node rank: the parsed report (the
:class:`~disttrain.diagnosis.report.ProbeReport` of the wire contract in docs/probe-report.md)
or why there is none. Output is a :class:`Diagnosis`: the probe checks plus the
``Validated`` summary, per-node results, the interface each rank must use, bandwidth,
and every failure and warning line in full (for ``status.probe``).

The steps are small pure functions over the typed reports, each with its table test:
:mod:`findings` (typed inputs, failures, warnings, the cause, version skew),
:mod:`attribution` (which node or path the evidence singles out),
:mod:`netsummary` (per-node results, the network summary), :mod:`checkconditions` (conditions
from findings) and :mod:`messages` (every condition message at most 400 characters:
cause, node(s), fix; details stay in ``status`` and the Events).

Rules:
- the cause is the failure of the earliest check (ProbesScheduled, MasterReachable,
  NetworkValidated, VersionsConsistent, CollectiveValidated); a specific reason from any
  rank beats a generic one (rank 0's RendezvousTimeout is usually a peer's
  MasterAddrLoopback);
- checks before the failing one are True, checks after it Unknown (not reached);
- versions are compared across ranks here as well, so a probe that did not compare them
  still gets a VersionsConsistent verdict;
- warnings (latent faults a passing probe saw) keep their condition True but replace
  its reason and message, and make Validated's reason PassedWithWarnings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.diagnosis import attribution, checkconditions, findings, messages, netsummary, stragglers
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain_probe.contract import vocabulary

# Which check a probe warning reason belongs to (from the vocabulary).
WARNING_CONDITION = {name: vocabulary.REASONS[name].condition for name in vocabulary.named(vocabulary.WARNING)}


@dataclass(frozen=True)
class Policy:
    """What the job's spec decides about a verdict, given to :func:`diagnose` once.

    ``max_link_imbalance``: ``probe.maxLinkImbalance``, a straggler node that many times
    below the median throughput fails the preflight (None: a warning only; see
    :mod:`disttrain.diagnosis.stragglers`)."""

    max_link_imbalance: Optional[float] = None

    @classmethod
    def of(cls, spec: DistTrainingJobSpec) -> "Policy":
        return cls(max_link_imbalance=spec.probe.max_link_imbalance)


@dataclass
class Diagnosis:
    """The result of :func:`diagnose`: ``conditions`` (type -> Verdict) for the probe checks
    and Validated; ``nodes`` (``status.nodes``); ``socket_ifnames`` (rank -> interface);
    bandwidths in GB/s (1e9 B/s); ``failures``/``warnings``: one full line each, for
    ``status.probe``; ``not_chosen``: every interface not chosen and why, one line per
    reason (``status.probe.interfacesNotChosen``)."""

    conditions: dict[str, Verdict]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    socket_ifnames: dict[int, Optional[str]] = field(default_factory=dict)
    master_addr: Optional[str] = None
    explained: Optional[str] = None  # the attribution kind when the evidence explained a failure
    backend: Optional[str] = None
    message_size_bytes: Optional[int] = None
    alg_bandwidth_gbps: Optional[float] = None
    bus_bandwidth_gbps: Optional[float] = None
    phase_seconds: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    not_chosen: list[str] = field(default_factory=list)  # status.probe.interfacesNotChosen

    @property
    def validated(self) -> bool:
        return self.conditions[vocabulary.VALIDATED].status == constants.TRUE


def _passed(ranks: list[findings.RankInput], master_addr: Optional[str], busbw, algbw, size,
            backend) -> dict[str, Verdict]:
    port = next((r.report.master.port for r in ranks if r.report and r.report.master), None)
    v0 = next((r.report.versions for r in ranks if r.report and r.report.versions), None)
    vmsg = ", ".join(f"{label} {getattr(v0, key)}" for key, label in
                     (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"))
                     if v0 is not None and getattr(v0, key)) or "versions unknown"
    return {
        vocabulary.MASTER_REACHABLE: Verdict(constants.TRUE, vocabulary.MASTER_PORT_OPEN,
                                    f"every rank reached {master_addr}:{port if port else ''}"),
        vocabulary.NETWORK_VALIDATED: Verdict(constants.TRUE, vocabulary.INTERFACE_SELECTED, netsummary.network_message(ranks)),
        vocabulary.VERSIONS_CONSISTENT: Verdict(constants.TRUE, vocabulary.VERSIONS_MATCH, f"same on every node: {vmsg}"),
        vocabulary.COLLECTIVE_VALIDATED: Verdict(constants.TRUE, vocabulary.ALLREDUCE_PASSED, messages.bound(_collective_passed(
            ranks, busbw, algbw, size, backend))),
    }


def _collective_passed(ranks: list[findings.RankInput], busbw, algbw, size, backend) -> str:
    """CollectiveValidated's message: over how many ranks (nodes x processes per node), the
    slowest node's intra-node all-reduce with several processes, then the world's."""
    nproc = netsummary.processes(ranks)
    if nproc <= 1:
        return (f"all-reduce correct over {len(ranks)} ranks ({backend}); busbw {busbw} GB/s, "
                f"algbw {algbw} GB/s at {size} bytes")
    return (f"all-reduce correct among each node's {nproc} local ranks (intra-node busbw "
            f"{netsummary.intra_bandwidth(ranks)} GB/s, slowest node) and over {len(ranks) * nproc} ranks "
            f"({len(ranks)} nodes x {nproc}, {backend}); busbw {busbw} GB/s, algbw {algbw} GB/s "
            f"at {size} bytes")


def diagnose(outcomes: list[ProbeOutcome], master_addr: Optional[str],
             policy: Policy = Policy()) -> Diagnosis:
    """Turn every rank's probe outcome into conditions (see the module docstring): the one
    verdict (``disttrain.diagnosis.advice`` only appends the spec's fix to its messages).

    ``outcomes`` holds one entry per node rank (all ranks finished, or not waited for:
    ``running``). ``master_addr`` is the address the probes were given as MASTER_ADDR.
    ``policy`` is what the job's spec decides (:class:`Policy`). Never raises for bad input:
    a report that does not match the schema is a ProbeReportInvalid failure.
    """
    ranks = [findings.typed(o) for o in sorted(outcomes, key=lambda o: o.rank)]
    busbw, algbw, size = netsummary.bandwidths(ranks)
    ifnames = netsummary.socket_ifnames(ranks)
    diag = Diagnosis(
        conditions={vocabulary.PROBES_SCHEDULED: Verdict(constants.TRUE, vocabulary.PROBES_SCHEDULED_OK, "every probe pod ran")},
        nodes=netsummary.node_results(ranks), socket_ifnames=ifnames, master_addr=master_addr,
        backend=netsummary.backend(ranks), message_size_bytes=size, alg_bandwidth_gbps=algbw,
        bus_bandwidth_gbps=busbw, phase_seconds=netsummary.phase_seconds(ranks),
        not_chosen=netsummary.not_chosen(ranks))
    for i, mbps in stragglers.node_throughput(ranks).items():  # noqa: B007
        diag.nodes[i]["throughputMbps"] = round(mbps, 1)

    found = findings.failures(ranks, master_addr) or attribution.own_resolution(ranks, master_addr)
    slow_fail, slow_warn = stragglers.findings(ranks, policy.max_link_imbalance) if not found else ([], [])
    found += slow_fail
    diag.failures = _failure_lines(found)
    # a slow link costs every step of training: it leads the network check's warnings
    warns = slow_warn + findings.warnings(ranks)
    diag.warnings = list(dict.fromkeys(w.text for w in warns))

    cause = findings.cause(found)
    if cause is not None:
        message, named, diag.explained = attribution.explain(cause, found, ranks, master_addr)
        diag.conditions.update(checkconditions.failed(cause, message, named))
        return diag

    passed = _passed(ranks, master_addr, busbw, algbw, size, diag.backend)
    diag.conditions.update(checkconditions.warned(passed, warns))
    diag.conditions[vocabulary.VALIDATED] = checkconditions.summary_passed(
        passed, warns, len(ranks), netsummary.summarize_ifnames(list(ifnames.values())), master_addr, busbw)
    return diag


def _failure_lines(found: list[findings.Finding]) -> list[str]:
    """``status.probe.failures``: one full line per distinct message, naming every node that
    reported it (a verdict every rank reports identically is one line)."""
    by_msg: dict[str, list[str]] = {}
    for f in found:
        by_msg.setdefault(f.message, [])
        if f.node and f.node not in by_msg[f.message]:
            by_msg[f.message].append(f.node)
    reason = {f.message: f.reason for f in found}
    out = []
    for msg, nodes in by_msg.items():
        if len(nodes) == 1:
            out.append(findings.Finding(reason[msg], nodes[0], msg).text)
        elif nodes:
            out.append(f"{', '.join(nodes)}: {msg}")
        else:
            out.append(f"{reason[msg]}: {msg}")
    return out


__all__ = ["Diagnosis", "Policy", "WARNING_CONDITION", "diagnose"]
