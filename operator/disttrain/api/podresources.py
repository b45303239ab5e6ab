"""What a whole pod asks of its node, computed as the scheduler computes it (Kubernetes'
``resourcehelper.PodRequests``, overhead aside), so that the probe pod, a single container,
reserves on its node what the training pod (trainer, sidecars and init containers) will
need there. Pure; never raises for a pod spec as written.

Per resource: the sum over the containers and the native sidecars (init containers with
``restartPolicy: Always``), then the maximum with each plain init container in order (a
plain init container runs beside the native sidecars declared before it). A container's
request of a resource it only limits is that limit, as the apiserver defaults it.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any, Callable, Optional

from disttrain.api.quantity import parse_quantity
from disttrain.api.trainer import is_native_sidecar

# The resources Kubernetes lets a container ask for less of than its limit; every other one
# (extended resources such as nvidia.com/gpu, hugepages-*) must have request == limit.
OVERCOMMITTABLE = ("cpu", "memory", "ephemeral-storage")
_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))

Amounts = dict[str, Decimal]


def quantity(value: Any) -> Optional[Decimal]:
    """A quantity as written in a template: a string (``"500m"``, ``"4Gi"``), an integer, or
    a float (``cpu: 0.5`` as YAML reads it); None for anything else or a negative one."""
    if isinstance(value, float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            return None
        try:
            return Decimal(repr(value))
        except InvalidOperation:
            return None
    return parse_quantity(value)


def _section(container: Any, key: str) -> Amounts:
    res = container.get("resources") if isinstance(container, dict) else None
    section = res.get(key) if isinstance(res, dict) else None
    out: Amounts = {}
    for name, value in (section.items() if isinstance(section, dict) else ()):
        q = quantity(value)
        if isinstance(name, str) and q is not None:
            out[name] = q
    return out


def container_requests(container: Any) -> Amounts:
    """A container's requests, a resource it only limits requested at its limit."""
    return {**_section(container, "limits"), **_section(container, "requests")}


def container_limits(container: Any) -> Amounts:
    """A container's limits as written."""
    return _section(container, "limits")


def _add(total: Amounts, more: Amounts) -> None:
    for name, q in more.items():
        total[name] = total.get(name, Decimal(0)) + q


def _max(total: Amounts, other: Amounts) -> None:
    for name, q in other.items():
        total[name] = max(total.get(name, Decimal(0)), q)


def _containers(pod_spec: Any, key: str) -> list[dict[str, Any]]:
    items = pod_spec.get(key) if isinstance(pod_spec, dict) else None
    return [c for c in (items if isinstance(items, list) else []) if isinstance(c, dict)]


def effective(pod_spec: Any, amounts: Callable[[Any], Amounts]) -> Amounts:
    """The pod's ``amounts`` (:func:`container_requests` or :func:`container_limits`) per
    resource, the scheduler's way (see the module docstring)."""
    total: Amounts = {}
    for c in _containers(pod_spec, "containers"):
        _add(total, amounts(c))
    sidecars: Amounts = {}
    inits: Amounts = {}
    for c in _containers(pod_spec, "initContainers"):
        if is_native_sidecar(c):
            _add(total, amounts(c))
            _add(sidecars, amounts(c))
            _max(inits, sidecars)
        else:
            running = dict(sidecars)
            _add(running, amounts(c))
            _max(inits, running)
    _max(total, inits)
    return total


def format_quantity(q: Decimal, binary: bool = False) -> str:
    """``q`` as a canonical quantity string: an integer (with a binary suffix, ``Ki`` to
    ``Ei``, when ``binary`` and exact), else milli-, micro- or nano-units, rounded up to
    the nano-unit (Kubernetes' finest)."""
    if q == q.to_integral_value():
        n = int(q)
        for suffix, power in _BINARY if binary and n else ():
            if n % (1 << power) == 0:
                return f"{n >> power}{suffix}"
        return str(n)
    for suffix, scale in (("m", 3), ("u", 6)):
        scaled = q.scaleb(scale)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int(q.scaleb(9).to_integral_value(rounding=ROUND_CEILING))}n"


def _binary(name: str) -> bool:
    return name in ("memory", "ephemeral-storage") or name.startswith("hugepages-")


def pod_resources(pod_spec: Any) -> dict[str, dict[str, str]]:
    """The ``resources`` of one container that reserves what the pod ``pod_spec`` asks of
    its node: ``requests`` = the pod's effective requests; ``limits``: for cpu, memory and
    ephemeral-storage the pod's effective limit (at least the request) when every container
    and native sidecar limits it (else none: the pod is not bounded), for every other
    resource the request (Kubernetes wants them equal). Quantities as canonical strings;
    empty sections left out."""
    requests = effective(pod_spec, container_requests)
    limits = effective(pod_spec, container_limits)
    bounded = _containers(pod_spec, "containers") + [
        c for c in _containers(pod_spec, "initContainers") if is_native_sidecar(c)]
    out_limits: dict[str, str] = {}
    for name in sorted(set(requests) | set(limits)):
        if name not in OVERCOMMITTABLE:
            out_limits[name] = format_quantity(requests.get(name, limits.get(name, Decimal(0))), _binary(name))
        elif name in limits and all(name in container_limits(c) for c in bounded):
            out_limits[name] = format_quantity(max(limits[name], requests.get(name, Decimal(0))), _binary(name))
    out: dict[str, dict[str, str]] = {}
    reqs = {n: format_quantity(q, _binary(n)) for n, q in sorted(requests.items())}
    if reqs:
        out["requests"] = reqs
    if out_limits:
        out["limits"] = out_limits
    return out
