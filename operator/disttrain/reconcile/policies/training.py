"""Training pods (pure): created once validated, pinned to the validated nodes; followed to
the end.

One training pod per node rank, attempt ``status.restarts`` (0-based). A rank's pod is
created only when every pod of other attempts is gone and no probe pod still runs (on
hostNetwork it holds the rendezvous port). With probes, rank r runs on the node whose probe
validated rank r, with the MASTER_ADDR, MASTER_PORT and NCCL_SOCKET_IFNAME that probe
validated; without probes, rank 0 first (its MASTER_ADDR is its own DNS name or address)
and the others once rank 0 has its address.

Once every rank runs, ``TrainingStarted`` is True. A failed rank (a non-zero exit of its
trainer or a plain init container, eviction, or its pod deleted while training) is handed
to :mod:`.restart`; every rank's trainer exited 0 ends the job, whatever its sidecars still
do; :mod:`.deadline` bounds the run.
"""

from __future__ import annotations

from typing import Optional

from disttrain.api import constants
from disttrain.api.common import OnStall
from disttrain.api.types import trainer_index, trainer_of
from disttrain.children import kubelet, observe, rankend
from disttrain.children.names import master_dns_name, uses_dns_hostnames, worker_pod_name
from disttrain.children.pods import Rendezvous, build_worker_pod
from disttrain.diagnosis import logline, stall
from disttrain.diagnosis.stallfacts import StallVerdict
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import conflicts, offers, restart, stallwatch
from disttrain.reconcile.policies.deadline import training_seconds_left
from disttrain.reconcile.policies.probelaunch import master_addr
from disttrain.reconcile.step import Outcome, Step
from disttrain_probe.contract import vocabulary


def current_workers(s: Step, attempt: int) -> dict[int, dict]:
    """The attempt's training pods by node rank; pods of other attempts are deleted."""
    by_rank: dict[int, dict] = {}
    for p in s.alive(constants.ROLE_WORKER):
        rank = observe.int_label(p, constants.LABEL_RANK)
        if observe.int_label(p, constants.LABEL_ATTEMPT) != attempt or not 0 <= rank < s.spec.num_nodes\
                or rank in by_rank:
            s.delete(p)
        else:
            by_rank[rank] = p
    return by_rank


def _may_create(s: Step, attempt: int) -> bool:
    """No pod of another attempt exists (terminating ones included) and no probe runs."""
    old = any(observe.role(p) == constants.ROLE_WORKER and observe.int_label(p, constants.LABEL_ATTEMPT) != attempt
              for p in s.ours)
    probes_running = any(observe.phase(p) in ("Pending", "Running") for p in s.alive(constants.ROLE_PROBE))
    if old or probes_running:
        s.plan.requeue(1.0)
    return not old and not probes_running


def _create_probed(s: Step, attempt: int, by_rank: dict[int, dict]) -> None:
    if all(r in by_rank for r in range(s.spec.num_nodes)):
        return  # every rank's pod exists (in place: the pods that probed train)
    nodes = s.st.nodes
    master = s.st.recorded_master
    if not master:  # validated, but the status lost it (edited, restored)
        s.set(constants.TRAINING_STARTED, constants.UNKNOWN, vocabulary.TRAINING_PENDING,
              "status.rendezvous.masterAddr is missing from the validated status: probing again "
              "to learn it")
        _reprobe(s, "the validated rendezvous is missing from the status")
        return
    for r in range(s.spec.num_nodes):
        if r in by_rank:
            continue
        info = nodes.get(r, {})
        rv = Rendezvous(master, s.spec.rendezvous.port, info.get("interface"), exact=True)
        s.create(stallwatch.watched(s, build_worker_pod(s.job, s.spec, r, info.get("name") or None, rv, attempt)))


