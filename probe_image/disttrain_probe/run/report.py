"""The report: one JSON object per rank, compact camelCase, versioned, <= 4096 bytes.

The capped form goes to the Kubernetes termination message (DISTTRAIN_PROBE_REPORT_PATH,
default /dev/termination-log, which Kubernetes truncates at 4096 bytes); the full form
and a readable summary go to stdout. When the report does not fit, detail is dropped
in a fixed order (mesh detail first) and ``truncated`` is set; it never exceeds the cap.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.contract.report_format import MAX_REPORT_BYTES, REPORT_VERSION


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True, sort_keys=False)


def _cut(s: Any, n: int) -> Any:
    if isinstance(s, str) and len(s) > n:
        return s[: max(0, n - 3)] + "..."
    return s


def _drop(key: str) -> Callable[[Dict[str, Any]], None]:
    def f(r: Dict[str, Any]) -> None:
        r.pop(key, None)
    return f


def _msgs(key: str, n: int) -> Callable[[Dict[str, Any]], None]:
    def f(r: Dict[str, Any]) -> None:
        for x in r.get(key) or []:
            if isinstance(x, dict) and "message" in x:
                x["message"] = _cut(x["message"], n)
    return f


def _rejected_cap(n: int) -> Callable[[Dict[str, Any]], None]:
    def f(r: Dict[str, Any]) -> None:
        rej = r.get("rejected") or []
        # NoIPv4 rejections are the least informative: they go first.
        rej.sort(key=lambda x: x.get("reason") == vocabulary.REJ_NO_IPV4)
        r["rejected"] = rej[:n]
    return f


def _ifaces_v4_only(r: Dict[str, Any]) -> None:
    for i in r.get("interfaces") or []:
        i["addrs"] = [a for a in i.get("addrs") or [] if ":" not in a]


def _ifaces_cap(n: int) -> Callable[[Dict[str, Any]], None]:
    def f(r: Dict[str, Any]) -> None:
        ifs = r.get("interfaces") or []
        keep = {(r.get("chosen") or {}).get("ifname"), r.get("ncclDefaultIfname")}
        keep |= {x.get("ifname") for x in r.get("rejected") or []}
        ranked = sorted(ifs, key=lambda i: (i.get("name") not in keep, not i.get("addrs")))
        names = {i.get("name") for i in ranked[:n]}
        r["interfaces"] = [i for i in ifs if i.get("name") in names]
    return f


def _failure_cut(n: int) -> Callable[[Dict[str, Any]], None]:
    def f(r: Dict[str, Any]) -> None:
        if isinstance(r.get("failure"), dict):
            r["failure"]["message"] = _cut(r["failure"].get("message"), n)
    return f


def _paths_cap(n: int) -> Callable[[Dict[str, Any]], None]:
    """Keep ``n`` rows of ``paths``: the chosen network's first, then those with a failed
    cell (the evidence), then the rest, by key."""
    def f(r: Dict[str, Any]) -> None:
        p = r.get("paths")
        if not isinstance(p, dict) or len(p) <= n:
            return
        subnet = (r.get("chosen") or {}).get("subnet") if isinstance(r.get("chosen"), dict) else None
        ifname = (r.get("chosen") or {}).get("ifname") if isinstance(r.get("chosen"), dict) else None

        def rank(k: str):
            row = str(p[k])
            return (k not in (subnet, f"ifname:{ifname}"), all(c in ".-o" for c in row), k)
        r["paths"] = {k: p[k] for k in sorted(p, key=rank)[:n]}
    return f


def _warnings_cap(n: int) -> Callable[[Dict[str, Any]], None]:
    def f(r: Dict[str, Any]) -> None:
        r["warnings"] = (r.get("warnings") or [])[:n]
    return f


def _local_msgs(n: int) -> Callable[[Dict[str, Any]], None]:
    """Cut the local ranks' failure messages to ``n`` characters."""
    def f(r: Dict[str, Any]) -> None:
        for e in r.get("localRanks") or []:
            if isinstance(e, dict) and isinstance(e.get("failure"), dict):
                e["failure"]["message"] = _cut(e["failure"].get("message"), n)
            if isinstance(e, dict):
                e.pop("note", None)
    return f


def _local_slim(r: Dict[str, Any]) -> None:
    """Passing local ranks keep only their rank, verdict and bandwidths."""
    for e in r.get("localRanks") or []:
        if isinstance(e, dict) and e.get("ok") is True:
            for k in ("device", "phase"):
                e.pop(k, None)


