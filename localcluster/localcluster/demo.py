"""``make demo``: bring up the local cluster, install the operator, apply the example job,
and show it validate and train.

Steps: ``python -m localcluster up``; ``helm install`` of the chart (the operator runs as a
pod, reaching the apiserver through the node's 10.96.0.1 relay);
``kubectl apply -f examples/ddp-digits.yaml`` (a previous run's job is deleted first);
then every condition change is printed as it happens, and at the end the job's conditions
as kubectl shows them, the training log's accuracy line and the two ``export`` lines that
point a shell's kubectl at the local cluster.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Optional

from rich.console import Console

from . import config, operator_install
from .operator_install import kubectl

console = Console(highlight=False, soft_wrap=True)
EXAMPLE = config.REPO_ROOT / "examples" / "ddp-digits.yaml"
JOB = "ddp-digits"
CONDITIONS_TEMPLATE = (
    '{{range .status.conditions}}{{.type}}{{"\\t"}}{{.status}}{{"\\t"}}{{.reason}}'
    '{{"\\t"}}{{.message}}{{"\\n"}}{{end}}'
)


def _job() -> Optional[dict]:
    out = kubectl("get", "dtj", JOB, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def watch(timeout: float) -> Optional[dict]:
    """Print condition transitions until the job is Succeeded or Failed; return the job."""
    seen: dict[str, tuple] = {}
    start = time.monotonic()
    job = None
    while time.monotonic() - start < timeout:
        job = _job()
        for cnd in ((job or {}).get("status") or {}).get("conditions") or []:
            key = (cnd["status"], cnd["reason"])
            if seen.get(cnd["type"]) != key:
                seen[cnd["type"]] = key
                colour = {"True": "green", "False": "red"}.get(cnd["status"], "yellow")
                console.print(
                    f"  [dim]{time.monotonic() - start:6.1f}s[/dim] {cnd['type']:<20} "
                    f"[{colour}]{cnd['status']:<7}[/{colour}] {cnd['reason']}: {cnd.get('message', '')}"
                )
        phase = ((job or {}).get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            return job
        time.sleep(0.5)
    return job


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.demo", description=__doc__)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the job")
    args = parser.parse_args(argv)

    console.rule("[bold]1. Local cluster (kube-apiserver, etcd, scheduler, controller-manager, node agents)")
    subprocess.run([sys.executable, "-m", "localcluster", "up"], check=True)
    console.print(kubectl("get", "nodes", "-o", "wide").stdout)

    console.rule("[bold]2. helm install disttrain charts/disttrain-operator (the operator runs as a pod)")
    console.print(operator_install.helm_install(), markup=False)
    console.print(kubectl("get", "pods", "-n", operator_install.NAMESPACE, "-o", "wide").stdout, markup=False)

    console.rule(f"[bold]3. kubectl apply -f examples/{EXAMPLE.name}")
    kubectl("delete", "-f", str(EXAMPLE), "--ignore-not-found", "--wait=true", check=False)
    t0 = time.monotonic()
    console.print(kubectl("apply", "-f", str(EXAMPLE)).stdout)
    job = watch(args.timeout)
    elapsed = time.monotonic() - t0

    console.rule("[bold]4. Result")
    console.print(kubectl("get", "dtj", JOB, "-o", "wide").stdout)
    console.print("[bold]Conditions[/bold] (kubectl get dtj ddp-digits -o go-template=..., aligned):")
    rows = [ln.split("\t") for ln in kubectl("get", "dtj", JOB, "-o", f"go-template={CONDITIONS_TEMPLATE}").stdout.splitlines()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)] if rows else []
    for r in rows:
        console.print("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3], markup=False)
    console.print(f"\nkubectl describe dtj {JOB} shows the same conditions with the operator's Events "
                  f"(kubectl get events --sort-by=.lastTimestamp).")
    logs = kubectl("logs", f"{JOB}-worker-0", check=False)
    acc = [ln for ln in (logs.stdout or "").splitlines() if "accuracy" in ln]
    if acc:
        console.print(f"[bold]Training log[/bold] (kubectl logs {JOB}-worker-0): {acc[-1]}")
    phase = ((job or {}).get("status") or {}).get("phase")
    console.print(f"job {JOB}: [bold]{phase}[/bold] {elapsed:.1f}s after kubectl apply")
    console.rule("[bold]Keep using kubectl against the local cluster")
    from .cli import env_lines
    console.print(env_lines().rstrip(), markup=False)
    console.print("# or: eval \"$(.venv/bin/python -m localcluster env)\"", markup=False)
    console.print("make down   # stops the cluster and removes its namespaces and processes")
    return 0 if phase == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
