"""A node lost as a machine that loses power (``make test-stall``, ``strike: loseNode``):
its links go down, then everything that runs for it is killed; the API is left as it is."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from localcluster.common import procs
from localcluster.common.config import node_spec_by_name
from localcluster.network import netns as network
from localcluster.nodes.realnode.base import process_name
from localcluster.nodes.realnode.cgroups import kill_node


def _links(netns: str) -> list[str]:
    out = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], capture_output=True,
                         text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n and n != "lo"]


def lose_node(state: Path, node: str) -> dict[str, Any]:
    """Make ``node`` die as a machine that loses power: its links go down (from then on it
    sends nothing: no FIN, no RST, no ARP answer), then its node agent and every process of
    its pods (hostNetwork and pod-network namespaces) are SIGKILLed. The API is left as it
    is. Returns what was done (links, agent pid, processes killed)."""
    spec = node_spec_by_name(node)
    links = _links(spec.netns)
    for link in links:
        subprocess.run(["ip", "-n", spec.netns, "link", "set", link, "down"], capture_output=True)
    agent = procs.tracked_pid(state, f"agent-{node}")
    real = procs.tracked_pid(state, process_name(node))
    if agent is not None:
        os.kill(agent, signal.SIGKILL)
    killed = 0
    if real is not None:  # a real node: its supervisor, then kubelet, containerd, shims, containers
        os.kill(real, signal.SIGKILL)
        killed += kill_node(spec.netns)
        agent = real
    for ns in [spec.netns] + [x for x in network.our_netns() if x.startswith(spec.netns + "-p")]:
        for pid in network.netns_pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while agent is not None and procs.alive(agent) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"node": node, "links": links, "agent": agent, "killed": killed}