def _create_unprobed(s: Step, attempt: int, by_rank: dict[int, dict]) -> None:
    """Without probes: rank 0 first (its MASTER_ADDR is its own DNS name, or its own
    address), the others once rank 0 has its address; interfaces only as the user set them."""
    spec = s.spec
    ifname = None if spec.network.socket_ifname == "auto" else spec.network.socket_ifname
    rank0 = by_rank.get(0)
    master: Optional[str]
    if constants.ROLE_WORKER in s.gangs:  # all ranks together, MASTER_ADDR rank 0's DNS name
        master = master_dns_name(s.job, spec)
        s.st.rendezvous.record(master, spec.rendezvous.port, ifname)
        for r in range(spec.num_nodes):
            if r not in by_rank:
                s.create(stallwatch.watched(s, build_worker_pod(
                    s.job, spec, r, None, Rendezvous(master, spec.rendezvous.port, ifname), attempt)))
        return
    if rank0 is None:
        dns = uses_dns_hostnames(spec)
        rv = Rendezvous(master_dns_name(s.job, spec) if dns else "$(OWN_IP)", spec.rendezvous.port, ifname)
        pod = stallwatch.watched(s, build_worker_pod(s.job, spec, 0, None, rv, attempt))
        ctr = pod["spec"]["containers"][trainer_index(spec)]
        if not dns:
            path = "status.hostIP" if spec.network.host_network else "status.podIP"
            ctr["env"] = [{"name": "OWN_IP", "valueFrom": {"fieldRef": {"fieldPath": path}}}] + ctr["env"]
        s.create(pod)
        return
    master = master_addr(s.job, spec, rank0)
    if not master:
        return
    s.st.rendezvous.record(master, spec.rendezvous.port, ifname)
    for r in range(1, spec.num_nodes):
        if r not in by_rank:
            s.create(stallwatch.watched(s, build_worker_pod(
                s.job, spec, r, None, Rendezvous(master, spec.rendezvous.port, ifname), attempt)))


def _failed_ranks(s: Step, by_rank: dict[int, dict]) -> list[str]:
    """One line per failed rank of the attempt: a non-sidecar container (the trainer, a
    plain init container) exited non-zero or was killed, its pod failed or was evicted
    before the trainer exited 0, its pod cannot start (a missing ConfigMap, Secret or key,
    an image it cannot pull), or its pod vanished after training started (deleted or
    evicted and removed). A sidecar's exit never fails a rank
    (:mod:`disttrain.children.rankend`)."""
    out = []
    trainer = _trainer(s)
    for r in range(s.spec.num_nodes):
        p = by_rank.get(r)
        if p is None:
            if s.is_true(constants.TRAINING_STARTED):
                out.append(f"rank {r} ({worker_pod_name(s.job.name, r)}): its pod was deleted "
                           "while training")
            continue
        line = _rank_failure(s, r, p, trainer)
        if line:
            out.append(line)
    return out


def _trainer(s: Step) -> str:
    """The trainer container's name in the job's pods (:func:`disttrain.api.types.trainer_of`)."""
    name = trainer_of(s.spec).get("name")
    return name if isinstance(name, str) else ""


# a training pod waiting in one of these fails its rank at once: the kubelet retries, but
# nothing changes until someone fixes the job or its namespace
_CANNOT_START = (kubelet.CONFIG, kubelet.CREATE, kubelet.IMAGE)


def _rank_failure(s: Step, r: int, p: dict, trainer: str) -> Optional[str]:
    """``rank r (pod on node) <what ended it>: <the log's end>; <the fix>`` when rank
    ``r``'s pod failed, its trainer or a plain init container exited non-zero, or it cannot
    start; else None. Which container ended the rank is :mod:`disttrain.children.rankend`'s
    (never a sidecar); what the kubelet says of it is
    :func:`disttrain.children.kubelet.container_failure`'s."""
    if rankend.done(p, trainer):
        return None
    f = kubelet.container_failure(p)
    cannot_start = f is not None and not f.ended and f.kind in _CANNOT_START
    end = rankend.failure(p, trainer)
    if end is None and observe.phase(p) != "Failed" and not cannot_start:
        return None
    who = f"rank {r} ({observe.name(p)} on {observe.node(p)})"
    if f is not None and f.kind != kubelet.EXIT and (end is None or f.container in ("", end.container)):
        ctr = f.container or trainer
        said = logline.quote(observe.termination_message(p, ctr), observe.name(p), ctr)
        quoted = f": {said}" if said and f.kind == kubelet.SIGNAL else ""
        field = "initContainers" if f.init else "containers"
        names = [c.get("name") for c in s.spec.template.spec.get(field) or [] if isinstance(c, dict)]
        where = f"spec.template.spec.{field}[{names.index(f.container)}]" if f.container in names else ""
        return f"{who}: {f.describe()}{quoted}; {f.fix(where, observe.name(p))}"
    end = end or rankend.trainer_end(p, trainer) or rankend.ContainerEnd(trainer, None, "")
    said = logline.quote(end.message, observe.name(p), end.container)
    why = observe.evicted(p)
    what = (f"was evicted ({why})" if why and end.code is None
            else f"container {end.container} exited {end.code}" if end.code is not None
            else "failed before its trainer exited")
    return f"{who} {what}" + (f": {said}" if said else "")


