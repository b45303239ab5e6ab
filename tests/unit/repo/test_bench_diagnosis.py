"""The time-to-diagnosis benchmark's pure parts (benchmarks/bench_diagnosis.py): which
scenarios it measures, the plain job's documents, when a plain job or a PyTorchJob has
ended, what their users see, the ratio and the verdict against the issue's 20x goal, and
the report with its PyTorchJob section. No cluster, no timing."""
from __future__ import annotations

import json
import textwrap

import pytest

from localcluster.scenarios import loader
from tests.support.fixtures import load_benchmark

bd = load_benchmark("bench_diagnosis")


def _pod(name, phase="Running", state=None, sched=None):
    st = {"phase": phase, "containerStatuses": [{"name": "trainer", "state": state or {"running": {}}}]}
    if sched:
        st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": sched}]
        st["containerStatuses"] = []
    return {"metadata": {"name": name}, "status": st}


def test_failing_scenarios_are_discovered_from_the_folder_not_a_list(tmp_path, monkeypatch):
    (tmp_path / "zz-new-fault.yaml").write_text(textwrap.dedent("""\
        description: a scenario someone adds later
        expect: {condition: MasterReachable, status: "False", reason: MasterAddrUnresolvable}
        """))
    (tmp_path / "fine.yaml").write_text("description: ok\nexpect: {status: 'True', phase: Succeeded}\n")
    monkeypatch.setattr(loader, "SCENARIO_DIR", tmp_path)
    got = bd.failing_scenarios(loader.all_names())
    assert [s.name for s in got] == ["zz-new-fault"]
    with pytest.raises(ValueError, match="not a failing scenario: fine"):
        bd.failing_scenarios(loader.all_names(), ["fine"])


def test_every_checked_in_failing_scenario_is_measured():
    names = [s.name for s in bd.failing_scenarios(loader.all_names())]
    expected = sorted(n for n in loader.all_names() if loader.load(n).expect.status == "False")
    assert names == expected and "firewall-master-drop" in names and "healthy" not in names
    only = bd.failing_scenarios(loader.all_names(), ["firewall-master-reject"])
    assert [s.name for s in only] == ["firewall-master-reject"]


def test_plain_documents_turn_probes_off_and_keep_the_rest():
    sc = loader.load("ifname-missing")
    docs = loader.job_documents(sc)
    plain = bd.plain_documents(docs)
    job = next(d for d in plain if d.get("kind") == "DistTrainingJob")
    assert job["spec"]["probe"]["enabled"] is False
    assert job["spec"]["network"]["socketIfname"] == "eth2"  # the user's setting stays
    orig = next(d for d in docs if d.get("kind") == "DistTrainingJob")
    assert orig["spec"]["probe"].get("enabled", True) is True  # input untouched
    assert [d["kind"] for d in plain] == [d["kind"] for d in docs]


