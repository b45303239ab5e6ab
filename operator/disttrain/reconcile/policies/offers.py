"""Resources no node offers (pure): a pod the scheduler finds ``Insufficient X`` for, on a
cluster where no node's ``status.allocatable`` has X at all, or none has as much as the pod
requests, would wait for ever.

The scheduler says ``Insufficient nvidia.com/gpu`` both for a node whose GPUs are busy and
for a node that has none, so its message alone cannot tell waiting from never. With the
nodes' allocatable (read by the shell, :class:`~disttrain.reconcile.step.NodeOffers`),
:func:`find` tells them apart: a resource counts as not offered only when every node was
read and none offers the amount one pod requests (GPUs, RDMA devices, ``hugepages-*``,
any extended resource, and cpu or memory beyond the largest node). The job then says so
at once (``ResourceNotOffered``, Unknown), and fails after
``runPolicy.schedulingPolicy.scheduleTimeoutSeconds`` (default :data:`DEFAULT_TIMEOUT_SECONDS`)
counted from when its pods became unschedulable, unless a node autoscaler is adding a node
for them (its ``TriggeredScaleUp`` or Karpenter's ``Nominated`` Event on a pod, newer than
any ``NotTriggerScaleUp``): then the job keeps waiting (``WaitingForResources``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.podresources import container_requests, effective
from disttrain.api.quantity import parse_quantity
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import nodematch, observe
from disttrain.diagnosis import messages
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import scheduling
from disttrain.reconcile.step import NodeOffers

DEFAULT_TIMEOUT_SECONDS = 300  # scheduleTimeoutSeconds unset: a new node's device plugin has time
SCALING = ("TriggeredScaleUp", "Nominated")  # cluster-autoscaler's, Karpenter's: a node is coming
NOT_SCALING = "NotTriggerScaleUp"
# a resource name ([prefix/]name) ends with a letter or digit: the sentence's "." is not in it
_INSUFFICIENT = re.compile(r"\d+ Insufficient ([A-Za-z0-9](?:[A-Za-z0-9./_-]*[A-Za-z0-9])?)")
_SHOWN = 2  # nodes named in a message


@dataclass(frozen=True)
class Shortage:
    """A resource no node offers enough of for one pod: ``resource``, what one pod
    ``requests`` (in the resource's base unit), ``offers``: ``(node, allocatable)`` of the
    nodes that have some, largest first, and ``nodes``: how many nodes were read."""

    resource: str
    requests: Decimal
    offers: tuple[tuple[str, Decimal], ...]
    nodes: int
    excluded: tuple[tuple[str, str], ...] = ()  # (node, why) that offer enough but the pod may not use

    def clause(self) -> str:
        """``no node offers nvidia.com/gpu (0/3 nodes have it; the pod requests 1)``, or
        ``no node offers 4 nvidia.com/gpu (3/5 nodes have it, at most 2: node-a: 2, node-b: 1,
        +1 more; the pod requests 4)``, or, when nodes that offer enough are ruled out for
        the pod, ``no node the pod may use offers 1 nvidia.com/gpu (ruled out: node-c (taint
        gpu=true:NoSchedule); the pod requests 1)``."""
        req = _num(self.requests, self.resource)
        if self.excluded:
            shown = ", ".join(f"{n} ({why})" for n, why in self.excluded[:_SHOWN])
            more = f", +{len(self.excluded) - _SHOWN} more" if len(self.excluded) > _SHOWN else ""
            return (f"no node the pod may use offers {req} {self.resource} (ruled out: {shown}{more}; "
                    f"the pod requests {req})")
        if not self.offers:
            return f"no node offers {self.resource} ({len(self.offers)}/{self.nodes} nodes have it; the pod requests {req})"
        shown = ", ".join(f"{n}: {_num(q, self.resource)}" for n, q in self.offers[:_SHOWN])
        more = f", +{len(self.offers) - _SHOWN} more" if len(self.offers) > _SHOWN else ""
        return (f"no node offers {req} {self.resource} ({len(self.offers)}/{self.nodes} nodes have it, "
                f"at most {_num(self.offers[0][1], self.resource)}: {shown}{more}; the pod requests {req})")

    def fix(self) -> str:
        """What makes the pod placeable."""
        if self.excluded:
            return (f"let the pods onto {self.excluded[0][0]} (the template's tolerations, nodeSelector, "
                    f"affinity) or add nodes with {self.resource}")
        if self.resource.startswith("hugepages-"):
            add = (f"reserve {self.resource} on the nodes (vm.nr_hugepages, then restart the kubelet)")
        elif "/" in self.resource:
            add = f"add nodes whose device plugin advertises {self.resource}"
        else:
            add = f"add nodes with more allocatable {self.resource}"
        less = "lower" if self.offers else "remove"
        return f"{add}, or {less} the request in spec.template"


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list:
    return v if isinstance(v, list) else []


def _num(q: Decimal, resource: str = "") -> str:
    """``q`` as a quantity: bytes of memory-like resources in the largest binary unit that
    divides them (``1Gi``), anything else as a plain number (``0.5``, ``4``)."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if q >= size and q % size == 0:
                return f"{q // size:f}{suffix}"
    return format(q.normalize(), "f")


def insufficient(message: str) -> list[str]:
    """The resources of the scheduler's ``N Insufficient X`` items (first sentence only, in
    order, each once). Never raises."""
    head = str(message).split("preemption:", 1)[0]
    return list(dict.fromkeys(_INSUFFICIENT.findall(head)))


def _amount(section: Any, resource: str) -> Decimal:
    q = parse_quantity(section.get(resource)) if isinstance(section, dict) else None
    return q if q is not None and q > 0 else Decimal(0)


def pod_requests(pod: Any, resource: str) -> Decimal:
    """What the scheduler counts for ``pod``: the containers' and sidecars' (init containers
    with restartPolicy Always) sum, or a plain init container beside the sidecars before it
    if larger (:func:`disttrain.api.podresources.effective`), plus ``spec.overhead``. 0 when
    the pod does not request it. Never raises."""
    spec = _d(_d(pod).get("spec"))
    need = effective(spec, container_requests).get(resource, Decimal(0))
    return need + _amount(spec.get("overhead"), resource)


def considered(pod: Any, message: str) -> list[str]:
    """The resources to weigh against the nodes' offers for ``pod`` the scheduler cannot
    place (``message``: its words): its ``Insufficient`` items; for a pod held by its gang
    (``minCount (2) cannot be satisfied``: the gang's words hide the member's own reason),
    every resource the pod requests. Never raises."""
    named = insufficient(message)
    if named or not scheduling.GANG.search(str(message)):
        return named
    spec = _d(_d(pod).get("spec"))
    return sorted(set(effective(spec, container_requests)) | set(_d(spec.get("overhead"))))


def shortages(pod: Any, message: str, nodes: Optional[NodeOffers]) -> list[Shortage]:
    """The resources :func:`considered` for ``pod`` (``message``: the scheduler's) that no
    node the pod may use (:mod:`disttrain.children.nodematch`: its nodeSelector, required
    nodeAffinity and tolerations) offers as much of as the pod requests; [] when the nodes
    were not all read, none was read, or the pod does not request the resource. Never
    raises."""
    if nodes is None or not nodes.complete or not nodes.allocatable:
        return []
    out = []
    spec = _d(pod).get("spec")
    barred = {name: why for name in dict(nodes.allocatable)
              if (why := nodematch.excluded_by(spec, name, *nodes.placement.get(name, ({}, []))))}
    for resource in considered(pod, message):
        req = pod_requests(pod, resource)
        if req <= 0:
            continue
        having = [(name, q) for name, alloc in nodes.allocatable
                  if isinstance(alloc, dict) and (q := _amount(alloc, resource)) > 0]
        offers = sorted(((n, q) for n, q in having if n not in barred), key=lambda o: (-o[1], o[0]))
        if not offers or offers[0][1] < req:
            out_of_reach = tuple(sorted((n, barred[n]) for n, q in having if n in barred and q >= req))
            out.append(Shortage(resource, req, tuple(offers), len(nodes.allocatable), out_of_reach))
    return out


def _unschedulable_since(pod: Any) -> Optional[datetime]:
    for pc in _l(observe.status(pod).get("conditions")):
        if isinstance(pc, dict) and pc.get("type") == "PodScheduled" and pc.get("status") == constants.FALSE:
            return observe.parse_time(pc.get("lastTransitionTime"))
    return None


def scaling(pods: list[Any], nodes: Optional[NodeOffers]) -> Optional[str]:
    """``TriggeredScaleUp: <message>`` when a node autoscaler's latest word on one of ``pods``
    is that it adds a node for it; None otherwise (no word, or ``NotTriggerScaleUp``)."""
    words = nodes.autoscaler if nodes is not None else {}
    for p in pods:
        reason, message = words.get(observe.name(p), ("", ""))
        if reason in SCALING:
            return f"{reason}: {message}".rstrip(": ")
    return None


@dataclass(frozen=True)
class Finding:
    """Why the job's unplaced pods can never be placed as the cluster is: the ``message``
    (cause, nodes' offers, ranks, fix, what happens next), ``expired`` when the schedule
    timeout passed (the job fails), ``scaling`` when a node autoscaler adds a node (the job
    waits), and ``left``: seconds until the timeout (None when it does not run)."""

    message: str
    expired: bool
    scaling: bool
    left: Optional[float]


def timeout_seconds(spec: DistTrainingJobSpec) -> int:
    """``runPolicy.schedulingPolicy.scheduleTimeoutSeconds``, else the default."""
    return spec.run_policy.scheduling_policy.schedule_timeout_seconds or DEFAULT_TIMEOUT_SECONDS


def find(unplaced: list[tuple[int, Any, str]], nodes: Optional[NodeOffers], spec: DistTrainingJobSpec,
         now: datetime) -> Optional[Finding]:
    """For ``unplaced`` (``(rank, pod, scheduler's message)`` of the pods it cannot place):
    a Finding when some of them request a resource no node offers enough of, else None
    (they only wait for busy nodes, or the nodes are not known). Never raises."""
    found: dict[Shortage, list[int]] = {}
    pods: list[Any] = []
    for rank, pod, message in unplaced:
        short = shortages(pod, message, nodes)
        for s in short:
            found.setdefault(s, []).append(rank)
        if short:
            pods.append(pod)
    if not found:
        return None
    first = next(iter(found))
    items = [f"{s.clause()}: {_ranks(r)} cannot be placed" for s, r in found.items()]
    scale = scaling(pods, nodes)
    timeout = timeout_seconds(spec)
    if scale is not None:
        tail = f"a node autoscaler is adding a node ({scale}): the job waits for it"
        return Finding(_with_tail(items, [tail]), False, True, None)
    starts = [t for p in pods if (t := _unschedulable_since(p)) is not None]
    since = min(starts) if starts else now
    left = timeout - (now - since).total_seconds()
    knob = f"runPolicy.schedulingPolicy.scheduleTimeoutSeconds={timeout}"
    then = (f"no such node came within {knob}" if left <= 0 else
            f"the job fails at {cond.now_rfc3339(since + timedelta(seconds=timeout))} ({knob}) unless "
            "a node autoscaler adds such a node")
    return Finding(_with_tail(items, [first.fix(), then]), left <= 0, False, max(left, 0.0))


def _with_tail(causes: list[str], tail: list[str]) -> str:
    """``causes`` (one clause per resource) joined while they fit, ``+N more resource(s)
    no node offers`` for the rest, then ``tail`` (the fix, what happens next) whole: at most
    :data:`messages.LIMIT` characters, the tail kept before any cause but the first."""
    end = messages.SEP + messages.SEP.join(tail)
    room = messages.LIMIT - len(end)
    if room < messages.MIN_PART:  # a tail of huge resource names: keep what fits, in order
        return messages.join([*causes, *tail])
    sep = messages.SEP

    def more(k: int) -> str:
        return f"+{k} more resource(s) no node offers"

    reserve = len(sep) + len(more(len(causes) - 1)) if len(causes) > 1 else 0
    out = messages.cut(causes[0], room - reserve)
    for i, c in enumerate(causes[1:], 1):
        after = len(sep) + len(more(len(causes) - i - 1)) if i < len(causes) - 1 else 0
        if len(out) + len(sep) + len(c) + after > room:
            out += sep + more(len(causes) - i)
            break
        out += sep + c
    return out + end


def _ranks(ranks: list[int]) -> str:
    ranks = sorted(set(ranks))
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def autoscaler_word(events: list[Any]) -> Optional[tuple[str, str]]:
    """The latest ``(reason, message)`` of a node autoscaler among a pod's Events
    (``TriggeredScaleUp``, ``NotTriggerScaleUp``, Karpenter's ``Nominated``), by the
    Event's last time; None when there is none. Never raises."""
    best: Optional[tuple[datetime, str, str]] = None
    for e in events:
        e = _d(e)
        reason = e.get("reason")
        if reason not in SCALING and reason != NOT_SCALING:
            continue
        when = next((t for k in ("lastTimestamp", "eventTime", "firstTimestamp")
                     if (t := observe.parse_time(e.get(k))) is not None), None)
        when = when or observe.parse_time(_d(e.get("metadata")).get("creationTimestamp"))
        if when is None:
            continue
        if best is None or when >= best[0]:
            best = (when, str(reason), str(e.get("message") or "")[:200])
    return (best[1], best[2]) if best else None