def _local_failing_only(r: Dict[str, Any]) -> None:
    """Only the local ranks that did not pass (``localWorldSize`` still says how many ran)."""
    if isinstance(r.get("localRanks"), list):
        r["localRanks"] = [e for e in r["localRanks"] if isinstance(e, dict) and e.get("ok") is not True]


STEPS: List[Callable[[Dict[str, Any]], None]] = [
    _drop("mesh"),
    _drop("env"),
    _drop("listenErrors"),
    _drop("hostResolves"),
    _local_msgs(300),
    _msgs("rejected", 160),
    _msgs("warnings", 300),
    _ifaces_v4_only,
    _rejected_cap(12),
    _msgs("rejected", 60),
    _drop("ncclBootstrap"),
    _local_slim,
    _paths_cap(16),
    _ifaces_cap(16),
    _msgs("warnings", 160),
    _failure_cut(600),
    _ifaces_cap(6),
    _drop("pathMbpsLow"),
    _drop("pathMbps"),
    _local_msgs(120),
    _paths_cap(8),
    _rejected_cap(4),
    _msgs("rejected", 0),
    _warnings_cap(4),
    _failure_cut(300),
    _msgs("warnings", 80),
    _local_failing_only,
]

ESSENTIAL = ("v", "rank", "worldSize", "node", "hostname", "ok", "phase", "failure", "warnings",
             "versions", "master", "chosen", "backend", "allreduce", "ncclDefaultIfname", "paths",
             "settings", "localWorldSize", "intraNode", "localRanks", "final")


def cap(report: Dict[str, Any], limit: int = MAX_REPORT_BYTES) -> Tuple[str, bool]:
    """Compact JSON of ``report`` within ``limit`` bytes; returns (text, truncated)."""
    text = dumps(report)
    if len(text) <= limit:
        return text, False
    r = copy.deepcopy(report)
    r["truncated"] = True
    for step in STEPS:
        step(r)
        text = dumps(r)
        if len(text) <= limit:
            return text, True
    # Last resort: only the essentials, then shrink whatever is still too long.
    r = {k: r.get(k) for k in ESSENTIAL if k in r}
    r["truncated"] = True
    if isinstance(r.get("master"), dict):  # e.g. a name with hundreds of addresses
        r["master"] = dict(r["master"], resolved=(r["master"].get("resolved") or [])[:4])
    for n in (200, 100, 40):
        _paths_cap(8 if n == 200 else 2)(r)
        _failure_cut(n)(r)
        _msgs("warnings", n)(r)
        _local_msgs(n)(r)
        if n == 40:
            _local_failing_only(r)
        r["warnings"] = (r.get("warnings") or [])[:2]
        text = dumps(r)
        if len(text) <= limit:
            return text, True
    # What the operator cannot do without: the verdict, and for a pass the interface the
    # training pod must use and the master it reached.
    chosen = v if isinstance(v := r.get("chosen"), dict) else {}
    master = v if isinstance(v := r.get("master"), dict) else {}
    kept_master = {k: master.get(k) for k in ("addr", "port") if master.get(k)}
    if isinstance(master.get("joined"), bool):  # False too: the operator reads it
        kept_master["joined"] = master["joined"]
    keep = {"v": r.get("v", REPORT_VERSION), "rank": r.get("rank"), "worldSize": r.get("worldSize"),
            "jobUid": _cut(r.get("jobUid"), 63), "attempt": r.get("attempt"),
            "pod": _cut(r.get("pod"), 253), "node": _cut(r.get("node"), 63), "ok": r.get("ok"), "phase": r.get("phase"),
            "failure": r.get("failure"), "warnings": [], "truncated": True,
            "chosen": {k: _cut(chosen.get(k), 63) for k in ("ifname", "addr", "subnet") if chosen.get(k)}
            or None,
            "master": kept_master or None}
    if r.get("final") is False:  # the pessimistic report written before a phase
        keep["final"] = False
    if r.get("localWorldSize") is not None:  # several processes per node: how many, which failed
        keep["localWorldSize"] = r.get("localWorldSize")
        keep["localRanks"] = [{"localRank": e.get("localRank"), "ok": False,
                               "failure": {"reason": (e.get("failure") or {}).get("reason")}}
                              for e in r.get("localRanks") or []
                              if isinstance(e, dict) and e.get("ok") is not True][:4]
    _failure_cut(40)(keep)
    text = dumps(keep)
    if len(text) > limit:  # absurd inputs (a 4 KiB node name): keep the verdict only
        text = dumps({"v": REPORT_VERSION, "ok": bool(r.get("ok")), "truncated": True})
    return text, True


