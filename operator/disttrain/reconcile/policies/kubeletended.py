"""Probes the kubelet ended (pure): its word is the verdict, never the silence that followed.

A probe whose container the kubelet ended (out of memory, a signal, an exit without the
probe's final report, a container that could not run, an init container that failed, a
pod evicted, preempted or past its activeDeadlineSeconds, its node NotReady) or cannot
start (a missing ConfigMap, Secret or key) told its peers nothing: they dial a store
nobody serves, or wait for it at their next gather, and report a refused or silent port,
a rendezvous timeout. Read as a network fault, that names a firewall on a healthy node.
Found on real kubelets: probes with ``memory: 64Mi`` were OOMKilled importing torch, and
the verdict was ``MasterPortTimeout: ... node-a's firewall drops it, or nothing listens
there``.

So the probe run reads every probe pod's container states
(:func:`disttrain.children.kubelet.container_failure`) before any report:
:func:`ended` names the ranks the kubelet ended (a probe's own final report, a failure it
published to its peers, is its word instead), and the verdict goes at once, after
:data:`SETTLE_SECONDS` for the other ranks to end the same way. :func:`mark` turns those
ranks' outcomes into failures that name the pod, the node, the container, the kubelet's
reason and the fix; :func:`override` makes them the verdict: ``Validated=False`` with
reason ``OOMKilled``, ``ProbeContainerFailed``, ``ProbeContainerConfigError``,
``ProbePodLost`` (evicted, preempted, node lost) or ``ProbeTimeout`` (the pod's
activeDeadlineSeconds), the checks Unknown (not reached), and no firewall, port or path
named; what the other ranks reported stays in ``status.probe.failures``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Optional

from disttrain.api.types import DistTrainingJobSpec, trainer_index
from disttrain.children import kubelet, observe
from disttrain.children.kubelet import ContainerFailure
from disttrain.diagnosis import logline, messages
from disttrain.diagnosis.diagnose import Diagnosis
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.diagnosis.report import ProbeReport
from disttrain.reconcile.policies import nodeloss
from disttrain.reconcile.policies.deadline import seconds_left
from disttrain.reconcile.step import ReportParser, Step
from disttrain_probe.contract import vocabulary

# After the first rank the kubelet ended, how long the others get to end too (s): every
# probe imports torch at about the same moment, so a memory limit kills them within a
# second or two, and the verdict then names every node at once.
SETTLE_SECONDS = 3.0
# What the probe uses, measured: `python -c 'import torch'` peaks at about 700 MiB of
# resident memory (torch 2.8.0+cu128 on x86_64, /usr/bin/time -v); the probe's own work
# adds little (docs/conditions.md)
PROBE_MEMORY = "about 700Mi (importing torch)"
REASONS = (vocabulary.OOM_KILLED, vocabulary.PROBE_CONTAINER_FAILED, vocabulary.PROBE_CONFIG_ERROR)
# which reason leads when the kubelet ended ranks for several (ProbePodLost is nodeloss.override's
# when no rank is one of these)
REASONS_ORDER = REASONS + (vocabulary.PROBE_TIMEOUT, vocabulary.PROBE_POD_LOST)


def reason_of(f: ContainerFailure) -> str:
    """The verdict's reason for a probe the kubelet ended as ``f`` says."""
    if f.kind == kubelet.OOM:
        return vocabulary.OOM_KILLED
    if f.kind == kubelet.CONFIG:
        return vocabulary.PROBE_CONFIG_ERROR
    if f.kind == kubelet.POD and f.reason == kubelet.POD_DEADLINE:
        return vocabulary.PROBE_TIMEOUT
    if f.kind in (kubelet.POD, kubelet.NODE):
        return vocabulary.PROBE_POD_LOST
    return vocabulary.PROBE_CONTAINER_FAILED


def _report(pod: Any, parse_report: ReportParser) -> tuple[Optional[ProbeReport], bool]:
    """(the probe container's parsed report or None, whether its message looks like a
    report: a JSON object)."""
    raw = observe.termination_message(pod, "probe")
    try:
        return parse_report(raw), True
    except ValueError:
        return None, raw.lstrip().startswith("{")