def _name_conflicts(s: Step) -> bool:
    """NameConflict while foreign pods hold training pod names: True while any does (no
    training pod is created meanwhile), the job failed with it once the conflict outlasted
    its bound."""
    if s.is_true(constants.TRAINING_STARTED):
        return False
    found = conflicts.check(s, [worker_pod_name(s.job.name, r) for r in range(s.spec.num_nodes)])
    if found is None:
        return False
    msg, expired = found
    if expired:
        s.set(constants.TRAINING_STARTED, constants.FALSE, vocabulary.NAME_CONFLICT, msg)
        s.finish(False, vocabulary.NAME_CONFLICT, msg, "a training pod's name is held by another pod")
        return True
    s.set(constants.TRAINING_STARTED, constants.UNKNOWN, vocabulary.NAME_CONFLICT, msg)
    return True


def _unplaced(s: Step, by_rank: dict[int, dict]) -> bool:
    """Say which training pods the scheduler cannot place on their validated node yet; True
    when one asks for a resource no node offers enough of past the schedule timeout (the
    job failed with ResourceNotOffered, :mod:`.offers`)."""
    stuck = [(r, p, m) for r, p in sorted(by_rank.items()) if (m := observe.unschedulable(p))]
    if not stuck or s.is_true(constants.TRAINING_STARTED):
        return False
    found = offers.find(stuck, s.nodes, s.spec, s.now)
    if found is not None:
        if found.scaling:
            s.set(constants.TRAINING_STARTED, constants.UNKNOWN, vocabulary.WAITING_FOR_RESOURCES, found.message)
            return False
        status = constants.FALSE if found.expired else constants.UNKNOWN
        s.set(constants.TRAINING_STARTED, status, vocabulary.RESOURCE_NOT_OFFERED, found.message)
        if found.expired:
            s.finish(False, vocabulary.RESOURCE_NOT_OFFERED, found.message, "a resource no node offers")
            return True
        if found.left is not None:
            s.plan.requeue(found.left)
        return False
    s.set(constants.TRAINING_STARTED, constants.UNKNOWN, vocabulary.WAITING_FOR_RESOURCES, cond.clip(
        "; ".join(f"rank {r} ({observe.name(p)}) cannot be placed yet: {m}" for r, p, m in stuck)
        + "; it starts when its validated node has room"))
    return False


def apply(s: Step) -> Outcome:
    """Once validated (or without probes): delete the probe pods (their job is done, unless
    ``probe.keepPods`` is Always) and advance training; FINISHED when the job ended."""
    if s.terminal or not (s.is_true(constants.VALIDATED) or not s.spec.probe.enabled):
        return Outcome.CONTINUE
    if s.spec.probe.keep_pods != "Always":
        for p in s.alive(constants.ROLE_PROBE):
            s.delete(p)
    run(s)
    return Outcome.FINISHED if s.terminal else Outcome.CONTINUE


def run(s: Step) -> None:
    """Advance training: create the missing pods, then follow them to the job's outcome."""
    attempt = s.st.restarts
    by_rank = current_workers(s, attempt)
    # The attempt is decided before anything of it is created: a rank that failed (or whose
    # pod vanished while training) ends this attempt, and its pods are never created again.
    failed = _failed_ranks(s, by_rank)
    if failed:
        _on_failure(s, attempt, by_rank, "; ".join(failed))
        return
    # names first: a rank created while another's name is held would wait alone at the
    # rendezvous for a peer that cannot start
    if _name_conflicts(s):
        return
    if _may_create(s, attempt):
        if s.spec.probe.enabled:
            _create_probed(s, attempt, by_rank)
        else:
            _create_unprobed(s, attempt, by_rank)
    if _unplaced(s, by_rank):
        return
    if by_rank and not s.st.start_time:
        s.st.start_time = s.ts
    n = s.spec.num_nodes
    if len(by_rank) == n and all(observe.phase(p) in ("Running", "Succeeded", "Failed") for p in by_rank.values())\
            and not s.is_true(constants.TRAINING_STARTED):
        placement = ", ".join(f"{r}:{observe.node(p)}" for r, p in sorted(by_rank.items()))
        s.set(constants.TRAINING_STARTED, constants.TRUE, vocabulary.ALL_RANKS_RUNNING,
              f"{n} training pods started (rank:node {placement})"
              + (f" after {attempt} gang restart(s)" if attempt else ""))
    if s.is_true(constants.TRAINING_STARTED):
        for ctype in (constants.SUCCEEDED, constants.FAILED):
            s.set(ctype, constants.UNKNOWN, vocabulary.TRAINING_RUNNING, "training is running")
    if not all(rankend.done(p, _trainer(s)) for p in by_rank.values()):
        verdict = stallwatch.judge(s, by_rank)
        if verdict is not None and verdict.act and _on_stall(s, attempt, by_rank, verdict):
            return
    if len(by_rank) == n and all(rankend.done(p, _trainer(s)) for p in by_rank.values()):
        # a plain sidecar may still run: cleanup deletes the pods (cleanPodPolicy Running,
        # or holding hostPorts), so they do not hold the node's ports and resources
        s.finish(True, vocabulary.ALL_RANKS_SUCCEEDED, f"all {n} ranks exited 0", "no rank failed")
        return
    left = training_seconds_left(s.spec, observe.parse_time(s.st.start_time), s.now)
    if left is not None and left <= 0:
        msg = f"training ran longer than runPolicy.activeDeadlineSeconds={s.spec.run_policy.active_deadline_seconds}"
        s.finish(False, vocabulary.DEADLINE_EXCEEDED, msg, msg)
    elif left is not None:
        s.plan.requeue(left)