def test_plain_verdict():
    running = [_pod("w-0"), _pod("w-1")]
    assert bd.plain_verdict({"status": {"phase": "Running"}}, running) is None
    assert bd.plain_verdict(None, [_pod("w-0", "Pending", sched="0/2 nodes")]) is None
    crashed = _pod("w-1", "Running", {"terminated": {"exitCode": 1, "reason": "Error"}})
    assert bd.plain_verdict({"status": {"phase": "Running"}}, [running[0], crashed]) == "failed"
    assert bd.plain_verdict({}, [_pod("w-1", "Failed")]) == "failed"
    assert bd.plain_verdict({"status": {"phase": "Failed"}}, []) == "failed"
    done = _pod("w-0", "Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}})
    assert bd.plain_verdict({"status": {"phase": "Succeeded"}}, [done]) == "succeeded"
    assert bd.plain_verdict({"status": {"phase": "Running"}}, [done]) is None


def test_pod_summary_says_what_a_user_reads():
    s = bd.pod_summary(_pod("w-1", "Failed", {"terminated": {"exitCode": 1, "reason": "Error"}}),
                       "RuntimeError: Unable to find address for: eth2")
    assert s == ('w-1 Failed, terminated exit 1 (Error), '
                 'log: "RuntimeError: Unable to find address for: eth2"')
    p = bd.pod_summary(_pod("w-2", "Pending", sched="0/2 nodes are available"))
    assert p == "w-2 Pending, Unschedulable: 0/2 nodes are available"


def test_ratio_and_assessment():
    assert bd.ratio(10.0, 300.0) == pytest.approx(30.0)
    assert bd.ratio(None, 300.0) is None and bd.ratio(0.0, 5.0) is None
    assert bd.ratio_text(10.0, 300.0, "capped") == ">= 30.0x"
    assert bd.ratio_text(10.0, 5.0, "failed") == "0.5x"
    assert bd.ratio_text(10.0, 50.0, "succeeded") == "n/a"
    assert bd.assess(10.0, 300.0, "capped") == "met"
    assert bd.assess(10.0, 150.0, "capped") == "capped below goal"  # the cap was too short to show 20x
    assert bd.assess(10.0, 8.0, "failed") == "plain fails sooner"
    assert bd.assess(10.0, 50.0, "failed") == "below goal"
    assert bd.assess(10.0, 50.0, "succeeded") == "plain succeeded"
    assert bd.assess(None, 50.0, "failed") == "no probe verdict"


def test_markdown_names_the_cap_and_escapes_cells():
    rows = [{"scenario": "a", "probe_s": 9.04, "plain_s": 60.0, "plain_end": "capped",
             "ratio": ">= 6.6x", "assessment": "below goal", "probe_sees": "X=False R: m|n",
             "plain_sees": "nothing failed"},
            {"scenario": "b", "probe_s": None, "plain_s": 3.0, "plain_end": "failed",
             "ratio": "n/a", "assessment": "no probe verdict", "probe_sees": "", "plain_sees": "w"}]
    md = bd.markdown(rows, 60.0, {"date": "d", "cpus": 2, "machine": "x86_64", "commit": "abc"})
    assert "capped at **60 s**" in md
    assert "| a | 9.0 | >= 60 | >= 6.6x | below goal | X=False R: m\\|n | nothing failed |" in md
    assert "| b | - | 3.0 | n/a | no probe verdict |  | w |" in md


def test_telling_line_skips_torchrun_banners_for_the_cause():
    log = "\n".join([
        "rank 1/2 on node-b: 336 training samples",
        "RuntimeError: Unable to find address for: eth2",
        "============================================================",
        "train_digits.py FAILED",
        "------------------------------------------------------------",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "============================================================",
    ])
    assert bd.telling_line(log) == "RuntimeError: Unable to find address for: eth2"
    assert bd.telling_line("epoch 10/40 loss 0.3\n=====\n") == "epoch 10/40 loss 0.3"
    assert bd.telling_line("") == "" and bd.telling_line("====\n----") == ""


def test_render_rewrites_the_markdown_from_the_json(tmp_path):
    rows = [{"scenario": "a", "probe_s": 2.0, "plain_s": 300.0, "plain_end": "capped",
             "ratio": ">= 150.0x", "assessment": "met", "probe_sees": "X=False", "plain_sees": "-"}]
    (tmp_path / "diagnosis.json").write_text(json.dumps(
        {"meta": {"date": "d", "cpus": 2, "machine": "m", "commit": "c"}, "cap_s": 300.0, "rows": rows}))
    assert bd.main(["--render", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "diagnosis.md").read_text()
    assert "| a | 2.0 | >= 300 | >= 150.0x | met |" in md and "How to read it" in md


# ---- the PyTorchJob column ---------------------------------------------------------------

def _pj(*conds):
    return {"status": {"conditions": [{"type": t, "status": st, "reason": f"PyTorchJob{t}",
                                       "message": m} for t, st, m in conds]}}


def test_peer_verdict_reads_the_pytorchjob_conditions():
    assert bd.peer_verdict(None) is None and bd.peer_verdict({}) is None
    running = _pj(("Created", "True", "created"), ("Running", "True", "is running."))
    assert bd.peer_verdict(running) is None
    assert bd.peer_verdict(_pj(("Restarting", "True", "restarting"))) is None
    assert bd.peer_verdict(_pj(("Created", "True", ""), ("Failed", "True", "1 Worker failed"))) == "failed"
    assert bd.peer_verdict(_pj(("Succeeded", "True", "done"))) == "succeeded"
    assert bd.peer_verdict(_pj(("Failed", "False", ""))) is None
    assert bd.conditions_text(_pj(("Created", "True", "PyTorchJob ddp-digits is created."),
                                  ("Running", "True", ""))) == \
        "Created=True PyTorchJobCreated: PyTorchJob ddp-digits is created.; Running=True PyTorchJobRunning"
    assert bd.conditions_text({}) == "no conditions"


def test_first_error_line_is_the_first_one_a_user_meets():
    logs = [("w-0/init-pytorch", "Server: 10.96.0.10\nwaiting for master\n"),
            ("w-0/pytorch", "rank 1/2\nRuntimeError: Connection timed out\nlater Error"),
            ("m-0/pytorch", "Exception: never read")]
    assert bd.first_error_line(logs) == "w-0/pytorch: RuntimeError: Connection timed out"
    assert bd.first_error_line([("x", "all fine\n")]) == "" and bd.first_error_line([]) == ""
    tb = ("Traceback (most recent call last):\n  File \"/workspace/t.py\", line 9, in <module>\n"
          "    raise RuntimeError(msg)\nRuntimeError: Unable to find address for: eth2\n")
    assert bd.first_error_line([("w/pytorch", tb)]) == \
        "w/pytorch: RuntimeError: Unable to find address for: eth2"


def test_peer_informative_needs_an_error_line_and_the_products_nodes():
    msg = "node-b (rank 1): connection to MASTER_ADDR 10.100.0.11:29500 timeout; node-a ..."
    assert bd.named_nodes(msg) == ["node-a", "node-b"]
    assert bd.named_nodes("node-aa and node-z, node-aa") == ["node-aa", "node-z"]
    sees = "conditions: Running; w-0 on node-a; log node-b: RuntimeError"
    assert bd.peer_informative(msg, sees, "w-0/pytorch: RuntimeError") is True
    assert bd.peer_informative(msg, sees, "") is False  # no error line at all
    assert bd.peer_informative(msg, "w-0 on node-a: RuntimeError", "w-0: RuntimeError") is False
    assert bd.peer_informative("no node named", "x", "w: Error") is True


def test_peer_faster_and_findings():
    assert bd.peer_faster(5.0, 4.0, "failed") and bd.peer_faster(5.0, 5.0, "failed")
    assert not bd.peer_faster(5.0, 6.0, "failed") and not bd.peer_faster(5.0, 60.0, "capped")
    assert not bd.peer_faster(5.0, 2.0, "succeeded") and bd.peer_faster(None, 9.0, "failed")
    rows = [{"scenario": "a", "probe_s": 5.0, "pj_s": 300.0, "pj_end": "capped"},
            {"scenario": "b", "probe_s": 3.5, "pj_s": 2.1, "pj_end": "failed", "pj_faster": True,
             "pj_informative": True, "pj_first_error": "w-0/pytorch: RuntimeError: eth2"},
            {"scenario": "c", "probe_s": 1.0, "pj_s": 30.0, "pj_end": "succeeded"},
            {"scenario": "d", "probe_s": 1.0}]
    found = bd.peer_findings(rows)
    assert found == [
        "b: the PyTorchJob says Failed after 2.1 s, no later than the product's verdict (3.5 s).",
        "b: the PyTorchJob user sees an error line naming every node the product names "
        "(w-0/pytorch: RuntimeError: eth2).",
        "c: the PyTorchJob trains to Succeeded (the fault does not bite it here), after 30.0 s."]
    assert bd.peer_findings(rows[:1]) == []


def _full_row(**kw):
    r = {"scenario": "s", "probe_s": 6.0, "plain_s": 300.0, "plain_end": "capped", "ratio": ">= 50.0x",
         "assessment": "met", "probe_sees": "MasterReachable=False", "plain_sees": "-",
         "pj_s": 300.0, "pj_end": "capped", "pj_ratio": ">= 50.0x", "pj_assessment": "met",
         "pj_faster": False, "pj_informative": False, "pj_sees": "nothing failed | x"}
    r.update(kw)
    return r


def test_markdown_has_the_pytorchjob_section_only_when_measured():
    meta = {"date": "d", "cpus": 2, "machine": "m", "commit": "c",
            "pytorchjob": {"version": "v1.8.1", "restartPolicy": "Never"}}
    md = bd.markdown([_full_row()], 300.0, meta)
    assert "## Against Kubeflow's PyTorchJob (training operator v1.8.1)" in md
    assert "restartPolicy Never" in md and "capped at **300 s**" in md
    assert "| s | 6.0 | >= 300 | >= 50.0x | met | no | no | nothing failed \\| x |" in md
    assert "- none: in every scenario measured the PyTorchJob is slower and less informative." in md
    md = bd.markdown([_full_row(pj_s=4.0, pj_end="failed", pj_ratio="0.7x", pj_faster=True,
                                pj_assessment="PyTorchJob fails sooner")], 300.0, meta)
    assert "| s | 6.0 | 4.0 | 0.7x | PyTorchJob fails sooner | yes | no |" in md
    assert "- s: the PyTorchJob says Failed after 4.0 s" in md
    md = bd.markdown([_full_row(pj_faster=None, pj_informative=None)], 300.0, meta)
    assert "| >= 50.0x | met | - | - |" in md  # the probe was not run: nothing to compare
    old = {k: v for k, v in _full_row().items() if not k.startswith("pj_")}  # an older JSON
    assert "PyTorchJob" not in bd.markdown([old], 300.0, meta)


def test_plain_column_may_be_skipped():
    md = bd.markdown([_full_row(plain_s=None, plain_end=None, ratio="n/a", assessment="not run")],
                     60.0, {"date": "d", "cpus": 2, "machine": "m", "commit": "c"})
    assert "| s | 6.0 | - | n/a | not run |" in md
    assert bd.time_cell(3.04, "succeeded", 60) == "3.0 (succeeded)"
    assert bd.time_cell(60.0, "capped", 60) == ">= 60" and bd.time_cell(None, None, 60) == "-"


def test_pod_summary_shows_the_init_container_in_the_way():
    pod = _pod("ddp-digits-worker-0", "Pending", {"waiting": {"reason": "PodInitializing"}})
    pod["status"]["initContainerStatuses"] = [{"name": "init-pytorch", "state": {"running": {}}}]
    assert bd.pod_summary(pod) == "ddp-digits-worker-0 Pending, init init-pytorch running"
    pod["status"]["initContainerStatuses"] = [
        {"name": "init-pytorch", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]
    assert bd.pod_summary(pod).endswith("init init-pytorch terminated (Error)")
    pod["status"]["initContainerStatuses"] = [
        {"name": "init-pytorch", "state": {"terminated": {"exitCode": 0}}}]
    assert bd.pod_summary(pod) == "ddp-digits-worker-0 Pending, waiting (PodInitializing)"


def test_columns_option_is_checked():
    with pytest.raises(SystemExit):
        bd.main(["--columns", "probe,nonsense"])
    with pytest.raises(SystemExit):
        bd.main(["--columns", ","])


def test_row_compares_with_the_peer_only_when_the_probe_ran():
    sc = loader.load("ifname-missing")
    k = {"seconds": 4.7, "end": "failed", "informative": True, "sees": "PyTorchJob failed",
         "first_error": "w/pytorch: RuntimeError: eth2", "conditions": [], "pods": []}
    alone = bd._row(sc, None, None, k)
    assert alone["pj_faster"] is None and alone["pj_informative"] is None
    assert alone["plain_end"] is None and alone["assessment"] == "not run"
    p = {"seconds": 3.5, "ok": True, "why": "", "condition": {"message": "node-b: eth2"},
         "sees": "NetworkValidated=False"}
    both = bd._row(sc, p, None, k)
    assert both["pj_faster"] is False and both["pj_informative"] is True
    assert both["pj_ratio"] == "1.3x" and both["pj_assessment"] == "below goal"
    assert bd.peer_findings([both]) == [
        "ifname-missing: the PyTorchJob user sees an error line naming every node the product "
        "names (w/pytorch: RuntimeError: eth2)."]


def test_peer_column_reused_from_a_previous_report_is_compared_with_the_new_probe_column(tmp_path):
    """--peer-from: the PyTorchJob does not change with the product, so a re-run of the
    probe column takes the peer's figures from the previous report and recomputes the
    ratios against the new probe seconds; a scenario the old report lacks has no peer."""
    sc = loader.load("firewall-master-reject")
    old_p = {"seconds": 38.4, "ok": True, "why": "", "condition": {"message": "node-b"},
             "sees": "MasterReachable=False"}
    k = {"seconds": 300.0, "end": "capped", "informative": False, "sees": "nothing failed",
         "first_error": "", "conditions": [{"type": "Running"}], "pods": ["m Running"]}
    previous = {"meta": {"date": "2026-12-01 18:20 UTC", "commit": "abc"},
                "rows": [bd._row(sc, old_p, None, k)]}
    assert previous["rows"][0]["pj_assessment"] == "capped below goal"
    again = bd.peer_from_row(previous, "firewall-master-reject")
    assert again == k
    assert bd.peer_from_row(previous, "ifname-missing") is None
    new_p = dict(old_p, seconds=6.0)
    row = bd._row(sc, new_p, None, again)
    assert row["pj_ratio"] == ">= 50.0x" and row["pj_assessment"] == "met"
    md = bd.markdown([row], 300.0, {"date": "d", "cpus": 2, "machine": "x", "commit": "c",
                                    "pytorchjob": {"version": "v1.8.1", "reusedFrom": "2026-12-01 18:20 UTC, commit abc"}})
    assert "reused from the run of 2026-12-01 18:20 UTC, commit abc" in md
    with pytest.raises(SystemExit):  # either run the peer or reuse it
        bd.main(["--columns", "probe,pytorchjob", "--peer-from", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit):  # an unreadable report is refused before any cluster work
        bd.main(["--columns", "probe", "--peer-from", str(tmp_path / "missing.json")])


def test_a_pytorchjobs_master_is_rank_0_and_worker_i_rank_i_plus_1():
    pods = [{"metadata": {"name": n}} for n in
            ("ddp-digits-worker-1", "ddp-digits-master-0", "ddp-digits-worker-0", "other-master-0",
             "ddp-digits-worker-x")]
    got = {r: p["metadata"]["name"] for r, p in bd.pytorchjob_ranks(pods).items()}
    assert got == {0: "ddp-digits-master-0", 1: "ddp-digits-worker-0", 2: "ddp-digits-worker-1"}
