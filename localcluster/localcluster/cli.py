"""`python -m localcluster up|down|status|env`: bring the local cluster up and down."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from localcluster.cluster import controlplane, kubeflow, kueue
from localcluster.common import procs
from localcluster.common.config import (
    FABRIC_NS,
    IMAGES_FILE,
    MAX_NODES,
    NODE_NS_PREFIX,
    k8s_bin_dir,
    node_spec_by_name,
    node_specs,
    state_dir,
    venv_python,
)
from localcluster.common.kubeapi import ApiError, KubeClient
from localcluster.common.kubeconfig import SERVER
from localcluster.network import dns, nodedns, routing, topology
from localcluster.network import netns as network
from localcluster.images import archives
from localcluster.nodes import realnode

# Modules a running agent has loaded, transitively (containerinit runs fresh for every
# container); tests/unit/test_localcluster_nodeagent.py keeps the list whole.
AGENT_SOURCES = ["__init__.py", "common/__init__.py", "common/config.py", "common/kubeapi.py",
                 "common/kubeconfig.py", "common/pki.py", "common/procs.py", "network/__init__.py",
                 "network/firewall.py", "network/netns.py", "network/nodedns.py", "network/podnet.py",
                 "network/serviceproxy.py", "network/topology.py", "nodes/__init__.py",
                 "nodes/nodeagent/__init__.py", "nodes/nodeagent/__main__.py", "nodes/nodeagent/agent.py",
                 "nodes/nodeagent/container.py", "nodes/nodeagent/lifecycle.py", "nodes/nodeagent/logs.py",
                 "nodes/nodeagent/node.py", "nodes/nodeagent/podstate.py", "nodes/nodeagent/podstatus.py",
                 "nodes/nodeagent/sandbox.py", "nodes/nodeagent/shared.py", "nodes/nodeagent/volumes.py",
                 "nodes/nodeagent/watch.py", "nodes/podspec.py"]
REALNODE_SOURCES = ["nodes/realnode.py", "images/archives.py", "network/serviceproxy.py", "network/podnet.py",
                    "network/topology.py"]
# What runs a node's pods: "containerd" (a real kubelet and containerd, realnode.py) or
# "agent" (the node agent, nodeagent/: pods as processes). $DISTTRAIN_NODE_RUNTIME or
# `up --runtime` chooses; see localcluster/README.md.
RUNTIMES = ("containerd", "agent")
DEFAULT_RUNTIME = "containerd"


def choose_runtime(explicit: str | None, wants_gpus: bool) -> tuple[str, str]:
    """The runtime for an `up` (:func:`node_runtime`), and why when it is not the one
    asked for: nodes with fake GPUs run as node agents unless a runtime was named
    (real nodes here have no device plugin; naming containerd then fails in `up`).
    Raises ValueError for an unknown name."""
    if wants_gpus and not explicit and not os.environ.get("DISTTRAIN_NODE_RUNTIME", "").strip():
        return "agent", ("fake GPUs need the node agent (real nodes here have no device plugin): "
                         "these nodes run as node agents, the lighter mode")
    return node_runtime(explicit), ""


def node_runtime(explicit: str | None = None) -> str:
    """The runtime `up` gives nodes: ``explicit``, else $DISTTRAIN_NODE_RUNTIME, else
    DEFAULT_RUNTIME. Raises ValueError for an unknown name."""
    r = explicit or os.environ.get("DISTTRAIN_NODE_RUNTIME", "").strip() or DEFAULT_RUNTIME
    if r not in RUNTIMES:
        raise ValueError(f"node runtime must be one of {', '.join(RUNTIMES)}, got {r!r}")
    return r


def _say(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)


def admin_client(state: Path) -> KubeClient:
    """A KubeClient authenticated as admin (system:masters)."""
    p = state / "pki"
    return KubeClient(SERVER, str(p / "ca.crt"), str(p / "admin.crt"), str(p / "admin.key"))


def _load_cfg(state: Path) -> dict:
    try:
        return json.loads((state / "cluster.json").read_text())
    except (OSError, ValueError):
        return {"nodes": {}}


def _save_cfg(state: Path, cfg: dict) -> None:
    (state / "cluster.json").write_text(json.dumps(cfg, indent=2))


def _agent_name(node: str) -> str:
    return f"agent-{node}"


def _node_process(node: str, runtime: str) -> str:
    return realnode.process_name(node) if runtime == "containerd" else _agent_name(node)


def _stop_node_processes(state: Path, name: str) -> None:
    """Stop whatever runs node ``name`` (agent or real node) and every process of it."""
    procs.stop_tracked(state, _agent_name(name))
    procs.stop_tracked(state, realnode.process_name(name), grace=20.0)
    nodedns.stop(state, name)
    realnode.kill_node(node_spec_by_name(name).netns)


def _node_ready(node: dict, since: float | None = None) -> bool:
    """Ready=True, and with ``since`` (a Unix time: when its node process started) from a
    heartbeat at or after it: a Node object a restarted kubelet has not updated yet still
    says Ready from before (until the node lifecycle controller's grace period)."""
    from datetime import datetime
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") != "Ready" or c.get("status") != "True":
            continue
        if since is None:
            return True
        try:
            beat = datetime.fromisoformat(str(c.get("lastHeartbeatTime")).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return False
        return beat >= int(since)  # heartbeats have whole seconds
    return False


def _kill_node_pods(ns: str) -> int:
    """SIGKILL every process in our namespace ``ns``; returns how many were signalled."""
    n = 0
    for pid in network.netns_pids(ns):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except ProcessLookupError:
            pass
    return n


def _remove_node(state: Path, name: str) -> None:
    _stop_node_processes(state, name)
    spec = node_spec_by_name(name)
    for ns in [n for n in network.our_netns() if n.startswith(spec.netns + "-p")]:
        _kill_node_pods(ns)  # its pods' own namespaces (podnet.py)
        network.delete_netns(ns)
    _kill_node_pods(spec.netns)
    network.delete_netns(spec.netns)
    try:
        admin_client(state).delete(f"/api/v1/nodes/{name}")
    except (ApiError, OSError):
        pass


def agent_code_version(runtime: str = "agent") -> str:
    """Hash of the node agent's (or the real node's) source: `up` restarts nodes that run
    older code."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in (REALNODE_SOURCES if runtime == "containerd" else AGENT_SOURCES):
        h.update((here / name).read_bytes())
    h.update(IMAGES_FILE.read_bytes() if IMAGES_FILE.exists() else b"")
    return h.hexdigest()[:16]


def _topology_doc(topo, peers: list[str]) -> dict:
    return {"topology": topo.to_json(), "peerHosts": peers}


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def up(nodes: int = 2, gpus: int = 0, timeout: float = 120.0, scenario=None,
       with_kubeflow: bool = False, kueue_options: "kueue.Options | None" = None,
       runtime: str | None = None) -> Path:
    """Bring the cluster up (reusing whatever already runs healthily) and return the admin
    kubeconfig path. Extra nodes from an earlier `up` are removed; agents whose GPU count
    differs are restarted.

    ``scenario`` (a ``scenario.Scenario``) decides the nodes and their interfaces, hosts
    lines, firewall, env and GPUs instead of ``nodes``/``gpus``; a node whose topology
    changed since the last `up` is rebuilt (its pods killed, its namespace recreated).

    Cluster DNS (CoreDNS, ``dns.py``) is set up after the nodes and answers before this
    returns. ``with_kubeflow`` also runs Kubeflow's training operator (``kubeflow.py``,
    ready before this returns); without it, one that runs is left running. With
    ``kueue_options`` (or a scenario's ``kueue`` key) Kueue comes last, with its queues
    (``kueue.py``); without, a Kueue an earlier `up` started is kept (restarted if it died)
    with the options it had; `down` stops it.

    ``runtime`` (``node_runtime``): "containerd" runs each node as a real kubelet with its
    own containerd (``realnode.py``; the images of ``make images`` are imported into it),
    "agent" as the node agent. A node whose runtime changed is rebuilt.

    Raises ControlPlaneError, NetworkError, FirewallError, ValueError (bad --nodes),
    dns.DnsError, kubeflow.KubeflowError, kueue.KueueError or TimeoutError.
    """
    from localcluster.scenarios import scenario as scn
    t0 = time.monotonic()
    if os.geteuid() != 0:
        raise PermissionError("localcluster needs root (network namespaces, mounts)")
    if scenario is not None:
        nodes = scenario.nodes
        topos = scn.topology(scenario)
        peers = topology.peer_hosts(topos)
        segments = list(scenario.segments)
    else:
        topos = topology.default_topology(nodes)
        peers = topology.peer_hosts(topology.default_topology(MAX_NODES))
        segments = list(topology.DEFAULT_SEGMENTS)
    wants_gpus = bool(gpus or any(t.gpus for t in topos))
    runtime, why = choose_runtime(runtime, wants_gpus)
    if why:
        _say(why)
    desired = node_specs(nodes)
    state = state_dir()
    state.mkdir(parents=True, exist_ok=True)
    controlplane.ensure_control_plane(state, timeout=timeout)
    _say(f"control plane ready ({time.monotonic() - t0:.1f}s)")
    network.ensure_fabric(segments)
    routers_changed = routing.ensure(routing.plan(scenario.routers, {k: v.subnet for k, v in scenario.segments.items()},
                                NODE_NS_PREFIX) if scenario is not None else [],
                   FABRIC_NS, network.our_netns(), NODE_NS_PREFIX)
    cfg = _load_cfg(state)
    code = agent_code_version(runtime)
    if runtime == "containerd":
        realnode.binaries()  # names what is missing before anything starts
        if wants_gpus:
            raise ValueError("real nodes (runtime containerd) have no GPUs here (no device "
                             "plugin); run GPU scenarios with --runtime agent")
        archives.write_list(state)
    want = {n.name for n in desired}
    for name in list(cfg.get("nodes", {})):
        if name not in want:
            _say(f"removing node {name}")
            _remove_node(state, name)
            del cfg["nodes"][name]
    (state / "nodes").mkdir(parents=True, exist_ok=True)
    rebuilt = False
    started: dict[str, float] = {}  # node -> when its process was started by this `up`
    for n, topo in zip(desired, topos):
        node_gpus = gpus if topo.gpus is None else topo.gpus
        doc = _topology_doc(topo, peers)
        digest = _digest(doc)
        prev = cfg.get("nodes", {}).get(n.name, {})
        agent = _node_process(n.name, runtime)
        if prev and prev.get("runtime", "agent") != runtime:
            _say(f"{n.name}: runtime {prev.get('runtime', 'agent')} -> {runtime}; replacing the node")
            _remove_node(state, n.name)
            prev = {}
        if prev and prev.get("topology", digest) != digest:
            _say(f"{n.name}: topology changed; rebuilding the node")
            _stop_node_processes(state, n.name)
            for ns in [x for x in network.our_netns() if x.startswith(n.netns + "-p")]:
                _kill_node_pods(ns)
                network.delete_netns(ns)
            _kill_node_pods(n.netns)
            network.delete_netns(n.netns)
            rebuilt = True
        (state / "nodes" / f"{n.name}.topology.json").write_text(json.dumps(doc, indent=1))
        network.ensure_node(n, topo)
        running = procs.tracked_pid(state, agent)
        if running is not None and (prev.get("gpus") != node_gpus or prev.get("code") != code):
            _stop_node_processes(state, n.name)
            running = None
        if running is None:
            started[n.name] = time.time()
        if running is None and runtime == "containerd":
            procs.start_detached(state, agent, [venv_python(), "-m", "localcluster.nodes.realnode",
                                                "run", "--node", n.name, "--state", str(state)])
        elif running is None:
            procs.start_detached(state, agent, [venv_python(), "-m", "localcluster.nodes.nodeagent",
                                                "--node", n.name, "--gpus", str(node_gpus),
                                                "--state", str(state)])
        nics = {ln.name: ln.addresses[0].split("/")[0] for ln in topo.links
                if ln.segment and ln.addresses}  # decoys (segment None) are not NICs
        cfg.setdefault("nodes", {})[n.name] = {"gpus": node_gpus, "internalIP": topo.internal_ip,
                                               "nics": nics, "code": code, "topology": digest,
                                               "runtime": runtime}
        _save_cfg(state, cfg)
    if rebuilt or routers_changed:  # new MACs (a rebuilt node, a router): forget cached ones
        for n in desired:
            network.flush_neighbours(n.netns)
            network.flush_route_cache(n.netns)  # and path MTUs learnt through an old router
    _save_cfg(state, cfg)
    client = admin_client(state)
    deadline = time.monotonic() + timeout
    while True:
        try:
            items = client.get("/api/v1/nodes")["items"]
            ready = {i["metadata"]["name"] for i in items
                     if _node_ready(i, started.get(i["metadata"]["name"]))}
            gpus_ok = all(i["status"].get("capacity", {}).get("nvidia.com/gpu", "0")
                          == str(cfg["nodes"][i["metadata"]["name"]]["gpus"])
                          for i in items if i["metadata"]["name"] in want)
            client.get("/api/v1/namespaces/default/serviceaccounts/default")
            if want <= ready and gpus_ok:
                break
        except (ApiError, OSError):
            pass
        for n in desired:
            if procs.tracked_pid(state, _node_process(n.name, runtime)) is None:
                raise RuntimeError(f"node {n.name} ({runtime}) exited; see {state}/logs/"
                                   f"{_node_process(n.name, runtime)}.log"
                                   + (f" and kubelet-{n.name}.log, containerd-{n.name}.log"
                                      if runtime == "containerd" else ""))
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout:.0f}s")
        time.sleep(0.3)
    _say(f"{len(desired)} node(s) Ready ({time.monotonic() - t0:.1f}s)")
    if runtime == "containerd":  # images rebuilt since a node started
        _import_images(state, desired)
    p = dns.ensure_dns(state, desired, topos, client, timeout=timeout)
    _say(f"cluster DNS answers on {dns.DNS_SERVICE_IP} (in {dns.DNS_NS}, "
         f"{', '.join(sorted(set(p.gateways.values())))}) ({time.monotonic() - t0:.1f}s)")
    for n, topo in zip(desired, topos):  # after cluster DNS: a node's own forwards to it
        if nodedns.ensure(state, n, topo.dns_records, timeout=timeout):
            _say(f"{n.name}: node-local DNS on {nodedns.NODE_LOCAL_DNS} answers "
                 f"{', '.join(sorted(topo.dns_records))} itself")
    if with_kubeflow:
        pid = kubeflow.ensure(state, client, timeout=timeout)
        _say(f"Kubeflow training operator ready (pid {pid}, PyTorchJob; log "
             f"{state}/logs/{kubeflow.PROCESS}.log) ({time.monotonic() - t0:.1f}s)")
    if kueue_options is None and scenario is not None and scenario.kueue is not None:
        kueue_options = scenario.kueue.options()
    if kueue_options is None and cfg.get("kueue"):  # started by an earlier `up`: keep it up
        kueue_options = kueue.Options.from_json(cfg["kueue"])
    if kueue_options is not None:
        secs = kueue.ensure_kueue(state, client, dict(kueue_options.quota),
                                  kueue_options.namespaces, kueue_options.integrations,
                                  timeout=timeout)
        cfg["kueue"] = kueue_options.to_json()
        _save_cfg(state, cfg)
        _say(f"kueue ready ({'started, queues Active in %.1fs' % secs if secs else 'kept running'}; "
             f"ClusterQueue {kueue.CLUSTER_QUEUE}, LocalQueue {kueue.LOCAL_QUEUE} in "
             f"{', '.join(kueue_options.namespaces) or 'no namespace'}) "
             f"({time.monotonic() - t0:.1f}s)")
    return state / "admin.kubeconfig"


def _import_images(state: Path, desired) -> None:
    """Import into each running real node the image archives it lacks. Raises RuntimeError."""
    images = archives.image_archives(state)
    ctr = realnode.binaries()["ctr"]
    for n in desired:
        try:
            archives.import_images(ctr, realnode.node_dir(state, n.name),
                                   realnode.containerd_root(n), images)
        except archives.ImageError as e:
            raise RuntimeError(f"{n.name}: {e}") from e


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
        _say(f"operator not stopped: {e}")
    kf_stopped = [kubeflow.PROCESS] if kubeflow.stop(state) else []
    agents = sorted((state / "run").glob("agent-*.pid")) if (state / "run").exists() else []
    agents += sorted((state / "run").glob("node-*.pid")) if (state / "run").exists() else []
    agents += sorted((state / "run").glob("nodedns-*.pid")) if (state / "run").exists() else []
    procs.stop_many([p for p in (procs.tracked_pid(state, pf.stem) for pf in agents) if p], 3)
    for ns in network.our_netns():  # real nodes: kubelet, containerd, shims, containers
        realnode.kill_node(ns)
    addons = dns.stop_dns(state) + ([kueue.KUEUE] if kueue.stop_kueue(state) else [])
    for pf in agents:
        pf.unlink(missing_ok=True)
    killed = 0
    for ns in network.our_netns():
        killed += _kill_node_pods(ns)
    if killed:
        _say(f"killed {killed} pod process(es)")
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
    _say("down" + (f" (stopped {', '.join(stopped)})" if stopped else " (nothing was running)"))


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
    cfg = _load_cfg(state)
    if cfg.get("kueue"):
        h = kueue.kueue_healthy(state)
        ok &= h
        print(f"  {'kueue':26s} {'healthy' if h else 'DOWN'} quota="
              + ",".join(f"{k}={v}" for k, v in sorted(cfg["kueue"].get("quota", {}).items()))
              + f" localQueue={kueue.LOCAL_QUEUE} in "
              + ",".join(cfg["kueue"].get("namespaces") or []))
    api_nodes = {}
    try:
        api_nodes = {i["metadata"]["name"]: i for i in admin_client(state).get("/api/v1/nodes")["items"]}
    except (ApiError, OSError):
        pass
    for name, info in sorted(cfg.get("nodes", {}).items()):
        spec = node_spec_by_name(name)
        net = network.node_healthy(spec, _stored_topology(state, name))
        agent = procs.tracked_pid(state, _node_process(name, info.get("runtime", "agent"))) is not None
        ready = name in api_nodes and _node_ready(api_nodes[name])
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
    u.add_argument("--kueue", action="store_true",
                   help="also run Kueue with a ClusterQueue and LocalQueue(s) (see kueue.py)")
    u.add_argument("--kueue-quota", default="",
                   help="the ClusterQueue's nominal quota, e.g. cpu=4,memory=8Gi,nvidia.com/gpu=2 "
                        f"(unnamed resources keep {kueue.DEFAULT_QUOTA})")
    u.add_argument("--kueue-namespace", action="append", dest="kueue_namespaces",
                   help="a namespace that gets the LocalQueue user-queue (repeatable; default: default)")
    sub.add_parser("down", help="stop everything and clean up")
    sub.add_parser("status", help="show health")
    sub.add_parser("env", help="print export lines for KUBECONFIG and PATH")
    a = ap.parse_args(argv)
    if a.cmd == "up":
        try:
            sc = None
            if a.scenario:
                from localcluster.scenarios import scenario as scn
                sc = scn.load(a.scenario)
            ko = None
            if a.kueue or a.kueue_quota or a.kueue_namespaces:
                ko = kueue.Options(tuple(sorted(kueue.parse_quota(a.kueue_quota).items())),
                                   tuple(a.kueue_namespaces or ["default"]))
            print(up(a.nodes, a.gpus_per_node, a.timeout, scenario=sc, with_kubeflow=a.kubeflow,
                     kueue_options=ko, runtime=a.runtime))
        except Exception as e:
            _say(f"up failed: {e}")
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
