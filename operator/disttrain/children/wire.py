"""The wire form of the objects the operator creates (pure): quantities as strings.

A quantity in a pod template may be a JSON number (``cpu: 1``, ``nvidia.com/gpu: 1``): the
apiserver takes it and stores it as a string (``"1"``). The kubernetes client's models type
every quantity as a string (``Dict[str, StrictStr]``), so this module writes them the way
the apiserver would before the body leaves the operator: an integer as its digits, a float
(from a hand-made object; the CRD refuses one) as a plain decimal (``0.5`` -> ``"0.5"``).
Every other value is left exactly as built: int-or-string fields (``port``,
``maxUnavailable``) are valid either way, and the body is sent as JSON past the client's
models (:meth:`disttrain.shell.kube.Kube.create_pod`), so a field the client does not know
reaches the apiserver, which is the judge.

The quantity fields of a core/v1 Pod: each container's (containers, initContainers,
ephemeralContainers) ``resources.limits``/``requests``, the pod's ``resources`` and
``overhead``, an emptyDir's ``sizeLimit`` and an ephemeral volume's claim
``resources.limits``/``requests``.
"""
from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def quantity_text(value: Any) -> Any:
    """An int or float quantity as the string the apiserver stores; anything else as is
    (a bool is not a quantity: the apiserver refuses it, naming the field)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return value  # not a number JSON can carry: the sender refuses it
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _requirements(res: Any) -> None:
    if not isinstance(res, dict):
        return
    for key in ("limits", "requests"):
        section = res.get(key)
        if isinstance(section, dict):
            res[key] = {k: quantity_text(v) for k, v in section.items()}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def pod_body(pod: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``pod`` (a core/v1 Pod as a dict) with its quantities as strings (see
    the module docstring). Takes any shape; never raises."""
    out = copy.deepcopy(pod)
    spec = out.get("spec") if isinstance(out, dict) else None
    if not isinstance(spec, dict):
        return out
    for key in _CONTAINER_LISTS:
        for ctr in _list(spec.get(key)):
            if isinstance(ctr, dict):
                _requirements(ctr.get("resources"))
    _requirements(spec.get("resources"))
    if isinstance(spec.get("overhead"), dict):
        spec["overhead"] = {k: quantity_text(v) for k, v in spec["overhead"].items()}
    for vol in _list(spec.get("volumes")):
        if not isinstance(vol, dict):
            continue
        empty = vol.get("emptyDir")
        if isinstance(empty, dict) and "sizeLimit" in empty:
            empty["sizeLimit"] = quantity_text(empty["sizeLimit"])
        claim = ((vol.get("ephemeral") or {}).get("volumeClaimTemplate") or {}) \
            if isinstance(vol.get("ephemeral"), dict) else {}
        claim_spec = claim.get("spec") if isinstance(claim, dict) else None
        if isinstance(claim_spec, dict):
            _requirements(claim_spec.get("resources"))
    return out
