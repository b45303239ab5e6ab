"""The scale benchmark's pure parts (benchmarks/bench_scale.py): the planner table, the
request counter, /proc parsing, the scale job, the timeline milestones, the medians and the
report. No cluster, no timing."""
from __future__ import annotations

import json

import pytest
import yaml

from localcluster.common.config import REPO_ROOT
from tests.support.fixtures import load_benchmark

bs = load_benchmark("bench_scale")


def test_planner_rows_stay_constant_per_rank_beyond_the_full_mesh():
    from disttrain_probe.phases import connectivity as C

    rows = {r["ranks"]: r for r in bs.planner_rows([8, C.FULL_MESH_MAX, 64, 1024])}
    assert rows[8]["per_rank_max"] == 7 and rows[8]["full_mesh"] is True
    assert rows[8]["total_dials"] == 56 and rows[8]["pairs"] == rows[8]["full_mesh_pairs"] == 28
    big = rows[1024]
    assert big["full_mesh"] is False and big["per_rank_max"] <= 6  # ring +-1, +-2 and 2 pairings
    assert big["total_dials"] == 2 * big["pairs"] < big["full_mesh_pairs"]
    assert abs(big["per_rank_mean"] - rows[64]["per_rank_mean"]) < 0.1


def test_dispatched_sums_only_our_flow_schema():
    text = "\n".join([
        "# HELP apiserver_flowcontrol_dispatched_requests_total x",
        'apiserver_flowcontrol_dispatched_requests_total{flow_schema="bench-disttrain-operator",'
        'priority_level="workload-low"} 41',
        'apiserver_flowcontrol_dispatched_requests_total{flow_schema="bench-disttrain-operator",'
        'priority_level="other"} 1',
        'apiserver_flowcontrol_dispatched_requests_total{flow_schema="service-accounts",'
        'priority_level="workload-low"} 1000',
        'apiserver_flowcontrol_current_executing_requests{flow_schema="bench-disttrain-operator"} 5',
    ])
    assert bs.dispatched(text) == 42.0 and bs.dispatched("") == 0.0
    fs = bs.flow_schema()
    subj = fs["spec"]["rules"][0]["subjects"][0]
    assert subj["serviceAccount"] == {"namespace": "disttrain-system", "name": "disttrain-operator"}
    assert fs["metadata"]["name"] == bs.FLOW_SCHEMA
    assert fs["spec"]["priorityLevelConfiguration"]["name"] == "workload-low"


def test_proc_parsing():
    stat = "1234 (python -m disttrain_probe) S 1 2 3 4 5 6 7 8 9 10 150 50 20 30 20 0 1"
    assert bs.cpu_seconds(stat, 100) == pytest.approx(2.5)  # (150+50+20+30)/100
    with pytest.raises((ValueError, IndexError)):
        bs.cpu_seconds("garbage", 100)
    assert bs.peak_rss_bytes("Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t1 kB\n") == 200 * 2**20
    assert bs.peak_rss_bytes("Name: x\n") is None


def test_max_rate_uses_windows_of_half_a_second_or_more():
    assert bs.max_rate([]) == 0.0 and bs.max_rate([(0.0, 5.0)]) == 0.0
    samples = [(0.0, 0.0), (1.0, 10.0), (1.2, 500.0), (2.0, 30.0 + 500.0), (3.0, 540.0)]
    # 0 -> 1: 10/s; 1 -> 2 (1.2 is too close): 520/s; 2 -> 3: 10/s
    assert bs.max_rate(samples) == pytest.approx(520.0)


def test_job_documents_make_a_light_job_of_the_example():
    example = [d for d in yaml.safe_load_all((REPO_ROOT / "examples/ddp-digits.yaml").read_text()) if d]
    [job] = bs.job_documents(example, 16, probe=False, name="job-007", port=30007)
    spec = job["spec"]
    assert job["metadata"]["name"] == "job-007" and spec["numNodes"] == 16
    assert spec["launcher"] == "env" and spec["probe"]["enabled"] is False
    assert spec["probe"]["timeoutSeconds"] == 300
    assert spec["rendezvous"]["port"] == 30007
    c = spec["template"]["spec"]["containers"][0]
    assert c["command"] == ["sleep", "3"] and "volumeMounts" not in c
    assert "volumes" not in spec["template"]["spec"]
    assert example[1]["spec"]["numNodes"] == 2  # input untouched
    from disttrain.api.types import DistTrainingJobSpec
    DistTrainingJobSpec.model_validate(spec)  # the operator's own models accept it


