"""Pod start and validation overhead: `kubectl apply` -> all training pods Running, and ->
every rank's first training line, with no probe, probe pods, and the probe in place
(``probe.placement: InPlace``), on real nodes (a kubelet and containerd per node, the
images `make images` built) and on the node agent, for each node count.

For every (runtime, nodes) it brings the local cluster up that way (the operator runs as
a host process, the same for every setting), alternates the settings on the example job
(numNodes = nodes), several runs each, and reports medians, each probe setting's
overhead against no probe (``+0.8 s``) and ratio, and the ratio real nodes / node agent,
all from this one run; plus the probe's own phase timings (slowest rank per phase, median
over runs). Results: benchmarks/results/pod-start.{md,json}.

A pod counts as started when its phase is Running or already Succeeded (the example
trains in seconds); in place the training pods run the probe first, so the time that
counts there is the first training line: the example's ``rank R/W on ...`` line, printed
after ``init_process_group`` and the data load, the latest over the ranks, timed by the
kubelet's log timestamps against the apply. Times are wall-clock seconds measured by this
script, polling the apiserver every 0.1 s through the Python client.

    make bench            # or: .venv/bin/python benchmarks/bench_overhead.py --runs 3 \
                          #       --runtimes containerd,agent --nodes 2,8 --settings off,pods,inplace
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes import config as kconfig
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
from localcluster.cluster import operator_install  # noqa: E402
from localcluster.common import config as lc_config

console = Console()


SETTINGS = {"off": "no probe", "pods": "probe pods", "inplace": "in place"}
FIRST_LINE = re.compile(r"^(\S+) rank \d+/\d+ on ")


def log_time(stamp: str) -> float:
    """Unix time of a kubelet log timestamp (RFC 3339 with nanoseconds, ``...01.123456789Z``)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float("0." + (frac or "0"))


def first_lines(core, ns: str, nodes: int, since: float) -> float | None:
    """Seconds from ``since`` (Unix time of the apply) to the latest rank's first training
    line, by the kubelet's log timestamps; None unless every rank printed it."""
    latest = None
    for r in range(nodes):
        try:
            log = core.read_namespaced_pod_log(f"ddp-digits-worker-{r}", ns, container="trainer", timestamps=True)
        except client.ApiException:
            return None
        at = next((m.group(1) for line in log.splitlines() if (m := FIRST_LINE.match(line))), None)
        if at is None:
            return None
        latest = max(latest or 0.0, log_time(at) - since)
    return latest


def run_once(core, custom, setting: str, runtime: str, nodes: int, timeout: float = 300.0) -> dict:
    from localcluster import demo
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    docs = [d for d in yaml.safe_load_all(demo.EXAMPLE.read_text()) if d]
    cm, job = docs
    job["spec"]["probe"]["enabled"] = setting != "off"
    if setting == "inplace":
        job["spec"]["probe"]["placement"] = "InPlace"
    job["spec"]["numNodes"] = nodes
    core.create_namespaced_config_map(ns, cm)
    wall0 = time.time()
    t0 = time.monotonic()
    custom.create_namespaced_custom_object("disttrain.dev", "v1alpha1", ns, "disttrainingjobs", job)
    started = None
    while time.monotonic() - t0 < timeout:
        pods = core.list_namespaced_pod(ns, label_selector="disttrain.dev/role=worker").items
        if len(pods) == nodes and all(p.status.phase in ("Running", "Succeeded") for p in pods):
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
    first = first_lines(core, ns, nodes, wall0)
    core.delete_namespace(ns)
    while True:
        left = core.list_namespaced_pod(ns).items
        if not left:
            break
        time.sleep(0.3)
    return {
        "runtime": runtime, "nodes": nodes,
        "setting": setting,
        "started_s": started,
        "first_line_s": first,
        "phase": status.get("phase"),
        "probe_phase_s": (status.get("probe") or {}).get("phaseSeconds") or {},
        "probe_duration_s": (status.get("probe") or {}).get("durationSeconds"),
        "busbw_gbps": (status.get("probe") or {}).get("busBandwidthGBps"),
    }


def _median(results: list[dict], key: str = "started_s", **match) -> float | None:
    v = [r[key] for r in results if r.get(key) is not None
         and all(r[k] == want for k, want in match.items())]
    return statistics.median(v) if v else None