# the probe pod's own containers; others (a mesh's injected sidecar) never outvote the
# probe's final report: an istio-proxy OOMKilled after every rank passed is no verdict
OURS = ("probe", "install-probe", "")


def ended_by_kubelet(pod: Any, parse_report: ReportParser) -> Optional[ContainerFailure]:
    """How the kubelet ended (or keeps from starting) this probe pod, or None when it did
    not, or the probe had its own word: a final report (``final`` not false) before the
    pod or a container ended, or a container's exit with a message that is a report which
    does not parse (ProbeReportInvalid says so). An image that cannot be pulled is
    ProbesScheduled's (:func:`.probing.scheduling_verdict`); out of memory, and a container
    that cannot start, are the kubelet's whatever the report when they are the probe's own
    containers (:data:`OURS`); another's (an injected sidecar) only without a final report.
    Never raises."""
    f = kubelet.container_failure(pod)
    if f is None or f.kind == kubelet.IMAGE:
        return None
    if (f.kind == kubelet.OOM or not f.ended) and f.container in OURS:
        return f
    rep, looks = _report(pod, parse_report)
    if rep is not None and rep.final is not False:
        return None  # it reported, and its peers heard: whatever ended the pod after that
    if rep is None and looks and f.kind in (kubelet.SIGNAL, kubelet.EXIT, kubelet.CREATE):
        return None
    return f


def ended(by_rank: dict[int, dict], n: int, parse_report: ReportParser,
          now: datetime) -> tuple[dict[int, ContainerFailure], Optional[float]]:
    """(rank -> how the kubelet ended its probe, None) once the verdict may go: every other
    rank ended, or :data:`SETTLE_SECONDS` passed since the first such rank ended (or that
    time is unknown); ({}, seconds) while the settle runs; ({}, None) when the kubelet
    ended no probe. Never raises."""
    found = {r: f for r in range(n) if (p := by_rank.get(r)) is not None
             and (f := ended_by_kubelet(p, parse_report)) is not None}
    if not found:
        return {}, None
    others = [r for r in range(n) if r not in found and not observe.finished(by_rank.get(r))]
    times = [t for f in found.values() if (t := observe.parse_time(f.finished_at)) is not None]
    if others and times and len(times) == len(found):
        left = seconds_left(min(times), SETTLE_SECONDS, now)
        if left is not None and left > 0:
            return {}, left
    return found, None


def template_field(spec: DistTrainingJobSpec, f: ContainerFailure) -> str:
    """Where the failed probe container's setting lives in the job: the template container
    whose memory limit is the one the probe got (it gets the training container's
    resources); ``spec.template``'s training container when that is not one."""
    if f.init or f.container not in ("probe", ""):
        return f"the probe pod's {f.who}"
    ctrs = spec.template.spec.get("containers") if isinstance(spec.template.spec, dict) else None
    ctrs = ctrs if isinstance(ctrs, list) else []
    hits = [i for i, c in enumerate(ctrs) if f.memory_limit and isinstance(c, dict) and str(
        ((c.get("resources") or {}).get("limits") or {}).get("memory")) == f.memory_limit]
    return f"spec.template.spec.containers[{hits[0] if len(hits) == 1 else trainer_index(spec)}]"


def describe(pod: Any, rank: int, f: ContainerFailure, spec: DistTrainingJobSpec,
             parse_report: ReportParser) -> str:
    """The whole line for one rank: pod, rank, node, what the kubelet said, the probe phase
    it died in (its pessimistic report's), the fix."""
    node = observe.node(pod) or "no node yet"
    rep, _ = _report(pod, parse_report)
    phase = rep.phase if rep is not None and rep.final is False else None
    during = f" during its {phase} phase" if isinstance(phase, str) and phase else ""
    fix = f.fix(template_field(spec, f), observe.name(pod))
    if f.kind == kubelet.OOM and not f.init:
        fix += f" (the probe needs {PROBE_MEMORY})"
    elif f.kind == kubelet.POD and f.reason == kubelet.POD_DEADLINE:  # the operator sets it on probes
        fix = "raise spec.probe.timeoutSeconds (the probe pod's activeDeadlineSeconds is 60 s more)"
    elif f.kind == kubelet.OOM:  # the operator sets no limit on its init container: a LimitRange did
        fix = (f"raise the default memory limit the namespace's LimitRange gives containers (the "
               f"probe sets none on {f.container})")
    tail = ""
    said = observe.termination_message(pod, f.container)
    if f.kind == kubelet.EXIT and not said.lstrip().startswith("{"):  # a report is no log line
        line = logline.quote(said, observe.name(pod), f.container)
        tail = f": {line}" if line else ""
    return (f"{node}: {observe.name(pod)} (rank {rank}){SAYS}{f.describe()}{during}"
            f"{tail}; {fix}")