def write(path: str, text: str, atomic: bool = False) -> Optional[str]:
    """Write the capped report; returns an error string instead of raising. ``atomic`` (in
    place, ground/config.py): into a temporary file of the same folder, then renamed over
    ``path``, so a reader that waits for the file (the relay, run/relay.py) never reads it
    half written; where that cannot be done (``path`` is a mounted file, its folder is not
    writable) it is written in place as by default. Not by default: /dev/termination-log is
    a file mounted over /dev, where a rename over it fails."""
    try:
        d = os.path.dirname(path)
        if d and not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
        if atomic:
            try:
                _replace(path, text)
                return None
            except OSError:
                pass  # a report written in place beats none
        with open(path, "w") as f:
            f.write(text)
            f.flush()
        return None
    except OSError as e:
        return str(e)


def _replace(path: str, text: str) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``. Raises
    OSError (the temporary file is removed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
        os.chmod(tmp, 0o644)  # as open() makes it: a reader in another container may run as another user
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def summary(r: Dict[str, Any]) -> str:
    """A few human-readable lines for the pod log."""
    lines = []
    verdict = "PASS" if r.get("ok") else "FAIL"
    lines.append(f"disttrain-probe {verdict}: rank {r.get('rank')}/{r.get('worldSize')} on "
                 f"{r.get('node')} (phase {r.get('phase')}, backend {r.get('backend')})")
    f = r.get("failure")
    if f:
        lines.append(f"  failure {f.get('reason')} in {f.get('phase')}: {f.get('message')}")
    m = r.get("master") or {}
    lines.append(f"  master {m.get('addr')}:{m.get('port')} -> {', '.join(m.get('resolved') or []) or '?'}"
                 f" route {m.get('route')}")
    v = r.get("versions") or {}
    if v:
        lines.append(f"  versions torch {v.get('torch')}, CUDA {v.get('cuda')}, NCCL {v.get('nccl')}"
                     + (f" ({v.get('ncclLib')}; torch built with {v.get('ncclBuild')})"
                        if v.get("ncclLib") else ""))
    c = r.get("chosen")
    if c:
        lines.append(f"  chosen {c.get('ifname')} {c.get('addr')} on {c.get('subnet')}"
                     f" (NCCL default would be {r.get('ncclDefaultIfname')})")
    measured = [f"{i.get('name')} {i.get('measuredMbps')}" for i in r.get("interfaces") or []
                if i.get("measuredMbps") is not None]
    if measured:
        lines.append(f"  measured Mb/s: {', '.join(measured)}")
    for x in r.get("rejected") or []:
        if x.get("reason") != vocabulary.REJ_NO_IPV4:
            lines.append(f"  rejected {x.get('ifname')}: {x.get('reason')}: {x.get('message')}")
    a = r.get("allreduce")
    if a and a.get("seconds") is not None:
        lines.append(f"  all-reduce {a.get('bytes')} B x {a.get('iterations')} in {a.get('seconds')}s: "
                     f"algbw {a.get('algbwGBps')} GB/s, busbw {a.get('busbwGBps')} GB/s, "
                     f"correct={a.get('correct')}")
    if r.get("localWorldSize") is not None:
        i = r.get("intraNode") or {}
        ranks = [e for e in r.get("localRanks") or [] if isinstance(e, dict)]
        passed = sum(1 for e in ranks if e.get("ok") is True)
        lines.append(f"  local ranks: {passed}/{r.get('localWorldSize')} passed"
                     + (f"; intra-node all-reduce busbw {i.get('busbwGBps')} GB/s, correct="
                        f"{i.get('correct')}" if i else ""))
        for e in ranks:
            f = e.get("failure")
            if f:
                lines.append(f"  local rank {e.get('localRank')} {f.get('reason')} in "
                             f"{f.get('phase')}: {f.get('message')}")
    for w in r.get("warnings") or []:
        lines.append(f"  warning {w.get('reason')}: {w.get('message')}")
    lines.append(f"  timings {r.get('timings')}")
    return "\n".join(lines)


def emit(report: Dict[str, Any], path: Optional[str], stream: Any = None,
         atomic: bool = False, limit: int = MAX_REPORT_BYTES) -> Tuple[str, bool]:
    """Write the report capped to ``limit`` bytes (the pod's termination message budget,
    contract/report_format.py) to ``path`` (``atomic``: see :func:`write`) and the summary +
    full JSON to stdout.

    The last stdout line is the full report as one JSON object.
    """
    text, truncated = cap(report, limit)
    err = write(path, text, atomic) if path else None
    out = stream or sys.stdout
    try:
        out.write(summary(report) + "\n")
        if err:
            out.write(f"  (could not write report to {path}: {err})\n")
        out.write(dumps(report) + "\n")
        out.flush()
    except Exception:
        pass
    return text, truncated
