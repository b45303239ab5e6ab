"""One node's agent: its identity and node state (certificates, capacity, topology,
hosts file), the pod workers' shared locks, the event queue, and start-up."""
from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from localcluster.common import pki
from localcluster.common.config import (
    APISERVER_PORT,
    KUBERNETES_SERVICE_IP,
    KUBERNETES_SERVICE_PORT,
    MAX_NODES,
    NodeSpec,
    pod_cidr,
)
from localcluster.common.kubeapi import KubeClient
from localcluster.common.kubeconfig import SERVER, write_kubeconfig
from localcluster.network import podnet, topology
from localcluster.network.serviceproxy import ServiceProxy
from localcluster.nodes import podspec
from localcluster.nodes.nodeagent.logs import LogServer
from localcluster.nodes.nodeagent.node import NodeRegistration
from localcluster.nodes.nodeagent.shared import log, now_rfc3339
from localcluster.nodes.nodeagent.watch import PodWatch

if TYPE_CHECKING:
    from localcluster.nodes.nodeagent.lifecycle import PodWorker


class Agent(NodeRegistration, PodWatch, LogServer):
    """One node's agent: Node registration, Lease, pod workers, log server."""

    def __init__(self, node: NodeSpec, gpus: int, state: Path):
        self.node = node
        self.gpus = gpus
        self.state = state
        p = state / "pki"
        certs = pki.ensure_node_pki(p, node.name, self._internal_ip(node, state))
        self.certs = certs
        self.client = KubeClient(SERVER, str(p / "ca.crt"), str(certs["client_crt"]),
                                 str(certs["client_key"]))
        write_kubeconfig(state / "nodes" / f"{node.name}.kubeconfig", f"system:node:{node.name}",
                         p / "ca.crt", certs["client_crt"], certs["client_key"])
        self.capacity = {"cpu": "8", "memory": "16Gi", "pods": "110",
                         "ephemeral-storage": "100Gi", "nvidia.com/gpu": str(gpus)}
        self.allocatable = dict(self.capacity)
        self.image_map = podspec.load_image_map()
        self.hosts_file = state / "nodes" / f"{node.name}.hosts"
        # Every node resolves every node's names, as cluster DNS / a cloud's resolver would.
        # c10d's TCPStore accepts on a dual-stack socket and reverse-resolves the peer's
        # v4-mapped address (::ffff:a.b.c.d); glibc does not map those to the IPv4 lines,
        # so they are listed too (else: "hostname of the client socket cannot be retrieved").
        # A scenario (`up` writes <state>/nodes/<node>.topology.json) may put its own lines
        # first (e.g. "127.0.1.1 node-a") and give per-node env and library paths.
        topo_file = state / "nodes" / f"{node.name}.topology.json"
        if topo_file.exists():
            doc = json.loads(topo_file.read_text())
            self.topology = topology.NodeTopology.from_json(doc["topology"])
            peers = doc.get("peerHosts") or []
        else:
            self.topology = topology.default_topology(node.index + 1)[node.index]
            peers = topology.peer_hosts(topology.default_topology(MAX_NODES))
        self.internal_ip = self.topology.internal_ip
        lines = ["127.0.0.1 localhost", *self.topology.hosts, *peers]
        self.hosts_file.write_text("".join(f"{ln}\n" for ln in lines))
        self.workers: dict[str, PodWorker] = {}
        self.events: "queue.Queue[dict]" = queue.Queue(maxsize=1000)
        self.finished_uids: set[str] = set()
        self.lock = threading.Lock()
        self.net_lock = threading.Lock()  # pod address allocation and sandbox set-up
        self.pod_cidr = pod_cidr(node.index)
        self.stop = threading.Event()
        self.boot_time = now_rfc3339()

    def node_image(self, image: dict) -> dict:
        """The image map entry with the node's scenario env and paths added."""
        t = self.topology
        if not (t.env or t.library_paths or t.pythonpath):
            return image
        out = dict(image)
        out["env"] = {**t.env, **(image.get("env") or {})}
        if t.library_paths:
            prev = out["env"].get("LD_LIBRARY_PATH", "")
            out["env"]["LD_LIBRARY_PATH"] = ":".join([p for p in prev.split(":") if p] + t.library_paths)
        out["pythonpath"] = list(image.get("pythonpath") or []) + t.pythonpath
        return out

    @staticmethod
    def _internal_ip(node: NodeSpec, state: Path) -> str:
        try:
            doc = json.loads((state / "nodes" / f"{node.name}.topology.json").read_text())
            return doc["topology"]["internal_ip"]
        except (OSError, ValueError, KeyError):
            return node.mgmt_ip

    # -- events -------------------------------------------------------------------------------
    def post_event(self, ns: str, involved: dict, reason: str, message: str, etype: str) -> None:
        """Queue an Event (dropped if the queue is full)."""
        now = now_rfc3339()
        ev = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"generateName": f"{involved['name']}.", "namespace": ns},
              "involvedObject": involved, "reason": reason, "message": message[:1024],
              "type": etype, "source": {"component": "kubelet", "host": self.node.name},
              "firstTimestamp": now, "lastTimestamp": now, "count": 1,
              "reportingComponent": "kubelet", "reportingInstance": self.node.name}
        try:
            self.events.put_nowait(ev)
        except queue.Full:
            pass

    def _event_loop(self) -> None:
        while not self.stop.is_set():
            ev = self.events.get()
            try:
                self.client.post(f"/api/v1/namespaces/{ev['metadata']['namespace']}/events", ev)
            except Exception as e:
                log.debug("event not posted: %s", e)

    def _pod_routes(self) -> list[tuple[str, str]]:
        """[(pod CIDR, InternalIP)] of every node `up` wrote a topology for."""
        out = []
        for f in sorted((self.state / "nodes").glob("*.topology.json")):
            try:
                t = json.loads(f.read_text())["topology"]
                out.append((pod_cidr(int(t["index"])), t["internal_ip"]))
            except (OSError, ValueError, KeyError):
                continue
        return out

    # -- run ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Register, then serve until SIGTERM. Raises on a registration failure after retries."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.register()
                self.renew_lease()
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise
                log.warning("registration failed (%s); retrying", e)
                time.sleep(1)
        log.info("node %s registered (InternalIP %s, kubelet port %d, gpus %d)", self.node.name,
                 self.internal_ip, self.node.kubelet_port, self.gpus)
        self.serve_logs()
        podnet.ensure_node(self.node.netns, self.pod_cidr, self._pod_routes())
        ServiceProxy(self.node.netns, KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT,
                     ("127.0.0.1", APISERVER_PORT)).start()
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        threading.Thread(target=self._event_loop, name="events", daemon=True).start()
        threading.Thread(target=self._watch_loop, name="pod-watch", daemon=True).start()
        self.stop.wait()
