"""Generated probe reports: parse_report returns a model or raises ReportInvalid, nothing
else, and whatever it accepts serializes to strict JSON (no NaN/Infinity, valid UTF-8,
int64 integers, a boolean ``ok``).

The termination message of a probe pod is untrusted input (any container in the pod can
write it), so the generators cover arbitrary bytes and JSON values as well as near-valid
reports with one field at a time replaced by something hostile: NaN and Infinity,
integers beyond int64, lone surrogates written as JSON escapes, deep nesting, duplicate
keys, wrong types, and values of the right type no probe writes (negative bandwidths and
times, interface names NCCL_SOCKET_IFNAME cannot carry, a pass without its phase or master
block): a report the checks take as a pass must be one the probe could have written.
``make fuzz`` runs at least 10,000 examples (HYPOTHESIS_PROFILE=fuzz).
"""
from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from disttrain.diagnosis.report import MAX_REPORT_BYTES, ProbeReport, ReportInvalid, parse_report
from disttrain.diagnosis.trust import Expected, check

from ..support.fixtures import report
from .manifests import weighted

pytestmark = pytest.mark.fuzz

INT64 = (-(2**63), 2**63 - 1)

# JSON-ish scalars, including the ones a strict parser must refuse.
HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, 2**63 - 1, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udfffb", "true", "1", "NaN", "", "\x00"]),
)
JSONISH = st.recursive(
    HOSTILE_SCALARS,
    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=8), ch, max_size=4),
    max_leaves=12,
)


def _nested(depth: int, leaf) -> object:
    for i in range(depth):
        leaf = [leaf] if i % 2 else {"x": leaf}
    return leaf


FIELDS = [
    "v", "rank", "worldSize", "node", "pod", "hostname", "hostIp", "ok", "phase", "failure",
    "warnings", "versions", "master", "portRange", "portRangeAllowed", "interfaces", "chosen",
    "network", "rejected", "ncclDefaultIfname", "socketIfname", "backend", "allreduce",
    "timings", "mesh", "truncated", "localWorldSize", "intraNode", "localRanks", "final",
]
# Paths inside a valid report whose value a mutation replaces.
NESTED_PATHS = [
    ("allreduce", "busbwGBps"), ("allreduce", "algbwGBps"), ("allreduce", "bytes"),
    ("allreduce", "correct"), ("allreduce", "seconds"), ("versions", "gpus"),
    ("versions", "nccl"), ("master", "port"), ("master", "resolved"), ("failure", "reason"),
    ("timings", "rendezvous"), ("chosen", "ifname"), ("portRange", 0),
    ("intraNode", "correct"), ("intraNode", "busbwGBps"), ("localRanks", 0),
    ("intraNode", "seconds"), ("master", "addr"), ("master", "joined"),
]
# Values of the right JSON type that no probe measures or no interface is named: what the
# type checks let through and the report's own rules must refuse.
PLAUSIBLE_BAD = {
    "busbwGBps": st.sampled_from([-1.0, -0.0, -1e-300, -5]),
    "algbwGBps": st.sampled_from([-1.0, -1e-9, -3]),
    "seconds": st.sampled_from([-0.01, -1, -1e9]),
    "bytes": st.sampled_from([-4, -1]),
    "joined": st.just(False),  # a rank that never joined rank 0's store did not pass
    "ifname": st.one_of(st.sampled_from(["eth1}", "ethé", "e" * 16, "eth 1", "eth/1", "a,b", "^lo",
                                         "=eth1", "", ".", "..", "eth1\n", "eth\x00"]),
                        st.text(min_size=1, max_size=20)),
}


