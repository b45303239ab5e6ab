"""The typed status the policies read and write (disttrain/reconcile/jobstatus.py): its keys
are the CRD's, its reads never raise on what the repair keeps, its writes are the wire
format, and no policy goes around it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.reconcile import jobstatus
from disttrain.reconcile.jobstatus import JobStatus
from disttrain.reconcile.status_repair import repair

ROOT = Path(__file__).resolve().parents[4]
TS = "2026-11-30T12:00:00Z"


def _status_schema() -> dict:
    crd = yaml.safe_load((ROOT / "crds" / "disttrain.dev_disttrainingjobs.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


def test_every_key_is_a_field_of_the_crds_status():
    schema = _status_schema()
    where = {"status": schema,
             "status.nodes[]": schema["properties"]["nodes"]["items"],
             "status.probe": schema["properties"]["probe"],
             "status.rendezvous": schema["properties"]["rendezvous"],
             "status.progress": schema["properties"]["progress"]}
    assert set(jobstatus.KEYS) == set(where)
    for path, keys in jobstatus.KEYS.items():
        for key in keys:
            assert key in where[path]["properties"], (path, key)


def test_reads_of_an_empty_status_give_the_defaults_and_write_nothing_but_records():
    raw: dict = {}
    s = JobStatus(raw)
    assert (s.restarts, s.suspensions, s.start_time, s.completion_time) == (0, 0, None, None)
    assert s.name_conflict_since is None and not s.waiting_for_name and s.nodes == {}
    assert s.recorded_master is None and not s.has_probe_record()
    assert raw == {}
    assert s.probe.attempt is None and raw == {"probe": {}}


def test_writes_use_the_wire_names():
    raw: dict = {"rendezvous": {"socketIfname": "eth1"}}
    s = JobStatus(raw)
    s.restarts = 2
    s.suspensions += 1
    s.start_time = TS
    s.complete(TS)
    s.complete("2030-01-01T00:00:00Z")  # the first completion time stays
    s.name_conflict_since = TS
    s.rendezvous.record("j-0.j", 29500)  # an interface not given keeps its value
    s.probe.attempt = 3
    s.probe.start_time = TS
    s.probe.complete(TS)
    s.observe(4)
    s.set_phase("Running")
    assert raw == {"restarts": 2, "suspensions": 1, "startTime": TS, "completionTime": TS,
                   "nameConflictSince": TS,
                   "rendezvous": {"socketIfname": "eth1", "masterAddr": "j-0.j", "masterPort": 29500},
                   "probe": {"attempt": 3, "startTime": TS, "completionTime": TS},
                   "observedGeneration": 4, "phase": "Running"}
    s.rendezvous.record("j-0.j", 29500, None)  # given as None: written as null
    assert raw["rendezvous"]["socketIfname"] is None
    s.start_time = None
    s.name_conflict_since = None
    assert "startTime" not in raw and "nameConflictSince" not in raw and s.waiting_for_name is False
    s.new_probe_attempt(4)
    assert raw["probe"] == {"attempt": 4}


def test_probe_summary_takes_the_models_names_and_leaves_out_none():
    raw: dict = {}
    JobStatus(raw).set_probe_summary(attempt=1, bus_bandwidth_gbps=1.5, alg_bandwidth_gbps=None,
                                     phase_seconds={}, failures=None)
    assert raw["probe"] == {"attempt": 1, "busBandwidthGBps": 1.5, "phaseSeconds": {}}
    with pytest.raises(KeyError):
        JobStatus(raw).set_probe_summary(busbw=1.0)


def test_progress_takes_the_stall_verdicts_fields_under_the_wire_names():
    from disttrain.diagnosis.stall import judge
    from disttrain.diagnosis.stallfacts import RankObservation

    obs = [RankObservation(0, "node-a", "python", seq=9, seq_age_s=400, frame="a.py:1 (f)", heard_age_s=1),
           RankObservation(1, "node-b", "collective", seq=10, seq_age_s=400, waiting_op="all_reduce",
                           waiting_seq=10, heard_age_s=1)]
    raw: dict = {}
    JobStatus(raw).set_progress(**judge(obs, 2, 300, 1_000_000.0).status_fields())
    assert raw["progress"] == {"seq": 10, "summary": "#10 (RankStuckInPython: rank 0)",
                               "since": "1970-01-12T13:40:00Z", "ranks": [0], "nodes": ["node-a"]}
    with pytest.raises(KeyError):
        JobStatus(raw).set_progress(step=1)


def test_nodes_by_rank_skip_entries_without_an_integer_rank_and_the_later_wins():
    raw = {"nodes": [{"rank": 0, "name": "a"}, {"rank": "1", "name": "b"}, "junk",
                     {"rank": 0, "name": "c"}]}
    assert JobStatus(raw).nodes == {0: {"rank": 0, "name": "c"}}


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
                    max_leaves=12)
FIELD = st.sampled_from(["restarts", "suspensions", "startTime", "completionTime", "nameConflictSince",
                         "nodes", "probe", "rendezvous", "conditions", "phase"])


@settings(max_examples=300)
@given(st.dictionaries(FIELD, JSON | st.dictionaries(st.sampled_from(
    ["attempt", "startTime", "masterAddr", "masterPort", "rank"]), JSON, max_size=4), max_size=8))
def test_reads_of_any_repaired_status_are_typed_and_never_raise(raw):
    """A hand-edited status, as the step sees it after the repair: every read has its type."""
    s = JobStatus(repair(raw, TS))
    assert isinstance(s.restarts, int) and s.restarts >= 0
    assert isinstance(s.suspensions, int) and s.suspensions >= 0
    assert s.start_time is None or isinstance(s.start_time, str)
    assert s.completion_time is None or isinstance(s.completion_time, str)
    assert s.recorded_master is None or (isinstance(s.recorded_master, str) and s.recorded_master)
    assert all(isinstance(k, int) and isinstance(v, dict) for k, v in s.nodes.items())
    assert s.probe.attempt is None or (isinstance(s.probe.attempt, int) and s.probe.attempt >= 0)
    assert s.probe.start_time is None or isinstance(s.probe.start_time, str)
    assert isinstance(s.conditions, list)


# What a policy must not do: index the status by a string (s.status["restarts"],
# s.status.get("probe"), plan.status.setdefault(...)). The repair builds it from raw input;
# jobstatus.py is the typed access.
RAW_ACCESS = re.compile(r"""\bstatus(\[|\.(get|pop|setdefault|update)\()""")


def test_no_policy_indexes_the_status_by_a_string():
    core = ROOT / "operator" / "disttrain" / "reconcile"
    found = []
    for path in sorted(core.rglob("*.py")):
        if path.name in ("jobstatus.py", "status_repair.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if RAW_ACCESS.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_the_border_check_sees_a_raw_access():
    # the pattern above must match the forms the policies used before (issue 17's 47 accesses)
    for line in ('s.status["restarts"] = attempt + 1', 'old = s.status.get("probe") or {}',
                 'plan.status.setdefault("completionTime", ts)', 's.status.pop("startTime", None)'):
        assert RAW_ACCESS.search(line), line
    assert not RAW_ACCESS.search("s.st.restarts = attempt + 1")


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=5), st.lists(st.one_of(
    st.none(), st.integers(), st.text(max_size=8),
    st.dictionaries(st.sampled_from(["node", "reason", "restart", "x"]),
                    st.one_of(st.none(), st.integers(), st.text(max_size=8)), max_size=4)), max_size=40)),
       st.text(min_size=1, max_size=8))
def test_excluded_nodes_read_any_hand_edit_and_stay_bounded(raw, node):
    """status.excludedNodes as a hand edit may leave it: read without raising, only string
    node names, no duplicates, at most MOST_EXCLUDED; exclude() adds a node once and keeps
    the list bounded and well-formed."""
    st_ = JobStatus({"excludedNodes": raw, "restarts": 2})
    names = st_.excluded_nodes
    assert all(isinstance(n, str) and n for n in names) and len(names) == len(set(names))
    assert len(names) <= jobstatus.MOST_EXCLUDED
    added = st_.exclude(node, "RankUnresponsive")
    assert added == (node not in names)
    after = st_.excluded_nodes
    assert node in after and len(after) <= jobstatus.MOST_EXCLUDED
    assert st_.exclude(node, "RankUnresponsive") is False
    if added:  # rewritten well-formed, the new entry last
        assert all(isinstance(e, dict) and isinstance(e["node"], str) for e in st_.raw["excludedNodes"])
        assert st_.raw["excludedNodes"][-1] == {"node": node, "reason": "RankUnresponsive", "restart": 3}
