"""One idempotent reconcile step (pure): observed job + its pods -> actions + new status.

Level-triggered: everything is recomputed from the spec, the observed children and the
status, so running it twice, or after an operator restart in the middle of a probe or of
training, creates no duplicate pods and loses nothing. Children have deterministic names
(``<job>-probe-<rank>``, ``<job>-worker-<rank>``) and an ``attempt`` label: a pod from an
older attempt is deleted, and new ones are created only after the old ones are gone.

Stages, each derived from the conditions:
1. probe (``probe.enabled`` and ``Validated`` Unknown): rank 0's probe pod first (it hosts
   the TCPStore; its MASTER_ADDR is its own status.hostIP), then ranks 1..n-1 with
   MASTER_ADDR = rank 0's hostIP; unschedulable probes fail ``ProbesScheduled`` at once;
   finished probes are diagnosed (:mod:`disttrain.diagnosis`);
2. training (``Validated`` True, or probes disabled): one worker pod per node rank, pinned
   to the node its probe validated, with the validated rendezvous; then Succeeded/Failed,
   gang restarts up to ``runPolicy.backoffLimit``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from pydantic import ValidationError

from . import conditions as cond
from . import constants as c
from .advice import apply_advice
from .api import DistTrainingJobSpec, spec_error_message
from .builders import (
    JobRef,
    Rendezvous,
    build_probe_pod,
    build_headless_service,
    build_worker_pod,
    master_dns_name,
    probe_pod_name,
    uses_dns_hostnames,
)
from .diagnosis import ProbeOutcome, diagnose, summarize_ifnames

ReportParser = Callable[[str], dict]


@dataclass
class Plan:
    """What one reconcile step wants done. ``status`` is the complete new status."""

    status: dict[str, Any]
    creates: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)  # pod names
    services: list[dict[str, Any]] = field(default_factory=list)  # to create (409: exists)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    status_changed: bool = False


# ---- pod observations ----------------------------------------------------------------


def _labels(pod: dict) -> dict:
    return pod.get("metadata", {}).get("labels") or {}


def _int_label(pod: dict, key: str, default: int = -1) -> int:
    try:
        return int(_labels(pod).get(key, default))
    except (TypeError, ValueError):
        return default


def _deleting(pod: dict) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _host_ip(pod: dict) -> Optional[str]:
    return (pod.get("status") or {}).get("hostIP") or None


def _master_addr(job: JobRef, spec: DistTrainingJobSpec, rank0: Optional[dict]) -> Optional[str]:
    """MASTER_ADDR for the other ranks once rank 0's pod has its address (None before):
    rank 0's DNS name with DNS hostnames, else its node IP (hostNetwork) or pod IP."""
    if rank0 is None:
        return None
    st = rank0.get("status") or {}
    addr = st.get("hostIP") if spec.network.host_network else st.get("podIP")
    if not addr:
        return None
    return master_dns_name(job, spec) if uses_dns_hostnames(spec) else addr


def _node(pod: dict) -> Optional[str]:
    return (pod.get("spec") or {}).get("nodeName") or None


def _unschedulable(pod: dict) -> Optional[str]:
    for pc in (pod.get("status") or {}).get("conditions") or []:
        if pc.get("type") == "PodScheduled" and pc.get("status") == "False":
            if pc.get("reason") == "Unschedulable":
                return pc.get("message") or "unschedulable"
    return None


