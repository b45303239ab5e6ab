"""How a training pod's rank ended, read from its containers (pure; untrusted input: any
field may be missing or of the wrong type, and nothing here raises for that).

A rank's work is its non-sidecar containers: the trainer and the plain init containers
before it (see :mod:`disttrain.api.trainer`). Sidecars, plain or native, never decide it:
a log shipper still running after the trainer exited 0 leaves the pod Running, and one
that exited 1 leaves it Failed, yet the rank succeeded. The exit code and termination
message are read from the container that ended the rank, never from a sidecar or proxy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api.trainer import is_native_sidecar


@dataclass(frozen=True)
class ContainerEnd:
    """A container that terminated: its name, exit code (None: not reported) and
    termination message ("" when none)."""

    container: str
    code: Optional[int]
    message: str


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _end(pod: Any, key: str, name: str) -> Optional[ContainerEnd]:
    """How container ``name`` (in status ``key``) terminated, or None while it has not."""
    for cs in _list(_dict(_dict(pod).get("status")).get(key)):
        cs = _dict(cs)
        if cs.get("name") != name:
            continue
        term = _dict(cs.get("state")).get("terminated")
        if not isinstance(term, dict):
            return None
        code = term.get("exitCode")
        msg = term.get("message")
        return ContainerEnd(name, code if isinstance(code, int) and not isinstance(code, bool) else None,
                            msg if isinstance(msg, str) else "")
    return None


def trainer_end(pod: Any, trainer: str) -> Optional[ContainerEnd]:
    """How the trainer container terminated, or None while it has not."""
    return _end(pod, "containerStatuses", trainer)


def done(pod: Any, trainer: str) -> bool:
    """The rank's work ended well: the trainer exited 0 (whatever its sidecars do), or the
    pod Succeeded."""
    end = trainer_end(pod, trainer)
    if end is not None:
        return end.code == 0
    return _dict(_dict(pod).get("status")).get("phase") == "Succeeded"


def failure(pod: Any, trainer: str) -> Optional[ContainerEnd]:
    """The non-sidecar container that ended the rank with a non-zero exit: a plain init
    container (the first, in order), else the trainer; None when none did."""
    spec = _dict(_dict(pod).get("spec"))
    for c in _list(spec.get("initContainers")):
        if isinstance(c, dict) and not is_native_sidecar(c) and isinstance(c.get("name"), str):
            end = _end(pod, "initContainerStatuses", c["name"])
            if end is not None and end.code != 0:
                return end
    end = trainer_end(pod, trainer)
    return end if end is not None and end.code != 0 else None
