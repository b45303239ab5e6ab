"""The admission check's cost: for the same job queued to a ClusterQueue with the
``disttrain-preflight`` check and to one without it, the time from the Workload's quota
reservation to its admission, and from ``kubectl apply`` to the job's pods Running.

Both ClusterQueues live in the same cluster (real kubelets, Kueue v0.17.0, the chart
installed with ``kueue.admissionCheck.enabled``), same quota; runs alternate between
them, so the baseline (no check) is measured in this very run. The job is the digits
example as a Kubeflow PyTorchJob (2 ranks, one per node) or as an indexed Job. Times are
wall-clock seconds seen by this script polling the apiserver every 0.1 s (the Workload's
own condition timestamps have 1 s resolution): QuotaReserved=True first seen, Admitted=True
first seen, every job pod Running (or already Succeeded) first seen. Each run's job is
deleted and its pods gone before the next. Results: benchmarks/results/admission-check.{md,json}.

    make bench-admission-check    # or: .venv/bin/python benchmarks/bench_admission_check.py --runs 5 --kind pytorchjob
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
from localcluster.cluster import kubeflow, operator_install  # noqa: E402
from localcluster.common import config as lc_config  # noqa: E402

CHECK = "disttrain-preflight"
NS = "bench-ac"
QUEUES = {"checked": "bench-checked", "plain": "bench-plain"}  # setting -> ClusterQueue (and LocalQueue)
POLL = 0.1
WORKLOADS = "workloads.kueue.x-k8s.io"


def kubectl(*args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
    """kubectl against the local cluster; returns stdout. Raises RuntimeError with its stderr."""
    env = dict(os.environ, KUBECONFIG=str(lc_config.state_dir() / "admin.kubeconfig"))
    p = subprocess.run([str(lc_config.k8s_bin_dir() / "kubectl"), *args], env=env, input=input,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def get(*args: str) -> dict:
    return json.loads(kubectl("get", *args, "-o", "json"))


def cluster_queue(name: str, checked: bool) -> dict:
    spec: dict = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                                    {"name": "memory", "nominalQuota": "32Gi"}]}]}]}
    if checked:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": spec}


def job_docs(kind: str, queue: str) -> list[dict]:
    """The digits example as a PyTorchJob, or 2 ranks as an indexed Job, labelled for ``queue``."""
    if kind == "pytorchjob":
        docs = kubeflow.pytorchjob_documents(
            [d for d in yaml.safe_load_all((REPO / "examples" / "ddp-digits.yaml").read_text()) if d])
    else:
        docs = [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp-digits"},
                 "spec": {"completionMode": "Indexed", "completions": 2, "parallelism": 2,
                          "backoffLimit": 0, "template": {"spec": {
                              "restartPolicy": "Never", "containers": [{
                                  "name": "trainer", "image": "ghcr.io/disttrain/examples-digits:0.1.0",
                                  "imagePullPolicy": "IfNotPresent",
                                  "command": ["sh", "-c", "sleep 5"],
                                  "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}}]
    docs[-1]["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = queue
    return docs


def _true(obj: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def one_run(kind: str, setting: str, timeout: float = 180.0) -> dict:
    """Apply the job to ``setting``'s queue; returns the seconds from apply to
    QuotaReserved, Admitted and the pods Running, and reservation -> admission.
    Raises TimeoutError naming what did not happen within ``timeout`` seconds."""
    queue = QUEUES[setting]
    t0 = time.monotonic()
    kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump_all(job_docs(kind, queue)))
    seen: dict[str, float] = {}
    while "running" not in seen:
        now = time.monotonic() - t0
        if now > timeout:
            raise TimeoutError(f"{setting}: only {sorted(seen)} after {timeout:.0f}s")
        items = [w for w in get(WORKLOADS, "-n", NS)["items"] if (w.get("spec") or {}).get("queueName") == queue]
        wl = items[0] if items else {}
        if "reserved" not in seen and _true(wl, "QuotaReserved"):
            seen["reserved"] = now
        if "admitted" not in seen and _true(wl, "Admitted"):
            seen["admitted"] = now
            seen.setdefault("reserved", now)
        pods = [p for p in get("pods", "-n", NS)["items"]
                if "disttrain.dev/role" not in (p["metadata"].get("labels") or {})]
        if "admitted" in seen and len(pods) >= 2 and all(
                p["status"].get("phase") in ("Running", "Succeeded") for p in pods):
            seen["running"] = now
        time.sleep(POLL)
    seen["reservedToAdmitted"] = seen["admitted"] - seen["reserved"]
    kubectl("delete", "pytorchjobs,jobs", "--all", "-n", NS, "--wait=true", "--timeout=90s", check=False)
    deadline = time.monotonic() + 120  # the next run reads the only Workload there is
    while (get("pods", "-n", NS)["items"] or get(WORKLOADS, "-n", NS)["items"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    return seen


def setup() -> None:
    """The cluster (2 real nodes, Kueue, Kubeflow's operator), the chart with the check,
    the two ClusterQueues and their LocalQueues in namespace :data:`NS`."""
    subprocess.run([sys.executable, "-m", "localcluster", "up", "--nodes", "2", "--kubeflow", "--kueue",
                    "--kueue-integration", "batch/job", "--kueue-integration", "kubeflow.org/pytorchjob"],
                   check=True, cwd=REPO)
    operator_install.helm_install("kueue.enabled=true", "kueue.admissionCheck.enabled=true",
                                  "kueue.admissionCheck.create=true")
    deadline = time.monotonic() + 120  # an earlier run's namespace may still be terminating
    while json.loads(kubectl("get", "namespace", NS, "-o", "json", check=False) or "{}").get(
            "status", {}).get("phase") != "Active":
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {NS} not Active")
        kubectl("create", "namespace", NS, check=False)
        time.sleep(1)
    for setting, name in QUEUES.items():
        kubectl("apply", "-f", "-", input=json.dumps(cluster_queue(name, setting == "checked")))
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": NS}, "spec": {"clusterQueue": name}}))
    deadline = time.monotonic() + 90
    while not all(_true(get("clusterqueue", q), "Active") for q in QUEUES.values()):
        if time.monotonic() > deadline:
            raise TimeoutError("the ClusterQueues did not become Active")
        time.sleep(0.5)


def teardown() -> None:
    kubectl("delete", "namespace", NS, "--timeout=90s", check=False)
    for q in QUEUES.values():  # before the chart: Kueue keeps a check a ClusterQueue lists
        kubectl("delete", "clusterqueue", q, "--timeout=60s", check=False)
    operator_install.helm_uninstall()


def report(kind: str, runs: dict[str, list[dict]]) -> str:
    def med(setting: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[setting])
    keys = [("reservedToAdmitted", "quota reserved -> admitted"), ("admitted", "apply -> admitted"),
            ("running", "apply -> pods Running")]
    n = len(runs["plain"])
    lines = ["# The admission check's cost: the same job with and without it", "",
             f"`benchmarks/bench_admission_check.py` (make bench-admission-check): {kind}, 2 ranks on 2 real "
             f"nodes, {n} alternating runs per queue in one script run, medians in seconds; the baseline is "
             "the same job in a ClusterQueue without the check, in the same cluster and run.", "",
             "| interval | without check | with check | difference | ratio |", "|---|---|---|---|---|"]
    for key, label in keys:
        a, b = med("plain", key), med("checked", key)
        ratio = f"{b / a:.1f}x" if a > 0.05 else "-"
        lines.append(f"| {label} | {a:.2f} | {b:.2f} | +{b - a:.2f} s | {ratio} |")
    lines += ["", "Every run (seconds: reserved, admitted, running):", ""]
    for setting in ("plain", "checked"):
        lines.append(f"- {setting}: " + "; ".join(
            f"{r['reserved']:.1f}, {r['admitted']:.1f}, {r['running']:.1f}" for r in runs[setting]))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kind", choices=["pytorchjob", "job"], default="pytorchjob")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "admission-check.md")
    a = ap.parse_args()
    setup()
    runs: dict[str, list[dict]] = {"plain": [], "checked": []}
    try:
        for i in range(a.runs):
            for setting in (("plain", "checked") if i % 2 == 0 else ("checked", "plain")):
                r = one_run(a.kind, setting)
                runs[setting].append(r)
                print(f"run {i + 1} {setting}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
    finally:
        teardown()
    text = report(a.kind, runs)
    a.out.write_text(text)
    a.out.with_suffix(".json").write_text(json.dumps({"kind": a.kind, "runs": runs}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