def test_timeline_summary_takes_the_last_pod_for_all_and_first_for_first():
    ev = {"job": {"Validated": 4.0},
          "p-0": {"role": "probe", "created": 0.3, "scheduled": 0.4, "running": 1.0, "ended": 3.5},
          "p-1": {"role": "probe", "created": 0.35, "scheduled": 0.6, "running": 1.4, "ended": 3.6},
          "w-0": {"role": "worker", "created": 4.1, "scheduled": 4.2, "running": 4.9},
          "w-1": {"role": "worker", "created": 4.15, "scheduled": 4.3}}
    t = bs.timeline_summary(ev)
    assert (t["probe_created_first"], t["probe_scheduled_last"], t["probe_running_last"],
            t["probe_ended_last"], t["validated"]) == (0.3, 0.6, 1.4, 3.6, 4.0)
    assert t["worker_created_first"] == 4.1 and t["worker_created_last"] == 4.15
    assert t["worker_running_last"] is None  # w-1 never ran: not "all running"
    assert bs.timeline_summary({})["probe_created_first"] is None


def test_size_row_and_markdown():
    runs = [{"probe": True, "validated_s": 3.0, "running_s": 4.0, "phase": "Succeeded",
             "phase_seconds": {"inventory": 2.0, "rendezvous": 0.4}, "probe_duration_s": 2.9,
             "probe_cpu_total_s": 5.0, "probe_cpu_max_s": 2.6, "probe_wall_max_s": 3.0,
             "requests": 40},
            {"probe": False, "running_s": 0.5, "phase": "Succeeded", "requests": 12},
            {"probe": True, "validated_s": 5.0, "running_s": 6.0, "phase": "Succeeded",
             "phase_seconds": {"inventory": 3.0}, "requests": 44}]
    row = bs.size_row(2, runs, 150 * 2**20)
    assert row["running_on_s"] == 5.0 and row["running_off_s"] == 0.5
    assert row["overhead_s"] == pytest.approx(4.5) and row["overhead_ratio"] == pytest.approx(10.0)
    assert row["phase_seconds"] == {"inventory": 2.5, "rendezvous": 0.4}
    assert row["requests_on"] == 42 and row["requests_off"] == 12 and row["outcomes"] == ["Succeeded"]
    row["timeline_on"] = {"probe_created_first": 0.2, "validated": 4.0}
    row["timeline_off"] = {"worker_created_last": 0.1, "worker_running_last": 0.5}
    data = {"meta": {"date": "d", "cpus": 2, "machine": "m", "commit": "c", "instance": 4},
            "sizes": [row], "planner": bs.planner_rows([64]),
            "many": {"jobs": 10, "job_nodes": 2, "cluster_nodes": 2, "probe": False,
                     "all_done_s": 30.0, "outcomes": {"Succeeded": 10}, "requests_per_job": 21.5,
                     "max_rate": 80.0, "operator_peak_rss_bytes": 300 * 2**20, "retries": 0}}
    md = bs.markdown(data)
    assert "| 2 | 4.00 | 5.00 / 0.50 | +4.50 s (10.00x) | 2.90 | 5.00 / 2.60 | 3.00 | 42 / 12 | 150 | Succeeded |" in md
    assert "| nodes | inventory | rendezvous |" in md and "| 2 | 2.50 | 0.40 |" in md
    assert "| 2 | 0.20 | 4.00 | 0.10 | 0.50 |" in md
    assert "| 64 | 6 / 6.00 / 6 | 384 | 192 | 2016 |" in md
    assert "| 10 | 30.0 s | Succeeded 10 | 21.5 | 80 | 300 | 0 |" in md
    assert bs.markdown({"meta": {}, "planner": []}).startswith("# Scale")


def test_render_rewrites_the_markdown(tmp_path):
    (tmp_path / "scale.json").write_text(json.dumps({"meta": {"date": "x"},
                                                     "planner": bs.planner_rows([64])}))
    assert bs.main(["--render", "--out", str(tmp_path)]) == 0
    assert "| 64 |" in (tmp_path / "scale.md").read_text()