def mark(outcomes: list[ProbeOutcome], found: dict[int, ContainerFailure], by_rank: dict[int, dict],
         spec: DistTrainingJobSpec, parse_report: ReportParser) -> None:
    """Turn the outcomes of the ranks the kubelet ended (:func:`ended`) into failures with
    the kubelet's reason (:func:`reason_of`) and the whole line (:func:`describe`); their
    pessimistic reports (written before a phase, never final) are dropped."""
    for out in outcomes:
        f = found.get(out.rank)
        if f is None or out.rank not in by_rank:
            continue
        out.report, out.running = None, False
        out.error_reason = reason_of(f)
        out.error = describe(by_rank[out.rank], out.rank, f, spec, parse_report)


def override(diag: Diagnosis, outcomes: list[ProbeOutcome]) -> bool:
    """When the kubelet ended a rank's probe (:func:`mark`), make that the verdict:
    ``Validated=False`` with its reason and the ranks it ended (grouped when they say the
    same), every check not passed Unknown; what the other ranks then reported follows
    from it. Returns True when it changed ``diag``."""
    hit = [x for x in outcomes if x.report is None and not x.running and x.error_reason in REASONS_ORDER]
    if not any(x.error_reason in REASONS_ORDER[:-1] for x in hit):
        return False  # only lost pods: nodeloss.override's
    first = min(hit, key=lambda x: REASONS_ORDER.index(x.error_reason))
    nodes = ", ".join(sorted({x.node or x.pod for x in hit}))
    nodeloss.take_over(diag, f"the kubelet ended the probe on {nodes}", first.error_reason or "",
                       _summary(hit, first))
    return True


SAYS = ": the kubelet says "
NAMED = 4  # nodes a grouped summary names; the others are counted


def _summary(hit: list[ProbeOutcome], first: ProbeOutcome) -> str:
    """Validated's message: the first reason's line, naming in front every node whose probe
    the kubelet ended for the same reason (the first :data:`NAMED`, the others counted; the
    phase left out, it may differ); at most :data:`messages.SUMMARY_LIMIT` characters."""
    same = sorted((x for x in hit if x.error_reason == first.error_reason), key=lambda x: x.rank)
    line = first.error or ""
    if len(same) > 1 and SAYS in line:
        who = ", ".join(f"{x.node or x.pod} (rank {x.rank})" for x in same[:NAMED])
        if len(same) > NAMED:
            who += f" and {len(same) - NAMED} more"
        line = who + SAYS + re.sub(r" during its \w+ phase", "", line.split(SAYS, 1)[1])
    return messages.bound(line, messages.SUMMARY_LIMIT)


def fail_now(s: Step, found: dict[int, ContainerFailure], by_rank: dict[int, dict]) -> None:
    """Fail the preflight with what the kubelet said, before every rank's pod exists (a
    rank 0 that cannot start keeps the others from being created): the same reason and
    message as :func:`override` would give."""
    outs = [ProbeOutcome(rank=r, pod=observe.name(by_rank[r]), node=observe.node(by_rank[r]))
            for r in sorted(found)]
    mark(outs, found, by_rank, s.spec, s.parse_report)
    first = min(outs, key=lambda x: REASONS_ORDER.index(x.error_reason))
    s.fail_preflight(first.error_reason, _summary(outs, first))
