"""Kubernetes resource quantities (``500m``, ``4Gi``) as Decimals, and the GPUs
(``nvidia.com/gpu``) a container requests."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, Optional, Union

from disttrain.api.k8sbase import QUANTITY_PATTERN


_QUANTITY_SUFFIX: dict[str, Union[int, Decimal]] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(value: Any) -> Optional[Decimal]:
    """A Kubernetes quantity (``2``, ``"500m"``, ``"4Gi"``, ``"1e3"``) as a Decimal; None
    when ``value`` is not one (wrong type, bad text, exponent beyond 1e±30). Never raises."""
    if type(value) is int:
        return Decimal(value)
    if not isinstance(value, str) or not re.fullmatch(QUANTITY_PATTERN, value):
        return None
    m = re.fullmatch(r"\+?([0-9.]+)(?:([KMGTPE]i|[numkMGTPE])|[eE]([-+]?[0-9.]+))?", value)
    if not m:
        return None
    try:
        number = Decimal(m.group(1))
        if m.group(3) is not None:
            exponent = Decimal(m.group(3))
            if abs(exponent) > 30 or exponent != exponent.to_integral_value():
                return None
            return number.scaleb(int(exponent))
        return number * _QUANTITY_SUFFIX[m.group(2) or ""]
    except (InvalidOperation, ValueError):
        return None


def gpus_requested(container: Any) -> int:
    """GPUs (``nvidia.com/gpu``) a container asks for: limits, else requests; 0 if none, or
    if the value is not a whole number below 2**31 (Kubernetes refuses fractional GPUs).
    Takes any value (a container dict as written); never raises."""
    res = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(res, dict):
        return 0
    for key in ("limits", "requests"):
        section = res.get(key)
        if not isinstance(section, dict) or section.get("nvidia.com/gpu") is None:
            continue
        q = parse_quantity(section["nvidia.com/gpu"])
        if q is not None and q == q.to_integral_value() and 0 <= q < 2**31:
            return int(q)
    return 0
