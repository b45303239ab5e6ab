"""Launching a probe attempt (pure): its pods, rank 0 first; its number and start in ``status.probe``.

Rank 0's probe hosts the rendezvous store, so its address must be known before the other
ranks start, but which node it lands on is the scheduler's decision: rank 0's pod is created
first (its MASTER_ADDR is its own DNS name or address), the others once rank 0 has its
address and its probe container has started (or :data:`PEER_START_WAIT_SECONDS` after it
reached its node), carrying that start time as the evidence that lets a dialling rank call
a silent master port blocked after a short grace. With a gang (:mod:`.gang`) every rank is
created at once, MASTER_ADDR rank 0's DNS name. In place (``probe.placement: InPlace``)
the other ranks' training pods are created as soon as rank 0 has its address, as without
a probe: the launch pays no wait of the probe's.

Pods of an older attempt are deleted; a rank's pod is created only when no observed pod
holds its name (:meth:`~disttrain.reconcile.step.Step.create`). Used by :mod:`.probing`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Optional

from disttrain.api import constants
from disttrain.api.common import ProbePlacement
from disttrain.api.types import DistTrainingJobSpec, trainer_of
from disttrain.children import inplace, observe
from disttrain.children import kueue as kueue_objects
from disttrain.children.names import JobRef, master_dns_name, probe_pod_name, uses_dns_hostnames, worker_pod_name
from disttrain.children.pods import Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.reconcile.policies import stallwatch
from disttrain.reconcile.policies.deadline import seconds_left
from disttrain.reconcile.step import Step

# How long after rank 0's pod got to its node the other probes wait for rank 0's probe
# container to start (s). Started, it is the evidence that lets them diagnose a blocked
# master port in seconds; a slow start (a cold image pull) must not hold back their own
# pulls for longer: they then start without it (and dial until their deadline).
PEER_START_WAIT_SECONDS = 5.0



def master_addr(job: JobRef, spec: DistTrainingJobSpec, rank0: Optional[dict]) -> Optional[str]:
    """MASTER_ADDR for the other ranks once rank 0's pod has its address (None before):
    rank 0's DNS name with DNS hostnames, else its node IP (hostNetwork) or pod IP."""
    if rank0 is None:
        return None
    addr = observe.host_ip(rank0) if spec.network.host_network else observe.pod_ip(rank0)
    if not addr:
        return None
    return master_dns_name(job, spec) if uses_dns_hostnames(spec) else addr


def peers_wait_left(rank0: dict, now: datetime) -> Optional[float]:
    """Seconds the probes of ranks 1..n-1 must still wait (<= 0: create them now): none once
    rank 0's probe container started, else until PEER_START_WAIT_SECONDS after rank 0's pod
    started on its node; None while it has not reached a node."""
    if observe.started_at(rank0, "probe"):
        return 0.0
    return seconds_left(observe.pod_start_time(rank0), PEER_START_WAIT_SECONDS, now)

def attempt_of(s: Step) -> int:
    """The current probe attempt (1-based), recorded in status.probe.attempt."""
    record = s.st.probe
    attempt = record.attempt
    if attempt is None or attempt < 1:
        attempt = record.attempt = 1
    return attempt


def in_place(spec: DistTrainingJobSpec) -> bool:
    """``probe.placement: InPlace``: the training pods run the probe (:mod:`disttrain.children.inplace`)."""
    return spec.probe.placement == ProbePlacement.InPlace.value


def _role(s: Step) -> tuple[str, Callable[[str, int], str]]:
    """The role of the pods that run the attempt's probe, and their names by rank."""
    return (constants.ROLE_WORKER, worker_pod_name) if in_place(s.spec) else (constants.ROLE_PROBE, probe_pod_name)


def probe_pod_names(s: Step) -> list[str]:
    """The names the attempt's probing pods take, by rank (probe pods, or in place the training pods)."""
    _, named = _role(s)
    return [named(s.job.name, r) for r in range(s.spec.num_nodes)]