@st.composite
def near_valid_reports(draw) -> str:
    """A valid report (the unit fixtures' shape) with a few fields replaced by hostile
    values, serialized as the probe would (json.dumps, which writes NaN/Infinity and
    \\udXXX escapes when given them), sometimes with raw text edits on top."""
    ok = draw(st.booleans())
    body = report(
        draw(st.integers(0, 3)), draw(st.sampled_from(["node-a", "node-b"])), ok,
        failure=None if ok else {"reason": "MasterPortTimeout", "phase": "rendezvous", "message": "m"},
        busbw=draw(st.floats(0, 100)),
    )
    body.setdefault("allreduce", {"bytes": 4, "iterations": 1, "seconds": 0.1, "algbwGBps": 1.0,
                                  "busbwGBps": 1.0, "correct": True})
    body.setdefault("timings", {"rendezvous": 0.1})
    if draw(st.booleans()):  # a pod that ran several processes (localranks.py)
        n = draw(st.integers(2, 4))
        body["localWorldSize"] = n
        body["intraNode"] = dict(body["allreduce"] or {"bytes": 4, "correct": False})
        body["localRanks"] = [{"localRank": k, "ok": ok, "phase": "report", "busbwGBps": 1.0}
                              for k in range(n)]
    for _ in range(draw(weighted((1, st.just(0)), (3, st.integers(1, 3))))):
        kind = draw(st.sampled_from(["top", "nested", "deep", "drop", "surrogate"]))
        if kind == "surrogate":  # a string holding a lone surrogate (json.dumps escapes it)
            field = draw(st.sampled_from(["node", "hostname", "phase", "backend", "socketIfname"]))
            body[field] = draw(st.sampled_from(["\ud800", "eth\udfff", "\udc80\udc80"]))
        elif kind == "top":
            body[draw(st.sampled_from(FIELDS))] = draw(JSONISH)
        elif kind == "nested":
            path = draw(st.sampled_from(NESTED_PATHS))
            parent = body.get(path[0])
            if isinstance(parent, dict) and isinstance(path[1], str):
                bad = PLAUSIBLE_BAD.get(path[1])
                parent[path[1]] = draw(bad if bad is not None and draw(st.booleans()) else JSONISH)
            elif isinstance(parent, list) and isinstance(path[1], int) and parent:
                parent[0] = draw(JSONISH)
        elif kind == "deep":
            body[draw(st.sampled_from(FIELDS))] = _nested(draw(st.integers(5, 600)), draw(HOSTILE_SCALARS))
        else:  # a field left out; the ones a pass cannot do without, more often
            body.pop(draw(st.sampled_from(FIELDS + ["phase", "master", "allreduce", "chosen"] * 3)), None)
    try:
        text = json.dumps(body, allow_nan=True)
    except (ValueError, RecursionError):
        text = "{}"
    edit = draw(st.sampled_from(["none", "none", "dup-ok", "raw-token", "truncate"]))
    if edit == "dup-ok":  # duplicate key: json keeps the last one silently
        text = text[:-1] + ', "ok": ' + draw(st.sampled_from(['false', 'true', '"yes"'])) + "}"
    elif edit == "raw-token":
        token = draw(st.sampled_from(["NaN", "-Infinity", "Infinity", "1e400", "-1e400",
                                      "9223372036854775808", '"\\ud800"', '"\\udc00x"', "1.5e308"]))
        text = text.replace('"busbwGBps": ', '"busbwGBps": ' + token + ", \"_\": ", 1) \
            if '"busbwGBps": ' in text else text[:-1] + ', "rank": ' + token + "}"
    elif edit == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    return text


RAW = weighted(
    (8, near_valid_reports()),
    (1, JSONISH.map(lambda o: json.dumps(o, allow_nan=True))),
    (1, st.binary(max_size=200)),
    (1, st.text(max_size=200)),
    (1, st.integers(1, 5000).map(lambda d: "[" * d + "]" * d)),
    (1, st.integers(1, 3000).map(lambda d: '{"v": 1, "ok": true, "x": ' + '{"a": ' * d + "1" + "}" * d + "}")),
)


def _same_as_sent(raw, dumped, path="$"):
    """What the model kept is what the probe sent: no lax coercion ("true" -> True,
    1 -> True, "1" -> 1) changed a value on the way."""
    if isinstance(dumped, dict):
        assert isinstance(raw, dict), path
        for k, v in dumped.items():
            if k in raw:
                _same_as_sent(raw[k], v, f"{path}.{k}")
    elif isinstance(dumped, list):
        assert isinstance(raw, list) and len(raw) == len(dumped), path
        for i, (a, b) in enumerate(zip(raw, dumped)):
            _same_as_sent(a, b, f"{path}[{i}]")
    else:
        assert raw == dumped and isinstance(raw, bool) == isinstance(dumped, bool), (path, raw, dumped)
        assert isinstance(raw, str) == isinstance(dumped, str), (path, raw, dumped)


