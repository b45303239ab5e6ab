"""Repair a status written by hand or by an older operator (pure).

``status`` is the operator's memory between steps, but anyone with access to the status
subresource can write it, and an older operator may have written other shapes. Before a
step reads it, :func:`repair` keeps what is well formed and drops or coerces the rest, so a
step never crashes on it:

- a condition without a known ``status`` (True/False/Unknown) or without a ``type`` is
  dropped (it is written again on this visit); a duplicated type keeps its first entry;
  a missing reason/message/lastTransitionTime is filled in;
- ``restarts``, ``probe.attempt``, ``rendezvous.masterPort`` and ``nodes[].rank`` given as
  integer strings (``"1"``) become integers; anything else non-integer is dropped;
- times that are not strings are dropped (any RFC 3339 form, with fractional seconds or an
  offset, is read by :func:`disttrain.children.observe.parse_time`);
- a node entry without an integer ``rank`` is dropped; its other fields keep strings,
  finite numbers (``throughputMbps``, ``localRanks``, ...) and a ``paths`` map of strings;
- the exclusive outcome pair (``Succeeded``/``Failed``) is restored from the other
  conditions (:func:`restore_outcome`): a job that ended never becomes Pending again
  because a condition was removed or flipped.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from disttrain.api import constants
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary

_KNOWN = frozenset({"conditions", "restarts", "suspensions", "probe", "rendezvous", "nodes", "startTime",
                    "completionTime", "phase", "observedGeneration"})
_STR_FIELDS_PROBE = ("startTime", "completionTime", "backend")
_NUM_FIELDS_PROBE = ("durationSeconds", "algBandwidthGBps", "busBandwidthGBps")


def _int(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            return None
    return None


def _num(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _conditions(raw: Any, now: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for x in raw if isinstance(raw, list) else []:
        if not isinstance(x, dict):
            continue
        ctype, status = x.get("type"), x.get("status")
        if not isinstance(ctype, str) or not ctype or ctype in seen:
            continue
        if status not in (constants.TRUE, constants.FALSE, constants.UNKNOWN):
            continue
        seen.add(ctype)
        gen = _int(x.get("observedGeneration"))
        out.append({
            "type": ctype,
            "status": status,
            "reason": _str(x.get("reason")) or "Unknown",
            "message": _str(x.get("message")) or "",
            "lastTransitionTime": _str(x.get("lastTransitionTime")) or now,
            "observedGeneration": gen,
        })
    return out


def _nodes(raw: Any) -> list[dict[str, Any]]:
    out = []
    for x in raw if isinstance(raw, list) else []:
        if not isinstance(x, dict):
            continue
        rank = _int(x.get("rank"))
        if rank is None or rank < 0:
            continue
        node = {k: v for k, v in x.items()
                if isinstance(v, str) or v is None or _num(v) is not None}
        paths = x.get("paths")  # network -> one character per peer (NodeResult.paths)
        if isinstance(paths, dict):
            node["paths"] = {k: v for k, v in paths.items() if isinstance(k, str) and isinstance(v, str)}
        node["rank"] = rank
        node["name"] = _str(x.get("name")) or ""
        out.append(node)
    return out


def _probe(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    attempt = _int(raw.get("attempt"))
    if attempt is not None and attempt >= 0:
        out["attempt"] = attempt
    for k in _STR_FIELDS_PROBE:
        if _str(raw.get(k)) is not None:
            out[k] = raw[k]
    for k in _NUM_FIELDS_PROBE:
        if _num(raw.get(k)) is not None:
            out[k] = raw[k]
    size = _int(raw.get("messageSizeBytes"))
    if size is not None:
        out["messageSizeBytes"] = size
    phases = raw.get("phaseSeconds")
    if isinstance(phases, dict):
        out["phaseSeconds"] = {k: v for k, v in phases.items()
                               if isinstance(k, str) and _num(v) is not None}
    for k in ("failures", "warnings", "interfacesNotChosen"):
        items = raw.get(k)
        if isinstance(items, list):
            out[k] = [x for x in items if isinstance(x, str)]
    for k, v in raw.items():  # fields added by newer code (kept when JSON-clean scalars)
        if k not in out and isinstance(v, str):
            out[k] = v
    return out


def _rendezvous(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for k in ("masterAddr", "socketIfname"):
        if _str(raw.get(k)) is not None:
            out[k] = raw[k]
    port = _int(raw.get("masterPort"))
    if port is not None:
        out["masterPort"] = port
    return out


def _put(conds: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str,
         now: str) -> None:
    cond.set_condition(conds, ctype, Verdict(status, reason, cond.clip(message)), None, now)


def restore_outcome(conds: list[dict[str, Any]], now: str) -> None:
    """Make ``Succeeded``/``Failed`` exclusive again, in place, from what the conditions
    still say (only :meth:`disttrain.reconcile.step.Step.finish` and the preflight's failure write
    them, so each of these means the job ended):

    - both True (an edit): Failed wins, a success is never claimed from a contradiction;
    - one True, the other missing or not False: the other becomes False, same reason;
    - neither True, one False (its partner removed or set Unknown): the partner becomes
      True with that reason (Succeeded only from Failed=False AllRanksSucceeded);
    - neither, but ``Validated=False``: the preflight failed, so ``Failed=True`` with
      ``PreflightFailed`` (or the spec reason, InvalidSpec/InvalidPodTemplate);
    - otherwise the two are set together all the same: one missing gets the other's
      reason and message as Unknown (the job has not ended), both missing (other
      conditions left) become Unknown ``TrainingPending``; the next step writes them as
      the job stands (a finished training ends again from its pods).
    Never raises."""
    _restore_ended(conds, now)
    if not conds:
        return  # nothing at all: the step writes every condition afresh
    present = [x for x in (cond.get(conds, constants.SUCCEEDED), cond.get(conds, constants.FAILED)) if x]
    reason, message = ((present[0]["reason"], present[0].get("message") or "") if present
                       else (vocabulary.TRAINING_PENDING, "training has not started"))
    for ctype in (constants.SUCCEEDED, constants.FAILED):
        if cond.get(conds, ctype) is None:
            _put(conds, ctype, constants.UNKNOWN, reason, message, now)


def _restore_ended(conds: list[dict[str, Any]], now: str) -> None:
    """The rules of :func:`restore_outcome` for a job that ended."""
    def get(ctype: str) -> Optional[dict[str, Any]]:
        return cond.get(conds, ctype)

    def status(ctype: str) -> Optional[str]:
        x = get(ctype)
        return x["status"] if x else None

    failed = get(constants.FAILED)
    if status(constants.SUCCEEDED) == constants.TRUE and failed and failed["status"] == constants.TRUE:
        _put(conds, constants.SUCCEEDED, constants.FALSE, failed["reason"], "the job failed", now)
        return
    for win, lose in ((constants.SUCCEEDED, constants.FAILED), (constants.FAILED, constants.SUCCEEDED)):
        w, lo = get(win), get(lose)
        if w and w["status"] == constants.TRUE:
            if not lo or lo["status"] != constants.FALSE:
                outcome = "succeeded" if win == constants.SUCCEEDED else "failed"
                _put(conds, lose, constants.FALSE, w["reason"], f"the job {outcome}", now)
            return
    for win, lose in ((constants.FAILED, constants.SUCCEEDED), (constants.SUCCEEDED, constants.FAILED)):
        lo = get(lose)
        if win == constants.SUCCEEDED and (lo or {}).get("reason") != vocabulary.ALL_RANKS_SUCCEEDED:
            continue  # a success is restored only from its own reason
        if lo and lo["status"] == constants.FALSE:
            _put(conds, win, constants.TRUE, lo["reason"], (
                f"{lo['reason']}: restored from {lose}=False (this condition was missing from "
                f"the status); {lo.get('message') or ''}"), now)
            return
    v = get(constants.VALIDATED)
    if v and v["status"] == constants.FALSE:
        spec = v["reason"] in constants.SPEC_REASONS
        reason = v["reason"] if spec else vocabulary.PREFLIGHT_FAILED
        _put(conds, constants.FAILED, constants.TRUE, reason, v["message"] if spec else (
            f"preflight failed ({v['reason']}), no training pods were created: {v['message']}"), now)
        _put(conds, constants.SUCCEEDED, constants.FALSE, reason, "invalid spec" if spec else "preflight failed", now)


def repair(raw: Any, now: str) -> dict[str, Any]:
    """A well-formed copy of ``raw`` (the job's ``status``, any JSON value); ``now`` (RFC
    3339) fills a condition's missing lastTransitionTime. Never raises."""
    if not isinstance(raw, dict):
        raw = {}
    out: dict[str, Any] = {}
    out["conditions"] = _conditions(raw.get("conditions"), now)
    restore_outcome(out["conditions"], now)
    restarts = _int(raw.get("restarts"))
    out["restarts"] = restarts if restarts is not None and restarts >= 0 else 0
    suspensions = _int(raw.get("suspensions"))
    if suspensions is not None and suspensions >= 0:
        out["suspensions"] = suspensions
    out["probe"] = _probe(raw.get("probe"))
    out["rendezvous"] = _rendezvous(raw.get("rendezvous"))
    if "nodes" in raw:
        out["nodes"] = _nodes(raw.get("nodes"))
    for k in ("startTime", "completionTime", "phase"):
        if _str(raw.get(k)) is not None:
            out[k] = raw[k]
    gen = _int(raw.get("observedGeneration"))
    if gen is not None:
        out["observedGeneration"] = gen
    for k, v in raw.items():  # other fields (newer operators): kept when JSON-clean
        if k not in out and k not in _KNOWN and _json_clean(v):
            out[k] = v
    return out


def _json_clean(v: Any, depth: int = 0) -> bool:
    """True for JSON values without NaN/Infinity, at most 32 levels deep."""
    if depth > 32:
        return False
    if v is None or isinstance(v, (str, bool, int)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, list):
        return all(_json_clean(x, depth + 1) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _json_clean(x, depth + 1) for k, x in v.items())
    return False
