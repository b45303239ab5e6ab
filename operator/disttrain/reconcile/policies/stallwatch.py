"""The stall watch while training (pure): ``Progressing`` from the ranks' progress, and
whether ``runPolicy.onStall`` applies (issue 33).

Only for a job with ``runPolicy.stallTimeoutSeconds``: its training pods carry the
progress recorder and the sidecar (:mod:`disttrain.children.progresswatch`). Each step,
once every rank runs, the ranks are observed from what the shell read: a pod whose sidecar
is Ready has every rank advancing; a pod whose sidecar is not Ready has its latest readiness
word (the one-line summary, :func:`disttrain_probe.contract.progress.parse_summary`); a
pod with neither is not heard. :func:`disttrain.diagnosis.stall.judge` decides; the step
requeues while a wait may turn into a stall.
"""
from __future__ import annotations

import re
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.types import nproc_for, trainer_index
from disttrain.children import observe
from disttrain.children.podbase import refresh_report_budget
from disttrain.children.progresswatch import (
    SIDECAR_NAME,
    ProgressEvent,
    ProgressWatch,
    add_watch,
    sidecar_status,
    watch_problem,
)
from disttrain.diagnosis import stall, stallfacts
from disttrain.diagnosis.stallfacts import ADVANCING, RankObservation, StallVerdict
from disttrain.reconcile.step import Step
from disttrain_probe.contract import progress, stragglers, vocabulary

QUIET_CAP_S = 30  # the sidecar turns not Ready after at most this long without progress (s)
RECHECK_S = 5.0  # while not advancing, look again this often (s)
# while advancing, look this often for a straggler's word (a Ready pod's one failed check
# changes nothing in the pod, so no watch event wakes the operator for it) (s)
STRAGGLER_RECHECK_S = 60.0
# a Ready pod's straggler word counts this long after it was said: its sidecar repeats it
# every stragglers.STRAGGLER_REPORT_S while the rank straggles (s)
STRAGGLER_FRESH_S = stragglers.STRAGGLER_REPORT_S + 2 * STRAGGLER_RECHECK_S