def _check_strict_json(obj, path="$"):
    """Every float finite, every int within int64, every string encodable as UTF-8."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, float):
        assert math.isfinite(obj), path
    elif isinstance(obj, int):
        assert INT64[0] <= obj <= INT64[1], path
    elif isinstance(obj, str):
        obj.encode("utf-8")
    elif isinstance(obj, list):
        for i, x in enumerate(obj):
            _check_strict_json(x, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, x in obj.items():
            k.encode("utf-8")
            _check_strict_json(x, f"{path}.{k}")


def _check_pass_is_plausible(rep):
    """A report the operator takes as a pass is one the probe could have written: in its
    last phase, with its master block (its port; not a rank that never joined, nor the
    pessimistic report), non-negative measurements and an interface name
    NCCL_SOCKET_IFNAME can carry."""
    assert rep.get("phase") == "report", rep.get("phase")
    assert isinstance(rep.get("master"), dict)
    port = rep["master"].get("port")
    assert isinstance(port, int) and not isinstance(port, bool), port
    assert rep["master"].get("joined") is not False and rep.get("final") is not False
    for block in ("allreduce", "intraNode"):
        for k, v in (rep.get(block) or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                assert v >= 0, (block, k, v)
    ifname = (rep.get("chosen") or {}).get("ifname")
    if ifname is not None:
        assert re.fullmatch(r"[A-Za-z0-9_.:-]{1,15}", ifname) and ifname not in (".", ".."), ifname


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(RAW)
def test_parse_report_is_total_and_accepted_reports_are_strict_json(raw):
    note(repr(raw)[:2000])
    try:
        rep = parse_report(raw)
    except ReportInvalid as e:
        assert str(e), "a ReportInvalid must say why"
        event("refused: " + re.sub(r"[0-9]+", "N", str(e))[:36])
        return
    event("accepted")
    assert isinstance(rep, ProbeReport)
    assert isinstance(rep.ok, bool)
    dumped = rep.model_dump(mode="json", by_alias=True)
    text = json.dumps(dumped, allow_nan=False)  # what the operator writes into status
    text.encode("utf-8")
    _check_strict_json(dumped)
    _same_as_sent(json.loads(raw), dumped)
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    assert len(data) <= MAX_REPORT_BYTES
    # whatever the parser accepts, the identity and consistency checks take without raising,
    # for another pod's report and for its own (its identity fields echoed: what is left to
    # decide a pass is its consistency)
    master = dumped.get("master") or {}
    own = Expected(rank=dumped.get("rank") or 0, world_size=dumped.get("worldSize") or 2,
                   job_uid=dumped.get("jobUid") or "uid-1", attempt=dumped.get("attempt") or 1,
                   pod=dumped.get("pod") or "p", node=dumped.get("node"), master_addr=None,
                   master_port=master.get("port") or 29500,
                   local_world_size=dumped.get("localWorldSize") or 1)
    other = Expected(rank=0, world_size=2, job_uid="uid-1", attempt=1, pod="p", node="node-a",
                     master_addr=None, master_port=29500, min_busbw_gbps=0.5)
    for exp in (own, other, Expected(**{**other.__dict__, "local_world_size": 2})):
        out = check(rep, exp)
        assert (out.report is None) != (out.error is None)
        if out.report is not None and out.report.ok is True:
            _check_pass_is_plausible(out.report.model_dump(mode="json", by_alias=True))


@pytest.mark.parametrize("raw,why", [
    ('{"v": 1, "ok": true, "allreduce": {"busbwGBps": NaN}}', "NaN"),
    ('{"v": 1, "ok": true, "allreduce": {"busbwGBps": Infinity}}', "Infinity"),
    ('{"v": 1, "ok": true, "allreduce": {"busbwGBps": 1e400}}', "finite"),
    ('{"v": 1, "ok": true, "rank": 9223372036854775808}', "int64"),
    ('{"v": 1, "ok": "true"}', "ok"),
    ('{"v": 1, "ok": 1}', "ok"),
    ('{"v": 1, "ok": true, "node": "\\ud800"}', "UTF-8"),
    ('{"v": 1, "ok": false, "ok": true}', "duplicate"),
    ('{"v": 1, "ok": true, "x": ' + "[" * 100 + "]" * 100 + "}", "nest"),
    ("[" * 2000 + "]" * 2000, "nest"),
    ('{"v": 1, "ok": true, "rank": "1"}', "rank"),
    ('{"v": true, "ok": true}', "version"),
])
def test_hostile_reports_are_refused_with_a_reason(raw, why):
    with pytest.raises(ReportInvalid) as exc:
        parse_report(raw)
    assert why.lower() in str(exc.value).lower(), str(exc.value)


def _with(path, value):
    body = report(1, "node-b")
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return json.dumps(body)


@pytest.mark.parametrize("path,value,named", [
    (("allreduce", "algbwGBps"), -1.0, "allreduce.algbwGBps"),
    (("allreduce", "busbwGBps"), -0.5, "allreduce.busbwGBps"),
    (("allreduce", "seconds"), -0.01, "allreduce.seconds"),
    (("allreduce", "bytes"), -4, "allreduce.bytes"),
    (("allreduce", "iterations"), -1, "allreduce.iterations"),
    (("chosen", "ifname"), "eth1}", "chosen.ifname"),
    (("chosen", "ifname"), "ethé", "chosen.ifname"),
    (("chosen", "ifname"), "e" * 16, "chosen.ifname"),
    (("chosen", "ifname"), "eth 1", "chosen.ifname"),
    (("chosen", "ifname"), "eth/1", "chosen.ifname"),
    (("chosen", "ifname"), "eth1,eth2", "chosen.ifname"),
    (("chosen", "ifname"), "^docker0", "chosen.ifname"),
    (("chosen", "ifname"), "", "chosen.ifname"),
    (("chosen", "ifname"), "..", "chosen.ifname"),
])
def test_a_report_with_an_impossible_measurement_or_interface_is_refused_naming_rank_and_field(
        path, value, named):
    with pytest.raises(ReportInvalid) as exc:
        parse_report(_with(path, value))
    msg = str(exc.value)
    assert "report of rank 1 " in msg and named in msg and len(msg) <= 400, msg


@pytest.mark.parametrize("ifname", ["eth0", "eth0:1", "br-3f2a.10", "e" * 15, "lxc_health", "ib0", "enp1s0f0"])
def test_real_interface_names_are_accepted(ifname):
    assert parse_report(_with(("chosen", "ifname"), ifname)).chosen.ifname == ifname


def test_a_valid_report_still_parses():
    rep = parse_report(json.dumps(report(1, "node-b")))
    assert rep.ok is True and rep.rank == 1 and rep.chosen.ifname == "eth1"