def _image_pull_error(pod: dict) -> Optional[str]:
    st = pod.get("status") or {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            return f"{cs.get('image')}: {waiting.get('reason')}: {waiting.get('message', '')}"
    return None


def _terminated(pod: dict, container: str) -> Optional[dict]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            return (cs.get("state") or {}).get("terminated")
    return None


def _started_at(pod: Optional[dict], container: str) -> Optional[str]:
    """When ``container`` started (RFC 3339), running or already terminated; None before."""
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            st = cs.get("state") or {}
            return (st.get("running") or st.get("terminated") or {}).get("startedAt") or None
    return None


# How long after rank 0's pod got to its node (status.startTime) the other probes wait for
# rank 0's probe container to start, in seconds. Started, it is the evidence that lets them
# diagnose a blocked master port in seconds; a slow start (a cold image pull) must not hold
# back their own pulls for longer: they then start without it (and dial until their deadline).
PEER_START_WAIT_SECONDS = 5.0


def _peers_may_start(rank0: dict, now: datetime) -> bool:
    """Whether the probes of ranks 1..n-1 may be created: rank 0's probe container has
    started, or PEER_START_WAIT_SECONDS have passed since rank 0's pod started on its node."""
    if _started_at(rank0, "probe"):
        return True
    since = _parse_time((rank0.get("status") or {}).get("startTime"))
    return since is not None and (now - since).total_seconds() >= PEER_START_WAIT_SECONDS


# A rank >= 1 that failed for one of these (or before the rendezvous) never joined rank 0's
# store, so no peer learns of it: they would wait for it until their own deadline.
STRANDING_REASONS = frozenset({
    c.REASON_MASTER_ADDR_LOOPBACK, c.REASON_MASTER_ADDR_UNRESOLVABLE,
    c.REASON_MASTER_PORT_REFUSED, c.REASON_MASTER_PORT_TIMEOUT,
})
# After the first such rank ended, how long the other dialling ranks get to end on their
# own (they run the same checks at about the same time) before the verdict goes without them.
STRANDED_SETTLE_SECONDS = 3.0


def _stranded(by_rank: dict[int, dict], n: int, parse_report: ReportParser,
              now: datetime) -> bool:
    """True when the verdict need not wait for the probes still running: some rank >= 1
    failed before joining the rendezvous store (see STRANDING_REASONS), and every other
    rank >= 1 has ended or STRANDED_SETTLE_SECONDS have passed since that rank ended.
    Rank 0 is never waited for then: it could only time out waiting for that rank. When
    rank 0 itself failed so (it never served the store), nobody is waited for: the others
    could only be refused by the port it no longer listens on."""
    def failed_before_store(r: int) -> Optional[dict]:
        term = _terminated(by_rank.get(r) or {}, "probe")
        if _phase(by_rank.get(r) or {}) != "Failed" or not term:
            return None
        try:
            rep = parse_report(term.get("message") or "")
        except ValueError:
            return None
        reason = (rep.get("failure") or {}).get("reason")
        if reason in STRANDING_REASONS or rep.get("phase") in ("config", "inventory"):
            return term
        return None

    if failed_before_store(0) is not None:
        return True
    first: Optional[datetime] = None
    found = False
    for r in range(1, n):
        term = failed_before_store(r)
        if term is not None:
            found = True
            ended = _parse_time(term.get("finishedAt"))
            if ended and (first is None or ended < first):
                first = ended
    if not found:
        return False
    others_done = all(_phase(by_rank.get(r) or {}) in ("Succeeded", "Failed") for r in range(1, n))
    return others_done or first is None or (now - first).total_seconds() >= STRANDED_SETTLE_SECONDS


def _by_rank(pods: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for p in pods:
        out[_int_label(p, c.LABEL_RANK)] = p
    return out


def _parse_time(ts: Optional[str]) -> Optional[datetime]:
    if not ts:
        return None
    if ts.endswith("Z"):
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return datetime.fromisoformat(ts)  # the Python client's form: 2026-11-30T12:00:00+00:00


# ---- the step --------------------------------------------------------------------------


def reconcile(
    body: dict[str, Any],
    pods: list[dict[str, Any]],
    now: datetime,
    parse_report: ReportParser,
    probe_image: str = c.DEFAULT_PROBE_IMAGE,
) -> Plan:
    """Compute one step. ``body`` is the job as the API returns it (camelCase), ``pods``
    every pod labelled with the job's name, ``parse_report`` turns a termination message
    into the report's camelCase dict or raises ValueError. Never raises for bad input:
    an invalid spec or report becomes a false condition."""
    meta = body.get("metadata") or {}
    gen = meta.get("generation")
    ts = cond.now_rfc3339(now)
    old_status = body.get("status") or {}
    status = copy.deepcopy(old_status)
    plan = Plan(status=status)
    conds: list[dict] = status.setdefault("conditions", [])
    status.setdefault("restarts", 0)
    status.setdefault("probe", {})
    status.setdefault("rendezvous", {})
    status["observedGeneration"] = gen

    try:
        spec = DistTrainingJobSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        msg = f"invalid spec: {spec_error_message(exc)}"
        if not conds:
            conds.extend(cond.initial(gen, ts, True))
        cond.set_condition(conds, c.VALIDATED, "False", "InvalidSpec", msg, gen, ts)
        cond.set_condition(conds, c.FAILED, "True", "InvalidSpec", msg, gen, ts)
        return _finish(plan, old_status, conds, probing=False)

    if not conds:
        conds.extend(cond.initial(gen, ts, spec.probe.enabled))
    job = JobRef.from_body(body)
    alive = [p for p in pods if not _deleting(p)]
    probes = [p for p in alive if _labels(p).get(c.LABEL_ROLE) == c.ROLE_PROBE]
    workers = [p for p in alive if _labels(p).get(c.LABEL_ROLE) == c.ROLE_WORKER]

    if cond.is_true(conds, c.SUCCEEDED) or cond.is_true(conds, c.FAILED):
        _cleanup(plan, spec, conds, probes, workers)
        return _finish(plan, old_status, conds, probing=False)

    probing = False
    if spec.probe.enabled and cond.status_of(conds, c.VALIDATED) == "Unknown":
        probing = True
        _probe_stage(plan, job, spec, conds, probes, now, ts, gen, parse_report, probe_image)
    if cond.is_true(conds, c.VALIDATED) or (
        not spec.probe.enabled and not cond.is_true(conds, c.FAILED)
    ):
        probing = False
        if spec.probe.keep_pods != "Always":
            for p in probes:  # validated: the probe pods' job is done
                _delete(plan, p)
        _training_stage(plan, job, spec, conds, workers, pods, probes, now, ts, gen)
    if cond.is_true(conds, c.SUCCEEDED) or cond.is_true(conds, c.FAILED):
        _cleanup(plan, spec, conds, probes, workers)
    if uses_dns_hostnames(spec) and not spec.network.subdomain and any(
        _int_label(p, c.LABEL_RANK) == 0 for p in plan.creates
    ):  # with rank 0's pod, the Service that names the pods (a user-set subdomain is theirs)
        plan.services.append(build_headless_service(job, spec))
    return _finish(plan, old_status, conds, probing)


def _finish(plan: Plan, old_status: dict, conds: list[dict], probing: bool) -> Plan:
    plan.status["phase"] = cond.phase(conds, probing)
    old_conds = {x["type"]: x for x in old_status.get("conditions") or []}
    for new in conds:
        old = old_conds.get(new["type"])
        if old and (old["status"], old.get("reason")) == (new["status"], new.get("reason")):
            continue
        if new["status"] == "Unknown" and (old is None or old["status"] == "Unknown"):
            continue
        if new["type"] in (c.SUCCEEDED, c.FAILED) and new["status"] == "False":
            continue  # the other outcome condition carries the event
        bad = (new["status"] == "False" and new["type"] not in (c.SUCCEEDED, c.FAILED)) or (
            new["type"] == c.FAILED and new["status"] == "True"
        )
        warn_reason = new["status"] == "True" and new.get("reason") not in (
            set(c.PASS_REASON.values())
            | {c.REASON_ALL_CHECKS_PASSED, c.REASON_ALL_RANKS_RUNNING, c.REASON_ALL_RANKS_SUCCEEDED}
        )
        etype = "Warning" if bad or warn_reason else "Normal"
        plan.events.append((etype, new["reason"], f"{new['type']}={new['status']}: {new['message']}"))
    plan.status_changed = plan.status != old_status
    return plan


def _delete(plan: Plan, pod: dict) -> None:
    name = pod["metadata"]["name"]
    if name not in plan.deletes:
        plan.deletes.append(name)


def _cleanup(plan: Plan, spec: DistTrainingJobSpec, conds, probes, workers) -> None:
    keep = spec.probe.keep_pods
    failed = cond.status_of(conds, c.VALIDATED) == "False"
    for p in probes:
        if _phase(p) not in ("Succeeded", "Failed"):
            _delete(plan, p)  # a probe still running after the verdict only blocks ports
        elif keep == "Never" or (keep == "OnFailure" and not failed):
            _delete(plan, p)
    policy = spec.run_policy.clean_pod_policy
    for p in workers:
        if policy == "All" or (policy == "Running" and _phase(p) in ("Pending", "Running")):
            _delete(plan, p)


def _probe_stage(plan, job, spec, conds, probes, now, ts, gen, parse_report, probe_image):
    status = plan.status
    pst = status["probe"]
    if not pst.get("attempt"):
        pst["attempt"] = 1
        pst["startTime"] = ts
    attempt = int(pst["attempt"])
    current = [p for p in probes if _int_label(p, c.LABEL_ATTEMPT) == attempt]
    for p in probes:
        if p not in current:
            _delete(plan, p)
    by_rank = _by_rank(current)
    n = spec.num_nodes
    cond.set_condition(conds, c.VALIDATED, "Unknown", c.REASON_PROBING, "preflight probe running", gen, ts)

    rank0 = by_rank.get(0)
    master = _master_addr(job, spec, rank0)
    if rank0 is None:
        if not any(p["metadata"]["name"] == probe_pod_name(job.name, 0) for p in probes):
            plan.creates.append(build_probe_pod(job, spec, 0, None, attempt, probe_image))
    elif master and _peers_may_start(rank0, now):
        # Once rank 0's probe runs (it listens on the master port at once), a peer that
        # cannot connect within a short grace knows the port is blocked, not "not open yet".
        status["rendezvous"].update(masterAddr=master, masterPort=spec.rendezvous.port)
        for rank in range(1, n):
            if rank not in by_rank and not any(
                p["metadata"]["name"] == probe_pod_name(job.name, rank) for p in probes
            ):
                plan.creates.append(build_probe_pod(job, spec, rank, master, attempt, probe_image,
                                                    _started_at(rank0, "probe")))

    # Scheduling verdict: fail in seconds, not at the probe timeout.
    unsched = [(r, p, _unschedulable(p)) for r, p in sorted(by_rank.items())]
    unsched = [(r, p, m) for r, p, m in unsched if m]
    pull = [(r, p, _image_pull_error(p)) for r, p in sorted(by_rank.items())]
    pull = [(r, p, m) for r, p, m in pull if m]
    if unsched or pull:
        if pull:
            reason = c.REASON_PROBE_IMAGE_PULL_FAILED
            msg = "; ".join(f"{p['metadata']['name']} (rank {r}): {m}" for r, p, m in pull)
            msg += "; fix the image name or pull secret (spec.probe.image / the training image)"
        else:
            scheduled = sorted({_node(p) for p in current if _node(p)})
            anti = any("anti-affinity" in m for _, _, m in unsched)
            reason = c.REASON_NOT_ENOUGH_NODES if anti else c.REASON_PROBE_UNSCHEDULABLE
            msg = "; ".join(f"{p['metadata']['name']} (rank {r}): {m}" for r, p, m in unsched)
            if anti:
                msg = (
                    f"numNodes={n} needs {n} nodes, one probe per node, but only "
                    f"{len(scheduled)} could take one ({', '.join(scheduled) or 'none'}); "
                    f"scheduler: {msg}; add nodes or lower spec.numNodes"
                )
            else:
                msg += "; relax the template's nodeSelector/tolerations/resources or add capacity"
        cond.set_condition(conds, c.PROBES_SCHEDULED, "False", reason, msg, gen, ts)
        _verdict_failed(plan, conds, reason, msg, gen, ts, now)
        return
    if len(by_rank) == n and all(_node(p) for p in by_rank.values()):
        nodes = ", ".join(f"{r}:{_node(p)}" for r, p in sorted(by_rank.items()))
        cond.set_condition(
            conds, c.PROBES_SCHEDULED, "True", c.REASON_PROBES_SCHEDULED,
            f"{n} probe pods scheduled, one per node (rank:node {nodes})", gen, ts,
        )
    else:
        cond.set_condition(
            conds, c.PROBES_SCHEDULED, "Unknown", c.REASON_PROBES_PENDING,
            f"{sum(1 for p in by_rank.values() if _node(p))}/{n} probe pods scheduled", gen, ts,
        )

    finished = len(by_rank) == n and all(
        _phase(p) in ("Succeeded", "Failed") for p in by_rank.values()
    )
    stranded = not finished and len(by_rank) == n and _stranded(by_rank, n, parse_report, now)
    if not finished and not stranded:
        started = _parse_time(pst.get("startTime"))
        budget = spec.probe.timeout_seconds + 30
        if started and (now - started).total_seconds() > budget:
            waiting = ", ".join(
                f"{p['metadata']['name']} ({_phase(p)} on {_node(p) or 'no node'})"
                for p in by_rank.values() if _phase(p) not in ("Succeeded", "Failed")
            ) or "no probe pods"
            msg = (
                f"probe did not finish within {budget}s: {waiting}; check the pods' events "
                "(kubectl describe pod) or raise spec.probe.timeoutSeconds"
            )
            _verdict_failed(plan, conds, c.REASON_PROBE_TIMEOUT, msg, gen, ts, now)
        return

    outcomes = []
    for r in range(n):
        pod = by_rank[r]
        term = _terminated(pod, "probe") or {}
        raw = term.get("message") or ""
        o = ProbeOutcome(rank=r, pod=pod["metadata"]["name"], node=_node(pod))
        if _phase(pod) not in ("Succeeded", "Failed"):  # not waited for (see _stranded)
            o.running = True
            outcomes.append(o)
            continue
        try:
            o.report = parse_report(raw)
        except ValueError as exc:
            exit_code = term.get("exitCode")
            if raw.lstrip().startswith("{") or exit_code == 0 or not raw:
                o.error = f"{o.pod} on {o.node}: report invalid: {exc}"
                o.error_reason = c.REASON_PROBE_REPORT_INVALID
            else:
                tail = raw.strip().splitlines()[-3:]
                o.error = f"{o.pod} on {o.node}: probe exited {exit_code} without a report: " + " | ".join(tail)
                o.error_reason = c.REASON_PROBE_FAILED
        outcomes.append(o)
    diag = diagnose(outcomes, master)
    apply_advice(diag, job, spec)
    for ctype, v in diag.conditions.items():
        if ctype == c.PROBES_SCHEDULED and cond.is_true(conds, ctype):
            continue  # keep the rank:node placement message
        cond.set_condition(conds, ctype, v.status, v.reason, v.message, gen, ts)
    status["nodes"] = diag.nodes
    status["rendezvous"].update(
        masterAddr=master,
        masterPort=spec.rendezvous.port,
        socketIfname=summarize_ifnames(list(diag.socket_ifnames.values())),
    )
    started = _parse_time(pst.get("startTime")) or now
    pst.update(
        completionTime=ts,
        durationSeconds=round((now - started).total_seconds(), 3),
        backend=diag.backend,
        messageSizeBytes=diag.message_size_bytes,
        algBandwidthGBps=diag.alg_bandwidth_gbps,
        busBandwidthGBps=diag.bus_bandwidth_gbps,
        phaseSeconds=diag.phase_seconds,
    )
    for key, items in (("failures", diag.failures), ("warnings", diag.warnings)):
        if items:
            pst[key] = items[:16]
        else:
            pst.pop(key, None)
    if not diag.validated:
        v = diag.conditions[c.VALIDATED]
        _verdict_failed(plan, conds, v.reason, v.message, gen, ts, now)


def _verdict_failed(plan, conds, reason, msg, gen, ts, now) -> None:
    """The preflight failed: Validated=False with the cause; the job is Failed."""
    cond.set_condition(conds, c.VALIDATED, "False", reason, msg, gen, ts)
    for ctype in c.CHECK_CONDITIONS:
        if cond.status_of(conds, ctype) == "Unknown":
            cond.set_condition(
                conds, ctype, "Unknown", c.REASON_NOT_REACHED, f"not checked: {reason}", gen, ts
            )
    cond.set_condition(
        conds, c.FAILED, "True", c.REASON_PREFLIGHT_FAILED,
        f"preflight failed ({reason}), no training pods were created: {msg}", gen, ts,
    )
    cond.set_condition(conds, c.SUCCEEDED, "False", c.REASON_PREFLIGHT_FAILED, "preflight failed", gen, ts)
    pst = plan.status["probe"]
    pst.setdefault("completionTime", ts)


def _training_stage(plan, job, spec, conds, workers, all_pods, probes, now, ts, gen):
    status = plan.status
    attempt = int(status.get("restarts", 0))
    n = spec.num_nodes
    current = [p for p in workers if _int_label(p, c.LABEL_ATTEMPT) == attempt]
    for p in workers:
        if p not in current:
            _delete(plan, p)
    # Same pod names across attempts: wait until the previous attempt's pods are gone.
    old_exist = any(
        _labels(p).get(c.LABEL_ROLE) == c.ROLE_WORKER and _int_label(p, c.LABEL_ATTEMPT) != attempt
        for p in all_pods
    )
    # Probe pods still running hold the rendezvous port on hostNetwork: let them end first.
    probes_running = any(_phase(p) in ("Pending", "Running") for p in probes)
    by_rank = _by_rank(current)
    rdzv = status["rendezvous"]
    if not old_exist and not probes_running:
        if spec.probe.enabled:
            nodes = {int(x["rank"]): x for x in status.get("nodes") or []}
            for r in range(n):
                if r in by_rank:
                    continue
                info = nodes.get(r, {})
                rv = Rendezvous(rdzv["masterAddr"], spec.rendezvous.port, info.get("interface"), exact=True)
                plan.creates.append(build_worker_pod(job, spec, r, info.get("name"), rv, attempt))
        else:
            _unprobed_workers(plan, job, spec, by_rank, attempt)
    if not status.get("startTime") and current:
        status["startTime"] = ts

    phases = {r: _phase(p) for r, p in by_rank.items()}
    if len(by_rank) == n and all(ph in ("Running", "Succeeded", "Failed") for ph in phases.values()):
        if not cond.is_true(conds, c.TRAINING_STARTED):
            placement = ", ".join(f"{r}:{_node(p)}" for r, p in sorted(by_rank.items()))
            cond.set_condition(
                conds, c.TRAINING_STARTED, "True", c.REASON_ALL_RANKS_RUNNING,
                f"{n} training pods started (rank:node {placement})"
                + (f" after {attempt} gang restart(s)" if attempt else ""), gen, ts,
            )
            for ctype in (c.SUCCEEDED, c.FAILED):
                cond.set_condition(conds, ctype, "Unknown", c.REASON_TRAINING_RUNNING, "training is running", gen, ts)
    failed = [(r, p) for r, p in sorted(by_rank.items()) if _phase(p) == "Failed"]
    if failed:
        details = []
        for r, p in failed:
            term = _terminated(p, p["spec"]["containers"][0]["name"]) or {}
            msg = (term.get("message") or "").strip().splitlines()[-2:]
            details.append(
                f"rank {r} ({p['metadata']['name']} on {_node(p)}) exited {term.get('exitCode')}"
                + (f": {' | '.join(msg)}" if msg else "")
            )
        text = "; ".join(details)
        if attempt < spec.run_policy.backoff_limit:
            status["restarts"] = attempt + 1
            for p in current:
                _delete(plan, p)
            cond.set_condition(
                conds, c.TRAINING_STARTED, "Unknown", c.REASON_RESTARTING,
                f"gang restart {attempt + 1}/{spec.run_policy.backoff_limit} after: {text}", gen, ts,
            )
            if spec.run_policy.reprobe_on_failure and spec.probe.enabled:
                cond.set_condition(conds, c.VALIDATED, "Unknown", c.REASON_PROBING, "re-probing after a rank failed", gen, ts)
                status["probe"] = {"attempt": int(status["probe"].get("attempt", 1)) + 1, "startTime": ts}
            return
        reason = c.REASON_BACKOFF_LIMIT_EXCEEDED if spec.run_policy.backoff_limit else c.REASON_RANK_FAILED
        cond.set_condition(conds, c.FAILED, "True", reason, text, gen, ts)
        cond.set_condition(conds, c.SUCCEEDED, "False", reason, "a rank failed", gen, ts)
        status["completionTime"] = ts
        return
    if len(by_rank) == n and all(ph == "Succeeded" for ph in phases.values()):
        cond.set_condition(
            conds, c.SUCCEEDED, "True", c.REASON_ALL_RANKS_SUCCEEDED,
            f"all {n} ranks exited 0", gen, ts,
        )
        cond.set_condition(conds, c.FAILED, "False", c.REASON_ALL_RANKS_SUCCEEDED, "no rank failed", gen, ts)
        status["completionTime"] = ts
        return
    deadline = spec.run_policy.active_deadline_seconds
    started = _parse_time(status.get("startTime"))
    if deadline and started and (now - started).total_seconds() > deadline:
        msg = f"training ran longer than runPolicy.activeDeadlineSeconds={deadline}"
        cond.set_condition(conds, c.FAILED, "True", c.REASON_DEADLINE_EXCEEDED, msg, gen, ts)
        cond.set_condition(conds, c.SUCCEEDED, "False", c.REASON_DEADLINE_EXCEEDED, msg, gen, ts)
        status["completionTime"] = ts


def _unprobed_workers(plan, job, spec, by_rank, attempt) -> None:
    """Without probes: rank 0 first (its MASTER_ADDR is its own DNS name, or its own
    address), the others once rank 0 has its address; interfaces only as the user set them."""
    ifname = None if spec.network.socket_ifname == "auto" else spec.network.socket_ifname
    rank0 = by_rank.get(0)
    if rank0 is None:
        dns = uses_dns_hostnames(spec)
        rv = Rendezvous(master_dns_name(job, spec) if dns else "$(OWN_IP)", spec.rendezvous.port, ifname)
        pod = build_worker_pod(job, spec, 0, None, rv, attempt)
        ctr = pod["spec"]["containers"][0]
        if not dns:
            field = "status.hostIP" if spec.network.host_network else "status.podIP"
            ctr["env"] = [{"name": "OWN_IP", "valueFrom": {"fieldRef": {"fieldPath": field}}}] + ctr["env"]
        plan.creates.append(pod)
        return
    master = _master_addr(job, spec, rank0)
    if not master:
        return
    plan.status["rendezvous"].update(masterAddr=master, masterPort=spec.rendezvous.port, socketIfname=ifname)
    for r in range(1, spec.num_nodes):
        if r not in by_rank:
            rv = Rendezvous(master, spec.rendezvous.port, ifname)
            plan.creates.append(build_worker_pod(job, spec, r, None, rv, attempt))
