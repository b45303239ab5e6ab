"""Reading observed children (pure): what a pod or Service as the API returns it says.

Every function here takes a plain dict in the apiserver's camelCase form, as untrusted
input: any field may be missing, null or of the wrong type (a hand-edited object, an older
kubelet, a fake in a test), and none of them raises for that; they answer "unknown"
instead (None, ``"Pending"``, -1).

Ownership: a child is the job's only when its controller ownerReference carries the job's
UID (:func:`owned_by`). Pods labelled with the job's name but owned by another object, for
example by the deleted job that had the same name, are not the job's children: they are
never judged, never counted, and a name they hold is reported rather than taken.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime, timezone
from typing import Any, Optional

from disttrain.api import constants

TERMINAL_PHASES = ("Succeeded", "Failed")


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def meta(obj: Any) -> dict:
    """``metadata`` of an object ({} when absent or malformed)."""
    return _dict(_dict(obj).get("metadata"))


def name(obj: Any) -> str:
    """``metadata.name`` ("" when absent)."""
    n = meta(obj).get("name")
    return n if isinstance(n, str) else ""


def labels(obj: Any) -> dict:
    """``metadata.labels`` ({} when absent or malformed)."""
    return _dict(meta(obj).get("labels"))


def int_label(obj: Any, key: str, default: int = -1) -> int:
    """An integer label (e.g. node rank, attempt); ``default`` when missing or not an integer."""
    raw = labels(obj).get(key)
    if isinstance(raw, bool):
        return default
    try:
        return int(str(raw), 10)
    except (TypeError, ValueError):
        return default


def controller_ref(obj: Any) -> dict:
    """The object's controller ownerReference ({} when it has none)."""
    for ref in _list(meta(obj).get("ownerReferences")):
        if _dict(ref).get("controller") is True:
            return _dict(ref)
    return {}


def controller_uid(obj: Any) -> Optional[str]:
    """UID of the object's controller ownerReference, or None."""
    uid = controller_ref(obj).get("uid")
    return uid if isinstance(uid, str) else None


def controller_kind(obj: Any) -> Optional[str]:
    """``kind`` of the object's controller ownerReference, or None."""
    kind = controller_ref(obj).get("kind")
    return kind if isinstance(kind, str) else None


def owned_by(obj: Any, uid: str) -> bool:
    """True when ``obj``'s controller ownerReference is the object with ``uid``."""
    return bool(uid) and controller_uid(obj) == uid


def deleting(obj: Any) -> bool:
    """The object has a deletionTimestamp (it is going away)."""
    return bool(meta(obj).get("deletionTimestamp"))


def role(pod: Any) -> str:
    """The pod's role label: ``probe``, ``worker`` or ""."""
    r = labels(pod).get(constants.LABEL_ROLE)
    return r if isinstance(r, str) else ""


def status(pod: Any) -> dict:
    return _dict(_dict(pod).get("status"))


def phase(pod: Any) -> str:
    """Pod phase; Pending when absent or not a string."""
    p = status(pod).get("phase")
    return p if isinstance(p, str) and p else "Pending"


def finished(pod: Any) -> bool:
    return phase(pod) in TERMINAL_PHASES


def host_ip(pod: Any) -> Optional[str]:
    v = status(pod).get("hostIP")
    return v if isinstance(v, str) and v else None


def pod_ip(pod: Any) -> Optional[str]:
    v = status(pod).get("podIP")
    return v if isinstance(v, str) and v else None


def pod_ips(pod: Any, limit: int = 4) -> tuple[str, ...]:
    """The pod's addresses: ``status.podIPs[].ip`` (at most ``limit``), else ``podIP``;
    only strings that parse as IP addresses (a pod's status is untrusted input)."""
    out: list[str] = []
    entries = status(pod).get("podIPs")
    for e in entries[:limit] if isinstance(entries, list) else []:
        ip = _dict(e).get("ip")
        if isinstance(ip, str) and _is_ip(ip) and ip not in out:
            out.append(ip)
    one = pod_ip(pod)
    if not out and one and _is_ip(one):
        out.append(one)
    return tuple(out)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def node(pod: Any) -> Optional[str]:
    """``spec.nodeName`` or None while unscheduled."""
    v = _dict(_dict(pod).get("spec")).get("nodeName")
    return v if isinstance(v, str) and v else None


def _container_statuses(pod: Any, init: bool = False) -> list[dict]:
    key = "initContainerStatuses" if init else "containerStatuses"
    return [_dict(x) for x in _list(status(pod).get(key))]


def pod_condition(pod: Any, ctype: str) -> dict:
    """The pod's condition of type ``ctype`` (the first one), {} when it has none; entries
    that are not objects are skipped (a pod's status is untrusted input)."""
    for pc in _list(status(pod).get("conditions")):
        if isinstance(pc, dict) and pc.get("type") == ctype:
            return pc
    return {}


