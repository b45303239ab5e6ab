"""`up`: bring the local cluster up, step by step (the control plane, the fabric and routers,
the nodes, cluster DNS and node-local DNS, Kubeflow's training operator and Kueue), reusing
whatever already runs healthily. ``python -m localcluster up`` (cli.py) calls it."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.cluster import controlplane, jobset, kubeflow, kueue, kueue_objects, trainer
from localcluster.common import procs
from localcluster.common.config import (
    FABRIC_NS,
    MAX_NODES,
    NODE_NS_PREFIX,
    NodeSpec,
    node_specs,
    state_dir,
    venv_python,
)
from localcluster.common.kubeapi import ApiError
from localcluster.common.kubeconfig import admin_client
from localcluster.network import dns, nodedns, routing, topology
from localcluster.network import netns as network
from localcluster.nodeimages import archives
from localcluster.nodes.processes import (
    choose_runtime,
    code_version,
    import_images,
    kill_node_pods,
    node_pressures,
    node_process,
    node_ready,
    remove_node,
    stop_node_processes,
)
from localcluster.nodes.realnode.base import binaries, check_disk, disk_hint
from localcluster.scenarios import nodeplan


def load_cfg(state: Path) -> dict:
    try:
        return json.loads((state / "cluster.json").read_text())
    except (OSError, ValueError):
        return {"nodes": {}}


def save_cfg(state: Path, cfg: dict) -> None:
    (state / "cluster.json").write_text(json.dumps(cfg, indent=2))


def _topology_doc(topo, peers: list[str]) -> dict:
    return {"topology": topo.to_json(), "peerHosts": peers}


def _digest(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Addons:
    """What `up` runs beside the nodes: Kubeflow's training operator (``kubeflow``),
    JobSet (``jobset``), Kubeflow Trainer v2 (``trainer``) and Kueue with these options (``kueue``; None: a scenario's, else
    an earlier `up`'s)."""

    kubeflow: bool = False
    jobset: bool = False
    trainer: bool = False  # Kubeflow Trainer v2 (TrainJob); implies jobset
    kueue: "kueue_objects.Options | None" = None


@dataclass
class _Bringup:
    """One `up`: where its state lives, the nodes it wants and how far it got."""

    state: Path
    cfg: dict  # <state>/cluster.json
    desired: list[NodeSpec]
    topos: list[topology.NodeTopology]
    runtime: str
    timeout: float  # seconds, for each wait
    t0: float  # time.monotonic() at the start
    started: dict[str, float] = field(default_factory=dict)  # node -> Unix time its process started

    def say(self, what: str) -> None:
        say(f"{what} ({time.monotonic() - self.t0:.1f}s)")


def up(nodes: int = 2, gpus: int = 0, timeout: float = 120.0, scenario=None,
       runtime: str | None = None, addons: Addons | None = None) -> Path:
    """Bring the cluster up (reusing whatever already runs healthily) and return the admin
    kubeconfig path. Extra nodes from an earlier `up` are removed; agents whose GPU count
    differs are restarted.

    ``scenario`` (a ``scenario.Scenario``) decides the nodes and their interfaces, hosts
    lines, firewall, env and GPUs instead of ``nodes``/``gpus``; a node whose topology
    changed since the last `up` is rebuilt (its pods killed, its namespace recreated).

    Cluster DNS (CoreDNS, ``dns.py``) is set up after the nodes and answers before this
    returns. ``addons.kubeflow`` also runs Kubeflow's training operator (``kubeflow.py``,
    ready before this returns); without it, one that runs is left running; likewise
    ``addons.jobset`` and JobSet (``jobset.py``), ``addons.trainer`` and Trainer v2
    (``trainer.py``, with JobSet), before Kueue. With
    ``addons.kueue`` (or a scenario's ``kueue`` key) Kueue comes last, with its queues
    (``kueue.py``); without, a Kueue an earlier `up` started is kept (restarted if it died)
    with the options it had; `down` stops it.

    ``runtime`` (``node_runtime``): "containerd" runs each node as a real kubelet with its
    own containerd (``realnode/``; the images of ``make images`` are imported into it),
    "agent" as the node agent. A node whose runtime changed is rebuilt.

    Raises ControlPlaneError, NetworkError, FirewallError, ValueError (bad --nodes),
    dns.DnsError, kubeflow.KubeflowError, gomanager.ManagerError (JobSet, Trainer), kueue.KueueError or
    TimeoutError.
    """
    t0 = time.monotonic()
    if os.geteuid() != 0:
        raise PermissionError("localcluster needs root (network namespaces, mounts)")
    topos, peers, segments = _plan(nodes, scenario)
    wants_gpus = bool(gpus or any(t.gpus for t in topos))
    runtime, why = choose_runtime(runtime, wants_gpus)
    if why:
        say(why)
    state = state_dir()
    state.mkdir(parents=True, exist_ok=True)
    b = _Bringup(state, {}, node_specs(len(topos)), topos, runtime, timeout, t0)
    controlplane.ensure_control_plane(state, timeout=timeout)
    b.say("control plane ready")
    network.ensure_fabric(segments)
    routers_changed = routing.ensure(routing.plan(scenario.routers, {k: v.subnet for k, v in scenario.segments.items()},
                                NODE_NS_PREFIX) if scenario is not None else [],
                   FABRIC_NS, network.our_netns(), NODE_NS_PREFIX)
    b.cfg = load_cfg(state)
    if runtime == "containerd":
        binaries()  # names what is missing before anything starts
        check_disk()
        if wants_gpus:
            raise ValueError("real nodes (runtime containerd) have no GPUs here (no device "
                             "plugin); run GPU scenarios with --runtime agent")
        archives.write_list(state)
    _remove_other_nodes(b)
    (state / "nodes").mkdir(parents=True, exist_ok=True)
    code = code_version(runtime)
    rebuilt = False
    for n, topo in zip(b.desired, topos):
        rebuilt = _ensure_node(b, n, topo, gpus if topo.gpus is None else topo.gpus,
                               {"peers": peers, "code": code}) or rebuilt
    if rebuilt or routers_changed:  # new MACs (a rebuilt node, a router): forget cached ones
        for n in b.desired:
            network.flush_neighbours(n.netns)
            network.flush_route_cache(n.netns)  # and path MTUs learnt through an old router
    save_cfg(state, b.cfg)
    client = admin_client(state)
    _wait_ready(b, client)
    say(f"{len(b.desired)} node(s) Ready ({time.monotonic() - t0:.1f}s)")
    if runtime == "containerd":  # images rebuilt since a node started
        import_images(state, b.desired)
    _ensure_dns(b, client)
    _ensure_addons(b, client, scenario, addons or Addons())
    return state / "admin.kubeconfig"


def _plan(nodes: int, scenario) -> tuple[list[topology.NodeTopology], list[str], list[str]]:
    """(topologies, peer hosts lines, segments) of ``scenario``, else of ``nodes`` plain
    nodes. Raises ScenarioError for a plan the scenario checks refuse."""
    if scenario is not None:
        topos = nodeplan.topology(scenario)
        return topos, topology.peer_hosts(topos), list(scenario.segments)
    node_specs(nodes)  # raises ValueError for a count out of 1..MAX_NODES
    return (topology.default_topology(nodes), topology.peer_hosts(topology.default_topology(MAX_NODES)),
            list(topology.DEFAULT_SEGMENTS))


def _remove_other_nodes(b: _Bringup) -> None:
    """Remove the nodes an earlier `up` made that this one does not want."""
    want = {n.name for n in b.desired}
    for name in list(b.cfg.get("nodes", {})):
        if name not in want:
            say(f"removing node {name}")
            remove_node(b.state, name)
            del b.cfg["nodes"][name]


def _ensure_node(b: _Bringup, n: NodeSpec, topo, node_gpus: int, shared: dict) -> bool:
    """Build node ``n`` (its namespace, its topology file) and start its process unless
    one runs with the same GPUs and code (``shared``: peers, code); returns True when an
    existing node was rebuilt (its topology changed)."""
    state, runtime, rebuilt = b.state, b.runtime, False
    doc = _topology_doc(topo, shared["peers"])
    digest = _digest(doc)
    prev = b.cfg.get("nodes", {}).get(n.name, {})
    agent = node_process(n.name, runtime)
    if prev and prev.get("runtime", "agent") != runtime:
        say(f"{n.name}: runtime {prev.get('runtime', 'agent')} -> {runtime}; replacing the node")
        remove_node(state, n.name)
        prev = {}
    if prev and prev.get("topology", digest) != digest:
        say(f"{n.name}: topology changed; rebuilding the node")
        stop_node_processes(state, n.name)
        for ns in [x for x in network.our_netns() if x.startswith(n.netns + "-p")]:
            kill_node_pods(ns)
            network.delete_netns(ns)
        kill_node_pods(n.netns)
        network.delete_netns(n.netns)
        rebuilt = True
    (state / "nodes" / f"{n.name}.topology.json").write_text(json.dumps(doc, indent=1))
    network.ensure_node(n, topo)
    running = procs.tracked_pid(state, agent)
    if running is not None and (prev.get("gpus") != node_gpus or prev.get("code") != shared["code"]):
        stop_node_processes(state, n.name)
        running = None
    if running is None:
        b.started[n.name] = time.time()
    if running is None and runtime == "containerd":
        procs.start_detached(state, agent, [venv_python(), "-m", "localcluster.nodes.realnode",
                                            "run", "--node", n.name, "--state", str(state)])
    elif running is None:
        procs.start_detached(state, agent, [venv_python(), "-m", "localcluster.nodes.nodeagent",
                                            "--node", n.name, "--gpus", str(node_gpus),
                                            "--state", str(state)])
    nics = {ln.name: ln.addresses[0].split("/")[0] for ln in topo.links
            if ln.segment and ln.addresses}  # decoys (segment None) are not NICs
    b.cfg.setdefault("nodes", {})[n.name] = {"gpus": node_gpus, "internalIP": topo.internal_ip,
                                             "nics": nics, "code": shared["code"], "topology": digest,
                                             "runtime": runtime}
    save_cfg(state, b.cfg)
    return rebuilt


def _wait_ready(b: _Bringup, client) -> None:
    """Wait until every wanted node is Ready (after its process started, if this `up`
    started it) with its GPUs, and the default ServiceAccount exists. Raises RuntimeError
    when a node process exited, TimeoutError after ``b.timeout`` seconds."""
    want = {n.name for n in b.desired}
    deadline = time.monotonic() + b.timeout
    while True:
        try:
            items = client.get("/api/v1/nodes")["items"]
            ready = {i["metadata"]["name"] for i in items
                     if node_ready(i, b.started.get(i["metadata"]["name"]))}
            gpus_ok = all(i["status"].get("capacity", {}).get("nvidia.com/gpu", "0")
                          == str(b.cfg["nodes"][i["metadata"]["name"]]["gpus"])
                          for i in items if i["metadata"]["name"] in want)
            client.get("/api/v1/namespaces/default/serviceaccounts/default")
            if want <= ready and gpus_ok:
                hit = node_pressures([i for i in items if i["metadata"]["name"] in want])
                if hit:
                    raise RuntimeError("node(s) under pressure, pods would be evicted: "
                                       + "; ".join(hit) + disk_hint())
                return
        except (ApiError, OSError):
            pass
        for n in b.desired:
            if procs.tracked_pid(b.state, node_process(n.name, b.runtime)) is None:
                raise RuntimeError(f"node {n.name} ({b.runtime}) exited; see {b.state}/logs/"
                                   f"{node_process(n.name, b.runtime)}.log"
                                   + (f" and kubelet-{n.name}.log, containerd-{n.name}.log"
                                      if b.runtime == "containerd" else ""))
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {b.timeout:.0f}s")
        time.sleep(0.3)


def _ensure_dns(b: _Bringup, client) -> None:
    """Cluster DNS, then each node's own DNS (it forwards to cluster DNS)."""
    p = dns.ensure_dns(b.state, b.desired, b.topos, client, timeout=b.timeout)
    b.say(f"cluster DNS answers on {dns.DNS_SERVICE_IP} (in {dns.DNS_NS}, "
          f"{', '.join(sorted(set(p.gateways.values())))})")
    for n, topo in zip(b.desired, b.topos):  # after cluster DNS: a node's own forwards to it
        if nodedns.ensure(b.state, n, topo.dns_records, timeout=b.timeout):
            say(f"{n.name}: node-local DNS on {nodedns.NODE_LOCAL_DNS} answers "
                 f"{', '.join(sorted(topo.dns_records))} itself")


def _ensure_addons(b: _Bringup, client, scenario, addons: Addons) -> None:
    """Kubeflow's training operator and JobSet when asked; Kueue when asked (by ``addons`` or the
    scenario) or when an earlier `up` started it (with the options it had)."""
    state = b.state
    if addons.kubeflow:
        pid = kubeflow.ensure(state, client, timeout=b.timeout)
        b.say(f"Kubeflow training operator ready (pid {pid}, PyTorchJob; log "
              f"{state}/logs/{kubeflow.PROCESS}.log)")
    if addons.jobset or addons.trainer:  # before Kueue: its integrations need the CRDs
        pid = jobset.ensure(state, client, timeout=b.timeout)
        b.say(f"JobSet ready (pid {pid}; log {state}/logs/{jobset.PROCESS}.log)")
    if addons.trainer:
        pid = trainer.ensure(state, client, timeout=b.timeout)
        b.say(f"Kubeflow Trainer v2 ready (pid {pid}, ClusterTrainingRuntime {trainer.RUNTIME}; "
              f"log {state}/logs/{trainer.PROCESS}.log)")
    kueue_options = addons.kueue
    if kueue_options is None and scenario is not None and scenario.kueue is not None:
        kueue_options = scenario.kueue.options()
    if kueue_options is None and b.cfg.get("kueue"):  # started by an earlier `up`: keep it up
        kueue_options = kueue_objects.Options.from_json(b.cfg["kueue"])
    if kueue_options is not None:
        secs = kueue.ensure_kueue(state, client, kueue_options, timeout=b.timeout)
        b.cfg["kueue"] = kueue_options.to_json()
        save_cfg(state, b.cfg)
        b.say(f"kueue ready ({'started, queues Active in %.1fs' % secs if secs else 'kept running'}; "
              f"ClusterQueue {kueue_objects.CLUSTER_QUEUE}, LocalQueue {kueue_objects.LOCAL_QUEUE} in "
              f"{', '.join(kueue_options.namespaces) or 'no namespace'})")


def say(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)
