"""`python -m disttrain explain` / `kubectl disttrain explain`: the evidence behind the
conditions, rendered from the job's status (pure render, no cluster)."""
from __future__ import annotations

import io

from rich.console import Console, Group

from disttrain.diagnosis.diagnose import diagnose
from disttrain.shell import explain
from tests.support.scenario_reports import SCENARIOS


def job_from(name: str) -> dict:
    outs, master = SCENARIOS[name]
    d = diagnose(outs, master)
    conds = [{"type": t, "status": v.status, "reason": v.reason, "message": v.message}
             for t, v in d.conditions.items()]
    return {"metadata": {"name": "ddp-digits", "namespace": "sc"},
            "status": {"phase": "Failed" if not d.validated else "Validated", "conditions": conds,
                       "nodes": d.nodes, "rendezvous": {"masterAddr": master, "masterPort": 29500,
                                                         "socketIfname": "eth1"},
                       "probe": {"failures": d.failures, "warnings": d.warnings, "backend": "gloo",
                                 "interfacesNotChosen": d.not_chosen}}}


def text_of(job: dict, width: int = 160) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(Group(*explain.render(job)))
    return buf.getvalue()


def test_a_blocked_pair_shows_in_the_matrix_of_every_network():
    out = text_of(job_from("partition-a-c"))
    assert "sc/ddp-digits  phase Failed  Validated=False (NoCommonInterface)" in out
    assert "Connectivity on 10.100.0.0/24" in out and "Connectivity on 10.101.0.0/24" in out
    row_a = next(line for line in out.splitlines() if line.strip("│┃ ").startswith("node-a") and "timeout" in line)
    assert row_a.count("timeout") == 1 and row_a.count("ok") == 1  # a->c failed, a->b worked
    assert "NetworkValidated" in out and "the path node-a<->node-c is blocked" in out
    assert "Failures (one per rank, in full)" in out


def test_a_passing_job_lists_nodes_interfaces_and_throughput():
    job = job_from("healthy")
    job["status"]["nodes"][0]["throughputMbps"] = 13000.0
    out = text_of(job)
    assert "Validated=True (PassedWithWarnings)" in out
    assert "node-a" in out and "eth1" in out and "10.101.0.11" in out and "13000" in out
    assert "2.8.0+cu128" in out and "2.27.3" in out
    assert "Warnings (in full)" in out
    assert "Connectivity on 10.101.0.0/24  (chosen)" in out and "10.100.0.0/24  (chosen)" not in out
    # the verdict names the choice; every interface not chosen, and why, is listed here
    assert "Interfaces not chosen, and why" in out and "eth0 not preferred: faster by measurement" in out
    assert "docker0 172.17.0.1 (DuplicateAddress" in out


def test_main_says_when_the_job_does_not_exist(monkeypatch):
    monkeypatch.setattr(explain, "load_job", lambda name, ns: None)
    buf = io.StringIO()
    assert explain.main(["nope", "-n", "x"], Console(file=buf)) == 1
    assert "no DistTrainingJob nope in namespace x" in buf.getvalue()
    monkeypatch.setattr(explain, "load_job", lambda name, ns: job_from("healthy"))
    buf = io.StringIO()
    assert explain.main(["ddp-digits", "-n", "sc"], Console(file=buf, width=160)) == 0
    assert "Nodes" in buf.getvalue()


def test_nodes_with_several_processes_show_how_many_ran_and_their_intra_node_busbw():
    job = job_from("healthy")
    plain = text_of(job)
    assert "intra GB/s" not in plain  # one process per node: the table as before
    for n, bw in zip(job["status"]["nodes"], (41.5, 38.25)):
        n.update(localRanks=8, intraNodeBusBandwidthGBps=bw)
    out = text_of(job, width=200)
    assert "local" in out and "intra GB/s" in out
    rows = [line for line in out.splitlines() if "eth1" in line and "node-" in line]
    assert any(" 8 " in r and "41.5" in r for r in rows) and any("38.2" in r for r in rows), rows


def test_main_without_a_kubeconfig_says_so_in_one_line(monkeypatch, tmp_path):
    """Seen by hand: `explain` with no kubeconfig printed two chained tracebacks."""
    import io

    from rich.console import Console

    from disttrain.shell import explain

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    buf = io.StringIO()
    rc = explain.main(["ddp-digits", "-n", "x"], console=Console(file=buf, width=200))
    out = buf.getvalue()
    assert rc == 2 and "no kubeconfig found" in out and "Traceback" not in out, out