def watch_for(s: Step) -> Optional[ProgressWatch]:
    """The watch the job's training pods get, None when ``stallTimeoutSeconds`` is unset.
    The sidecar turns not Ready after half the timeout, at most :data:`QUIET_CAP_S`."""
    timeout = s.spec.run_policy.stall_timeout_seconds
    if timeout is None:
        return None
    return ProgressWatch(image=s.spec.probe.image or s.probe_image,
                         stall_after_s=max(5, min(QUIET_CAP_S, timeout // 2)))


def watched(s: Step, pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` (a training pod just built) with the stall watch when the job asks for it
    (:func:`watch_for`) and its trainer can take it; changed in place and returned."""
    watch = watch_for(s)
    if watch is None:
        return pod
    containers = (pod.get("spec") or {}).get("containers") or []
    i = trainer_index(s.spec)
    if 0 <= i < len(containers) and isinstance(containers[i], dict):
        if add_watch(pod["spec"], containers[i], watch):
            refresh_report_budget(pod["spec"])  # in place: two more containers share the messages
    return pod


_AT = re.compile(r"^(.*:\d+)\((.*)\)$")


def _frame(at: str) -> Optional[str]:
    """The summary's ``train.py:88(load_batch)`` as messages write it, ``train.py:88
    (load_batch)``; None for none."""
    m = _AT.match(at)
    return f"{m.group(1)} ({m.group(2)})" if m else (at or None)


def _word_age(word: ProgressEvent, now: float) -> Optional[float]:
    """Seconds since the kubelet said ``word`` (0 for a time ahead of ``now``), None when its
    time is unknown."""
    said = observe.parse_time(word.at)
    return max(0.0, now - said.timestamp()) if said is not None else None


def _word_ranks(word: ProgressEvent, node: str, now: float, kubelet_heard: bool = False) -> list[RankObservation]:
    """The ranks one readiness word tells of, their ages measured to ``now`` (Unix s). With
    ``kubelet_heard`` (the pod's kubelet still reports its sidecar not Ready) a word's age is
    no silence: the kubelet's event spam filter (25 per object, then one per 5 minutes) holds
    back later words, so only the word's own ``stale`` says a rank stopped answering."""
    try:
        segs = progress.parse_summary(word.summary)
    except ValueError:
        return []
    age = _word_age(word, now) or 0.0
    out = []
    for seg in segs:
        if seg.rank is None:
            continue
        idle = float(seg.idle_s) + age
        out.append(RankObservation(
            rank=seg.rank, node=node, where=seg.where, seq=seg.seq, seq_age_s=idle,
            waiting_op=seg.op or None,
            waiting_seq=seg.seq if seg.where == progress.IN_COLLECTIVE else None,
            frame=_frame(seg.at), heard_age_s=idle if seg.stale else (0.0 if kubelet_heard else age)))
    return out


WORD_SKEW_S = 2.0  # Event and condition times are whole seconds, from two clocks (s)


def _earlier_wait(pod: dict[str, Any], word: ProgressEvent) -> bool:
    """The word was said before the pod's sidecar last turned not Ready (the pod's
    ContainersReady condition False since later): it tells of an earlier wait, not this one."""
    c = observe.pod_condition(pod, "ContainersReady")
    if c.get("status") != constants.FALSE:
        return False
    since, said = observe.parse_time(c.get("lastTransitionTime")), observe.parse_time(word.at)
    return since is not None and said is not None and said.timestamp() < since.timestamp() - WORD_SKEW_S


MOST_LINKS = 8  # silent links kept per step
UNKNOWN_WHERE = "unknown"  # a rank whose pod's sidecar said no record of it


def _addresses(s: Step, by_rank: dict[int, dict]) -> dict[str, tuple[str, str]]:
    """address -> (node, network) for the job's nodes: each node's address on the chosen
    interface (status.nodes, network = that interface), then the training pods' own
    addresses (network "the pod network", or "the node network" for a hostNetwork pod's)."""
    out: dict[str, tuple[str, str]] = {}
    for x in s.st.nodes.values():
        addr, name, ifname = x.get("address"), x.get("name"), x.get("interface")
        if isinstance(addr, str) and isinstance(name, str) and name:
            out.setdefault(addr, (name, ifname if isinstance(ifname, str) and ifname else "the node network"))
    for p in by_rank.values():
        node = observe.node(p)
        if not node:
            continue
        host = observe.host_ip(p)
        for ip in observe.pod_ips(p):
            out.setdefault(ip, (node, "the node network" if ip == host else "the pod network"))
        if host:
            out.setdefault(host, (node, "the node network"))
    return out


def links(s: Step, by_rank: dict[int, dict], now: float) -> list[stallfacts.LinkSilence]:
    """The links between two of the job's nodes over which a training pod's TCP connections
    lose packets (the sidecars' ``tcp`` segments, words of the pod's current wait),
    one per pair of nodes (the most retransmitted side; ends in name order), at most
    :data:`MOST_LINKS`; peers that are no node of the job are left out. Never raises."""
    where = _addresses(s, by_rank)
    words = {w.pod: w for w in s.progress}
    best: dict[tuple[str, str], tuple[int, stallfacts.LinkSilence]] = {}
    for p in by_rank.values():
        word, node = words.get(observe.name(p)), observe.node(p)
        if word is None or not node or _earlier_wait(p, word):
            continue
        try:
            peers = progress.parse_tcp(word.summary)
        except ValueError:
            continue
        for t in peers:
            other, network = where.get(t.peer, ("", ""))
            if not other or other == node:
                continue
            pair = (min(node, other), max(node, other))
            evidence = f"loses packets: {t.unacked} B unacked after {t.retrans} TCP retransmits"
            if pair not in best or t.retrans > best[pair][0]:
                best[pair] = (t.retrans, stallfacts.LinkSilence(pair[0], pair[1], network, evidence))
    ranked = sorted(best.values(), key=lambda x: (-x[0], x[1].node_a, x[1].node_b))
    return [link for _, link in ranked[:MOST_LINKS]]


NODE_MONITOR_GRACE_S = 50.0  # kube-controller-manager's --node-monitor-grace-period default (s)


def _node_silent_for(pod: dict[str, Any], now: float) -> float:
    """Seconds since the pod's node last reported it (0.0 while it does): a pod whose Ready
    condition is False while ContainersReady is True, without readiness gates, was not
    marked so by its kubelet (which sets both from the same containers) but by the node
    lifecycle controller, which marks a NotReady node's pods after the node went unheard for
    its grace period (:data:`NODE_MONITOR_GRACE_S`)."""
    if (pod.get("spec") or {}).get("readinessGates"):
        return 0.0
    ready, containers = observe.pod_condition(pod, "Ready"), observe.pod_condition(pod, "ContainersReady")
    if ready.get("status") != constants.FALSE or containers.get("status") != constants.TRUE:
        return 0.0
    at = observe.parse_time(ready.get("lastTransitionTime"))
    return NODE_MONITOR_GRACE_S + (max(0.0, now - at.timestamp()) if at is not None else 0.0)


def _straggling(word: Optional[ProgressEvent], now: float) -> dict[int, stragglers.StragglerView]:
    """rank -> its recorder's straggler view, from a Ready pod's word said within
    :data:`STRAGGLER_FRESH_S`; {} for none (or an unreadable word)."""
    age = _word_age(word, now) if word is not None else None
    if word is None or age is None or age > STRAGGLER_FRESH_S:
        return {}
    try:
        return {w.rank: w.view for w in progress.parse_straggler(word.summary)}
    except ValueError:
        return {}


def observations(s: Step, by_rank: dict[int, dict], now: float) -> list[RankObservation]:
    """Every rank heard of, from the training pods ``by_rank`` (node rank -> pod)."""
    nproc = nproc_for(s.spec)
    words = {w.pod: w for w in s.progress}
    out: list[RankObservation] = []
    for r, p in sorted(by_rank.items()):
        cs, node = sidecar_status(p), observe.node(p) or observe.name(p)
        if cs is None or cs.get("started") is not True:
            continue
        if cs.get("ready") is True:
            heard = _node_silent_for(p, now)
            slow = _straggling(words.get(observe.name(p)), now)
            out += [RankObservation(rank=g, node=node, where=ADVANCING, seq_age_s=0.0, heard_age_s=heard,
                                    straggler=slow.get(g)) for g in range(r * nproc, (r + 1) * nproc)]
        elif observe.name(p) in words and not _earlier_wait(p, words[observe.name(p)]):
            word = words[observe.name(p)]
            told = _word_ranks(word, node, now, kubelet_heard=_node_silent_for(p, now) == 0.0)
            # a word with no rank in it ("no records", an unreadable file): its ranks' node is
            # known, where they are is not (a node lost before its sidecar first passed)
            out += told or [RankObservation(rank=g, node=node, where=UNKNOWN_WHERE, heard_age_s=_word_age(word, now))
                            for g in range(r * nproc, (r + 1) * nproc)]
    return out


def _unwatched(s: Step, by_rank: dict[int, dict]) -> Optional[str]:
    """Why a training pod of ``by_rank`` was built without the watch (its trainer, as
    built, refused it: :func:`watch_problem`), None when every pod has it."""
    i = trainer_index(s.spec)
    for p in by_rank.values():
        spec = p.get("spec") or {}
        if not any(isinstance(c, dict) and c.get("name") == SIDECAR_NAME for c in spec.get("initContainers") or []):
            containers = spec.get("containers") or []
            trainer = containers[i] if 0 <= i < len(containers) and isinstance(containers[i], dict) else {}
            return watch_problem(trainer) or "a training pod was created without the progress sidecar"
    return None


def judge(s: Step, by_rank: dict[int, dict]) -> Optional[StallVerdict]:
    """Write ``Progressing`` and ``status.progress`` for a watched job whose ranks all run;
    the verdict (its ``act``: onStall applies now), or None when not watched."""
    timeout = s.spec.run_policy.stall_timeout_seconds
    if timeout is None or not s.is_true(constants.TRAINING_STARTED):
        return None
    problem = _unwatched(s, by_rank)
    if problem is not None:  # the pods carry no recorder: say why, once, and do not poll
        s.set(constants.PROGRESSING, constants.UNKNOWN, vocabulary.PROGRESS_NOT_REPORTED,
              f"training is not watched: {problem}")
        return None
    now = s.now.timestamp()
    world = s.spec.num_nodes * nproc_for(s.spec)
    seen = observations(s, by_rank, now)
    v = stall.judge(seen, world, float(timeout), now, links(s, by_rank, now))
    s.set(constants.PROGRESSING, v.status, v.reason, v.message)
    details = stallfacts.rank_details(stallfacts.facts(seen, world, float(timeout), now), v.ranks)
    s.st.set_progress(**v.status_fields(), rank_details=details)
    s.plan.requeue(RECHECK_S if v.status != constants.TRUE else STRAGGLER_RECHECK_S)
    return v
