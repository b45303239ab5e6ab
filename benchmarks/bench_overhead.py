"""Validation overhead: `kubectl apply` -> all training pods Running, probe on vs off.

Runs on the local cluster (brought up if needed) with the operator installed as in
`make demo`. Alternates `probe.enabled: true` and `false` on the example job, several
runs each, and reports medians, their difference and their ratio (probe on / probe off),
plus the probe's own phase timings (slowest rank per phase, median over runs).

A pod counts as started when its phase is Running or already Succeeded (the example
trains in seconds). Times are wall-clock seconds measured by this script, polling the
apiserver every 0.1 s through the Python client.

    make bench            # or: .venv/bin/python benchmarks/bench_overhead.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml
from kubernetes import client, config as kconfig
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
from localcluster import config as lc_config, operator_install  # noqa: E402

console = Console()


def run_once(core, custom, probe: bool, timeout: float = 300.0) -> dict:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    docs = list(yaml.safe_load_all((REPO / "examples" / "ddp-digits.yaml").read_text()))
    cm, job = docs
    job["spec"]["probe"]["enabled"] = probe
    core.create_namespaced_config_map(ns, cm)
    t0 = time.monotonic()
    custom.create_namespaced_custom_object("disttrain.dev", "v1alpha1", ns, "disttrainingjobs", job)
    started = None
    while time.monotonic() - t0 < timeout:
        pods = core.list_namespaced_pod(ns, label_selector="disttrain.dev/role=worker").items
        if len(pods) == 2 and all(p.status.phase in ("Running", "Succeeded") for p in pods):
            started = time.monotonic() - t0
            break
        time.sleep(0.1)
    # Let it finish so the next run starts on idle nodes (and ports are free).
    status = {}
    while time.monotonic() - t0 < timeout:
        status = custom.get_namespaced_custom_object(
            "disttrain.dev", "v1alpha1", ns, "disttrainingjobs", "ddp-digits").get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    core.delete_namespace(ns)
    while True:
        left = core.list_namespaced_pod(ns).items
        if not left:
            break
        time.sleep(0.3)
    return {
        "probe": probe,
        "started_s": started,
        "phase": status.get("phase"),
        "probe_phase_s": (status.get("probe") or {}).get("phaseSeconds") or {},
        "probe_duration_s": (status.get("probe") or {}).get("durationSeconds"),
        "busbw_gbps": (status.get("probe") or {}).get("busBandwidthGBps"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs per setting (alternating)")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "localcluster", "up"], check=True, cwd=REPO)
    operator_install.start()
    kconfig.load_kube_config(str(lc_config.state_dir() / "admin.kubeconfig"))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    results = []
    for i in range(args.runs * 2):
        r = run_once(core, custom, probe=(i % 2 == 0))
        console.print(f"run {i + 1}: probe={'on ' if r['probe'] else 'off'} started after "
                      f"{r['started_s']:.2f}s -> {r['phase']}")
        results.append(r)
    on = [r["started_s"] for r in results if r["probe"] and r["started_s"] is not None]
    off = [r["started_s"] for r in results if not r["probe"] and r["started_s"] is not None]
    med_on, med_off = statistics.median(on), statistics.median(off)
    table = Table(title="apply -> all training pods Running (seconds, median)")
    for col in ("probe", "runs", "median", "min", "max"):
        table.add_column(col)
    table.add_row("enabled", str(len(on)), f"{med_on:.2f}", f"{min(on):.2f}", f"{max(on):.2f}")
    table.add_row("disabled", str(len(off)), f"{med_off:.2f}", f"{min(off):.2f}", f"{max(off):.2f}")
    console.print(table)
    console.print(f"validation overhead: +{med_on - med_off:.2f}s, ratio {med_on / med_off:.2f}x (probe on / off)")
    phases: dict[str, list[float]] = {}
    for r in results:
        for k, v in r["probe_phase_s"].items():
            phases.setdefault(k, []).append(v)
    pt = Table(title="probe phase timings (slowest rank, median over runs, seconds)")
    pt.add_column("phase")
    pt.add_column("median")
    for k, v in phases.items():
        pt.add_row(k, f"{statistics.median(v):.3f}")
    durations = [r["probe_duration_s"] for r in results if r["probe_duration_s"]]
    if durations:
        pt.add_row("operator-measured probe duration", f"{statistics.median(durations):.3f}")
    console.print(pt)
    bw = [r["busbw_gbps"] for r in results if r["busbw_gbps"]]
    if bw:
        console.print(f"probe all-reduce busbw (4 MiB, gloo, 2 ranks): median {statistics.median(bw):.3f} GB/s")
    out = REPO / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "overhead.json").write_text(json.dumps({
        "runs": results, "median_on_s": med_on, "median_off_s": med_off,
        "difference_s": med_on - med_off, "ratio": med_on / med_off}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
