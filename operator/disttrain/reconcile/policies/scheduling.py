"""What the scheduler's "unschedulable" message means for a job (pure).

The scheduler explains a pod it cannot place in one counted sentence, e.g.
``0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match pod
anti-affinity rules. preemption: ...``. :func:`classify` reads it:

- ``not-enough-nodes``: the cluster has fewer nodes than ``numNodes`` (the one-per-node
  anti-affinity can never be met): fail at once (NotEnoughNodes);
- ``wait``: some node is only busy (Insufficient cpu/memory/GPU, its rendezvous hostPort
  taken by another job, too many pods): the pod will schedule when that frees up, so the
  job waits and says why (WaitingForResources), as a batch/v1 Job would; unless the nodes
  its own constraints leave are fewer than the ranks (``0/2 nodes are available: 1
  Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector`` for 2 ranks, one
  per node): then no capacity freed can place them, and it is ``unschedulable``;
- ``unschedulable``: the pod's own constraints exclude the nodes (node selector or
  affinity, untolerated taints, cordoned nodes, volume conflicts): fail at once
  (ProbeUnschedulable) with the scheduler's words and the fix;
- ``gang``: the pod waits for the rest of its gang ("minCount (2) cannot be satisfied: 0
  scheduled, 1 remaining", from the GangScheduling plugin): no verdict of its own; the other
  members' messages decide.
"""

from __future__ import annotations

import re
from typing import Optional

_TOTAL = re.compile(r"(\d+)/(\d+) nodes are available")
_ITEM = re.compile(r"(\d+) ([^,.]+)")
TRANSIENT = ("Insufficient ", "didn't have free ports", "Too many pods")
ANTI_AFFINITY = "didn't match pod anti-affinity rules"
NODE_SELECTOR = "didn't match Pod's node affinity/selector"


def reasons(message: str) -> list[tuple[int, str]]:
    """(count, reason) items of the scheduler's first sentence (before "preemption:")."""
    head = message.split("preemption:", 1)[0]
    _, _, tail = head.partition("nodes are available:")
    return [(int(n), r.strip()) for n, r in _ITEM.findall(tail)]


def total_nodes(message: str) -> Optional[int]:
    m = _TOTAL.search(message)
    return int(m.group(2)) if m else None


GANG = re.compile(r"minCount \(\d+\) cannot be satisfied")


def classify(message: str, num_nodes: int) -> str:
    """``not-enough-nodes``, ``wait``, ``unschedulable`` or ``gang`` (see the module
    docstring)."""
    if GANG.search(message) and "nodes are available" not in message:
        return "gang"
    total = total_nodes(message)
    if total is not None and total < num_nodes:
        return "not-enough-nodes"
    items = reasons(message)
    # the nodes the pod's own constraints rule out for good; each rank needs a node of its
    # own, so when the others are fewer than the ranks, no capacity freed can help
    ruled_out = sum(n for n, r in items if not any(t in r for t in TRANSIENT) and ANTI_AFFINITY not in r)
    if total is not None and ruled_out and total - ruled_out < num_nodes:
        return "unschedulable"
    if any(any(t in r for t in TRANSIENT) for _, r in items):
        return "wait"
    if items and all(ANTI_AFFINITY in r for _, r in items):
        return "not-enough-nodes"
    if not items and ANTI_AFFINITY in message:
        return "not-enough-nodes"
    return "unschedulable"


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def summarize(unschedulable: list[tuple[int, str]], num_nodes: int, each: int = 150) -> str:
    """The scheduler's words for several pods as one counted clause, causes first.

    ``unschedulable`` is ``[(rank, message), ...]``. Pods with the same message share one
    clause (``ranks 0, 1: 0/2 nodes are available: ...``); a pod only held by its gang is
    said once at the end (it is a consequence, not a cause); each message is cut before
    ``preemption:`` and to ``each`` characters. Never raises.
    """
    causes: dict[str, list[int]] = {}
    held: list[int] = []
    for rank, message in sorted(unschedulable):
        if classify(message, num_nodes) == "gang":
            held.append(rank)
            continue
        text = message.split("preemption:", 1)[0].strip().rstrip(".")
        if len(text) > each:
            text = text[: each - 3].rstrip(" ;,:") + "..."
        causes.setdefault(text, []).append(rank)
    parts = [f"{_ranks(ranks)}: {text}" for text, ranks in causes.items()]
    if held:
        parts.append(f"{_ranks(held)} held by the gang (all {num_nodes} or none)")
    return "; ".join(parts)


def _pairs(selector: object, most: int = 4, each: int = 60) -> str:
    """``k=v, k2=v2`` of a nodeSelector mapping (at most ``most`` pairs, each cut to
    ``each`` characters); "" when it is not a non-empty mapping."""
    if not isinstance(selector, dict):
        return ""
    pairs = [f"{k}={v}"[:each] for k, v in list(selector.items())[:most]]
    more = len(selector) - most
    return ", ".join(pairs) + (f" and {more} more" if more > 0 else "")


def _affinity_keys(pod_spec: dict, most: int = 4, each: int = 60) -> str:
    """The keys of the template's required nodeAffinity terms (``matchExpressions`` and
    ``matchFields``), ``a, b``; "" when it has none or its shape is not the API's."""
    node_aff = ((pod_spec.get("affinity") or {}) if isinstance(pod_spec.get("affinity"), dict) else {}).get("nodeAffinity")
    req = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_aff, dict) else None
    terms = req.get("nodeSelectorTerms") if isinstance(req, dict) else None
    keys: list[str] = []
    for term in terms if isinstance(terms, list) else []:
        for field in ("matchExpressions", "matchFields"):
            exprs = term.get(field) if isinstance(term, dict) else None
            for e in exprs if isinstance(exprs, list) else []:
                key = e.get("key") if isinstance(e, dict) else None
                if isinstance(key, str) and key and key[:each] not in keys:
                    keys.append(key[:each])
    return ", ".join(keys[:most]) + (f" and {len(keys) - most} more" if len(keys) > most else "")


def selector_fix(messages: list[str], pod_spec: object) -> Optional[str]:
    """The fix naming what the pods select nodes on, when a scheduler message in
    ``messages`` says the nodes "didn't match Pod's node affinity/selector": the template's
    ``spec.template.spec.nodeSelector`` pairs and/or its required nodeAffinity terms' keys,
    and to label a node or change the selector (the operator reads no node labels, so it
    does not claim which node lacks them). None when no message says so or the template
    (``pod_spec``, the template's ``spec`` mapping, any shape) selects on nothing. Never
    raises; at most about 300 characters."""
    if not any(NODE_SELECTOR in (m or "") for m in messages) or not isinstance(pod_spec, dict):
        return None
    pairs = _pairs(pod_spec.get("nodeSelector"))
    keys = _affinity_keys(pod_spec)
    said = []
    if pairs:
        said.append(f"spec.template.spec.nodeSelector {pairs}")
    if keys:
        said.append(f"required nodeAffinity on {keys} (spec.template.spec.affinity)")
    if not said:
        return None
    return (f"the pods select nodes by {' and '.join(said)}: label the nodes that should run "
            "the job to match, or change the selector")


def gang_held(unschedulable: list[tuple[int, str]], num_nodes: int) -> int:
    """How many of ``unschedulable`` (``[(rank, message)]``) are only held by their gang (the
    scheduler could place them once the rest fit)."""
    return sum(1 for _, m in unschedulable if classify(m, num_nodes) == "gang")