def current_probes(s: Step, attempt: int) -> dict[int, dict]:
    """The attempt's probe pods by node rank; every other probe pod of the job is deleted.
    In place, the training pods of the current training attempt (status.restarts) shown as
    probe pods (:func:`disttrain.children.inplace.probe_view`)."""
    role, _ = _role(s)
    label = s.st.restarts if in_place(s.spec) else attempt
    by_rank: dict[int, dict] = {}
    n = s.spec.num_nodes
    for p in s.alive(role):
        rank = observe.int_label(p, constants.LABEL_RANK)
        if observe.int_label(p, constants.LABEL_ATTEMPT) != label or not 0 <= rank < n or rank in by_rank:
            s.delete(p)
        else:
            by_rank[rank] = p
    if in_place(s.spec):
        trainer = trainer_of(s.spec).get("name")
        return {r: inplace.probe_view(p, trainer if isinstance(trainer, str) else "") for r, p in by_rank.items()}
    return by_rank


def record_start(s: Step, by_rank: dict[int, dict]) -> None:
    """status.probe.startTime: when the attempt's first probe pod was created (its budget
    starts then, not while the job waits for a name or for quota)."""
    record = s.st.probe
    if record.start_time or not by_rank:
        return
    created = [observe.parse_time(observe.meta(p).get("creationTimestamp")) for p in by_rank.values()]
    first = min((t for t in created if t), default=None)
    record.start_time = first.strftime("%Y-%m-%dT%H:%M:%SZ") if first else s.ts


def check_training_pods(s: Step) -> None:
    """Have the Pod API check the training pods before the attempt's first probe pod is
    created (server-side dry run of rank 0's pod and, with more nodes, rank 1's: they
    differ only there, by the rendezvous hostPort): a template the CRD admitted but the Pod
    API refuses (requests above limits, a field only the Pod API checks) then ends the job
    as ``InvalidPodTemplate`` naming the field, before any probe runs, not once the probe
    passed. The rendezvous is a stand-in (the probe decides it); nothing is stored."""
    rv = Rendezvous("127.0.0.1", s.spec.rendezvous.port)
    in_place_pod = _builder(s, attempt_of(s)) if in_place(s.spec) else None  # the very pods, relay included
    for rank in range(min(2, s.spec.num_nodes)):
        pod = in_place_pod(rank, ProbeMaster("127.0.0.1" if rank else None)) if in_place_pod is not None else \
            stallwatch.watched(s, build_worker_pod(s.job, s.spec, rank, None, rv, s.st.restarts or 0))
        if s.placement is not None:
            kueue_objects.place(pod, *s.placement)
        s.plan.dry_runs.append(pod)


def _builder(s: Step, attempt: int) -> Callable[[int, ProbeMaster], dict]:
    """The pod that runs rank r's probe: a probe pod, or in place the training pod that
    runs it first (with the stall watch when the job asks for it)."""
    if in_place(s.spec):
        attempts = inplace.Attempts(probe=attempt, training=s.st.restarts)
        return lambda rank, master: stallwatch.watched(s, inplace.build_pod(
            s.job, s.spec, rank, master, attempts, s.probe_image))
    return lambda rank, master: build_probe_pod(s.job, s.spec, rank, master, attempt, s.probe_image)


def launch(s: Step, attempt: int, by_rank: dict[int, dict]) -> Optional[str]:
    """Create the missing probe pods (rank 0 first); returns MASTER_ADDR once known. The
    attempt's first creates come with :func:`check_training_pods`."""
    job, spec = s.job, s.spec
    build = _builder(s, attempt)
    if not by_rank:
        check_training_pods(s)
    rank0 = by_rank.get(0)
    master = master_addr(job, spec, rank0)
    if _role(s)[0] in s.gangs:  # a gang is placed only once all its pods exist: all at once
        master = master_dns_name(job, spec)
        s.st.rendezvous.record(master, spec.rendezvous.port)
        for rank in range(spec.num_nodes):
            if rank not in by_rank:
                s.create(build(rank, ProbeMaster(master if rank else None)))
        return master
    if rank0 is None:
        s.create(build(0, ProbeMaster()))
        return master
    if not master:
        return None
    # In place the training pods wait for nothing more than training's own would (rank 0's
    # address): every second here is paid at every launch. Without rank 0's start the
    # dialling ranks decide a silent master port by its host's other answers and the
    # beacon (as gang probes do, all created at once).
    left = 0.0 if in_place(spec) else peers_wait_left(rank0, s.now)
    if left is None or left > 0:
        if left is not None:
            s.plan.requeue(left)
        return master
    s.st.rendezvous.record(master, spec.rendezvous.port)
    started = observe.started_at(rank0, "probe")
    for rank in range(1, spec.num_nodes):
        if rank not in by_rank:
            s.create(build(rank, ProbeMaster(master, started)))
    return master

