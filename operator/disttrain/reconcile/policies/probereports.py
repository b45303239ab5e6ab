"""The probe reports of an attempt (pure): one checked outcome per rank for the verdict.

A finished probe's report (its termination message) is parsed and checked against what the
operator expects of that rank (:mod:`disttrain.diagnosis.trust`: the job, the attempt, the
pod, the node, MASTER_ADDR); a probe that ended without one says why (its pod lost,
the report invalid, the probe exited without a report). Used by :mod:`.probing`; the
outcomes go to :mod:`.verdict`.
"""

from __future__ import annotations

from typing import Optional

from disttrain.api.types import nproc_for
from disttrain.children import observe
from disttrain.diagnosis import logline, trust
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.reconcile.policies.probelaunch import attempt_of
from disttrain.reconcile.step import Step
from disttrain_probe.contract import vocabulary


def given_master(pod: dict) -> Optional[str]:
    """The MASTER_ADDR value the operator put in the probe pod (None for a downward-API field)."""
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(ctr, dict) and ctr.get("name") == "probe":
            for e in ctr.get("env") or []:
                if isinstance(e, dict) and e.get("name") == "MASTER_ADDR":
                    v = e.get("value")
                    return v if isinstance(v, str) else None
    return None


def collect(s: Step, by_rank: dict[int, dict]) -> list[ProbeOutcome]:
    """One outcome per rank: its report (parsed and checked by :mod:`disttrain.diagnosis.trust`) or
    why there is none; ranks still running (not waited for, see :func:`.stranded.stranded`) are marked."""
    attempt = attempt_of(s)
    outcomes = []
    for r in range(s.spec.num_nodes):
        pod = by_rank[r]
        name, node = observe.name(pod), observe.node(pod)
        out = ProbeOutcome(rank=r, pod=name, node=node, pod_ips=observe.pod_ips(pod))
        outcomes.append(out)
        if not observe.finished(pod):
            out.running = True
            continue
        raw = observe.termination_message(pod, "probe")
        code = observe.exit_code(pod, "probe")
        lost = observe.evicted(pod)
        try:
            report = s.parse_report(raw)
        except ValueError as exc:
            if lost and not raw:
                out.error = (f"{name} on {node} ended before it reported ({lost}); run the job "
                             "again once the node is healthy")
                out.error_reason = vocabulary.PROBE_POD_LOST
            elif raw.lstrip().startswith("{") or code == 0 or not raw:
                out.error = f"{name} on {node}: report invalid: {exc}"
                out.error_reason = vocabulary.PROBE_REPORT_INVALID
            else:
                said = logline.quote(raw, name, "probe")
                out.error = f"{name} on {node}: probe exited {code} without a report: {said}"
                out.error_reason = vocabulary.PROBE_FAILED
            continue
        expected = trust.Expected(
            rank=r, world_size=s.spec.num_nodes, job_uid=s.job.uid, attempt=attempt, pod=name,
            node=node, master_addr=given_master(pod), master_port=s.spec.rendezvous.port,
            min_busbw_gbps=s.spec.probe.min_bus_bandwidth_gbps, local_world_size=nproc_for(s.spec))
        checked = trust.check(report, expected)
        if checked.error:
            out.error = checked.error
            out.error_reason = vocabulary.PROBE_REPORT_INVALID
        else:
            out.report = checked.report
    return outcomes
