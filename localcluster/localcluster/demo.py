"""``make demo``: bring up the local cluster, install the operator, apply the example job,
and show it validate and train.

Steps: ``python -m localcluster up --runtime containerd`` (real kubelets, each with its own
containerd, running the images ``make images`` built); ``helm install`` of the chart (the
operator runs from its image as a pod, reaching the apiserver through the node's 10.96.0.1
relay); ``kubectl apply -f examples/ddp-digits.yaml`` exactly as written (a previous
run's job is deleted first; the images carry no torch: each real node mounts the shared
torch tree into its containers, ``realnode.site_spec``);
then every condition change is printed as it happens, and at the end the job's conditions
as kubectl shows them, the training log's accuracy line and the two ``export`` lines that
point a shell's kubectl at the local cluster.

The demo fails (exit 1) unless the job Succeeded and the operator pod never restarted: the
chart sets no liveness-driven restarts that a healthy operator would trigger, so a restart
means the operator process (or its container's set-up) exited, a defect the job's own
success would otherwise hide. The
restarted containers' last state and previous log are printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Optional

from rich.console import Console
from rich.markup import escape

from localcluster.cluster import operator_install
from localcluster.cluster.operator_install import kubectl
from localcluster.common import config

console = Console(highlight=False, soft_wrap=True)
EXAMPLE = config.REPO_ROOT / "examples" / "ddp-digits.yaml"
JOB = "ddp-digits"
OPERATOR_SELECTOR = f"app.kubernetes.io/instance={operator_install.RELEASE}"
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


def restarted_containers(pods: list[dict]) -> list[str]:
    """One line per container of ``pods`` (Pod objects as JSON) whose restartCount is above
    0: ``pod/container: N restart(s); last state: <reason> exit <code> at <finishedAt>:
    <first line of message>``. Empty when nothing restarted. Pure."""
    out = []
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        status = pod.get("status") or {}
        for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
            n = int(cs.get("restartCount") or 0)
            if n <= 0:
                continue
            last = (cs.get("lastState") or {}).get("terminated") or {}
            now = next(iter(cs.get("state") or {}), "unknown")
            detail = (f"{last.get('reason', '?')} exit {last.get('exitCode', '?')} at "
                      f"{last.get('finishedAt', '?')}" if last else "not recorded")
            msg = (last.get("message") or "").strip().splitlines()
            out.append(f"{name}/{cs.get('name', '?')}: {n} restart{'s' if n > 1 else ''} "
                       f"(now {now}); last state: {detail}" + (f": {msg[0]}" if msg else ""))
    return out


def check_operator_restarts() -> bool:
    """Print the operator pod's restarts loudly (last state, previous log tail); True when
    it never restarted."""
    out = kubectl("get", "pods", "-n", operator_install.NAMESPACE, "-l", OPERATOR_SELECTOR,
                  "-o", "json", check=False)
    if out.returncode != 0:
        console.print("[bold red]cannot read the operator pod:[/bold red] "
                      + escape(out.stderr.strip()), markup=True)
        return False
    pods = json.loads(out.stdout).get("items") or []
    lines = restarted_containers(pods)
    if not lines:
        names = ", ".join(p["metadata"]["name"] for p in pods)
        console.print(f"operator pod {names}: 0 restarts")
        return True
    console.rule("[bold red]The operator pod restarted: make demo fails")
    for ln in lines:
        console.print(f"[red]{escape(ln)}[/red]", markup=True, highlight=False)
    for pod in pods:
        prev = kubectl("logs", "-n", operator_install.NAMESPACE, pod["metadata"]["name"],
                       "--previous", "--tail=20", check=False)
        if prev.returncode == 0 and prev.stdout.strip():
            console.print(f"previous log of {pod['metadata']['name']} (last 20 lines):", markup=False)
            console.print(prev.stdout.rstrip(), markup=False)
    return False


def apply_example() -> subprocess.CompletedProcess:
    """``kubectl apply -f examples/ddp-digits.yaml``. Raises CalledProcessError."""
    return kubectl("apply", "-f", str(EXAMPLE))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.demo", description=__doc__)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the job")
    parser.add_argument("--runtime", default="containerd", choices=["containerd", "agent"],
                        help="containerd: real kubelets (default); agent: the node agent")
    args = parser.parse_args(argv)

    console.rule("[bold]1. Local cluster (kube-apiserver, etcd, scheduler, controller-manager, "
                 + ("real kubelets with containerd)" if args.runtime == "containerd" else "node agents)"))
    subprocess.run([sys.executable, "-m", "localcluster", "up", "--runtime", args.runtime], check=True)
    console.print(kubectl("get", "nodes", "-o", "wide").stdout)

    console.rule("[bold]2. helm install disttrain charts/disttrain-operator (the operator runs as a pod)")
    console.print(operator_install.helm_install(), markup=False)
    console.print(kubectl("get", "pods", "-n", operator_install.NAMESPACE, "-o", "wide").stdout, markup=False)
    operator_ok = check_operator_restarts()

    console.rule(f"[bold]3. kubectl apply -f examples/{EXAMPLE.name}")
    kubectl("delete", "-f", str(EXAMPLE), "--ignore-not-found", "--wait=true", check=False)
    t0 = time.monotonic()
    console.print(apply_example().stdout)
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
    console.print(kubectl("get", "pods", "-n", operator_install.NAMESPACE, "-l", OPERATOR_SELECTOR).stdout,
                  markup=False)
    operator_ok = check_operator_restarts() and operator_ok
    console.rule("[bold]Keep using kubectl against the local cluster")
    from localcluster.cli import env_lines
    console.print(env_lines().rstrip(), markup=False)
    console.print("# or: eval \"$(.venv/bin/python -m localcluster env)\"", markup=False)
    console.print("make down   # stops the cluster and removes its namespaces and processes")
    return 0 if phase == "Succeeded" and operator_ok else 1


if __name__ == "__main__":
    sys.exit(main())