def _on_stall(s: Step, attempt: int, by_rank: dict[int, dict], verdict: StallVerdict) -> bool:
    """runPolicy.onStall once the stall verdict acts: Fail ends the job (TrainingStalled),
    Restart is a failed rank's gang restart (the job fails as TrainingStalled past
    backoffLimit) that leaves out the node a node fault named (status.excludedNodes: the
    next attempt probes again, so that its placement is validated without it); Wait only
    reports (False)."""
    how = s.spec.run_policy.on_stall
    if how == OnStall.Wait.value:
        return False
    if how == OnStall.Fail.value:
        s.finish(False, vocabulary.TRAINING_STALLED, verdict.message, "training stalled")
        return True
    avoid = stall.nodes_to_avoid(verdict)
    d = _restart_decision(s, attempt)
    if d.restart:  # the restart's condition (and its Event) says "without <node>"
        for node in avoid:
            s.st.exclude(node, verdict.reason)
    _on_failure(s, attempt, by_rank, verdict.message, vocabulary.TRAINING_STALLED, avoid)
    return True


def _restart_decision(s: Step, attempt: int) -> restart.Decision:
    spec = s.spec
    return restart.on_rank_failure(attempt, spec.run_policy.backoff_limit,
                                   spec.run_policy.reprobe_on_failure, spec.probe.enabled)


def _on_failure(s: Step, attempt: int, by_rank: dict[int, dict], text: str,
                reason: Optional[str] = None, avoid: tuple[str, ...] = ()) -> None:
    """A failed attempt: the gang restart runPolicy allows (probing again when the policy
    says so, or to place it without the nodes ``avoid`` names, said in its messages), else
    the job fails (with ``reason``, or the restart decision's own)."""
    spec = s.spec
    d = _restart_decision(s, attempt)
    without = f" without {', '.join(avoid)}" if avoid else ""
    if not d.restart:
        s.finish(False, reason or d.reason, text, "a rank failed" if reason is None else "training stalled")
        return
    s.st.restarts = attempt + 1
    for p in by_rank.values():
        s.delete(p)
    s.set(constants.TRAINING_STARTED, constants.UNKNOWN, vocabulary.RESTARTING,
          f"gang restart {attempt + 1}/{spec.run_policy.backoff_limit}{without} after: {text}")
    for ctype in (constants.SUCCEEDED, constants.FAILED):
        s.set(ctype, constants.UNKNOWN, vocabulary.RESTARTING, f"restarting all ranks{without}")
    if d.reprobe or (avoid and spec.probe.enabled):
        _reprobe(s, "a rank failed")


def _reprobe(s: Step, why: str) -> None:
    """Validate again before training: the next probe attempt, every check Unknown."""
    s.set(constants.VALIDATED, constants.UNKNOWN, vocabulary.PROBING, f"re-probing: {why}")
    for ctype in constants.CHECK_CONDITIONS:
        s.set(ctype, constants.UNKNOWN, vocabulary.NOT_CHECKED, f"re-probing: {why}")
    s.st.new_probe_attempt((s.st.probe.attempt or 1) + 1)
