"""A pod set's topology assignment (Kueue's ``status.admission.podSetAssignments[].
topologyAssignment``) as a list of domains, each a node selector and the number of the pod
set's pods placed in it, in Kueue's order. Pure; untrusted input: a shape Kueue would not
write raises :class:`Unreadable` naming the field, for the parser to turn into a problem.

Two shapes, read as Kueue v0.17.0 serves them (``apis/kueue/v1beta2/workload_types.go``,
``apis/kueue/v1beta1/workload_types.go``):

- v1beta2 (the storage version): ``levels`` (the node label keys, one per topology level;
  only ``kubernetes.io/hostname`` when the topology has it) and ``slices[]``, each with
  ``domainCount``, ``valuesPerLevel[]`` (one per level: ``universal``, the one value of
  every domain of the slice, or ``individual`` with optional ``prefix``/``suffix`` and
  ``roots[]``, one per domain) and ``podCounts`` (``universal`` or ``individual[]``).
- v1beta1: ``levels`` and ``domains[]``, each ``values[]`` (one per level) and ``count``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_DOMAINS = 4096  # as many as a job has nodes (DistTrainingJob's numNodes limit)


class Unreadable(ValueError):
    """A field of the Workload the check cannot read: ``field`` its path, ``what`` why."""

    def __init__(self, field: str, what: str) -> None:
        super().__init__(f"{field}: {what}")
        self.field = field
        self.what = what


@dataclass(frozen=True)
class Domain:
    """One topology domain: the node selector of its level values, and how many of the pod
    set's pods Kueue placed in it."""

    selector: dict[str, str]
    count: int


def _str_list(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise Unreadable(field, "not a list of non-empty strings")
    return value


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Unreadable(field, "not a non-negative integer")
    return value


def _level_values(level: Any, n: int, field: str) -> list[str]:
    """The ``n`` values one ``valuesPerLevel`` entry gives its slice's domains."""
    if not isinstance(level, dict):
        raise Unreadable(field, "not an object")
    if isinstance(level.get("universal"), str) and level["universal"]:
        return [level["universal"]] * n
    ind = level.get("individual")
    if not isinstance(ind, dict):
        raise Unreadable(field, "neither universal nor individual")
    prefix, suffix = ind.get("prefix") or "", ind.get("suffix") or ""
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        raise Unreadable(f"{field}.individual", "prefix or suffix not a string")
    roots = _str_list(ind.get("roots"), f"{field}.individual.roots")
    if len(roots) != n:
        raise Unreadable(f"{field}.individual.roots", f"{len(roots)} roots for domainCount {n}")
    return [prefix + r + suffix for r in roots]


def _pod_counts(counts: Any, n: int, field: str) -> list[int]:
    if not isinstance(counts, dict):
        raise Unreadable(field, "not an object")
    if counts.get("universal") is not None:
        return [_count(counts["universal"], f"{field}.universal")] * n
    ind = counts.get("individual")
    if not isinstance(ind, list) or len(ind) != n:
        raise Unreadable(f"{field}.individual", f"not a list of {n} counts")
    return [_count(c, f"{field}.individual[{i}]") for i, c in enumerate(ind)]


def _slice(sl: Any, levels: list[str], field: str) -> list[Domain]:
    if not isinstance(sl, dict):
        raise Unreadable(field, "not an object")
    n = _count(sl.get("domainCount"), f"{field}.domainCount")
    if n > MAX_DOMAINS:
        raise Unreadable(f"{field}.domainCount", f"more than {MAX_DOMAINS} domains")
    per_level = sl.get("valuesPerLevel")
    if not isinstance(per_level, list) or len(per_level) != len(levels):
        raise Unreadable(f"{field}.valuesPerLevel", f"not one entry per level ({len(levels)})")
    values = [_level_values(lv, n, f"{field}.valuesPerLevel[{i}]") for i, lv in enumerate(per_level)]
    counts = _pod_counts(sl.get("podCounts"), n, f"{field}.podCounts")
    return [Domain({key: values[j][d] for j, key in enumerate(levels)}, counts[d]) for d in range(n)]


def domains(assignment: Any, field: str) -> list[Domain]:
    """The domains of ``assignment`` (either shape, see the module docstring), in order."""
    if not isinstance(assignment, dict):
        raise Unreadable(field, "not an object")
    levels = _str_list(assignment.get("levels"), f"{field}.levels")
    if "slices" in assignment:
        slices = assignment["slices"]
        if not isinstance(slices, list):
            raise Unreadable(f"{field}.slices", "not a list")
        out = [d for i, sl in enumerate(slices) for d in _slice(sl, levels, f"{field}.slices[{i}]")]
    else:
        raw = assignment.get("domains")
        if not isinstance(raw, list):
            raise Unreadable(f"{field}.domains", "not a list (neither slices nor domains)")
        out = []
        for i, dom in enumerate(raw):
            f = f"{field}.domains[{i}]"
            if not isinstance(dom, dict):
                raise Unreadable(f, "not an object")
            values = _str_list(dom.get("values"), f"{f}.values")
            if len(values) != len(levels):
                raise Unreadable(f"{f}.values", f"not one value per level ({len(levels)})")
            out.append(Domain(dict(zip(levels, values)), _count(dom.get("count"), f"{f}.count")))
    if len(out) > MAX_DOMAINS:
        raise Unreadable(field, f"more than {MAX_DOMAINS} domains")
    return out


def selector_of_pod(doms: list[Domain], index: int) -> dict[str, str]:
    """The node selector of the pod at ``index`` of its pod set: the domains taken in
    order, each for as many pods as its count ({} when the domains place fewer)."""
    seen = 0
    for d in doms:
        seen += d.count
        if index < seen:
            return dict(d.selector)
    return {}
