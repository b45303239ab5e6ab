"""The probe verdict (pure): every rank's report, read and checked -> conditions and status.

A report's way from its parse to its condition, eight stops in five files:
:func:`apply` -> :func:`collect` -> ``s.parse_report``
(:func:`disttrain.diagnosis.report.parse_report`: the typed report) ->
:func:`disttrain.diagnosis.trust.check` (is it this rank's, of this attempt?) ->
:func:`write` -> :func:`decide` (the rules below; the first is
:func:`disttrain.diagnosis.diagnose.diagnose`) -> :meth:`disttrain.reconcile.step.Step.set`.
A rank without a report (the kubelet ended it, its node was lost) takes its outcome from
:mod:`.kubeletended` or :mod:`.nodeloss` in :func:`collect`; :mod:`.probing` only decides
when the verdict can be reached.

The verdict is :data:`RULES`, an ordered list of named rules with one interface
(:class:`VerdictRule`), run by one loop (:func:`decide`) over what they read
(:class:`Context`: the step, the outcomes, MASTER_ADDR, the probe pods as observed). A rule
returns the verdict it made, or None when it does not apply (the verdict stands); a
``final`` rule that applied ends the loop. In order:

1. ``diagnose``: always; the check conditions and Validated from the outcomes, with the
   spec's policy (:func:`disttrain.diagnosis.diagnose.diagnose`).
2. ``advice``: a false check's message lacks the fix the job's spec gives; appends it
   (:func:`disttrain.diagnosis.advice.apply_advice`; messages only).
3. ``kubelet-ended``: the kubelet ended a rank's probe (OOMKilled, a container that could
   not run, ...); Validated=False with the kubelet's reason, the checks not passed
   Unknown (:func:`.kubeletended.override`). Final.
4. ``node-loss``: a rank's probe pod was lost with its node; Validated=False
   ProbePodLost, the checks not passed Unknown (:func:`.nodeloss.override`). Final.
5. ``network-policy``: not validated, the pod network, and the namespace's
   NetworkPolicies drop (or may drop) the job's own traffic on the ports it needs
   (:func:`needs`) while the probes failed the way a dropped connection makes them fail;
   the failed check and Validated get ``NetworkPolicyBlocks`` (or, undecided, the
   candidate policy in place of a firewall) (:func:`disttrain.diagnosis.netpolverdict.judge`).
6. ``mesh-sidecar``: Validated says ``ConnectionIntercepted`` and the probe pods carry a
   mesh's sidecar; its name and fix go in the failed check and Validated
   (:func:`disttrain.diagnosis.mesh.override`).

Rules 2-6 change the Diagnosis in place (only here, inside :func:`decide`). The verdict
then writes ``status.nodes`` (what each rank validated), ``status.rendezvous`` (what
training will use) and a new ``status.probe`` (replaced whole, so nothing of an earlier
attempt is left behind), and fails the preflight when a check is False. Outside the list,
:func:`blocked_timeout` names the NetworkPolicy when the probe budget ran out before any
verdict (:mod:`.probing`; there is no Diagnosis then).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from disttrain.api import constants
from disttrain.api.types import nproc_for
from disttrain.children import observe
from disttrain.children.names import job_selector
from disttrain.children.podbase import beacon_port
from disttrain.diagnosis import logline, mesh, netpolverdict, networkpolicy, trust
from disttrain.diagnosis.advice import apply_advice
from disttrain.diagnosis.diagnose import Diagnosis, Policy, diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain.diagnosis.netsummary import summarize_ifnames
from disttrain.reconcile.policies import kubeletended, nodeloss
from disttrain.reconcile.policies.probelaunch import attempt_of
from disttrain.reconcile.step import Outcome, ProbeRun, Step
from disttrain_probe.contract import report_format, vocabulary

MAX_DETAIL_EVENTS = 8  # per kind and verdict; the rest are in status.probe


def apply(s: Step) -> Outcome:
    """Write the verdict once the probe run reached it (``s.probe_run``, from
    :mod:`.probing`): every rank's outcome (:func:`collect`), then :func:`write`; FINISHED
    when the preflight failed."""
    if s.probe_run is not None:
        write(s, collect(s, s.probe_run), s.probe_run.master)
    return Outcome.FINISHED if s.terminal else Outcome.CONTINUE


def given_master(pod: dict) -> Optional[str]:
    """The MASTER_ADDR value the operator put in the probe pod (None for a downward-API field)."""
    for ctr in (pod.get("spec") or {}).get("containers") or []:
        if isinstance(ctr, dict) and ctr.get("name") == "probe":
            for e in ctr.get("env") or []:
                if isinstance(e, dict) and e.get("name") == "MASTER_ADDR":
                    v = e.get("value")
                    return v if isinstance(v, str) else None
    return None


def _cut_by_kubelet(raw: str) -> str:
    """Why a report that does not parse is cut short, when its length says so: the kubelet
    shares 12 KiB of termination messages among a pod's containers and cuts each message to
    its share (:func:`report_format.report_budget`); a report exactly that long was cut by
    it, most likely because containers were added to the pod after the operator built it
    (a webhook's sidecars), so the probe was told a larger share. '' otherwise."""
    n = len(raw.encode("utf-8", "replace"))
    k = report_format.POD_MESSAGE_BYTES // n if n else 0
    if n < report_format.MIN_REPORT_BYTES or k < 4 or report_format.report_budget(k) != n:
        return ""
    return (f"the kubelet cut it at {n} bytes, the share of each of {k} containers in the pod "
            "(containers added after the operator built it leave the probe less than it was told): ")


def collect(s: Step, run: ProbeRun) -> list[ProbeOutcome]:
    """One outcome per rank: its report (parsed by ``s.parse_report``, then checked against
    what the operator expects of that rank by :func:`disttrain.diagnosis.trust.check`) or why
    there is none: the kubelet ended it (:func:`.kubeletended.mark`), its node was lost
    (:func:`.nodeloss.mark`), the report is invalid, the probe exited without one; ranks
    still running (not waited for, see :func:`.stranded.stranded`) are marked. Never raises."""
    attempt, by_rank = attempt_of(s), run.by_rank
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
                out.error = f"{name} on {node}: report invalid: {_cut_by_kubelet(raw)}{exc}"
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
    if run.killed:
        kubeletended.mark(outcomes, run.killed, by_rank, s.spec, s.parse_report)
    if run.lost:
        nodeloss.mark(outcomes, run.lost)
    return outcomes


EPHEMERAL_DEFAULT = (32768, 60999)  # Linux's net.ipv4.ip_local_port_range default


def needs(s: Step, outcomes: list[ProbeOutcome]) -> list[networkpolicy.Need]:
    """The TCP ports the job's pods dial each other on: the rendezvous port, the probe's
    beacon port and the ephemeral range NCCL and gloo listen on (``network.portRange``,
    else the range the probes reported, else Linux's default)."""
    rng = s.spec.network.port_range
    if rng:
        lo, hi = (int(x) for x in rng.split("-"))
    else:
        reported = (o.report.port_range if o.report is not None else None for o in outcomes)
        lo, hi = next(((r[0], r[1]) for r in reported if isinstance(r, list) and len(r) == 2
                       and all(isinstance(x, int) and 1 <= x <= 65535 for x in r) and r[0] <= r[1]),
                      EPHEMERAL_DEFAULT)
    port = s.spec.rendezvous.port
    return [networkpolicy.Need(port, port, "rendezvous"),
            networkpolicy.Need(beacon_port(s.spec), beacon_port(s.spec), "probe's 2nd port"),
            networkpolicy.Need(lo, hi, "ephemeral: NCCL, gloo")]


def _probe_pods(s: Step, outcomes: list[ProbeOutcome]) -> list[dict]:
    """The probe pods of the outcomes, as observed."""
    names = {o.pod for o in outcomes}
    seen = list(s.probe_run.by_rank.values()) if s.probe_run is not None else s.ours
    return [p for p in seen if observe.name(p) in names]


def policy_blocks(s: Step, pods: list[dict], outcomes: list[ProbeOutcome]) -> list[networkpolicy.Block]:
    """What the namespace's NetworkPolicies certainly drop between the job's ``pods`` (probe
    pods as observed) on the ports it needs (:func:`needs`), judged with the namespace's
    labels as read (``s.namespace_labels``); [] with hostNetwork (exempt) or no policy."""
    if s.spec.network.host_network or not s.network_policies:
        return []
    views = [networkpolicy.PodView.of(p) for p in pods]
    return networkpolicy.blocked(s.network_policies, views, s.job.namespace, needs(s, outcomes),
                                 s.namespace_labels)


def blocked_timeout(s: Step, pods: list[dict]) -> bool:
    """When the probe budget ran out and the namespace's NetworkPolicies drop the job's own
    traffic between ``pods``, that is the cause, not "ProbeTimeout": the check the blocked
    ports belong to (MasterReachable for the rendezvous port, else NetworkValidated) and
    Validated say ``NetworkPolicyBlocks`` naming the policies, and the preflight fails.
    Returns True when it did."""
    blocks = policy_blocks(s, pods, [])
    if not blocks:
        return False
    text = netpolverdict.message(blocks, s.job.namespace, job_selector(s.job))
    rdzv = any(b.need.lo <= s.spec.rendezvous.port <= b.need.hi for b in blocks)
    s.set(constants.MASTER_REACHABLE if rdzv else constants.NETWORK_VALIDATED, constants.FALSE,
          vocabulary.NETWORK_POLICY_BLOCKS, text)
    s.fail_preflight(vocabulary.NETWORK_POLICY_BLOCKS, text)
    return True


@dataclass(frozen=True)
class Context:
    """What the verdict's rules read: the step (spec, job, the namespace's NetworkPolicies
    and labels), every rank's checked outcome, the MASTER_ADDR the probes were given, and
    the outcomes' probe pods as observed."""

    s: Step
    outcomes: list[ProbeOutcome]
    master: Optional[str]
    pods: list[dict]

    @classmethod
    def of(cls, s: Step, outcomes: list[ProbeOutcome], master: Optional[str]) -> "Context":
        return cls(s, outcomes, master, _probe_pods(s, outcomes))


@dataclass(frozen=True)
class VerdictRule:
    """One rule of the verdict: ``apply`` returns the verdict it made from the one before,
    or None when it does not apply; when a ``final`` rule applied, no later rule runs."""

    name: str
    apply: Callable[[Context, Diagnosis], Optional[Diagnosis]]
    final: bool = False


def _diagnose(c: Context, _: Diagnosis) -> Diagnosis:
    return diagnose(c.outcomes, c.master, Policy.of(c.s.spec))


def _advice(c: Context, diag: Diagnosis) -> Optional[Diagnosis]:
    before = [v.message for v in diag.conditions.values()]
    apply_advice(diag, c.s.job, c.s.spec)
    return diag if [v.message for v in diag.conditions.values()] != before else None


def _kubelet_ended(c: Context, diag: Diagnosis) -> Optional[Diagnosis]:
    return diag if kubeletended.override(diag, c.outcomes) else None


def _node_loss(c: Context, diag: Diagnosis) -> Optional[Diagnosis]:
    return diag if nodeloss.override(diag, c.outcomes) else None


def _network_policy(c: Context, diag: Diagnosis) -> Optional[Diagnosis]:
    """A NetworkPolicy that drops the job's own traffic is the cause of a dropped-connection
    failure; one that may drop it (a selector or port the operator cannot decide) is named
    as the candidate instead of a host firewall (:mod:`disttrain.diagnosis.netpolverdict`);
    hostNetwork pods are exempt."""
    s = c.s
    if diag.validated or s.spec.network.host_network:
        return None
    views = [networkpolicy.PodView.of(p) for p in c.pods]
    changed = netpolverdict.judge(diag, s.network_policies, views, s.job.namespace, needs(s, c.outcomes),
                                  s.namespace_labels, job_selector(s.job), s.spec.rendezvous.port)
    return diag if changed else None


def _mesh_sidecar(c: Context, diag: Diagnosis) -> Optional[Diagnosis]:
    return diag if mesh.override(diag, c.pods) else None


# The verdict, in order (see the module docstring): a probe the kubelet ended, or a lost
# probe pod, is the cause, not what followed; a policy that blocks before the sidecar.
RULES = (
    VerdictRule("diagnose", _diagnose),
    VerdictRule("advice", _advice),
    VerdictRule("kubelet-ended", _kubelet_ended, final=True),
    VerdictRule("node-loss", _node_loss, final=True),
    VerdictRule("network-policy", _network_policy),
    VerdictRule("mesh-sidecar", _mesh_sidecar),
)


def decide(c: Context) -> tuple[Diagnosis, list[str]]:
    """Run :data:`RULES` in order; the verdict and the names of the rules that made it. The
    first, ``diagnose``, replaces the empty Diagnosis the loop starts from."""
    diag, made = Diagnosis(conditions={}), []
    for rule in RULES:
        after = rule.apply(c, diag)
        if after is None:
            continue
        diag = after
        made.append(rule.name)
        if rule.final:
            break
    return diag, made


def write(s: Step, outcomes: list[ProbeOutcome], master: Optional[str]) -> bool:
    """Write the verdict (:func:`decide`); True when the job was validated."""
    diag, _ = decide(Context.of(s, outcomes, master))
    for ctype, v in diag.conditions.items():
        if ctype == constants.PROBES_SCHEDULED and s.is_true(ctype):
            continue  # keep the rank:node placement message
        s.set(ctype, v.status, v.reason, v.message)
    s.st.set_nodes(diag.nodes)
    s.st.rendezvous.record(master, s.spec.rendezvous.port,
                           summarize_ifnames(list(diag.socket_ifnames.values())))
    old = s.st.probe
    started = observe.parse_time(old.start_time) or s.now
    summary = dict(
        attempt=old.attempt if old.attempt is not None else 1,
        start_time=old.start_time or s.ts,
        completion_time=s.ts,
        duration_seconds=round((s.now - started).total_seconds(), 3),
        backend=diag.backend,
        message_size_bytes=diag.message_size_bytes,
        alg_bandwidth_gbps=diag.alg_bandwidth_gbps,
        bus_bandwidth_gbps=diag.bus_bandwidth_gbps,
        phase_seconds=diag.phase_seconds,
        failures=diag.failures[:16] or None,
        warnings=diag.warnings[:16] or None,
        interfaces_not_chosen=diag.not_chosen or None,
    )
    # The conditions say the cause in <= 400 characters; each finding in full goes to an
    # Event (kubectl describe dtj, kubectl get events), a Warning for a failure.
    for kind, lines in (("Warning", diag.failures), ("Normal", diag.warnings)):
        for line in lines[:MAX_DETAIL_EVENTS]:
            s.plan.events.append((kind, vocabulary.PROBE_DETAIL, line))
    s.st.set_probe_summary(**summary)
    if not diag.validated:
        v = diag.conditions[constants.VALIDATED]
        s.fail_preflight(v.reason, v.message)
        return False
    return True
