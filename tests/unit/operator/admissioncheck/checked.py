"""A checked Workload at each point of its life, its shadow DistTrainingJob and the shadow's
probe pods (shared by the admission check controller's tests)."""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from disttrain.admissioncheck import decide as D
from disttrain.api import constants

from .workloads import pytorchjob

ROOT = Path(__file__).resolve().parents[4]
CHECK = "preflight"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
BORN = "2026-12-01T11:58:00Z"
NODES = ["node-a", "node-b", "node-c"]


def checked(state: str = "Pending", retry: int = 0, quota: bool = True, finished: bool = False,
            workers: int = 2, **kw: Any) -> dict:
    """A PyTorchJob's Workload (a master and ``workers``) with our check ``CHECK`` in ``state``."""
    wl = pytorchjob(workers=workers, admission=[{"name": "master", "flavors": {"cpu": "default"}},
                                                {"name": "worker", "flavors": {"cpu": "default"}}], **kw)
    wl["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True" if quota else "False"}]
    if finished:
        wl["status"]["conditions"].append({"type": "Finished", "status": "True"})
    entry: dict[str, Any] = {"name": CHECK, "state": state, "lastTransitionTime": BORN}
    if retry:
        entry["retryCount"] = retry
    wl["status"]["admissionChecks"] = [entry, {"name": "other-check", "state": "Pending"}]
    return wl


def seen(wl: Optional[dict], shadow: Optional[dict] = None, pods: tuple = (), labelled: tuple = (),
         **kw: Any) -> D.Seen:
    return D.Seen(wl, frozenset({CHECK}), NOW, shadow, tuple(pods), tuple(labelled), **kw)


def shadow_of(wl: dict, validated: Optional[str] = None, reason: str = "AllChecksPassed",
              message: str = "all checks passed", born: str = BORN, checks: Optional[dict] = None) -> dict:
    """The shadow job decide() creates for ``wl``, as the API returns it, with Validated
    ``validated`` (None: no condition yet) and check conditions ``checks`` (type -> (status, reason, message))."""
    body = D.decide(seen(wl)).create
    assert body is not None
    job = copy.deepcopy(body)
    job["metadata"].update(uid="shadow-uid", creationTimestamp=born)
    conds = []
    for ctype, (st, r, msg) in (checks or {}).items():
        conds.append({"type": ctype, "status": st, "reason": r, "message": msg})
    if validated is not None:
        conds.append({"type": constants.VALIDATED, "status": validated, "reason": reason, "message": message})
    job["status"] = {"conditions": conds}
    return job


def probe_pods(job: dict, ranks: Optional[list[int]] = None, attempt: int = 1) -> list[dict]:
    """The shadow's probe pods of ``ranks`` (all: every node of NODES), rank r on NODES[r]."""
    name = job["metadata"]["name"]
    out = []
    for r in range(len(NODES)) if ranks is None else ranks:
        out.append({"metadata": {"name": f"{name}-probe-{r}", "labels": {
            constants.LABEL_JOB: name, constants.LABEL_ROLE: constants.ROLE_PROBE,
            constants.LABEL_RANK: str(r), constants.LABEL_ATTEMPT: str(attempt)}},
            "spec": {"nodeName": NODES[r]}, "status": {"phase": "Succeeded"}})
    return out
