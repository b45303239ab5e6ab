"""Pod start and validation overhead: `kubectl apply` -> all training pods Running, probe
on vs off, on real nodes (a kubelet and containerd per node, the images `make images`
built) and on the node agent, for each node count.

For every (runtime, nodes) it brings the local cluster up that way (the operator runs as
a host process, the same for both runtimes), alternates `probe.enabled: true` and `false`
on the example job (numNodes = nodes), several runs each, and reports medians, the ratio
probe on / probe off, and the ratio real nodes / node agent for the same nodes and probe
setting, all from this one run; plus the probe's own phase timings (slowest rank per
phase, median over runs). Results: benchmarks/results/pod-start.{md,json}.

A pod counts as started when its phase is Running or already Succeeded (the example
trains in seconds). Times are wall-clock seconds measured by this script, polling the
apiserver every 0.1 s through the Python client.

    make bench            # or: .venv/bin/python benchmarks/bench_overhead.py --runs 3 \
                          #       --runtimes containerd,agent --nodes 2,8
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
from kubernetes import client
from kubernetes import config as kconfig
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
from localcluster.cluster import operator_install  # noqa: E402
from localcluster.common import config as lc_config

console = Console()


def run_once(core, custom, probe: bool, runtime: str, nodes: int, timeout: float = 300.0) -> dict:
    from localcluster import demo
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    docs = [d for d in yaml.safe_load_all(demo.EXAMPLE.read_text()) if d]
    cm, job = docs
    job["spec"]["probe"]["enabled"] = probe
    job["spec"]["numNodes"] = nodes
    core.create_namespaced_config_map(ns, cm)
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
    core.delete_namespace(ns)
    while True:
        left = core.list_namespaced_pod(ns).items
        if not left:
            break
        time.sleep(0.3)
    return {
        "runtime": runtime, "nodes": nodes,
        "probe": probe,
        "started_s": started,
        "phase": status.get("phase"),
        "probe_phase_s": (status.get("probe") or {}).get("phaseSeconds") or {},
        "probe_duration_s": (status.get("probe") or {}).get("durationSeconds"),
        "busbw_gbps": (status.get("probe") or {}).get("busBandwidthGBps"),
    }


def _median(results: list[dict], **match) -> float | None:
    v = [r["started_s"] for r in results if r["started_s"] is not None
         and all(r[k] == want for k, want in match.items())]
    return statistics.median(v) if v else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs per setting (alternating)")
    parser.add_argument("--runtimes", default="containerd,agent")
    parser.add_argument("--nodes", default="2,8")
    args = parser.parse_args()
    runtimes = [r for r in args.runtimes.split(",") if r]
    counts = [int(n) for n in args.nodes.split(",") if n]
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
            for i in range(args.runs * 2):
                r = run_once(core, custom, probe=(i % 2 == 0), runtime=runtime, nodes=nodes)
                console.print(f"  run {i + 1}: probe={'on ' if r['probe'] else 'off'} started after "
                              f"{r['started_s'] or float('nan'):.2f}s -> {r['phase']}")
                results.append(r)
    table = Table(title="apply -> all training pods Running (seconds, median) and ratios")
    for col in ("runtime", "nodes", "probe on", "probe off", "on / off", "on: real / agent", "off: real / agent"):
        table.add_column(col)
    rows = []
    for nodes in counts:
        for runtime in runtimes:
            on, off = _median(results, runtime=runtime, nodes=nodes, probe=True), _median(results, runtime=runtime, nodes=nodes, probe=False)
            a_on, a_off = _median(results, runtime="agent", nodes=nodes, probe=True), _median(results, runtime="agent", nodes=nodes, probe=False)
            ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"  # noqa: E731
            row = [runtime, str(nodes), f"{on:.2f}" if on else "-", f"{off:.2f}" if off else "-",
                   ratio(on, off), ratio(on, a_on) if runtime != "agent" else "1", ratio(off, a_off) if runtime != "agent" else "1"]
            rows.append(row)
            table.add_row(*row)
    console.print(table)
    phases: dict[str, list[float]] = {}
    for r in results:
        for k, v in r["probe_phase_s"].items():
            phases.setdefault(f"{r['runtime']}/{r['nodes']}: {k}", []).append(v)
    pt = Table(title="probe phase timings (slowest rank, median over runs, seconds)")
    pt.add_column("runtime/nodes: phase")
    pt.add_column("median")
    for k, v in phases.items():
        pt.add_row(k, f"{statistics.median(v):.3f}")
    console.print(pt)
    out = REPO / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / "pod-start.json").write_text(json.dumps({"runs": results, "rows": rows}, indent=2))
    md = ["# Pod start: apply -> all training pods Running", "",
          "`benchmarks/bench_overhead.py` (make bench): medians over alternating runs, one script "
          "run; ratios within the run (real nodes / node agent at the same nodes and probe setting).", "",
          "| " + " | ".join(c.header for c in table.columns) + " |",
          "|" + "---|" * len(table.columns)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    (out / "pod-start.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
