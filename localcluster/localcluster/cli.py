"""`python -m localcluster up|down|status|env`: bring the local cluster up and down."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from localcluster.bringup import Addons, load_cfg, say, up
from localcluster.cluster import controlplane, jobset, kubeflow, kueue, kueue_objects, trainer
from localcluster.common import procs
from localcluster.common.config import (
    FABRIC_NS,
    k8s_bin_dir,
    node_spec_by_name,
    state_dir,
)
from localcluster.common.kubeapi import ApiError
from localcluster.common.kubeconfig import admin_client
from localcluster.network import dns, topology
from localcluster.network import netns as network
from localcluster.nodes.processes import (
    DEFAULT_RUNTIME,
    RUNTIMES,
    kill_node_pods,
    node_process,
    node_ready,
)
from localcluster.nodes.realnode.cgroups import kill_node


def _created_paths_cleanup(state: Path) -> None:
    f = state / "created-paths"
    try:
        paths = [p for p in f.read_text().splitlines() if p.strip()]
    except OSError:
        return
    # deepest first, each path once
    for p in sorted(set(paths), key=lambda x: x.count("/"), reverse=True):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)  # only if empty
            elif os.path.isfile(p) and os.path.getsize(p) == 0:
                os.unlink(p)
        except OSError:
            pass
    f.unlink(missing_ok=True)


def _unmount_leftovers(state: Path) -> None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    targets = [ln.split()[4] for ln in lines if len(ln.split()) > 4]
    for t in sorted(targets, key=len, reverse=True):
        if t == str(state) or t.startswith(str(state) + "/"):
            subprocess.run(["umount", "-l", t], capture_output=True)


def down() -> None:
    """Stop everything `up` started: node agents, pod processes, cluster DNS, control plane
    (and the operator if `localcluster.cluster.operator_install` started it); delete the
    namespaces, created mount points and etcd data. Safe to run when nothing is up."""
    state = state_dir()
    try:  # the operator as `localcluster.cluster.operator_install` runs it: useless without the cluster
        from localcluster.cluster import operator_install
        operator_install.stop(timeout=5.0)
    except Exception as e:  # module absent or broken: not ours to fix here
        say(f"operator not stopped: {e}")
    kf_stopped = [kubeflow.PROCESS] if kubeflow.stop(state) else []
    kf_stopped += [trainer.PROCESS] if trainer.stop(state) else []
    kf_stopped += [jobset.PROCESS] if jobset.stop(state) else []
    agents = sorted((state / "run").glob("agent-*.pid")) if (state / "run").exists() else []
    agents += sorted((state / "run").glob("node-*.pid")) if (state / "run").exists() else []
    agents += sorted((state / "run").glob("nodedns-*.pid")) if (state / "run").exists() else []
    procs.stop_many([p for p in (procs.tracked_pid(state, pf.stem) for pf in agents) if p], 3)
    for ns in network.our_netns():  # real nodes: kubelet, containerd, shims, containers
        kill_node(ns)
    addons = dns.stop_dns(state) + ([kueue.KUEUE] if kueue.stop_kueue(state) else [])
    for pf in agents:
        pf.unlink(missing_ok=True)
    killed = 0
    for ns in network.our_netns():
        killed += kill_node_pods(ns)
    if killed:
        say(f"killed {killed} pod process(es)")
    stopped = kf_stopped + addons + controlplane.stop_control_plane(state)
    for pid in procs.stray_pids(state):
        procs.stop_pid(pid, grace=2)
    for ns in network.our_netns():
        if ns != FABRIC_NS:
            network.delete_netns(ns)
    network.delete_netns(FABRIC_NS)
    _unmount_leftovers(state)
    _created_paths_cleanup(state)
    for d in ("etcd", "pods", "run", "apiserver-certs", "controller-manager-certs",
              "scheduler-certs"):
        shutil.rmtree(state / d, ignore_errors=True)
    (state / "cluster.json").unlink(missing_ok=True)
    say("down" + (f" (stopped {', '.join(stopped)})" if stopped else " (nothing was running)"))


def _stored_topology(state: Path, name: str):
    try:
        doc = json.loads((state / "nodes" / f"{name}.topology.json").read_text())
        return topology.NodeTopology.from_json(doc["topology"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def status() -> int:
    """Print component/node health; return 0 if everything is healthy, 1 otherwise."""
    state = state_dir()
    ok = True
    print(f"state dir: {state}")
    for name in controlplane.COMPONENTS:
        h = controlplane.component_healthy(state, name)
        ok &= h
        print(f"  {name:26s} {'healthy' if h else 'DOWN'}")
    h = dns.dns_healthy(state)
    ok &= h
    print(f"  {'cluster DNS (coredns)':26s} {'healthy' if h else 'DOWN'}")
    kf = kubeflow.status_line(state)
    if kf is not None:  # only once `up --kubeflow` started it
        ok &= kf.startswith("healthy")
        print(f"  {'training operator (kubeflow)':26s} {kf}")
    for name, line in (("jobset", jobset.status_line(state)),
                       ("trainer (kubeflow v2)", trainer.status_line(state))):
        if line is not None:  # only once `up --jobset`/`--trainer` started it
            ok &= line.startswith("healthy")
            print(f"  {name:26s} {line}")
    cfg = load_cfg(state)
    if cfg.get("kueue"):
        h = kueue.kueue_healthy(state)
        ok &= h
        print(f"  {'kueue':26s} {'healthy' if h else 'DOWN'} quota="
              + ",".join(f"{k}={v}" for k, v in sorted(cfg["kueue"].get("quota", {}).items()))
              + f" localQueue={kueue_objects.LOCAL_QUEUE} in "
              + ",".join(cfg["kueue"].get("namespaces") or []))
    api_nodes = {}
    try:
        api_nodes = {i["metadata"]["name"]: i for i in admin_client(state).get("/api/v1/nodes")["items"]}
    except (ApiError, OSError):
        pass
    for name, info in sorted(cfg.get("nodes", {}).items()):
        spec = node_spec_by_name(name)
        net = network.node_healthy(spec, _stored_topology(state, name))
        agent = procs.tracked_pid(state, node_process(name, info.get("runtime", "agent"))) is not None
        ready = name in api_nodes and node_ready(api_nodes[name])
        ok &= net and agent and ready
        print(f"  {name:26s} netns={'ok' if net else 'MISSING'} "
              f"{'kubelet' if info.get('runtime') == 'containerd' else 'agent'}={'up' if agent else 'DOWN'} "
              f"Ready={ready} internalIP={info.get('internalIP')} "
              + " ".join(f"{k}={v}" for k, v in (info.get("nics") or {}).items())
              + f" gpus={info.get('gpus')}")
    if not cfg.get("nodes"):
        print("  (no nodes)")
        ok = False
    print(f"KUBECONFIG={state / 'admin.kubeconfig'}")
    return 0 if ok else 1


def env_lines() -> str:
    """Shell lines that point kubectl (and helm) at the cluster."""
    from localcluster.cluster.operator_install import helm_bin
    state = state_dir()
    return (f"export KUBECONFIG={state / 'admin.kubeconfig'}\n"
            f"export PATH={k8s_bin_dir()}:{helm_bin().parent}:$PATH\n")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    ap = argparse.ArgumentParser(prog="python -m localcluster",
                                 description="a local Kubernetes cluster with simulated nodes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="start (or reuse) the cluster; prints the KUBECONFIG path")
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--gpus-per-node", type=int, default=0)
    u.add_argument("--timeout", type=float, default=120.0)
    u.add_argument("--scenario", help="build the nodes a scenario describes (name in scenarios/ or path)")
    u.add_argument("--runtime", choices=RUNTIMES,
                   help="what runs the nodes' pods: containerd (a real kubelet and containerd per "
                        f"node) or agent (the node agent); default $DISTTRAIN_NODE_RUNTIME or {DEFAULT_RUNTIME}")
    u.add_argument("--kubeflow", action="store_true",
                   help="also run Kubeflow's training operator (PyTorchJob), see localcluster/README.md")
    u.add_argument("--jobset", action="store_true",
                   help="also run JobSet (sigs.k8s.io/jobset), see localcluster/cluster/jobset.py")
    u.add_argument("--trainer", action="store_true",
                   help="also run Kubeflow Trainer v2 (TrainJob) and JobSet, see "
                        "localcluster/cluster/trainer.py")
    u.add_argument("--kueue", action="store_true",
                   help="also run Kueue with a ClusterQueue and LocalQueue(s) (see kueue.py)")
    u.add_argument("--kueue-quota", default="",
                   help="the ClusterQueue's nominal quota, e.g. cpu=4,memory=8Gi,nvidia.com/gpu=2 "
                        f"(unnamed resources keep {kueue_objects.DEFAULT_QUOTA})")
    u.add_argument("--kueue-namespace", action="append", dest="kueue_namespaces",
                   help="a namespace that gets the LocalQueue user-queue (repeatable; default: default)")
    u.add_argument("--kueue-integration", action="append", dest="kueue_integrations",
                   choices=sorted(kueue_objects.INTEGRATION_RESOURCES),
                   help="a Kueue integration to enable (repeatable; default: "
                        + ", ".join(kueue_objects.DEFAULT_INTEGRATIONS) + ")")
    u.add_argument("--kueue-wait-for-pods-ready", default="", metavar="TIMEOUT",
                   help="Kueue's waitForPodsReady with this timeout (e.g. 5m) and blockAdmission")
    sub.add_parser("down", help="stop everything and clean up")
    sub.add_parser("status", help="show health")
    sub.add_parser("env", help="print export lines for KUBECONFIG and PATH")
    a = ap.parse_args(argv)
    if a.cmd == "up":
        try:
            sc = None
            if a.scenario:
                from localcluster.scenarios import loader
                sc = loader.load(a.scenario)
            ko = None
            if (a.kueue or a.kueue_quota or a.kueue_namespaces or a.kueue_integrations
                    or a.kueue_wait_for_pods_ready):
                ko = kueue_objects.Options(tuple(sorted(kueue_objects.parse_quota(a.kueue_quota).items())),
                                   tuple(a.kueue_namespaces or ["default"]),
                                   tuple(a.kueue_integrations or kueue_objects.DEFAULT_INTEGRATIONS),
                                   a.kueue_wait_for_pods_ready)
            print(up(a.nodes, a.gpus_per_node, a.timeout, scenario=sc, runtime=a.runtime,
                     addons=Addons(kubeflow=a.kubeflow, jobset=a.jobset, trainer=a.trainer, kueue=ko)))
        except Exception as e:
            say(f"up failed: {e}")
            return 1
        return 0
    if a.cmd == "down":
        down()
        return 0
    if a.cmd == "status":
        return status()
    if a.cmd == "env":
        sys.stdout.write(env_lines())
        return 0
    return 2