def unschedulable(pod: Any) -> Optional[str]:
    """The scheduler's message when PodScheduled is False for reason Unschedulable."""
    for pc in _list(status(pod).get("conditions")):
        pc = _dict(pc)
        if pc.get("type") == "PodScheduled" and pc.get("status") == constants.FALSE\
                and pc.get("reason") == "Unschedulable":
            msg = pc.get("message")
            return msg if isinstance(msg, str) and msg else "unschedulable"
    return None


PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")


# containerd's and the kubelet's wrappers around a pull error, each naming the image again
_PULL_WRAPPERS = re.compile(
    r'(rpc error: code = \w+ desc = |failed to pull and unpack image "[^"]*": |'
    r'failed to pull image "[^"]*": |failed to resolve reference "[^"]*": |'
    r'Back-off pulling image "[^"]*": )')


def pull_cause(message: str, keep: int = 160) -> str:
    """A runtime's pull error without the wrappers that repeat the image name, and, when
    longer than ``keep`` characters, its end (where the cause is: ``no such host``, ``not
    found``, ``unauthorized``) behind "...". Pure; never raises."""
    text = _PULL_WRAPPERS.sub("", str(message)).strip()
    return text if len(text) <= keep else "..." + text[-(keep - 3):].lstrip()


def image_pull_error(pod: Any) -> Optional[str]:
    """``<image>: <reason>: <cause>`` when a (init) container cannot get its image
    (:func:`pull_cause` of the kubelet's message)."""
    for cs in _container_statuses(pod, init=True) + _container_statuses(pod):
        waiting = _dict(_dict(cs.get("state")).get("waiting"))
        if waiting.get("reason") in PULL_ERRORS:
            return (f"{cs.get('image')}: {waiting.get('reason')}: "
                    f"{pull_cause(waiting.get('message') or '')}")
    return None


def terminated(pod: Any, container: str) -> Optional[dict]:
    """The ``state.terminated`` block of ``container``, or None while it has not ended."""
    for cs in _container_statuses(pod):
        if cs.get("name") == container:
            t = _dict(cs.get("state")).get("terminated")
            return t if isinstance(t, dict) else None
    return None


def termination_message(pod: Any, container: str) -> str:
    """The container's termination message ("" when none)."""
    msg = (terminated(pod, container) or {}).get("message")
    return msg if isinstance(msg, str) else ""


def exit_code(pod: Any, container: str) -> Optional[int]:
    code = (terminated(pod, container) or {}).get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def started_at(pod: Any, container: str) -> Optional[str]:
    """When ``container`` started (RFC 3339), running or already terminated; None before."""
    for cs in _container_statuses(pod):
        if cs.get("name") == container:
            st = _dict(cs.get("state"))
            when = _dict(st.get("running") or st.get("terminated")).get("startedAt")
            return when if isinstance(when, str) and when else None
    return None


def pod_start_time(pod: Any) -> Optional[datetime]:
    """``status.startTime``: when the pod reached its node."""
    return parse_time(status(pod).get("startTime"))


def scheduled_at(pod: Any) -> Optional[datetime]:
    """When the pod was bound to its node (PodScheduled=True's lastTransitionTime, else its
    creationTimestamp once it has a node); None while unscheduled."""
    if node(pod) is None:
        return None
    for pc in _list(status(pod).get("conditions")):
        pc = _dict(pc)
        if pc.get("type") == "PodScheduled" and pc.get("status") == constants.TRUE:
            when = parse_time(pc.get("lastTransitionTime"))
            if when is not None:
                return when
    return parse_time(meta(pod).get("creationTimestamp"))


def evicted(pod: Any) -> Optional[str]:
    """The kubelet's or the eviction API's message when the pod was evicted or preempted."""
    st = status(pod)
    if st.get("reason") in ("Evicted", "Preempting", "NodeLost", "Terminated"):
        msg = st.get("message")
        return f"{st.get('reason')}: {msg}" if isinstance(msg, str) and msg else str(st.get("reason"))
    for pc in _list(st.get("conditions")):
        pc = _dict(pc)
        if pc.get("type") == "DisruptionTarget" and pc.get("status") == constants.TRUE:
            return f"{pc.get('reason') or 'DisruptionTarget'}: {pc.get('message') or ''}".rstrip(": ")
    return None


def parse_time(ts: Any) -> Optional[datetime]:
    """An RFC 3339 time (``Z`` or an offset, with or without fractional seconds) as an aware
    UTC datetime; None for anything else (missing, garbage, a number)."""
    if not isinstance(ts, str) or not ts:
        return None
    text = ts.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)
