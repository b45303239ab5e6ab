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


# Extended resources (``nvidia.com/gpu``, ``example.com/foo``): what Kubernetes calls a
# resource name with a domain that is not ``kubernetes.io`` (apimachinery's
# IsExtendedResourceName). The Pod API never overcommits one: it must be set in limits,
# a request must equal its limit, and the amount must be whole. The same tests as CEL
# (the CRD's rules, :mod:`disttrain.api.containers`) and in Python, so both refuse alike.
def cel_extended(k: str) -> str:
    """CEL: whether the resource name ``k`` is an extended resource."""
    return f"({k}.contains('/') && !{k}.contains('kubernetes.io/') && !{k}.startsWith('requests.'))"


# A quantity string with a visible fraction: a plain decimal with a non-zero digit after
# the point ("0.5", "1.50"), or whole milli-units not a multiple of 1000 ("500m", "1500m").
# Other spellings of a fraction ("1.5k"? no: "1.0001k", "500u") are left to the apiserver,
# which refuses them when the pods are created (InvalidPodTemplate).
_DECIMAL_FRACTION = r"^[+]?[0-9]*[.][0-9]*[1-9][0-9]*$"
_MILLI = r"^[+]?[0-9]+m$"
_WHOLE_MILLI = r"(000m$)|(^[+]?0+m$)"


def cel_fractional(v: str) -> str:
    """CEL: whether the quantity ``v`` is written with a visible fraction."""
    return (f"(type({v}) == string && ({v}.matches('{_DECIMAL_FRACTION}') || "
            f"({v}.matches('{_MILLI}') && !{v}.matches('{_WHOLE_MILLI}'))))")


# An integer, or a string of at most 18 digits: amounts compared exactly (request == limit).
_PLAIN = r"^[0-9]{1,18}$"


def cel_plain(v: str) -> str:
    """CEL: whether the quantity ``v`` is an integer or a digits-only string."""
    return f"string({v}).matches('{_PLAIN}')"



def _search(pattern: str, text: str) -> bool:
    """RE2's unanchored search as CEL's ``matches`` does it (``$``: the end of the text)."""
    return re.search(pattern.replace("$", r"\Z"), text) is not None


def is_extended_resource(name: str) -> bool:
    """Whether ``name`` is an extended resource (a domain other than kubernetes.io)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def visibly_fractional(value: Any) -> bool:
    """Whether a quantity is written with a fraction :func:`cel_fractional` sees."""
    return isinstance(value, str) and (_search(_DECIMAL_FRACTION, value) or (
        _search(_MILLI, value) and not _search(_WHOLE_MILLI, value)))


def plain_amount(value: Any) -> Optional[int]:
    """The amount of an integer or a digits-only quantity (at most 18 digits), else None."""
    text = str(value) if type(value) is int or isinstance(value, str) else ""
    return int(text) if _search(_PLAIN, text) else None
