"""Whether a pod may land on a node (pure), as kube-scheduler's NodeAffinity and
TaintToleration filters decide it from the pod's spec and the node's labels and taints.

Used to weigh only the nodes a pod may use when it asks for a resource
(:mod:`disttrain.reconcile.policies.offers`): a GPU offered only by a node the template's
``nodeSelector``, required ``nodeAffinity`` or missing toleration rules out is as good as
no GPU, and the job must say so rather than wait for ever. The rules follow the API
reference: ``nodeSelector`` pairs all match; ``nodeSelectorTerms`` are ORed, a term's
``matchExpressions`` and ``matchFields`` ANDed, a term with neither matches nothing;
operators ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``, ``Lt`` (integers); a
``NoSchedule`` or ``NoExecute`` taint keeps out every pod without a toleration for it
(``PreferNoSchedule`` only steers). Anything malformed counts as no constraint: the
operator never rules a node out on a field it cannot read.
"""

from __future__ import annotations

from typing import Any, Optional

EXCLUDING_EFFECTS = ("NoSchedule", "NoExecute")


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list:
    return v if isinstance(v, list) else []


def _int(v: Any) -> Optional[int]:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


def expression_matches(expr: Any, values_of: dict[str, str]) -> bool:
    """One ``matchExpressions``/``matchFields`` item (``{key, operator, values}``) against
    ``values_of`` (label or field -> value). A malformed item matches (no constraint)."""
    e = _d(expr)
    key, op = e.get("key"), e.get("operator")
    if not isinstance(key, str) or not isinstance(op, str):
        return True
    values = [str(v) for v in _l(e.get("values"))]
    has, value = key in values_of, values_of.get(key)
    if op == "In":
        return has and value in values
    if op == "NotIn":
        return not has or value not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt"):
        mine, bound = _int(value), _int(values[0]) if len(values) == 1 else None
        if bound is None:
            return True
        return mine is not None and (mine > bound if op == "Gt" else mine < bound)
    return True


def _term_matches(term: Any, labels: dict[str, str], name: str) -> bool:
    t = _d(term)
    exprs, fields = _l(t.get("matchExpressions")), _l(t.get("matchFields"))
    if not exprs and not fields:
        return False  # an empty term matches no node
    return (all(expression_matches(e, labels) for e in exprs)
            and all(expression_matches(f, {"metadata.name": name}) for f in fields))


def _tolerates(tolerations: list, taint: dict) -> bool:
    key, value, effect = str(taint.get("key") or ""), str(taint.get("value") or ""), taint.get("effect")
    for tol in tolerations:
        t = _d(tol)
        if t.get("effect") not in (None, "", effect):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") == key and (op == "Exists" or str(t.get("value") or "") == value):
            return True
    return False


def excluded_by(pod_spec: Any, name: str, labels: Any, taints: Any) -> Optional[str]:
    """Why a pod of ``pod_spec`` may not land on node ``name`` with ``labels`` (label ->
    value) and ``taints`` (``[{key, value, effect}]``), as a short phrase:
    ``nodeSelector gpu=a100``, ``required nodeAffinity``, ``taint dedicated=ml:NoSchedule``;
    None when it may, as far as these tell. Never raises."""
    spec, labels = _d(pod_spec), {str(k): str(v) for k, v in _d(labels).items()}
    for k, v in _d(spec.get("nodeSelector")).items():
        if labels.get(str(k)) != str(v):
            return f"nodeSelector {k}={v}"
    required = _d(_d(_d(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms")
    if isinstance(terms, list) and terms and not any(_term_matches(t, labels, name) for t in terms):
        return "required nodeAffinity"
    tolerations = _l(spec.get("tolerations"))
    for taint in _l(taints):
        t = _d(taint)
        if t.get("effect") in EXCLUDING_EFFECTS and not _tolerates(tolerations, t):
            value = f"={t.get('value')}" if t.get("value") else ""
            return f"taint {t.get('key')}{value}:{t.get('effect')}"
    return None
