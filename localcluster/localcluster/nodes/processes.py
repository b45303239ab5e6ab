"""The node processes `up` starts and stops: which runtime runs a node's pods (a real
kubelet with containerd, or the node agent), each node's tracked process, its readiness,
the removal of a node and its pods, and the code fingerprint that restarts nodes running
older code."""
from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

from localcluster.common import procs
from localcluster.common.config import (
    IMAGES_FILE,
    node_spec_by_name,
)
from localcluster.common.kubeapi import ApiError
from localcluster.common.kubeconfig import admin_client
from localcluster.network import netns as network
from localcluster.network import nodedns
from localcluster.nodeimages import archives
from localcluster.nodes.realnode.base import binaries, containerd_root, node_dir, process_name
from localcluster.nodes.realnode.cgroups import kill_node

# Modules a running agent has loaded, transitively (containerinit runs fresh for every
# container); tests/unit/localcluster/nodes/test_nodeagent.py keeps the list whole.
AGENT_SOURCES = ["__init__.py", "common/__init__.py", "common/config.py", "common/kubeapi.py",
                 "common/kubeconfig.py", "common/pki.py", "common/procs.py", "network/__init__.py",
                 "network/dnsquery.py", "network/firewall.py", "network/netns.py", "network/nodedns.py",
                 "network/podnet.py", "network/serviceproxy.py", "network/setns.py", "network/topology.py",
                 "nodes/__init__.py",
                 "nodes/nodeagent/__init__.py", "nodes/nodeagent/__main__.py", "nodes/nodeagent/agent.py",
                 "nodes/nodeagent/container.py", "nodes/nodeagent/lifecycle.py", "nodes/nodeagent/logs.py",
                 "nodes/nodeagent/node.py", "nodes/nodeagent/podstate.py", "nodes/nodeagent/podstatus.py",
                 "nodes/nodeagent/sandbox.py", "nodes/nodeagent/shared.py", "nodes/nodeagent/volumes.py",
                 "nodes/nodeagent/watch.py", "nodes/podspec.py"]


REALNODE_SOURCES = ["nodes/realnode/__init__.py", "nodes/realnode/__main__.py", "nodes/realnode/base.py",
                    "nodes/realnode/cgroups.py", "nodes/realnode/nodeconfig.py", "nodes/realnode/sitetree.py",
                    "nodes/realnode/supervisor.py", "nodeimages/archives.py", "network/serviceproxy.py", "network/setns.py",
                    "network/podnet.py", "network/topology.py"]


# What runs a node's pods: "containerd" (a real kubelet and containerd, realnode/) or
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


def agent_name(node: str) -> str:
    return f"agent-{node}"


def node_process(node: str, runtime: str) -> str:
    return process_name(node) if runtime == "containerd" else agent_name(node)


def stop_node_processes(state: Path, name: str) -> None:
    """Stop whatever runs node ``name`` (agent or real node) and every process of it."""
    procs.stop_tracked(state, agent_name(name))
    procs.stop_tracked(state, process_name(name), grace=20.0)
    nodedns.stop(state, name)
    kill_node(node_spec_by_name(name).netns)


def node_ready(node: dict, since: float | None = None) -> bool:
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


PRESSURES = ("DiskPressure", "MemoryPressure", "PIDPressure")


def node_pressures(nodes: list[dict]) -> list[str]:
    """``["<node>: <condition> (<message>)"]`` for each pressure condition that is True on
    the Node objects ``nodes``: such a node is tainted and evicts pods (under disk pressure
    the kubelet also deletes every image no pod runs, and ours are never pulled back)."""
    out = []
    for node in nodes:
        for c in (node.get("status") or {}).get("conditions") or []:
            if c.get("type") in PRESSURES and c.get("status") == "True":
                out.append(f"{(node.get('metadata') or {}).get('name')}: {c['type']}"
                           f" ({str(c.get('message') or '')[:160]})")
    return out


def kill_node_pods(ns: str) -> int:
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


def remove_node(state: Path, name: str) -> None:
    stop_node_processes(state, name)
    spec = node_spec_by_name(name)
    for ns in [n for n in network.our_netns() if n.startswith(spec.netns + "-p")]:
        kill_node_pods(ns)  # its pods' own namespaces (podnet.py)
        network.delete_netns(ns)
    kill_node_pods(spec.netns)
    network.delete_netns(spec.netns)
    try:
        admin_client(state).delete(f"/api/v1/nodes/{name}")
    except (ApiError, OSError):
        pass


def code_version(runtime: str = "agent") -> str:
    """Hash of the node agent's (or the real node's) source: `up` restarts nodes that run
    older code."""
    h = hashlib.sha256()
    here = Path(__file__).parent.parent  # the package's root
    for name in (REALNODE_SOURCES if runtime == "containerd" else AGENT_SOURCES):
        h.update((here / name).read_bytes())
    h.update(IMAGES_FILE.read_bytes() if IMAGES_FILE.exists() else b"")
    return h.hexdigest()[:16]


def import_images(state: Path, desired) -> None:
    """Import into each running real node the image archives it lacks. Raises RuntimeError."""
    images = archives.image_archives(state)
    ctr = binaries()["ctr"]
    for n in desired:
        try:
            archives.import_images(ctr, node_dir(state, n.name),
                                   containerd_root(n), images)
        except archives.ImageError as e:
            raise RuntimeError(f"{n.name}: {e}") from e