def _rows(results: list[dict], counts: list[int], runtimes: list[str], settings: list[str]) -> list[list[str]]:
    """One row per (runtime, nodes, setting): medians, the overhead against no probe
    (``+0.8 s``, first training line) and the ratio real nodes / agent."""
    rows = []
    fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
    for nodes in counts:
        for runtime in runtimes:
            base = _median(results, "first_line_s", runtime=runtime, nodes=nodes, setting="off")
            for setting in settings:
                m = dict(runtime=runtime, nodes=nodes, setting=setting)
                started, first = _median(results, **m), _median(results, "first_line_s", **m)
                over = f"{first - base:+.1f} s" if first is not None and base is not None and setting != "off" else "-"
                ratio = f"{first / base:.2f}x" if first and base and setting != "off" else "-"
                agent = _median(results, "first_line_s", runtime="agent", nodes=nodes, setting=setting)
                real = f"{first / agent:.2f}x" if first and agent and runtime != "agent" else "-"
                rows.append([runtime, str(nodes), SETTINGS[setting], fmt(started), fmt(first), over, ratio, real])
    return rows


COLUMNS = ("runtime", "nodes", "placement", "pods Running", "first training line", "overhead",
           "/ no probe", "real / agent")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per setting (alternating)")
    parser.add_argument("--runtimes", default="containerd,agent")
    parser.add_argument("--nodes", default="2,8")
    parser.add_argument("--settings", default="off,pods,inplace", help="of: " + ", ".join(SETTINGS))
    args = parser.parse_args()
    runtimes = [r for r in args.runtimes.split(",") if r]
    counts = [int(n) for n in args.nodes.split(",") if n]
    settings = [s for s in args.settings.split(",") if s in SETTINGS]
    results = []
    for nodes in counts:
        for runtime in runtimes:
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-m", "localcluster", "up", "--runtime", runtime,
                            "--nodes", str(nodes), "--timeout", "600"], check=True, cwd=REPO)
            console.print(f"[bold]{runtime}, {nodes} nodes[/bold]: up in {time.monotonic() - t0:.1f}s")
            operator_install.start()
            kconfig.load_kube_config(str(lc_config.state_dir() / "admin.kubeconfig"))
            core, custom = client.CoreV1Api(), client.CustomObjectsApi()
            for i in range(args.runs * len(settings)):
                setting = settings[i % len(settings)]
                r = run_once(core, custom, setting=setting, runtime=runtime, nodes=nodes)
                console.print(f"  run {i + 1}: {SETTINGS[setting]:10s} pods Running after "
                              f"{r['started_s'] or float('nan'):.2f}s, first training line after "
                              f"{r['first_line_s'] or float('nan'):.2f}s -> {r['phase']}")
                results.append(r)
    table = Table(title="apply -> training pods Running, -> every rank's first training line (seconds, median)")
    for col in COLUMNS:
        table.add_column(col)
    rows = _rows(results, counts, runtimes, settings)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    phases: dict[str, list[float]] = {}
    for r in results:
        for k, v in r["probe_phase_s"].items():
            phases.setdefault(f"{r['runtime']}/{r['nodes']}/{r['setting']}: {k}", []).append(v)
    pt = Table(title="probe phase timings (slowest rank, median over runs, seconds)")
    pt.add_column("runtime/nodes/placement: phase")
    pt.add_column("median")
    for k, v in phases.items():
        pt.add_row(k, f"{statistics.median(v):.3f}")
    console.print(pt)
    out = REPO / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "pod-start.json").write_text(json.dumps({"runs": results, "rows": rows}, indent=2))
    md = ["# Pod start: apply -> training pods Running, and -> every rank's first training line", "",
          "`benchmarks/bench_overhead.py` (make bench): medians over alternating runs, one script "
          f"run (`{' '.join(sys.argv[1:])}`); overhead and ratios within the run, against no probe "
          "at the same runtime and nodes (first training line); in place the training pods run "
          "the probe first, so their Running says little: the first training line is the time.", "",
          "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md += ["", "Probe phases (slowest rank, median, seconds): " + "; ".join(
        f"{k} {statistics.median(v):.2f}" for k, v in phases.items())]
    (out / "pod-start.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
