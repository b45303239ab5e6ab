"""Carry out a scenario's ``strike`` (:mod:`localcluster.scenarios.strike`) on the real
nodes while the job trains, and undo it afterwards.

The struck rank's pod is given by the caller (a DistTrainingJob's ``<job>-worker-<rank>``,
a PyTorchJob's master and workers); its training process is found on this host as the
Python process, in that pod's cgroup, whose argv runs the training script (not torchrun's
agent, not the shell that wraps it). Faults: ``freeze`` (SIGSTOP), ``partition`` (an
nftables input rule on the struck node dropping both of the peer node's addresses),
``loseNode`` (:func:`localcluster.nodes.loss.lose_node`), ``throttle`` (the CFS quota of the
training container's cpu cgroup, cgroup v1 as the real nodes have it).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Optional

from localcluster.common.config import NodeSpec, node_index
from localcluster.network import firewall
from localcluster.nodes import loss
from localcluster.scenarios.strike import Strike

SCRIPT = "train_digits.py"  # what the example's trainer runs (scenarios/scripts/ replace its text)
CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


class StrikeError(RuntimeError):
    """The strike could not be carried out (no pod, no training process, no cgroup)."""


def _argv(pid: str) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def trainer_pid(pod_uid: str, script: str = SCRIPT) -> Optional[int]:
    """The host pid of the training process in the pod with ``pod_uid``: a Python process
    whose cgroup names ``pod<uid>`` and whose argv runs ``script`` (torchrun's agent and a
    wrapping shell left out); None when there is none (yet)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"pod{pod_uid}" not in (d / "cgroup").read_text():
                continue
        except OSError:
            continue
        argv = _argv(d.name)
        if (argv and os.path.basename(argv[0]).startswith("python") and any(a.endswith(script) for a in argv)
                and not any("torchrun" in a or a == "torch.distributed.run" for a in argv)):
            return int(d.name)
    return None


def throttle(pid: int, cpus: Optional[float]) -> Path:
    """Set the CFS quota of ``pid``'s cpu cgroup to ``cpus`` CPUs (None: no limit); returns
    the cgroup's directory. Raises StrikeError when it has none (not cgroup v1)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            d = CPU_CGROUP / path.lstrip("/")
            period = int((d / "cpu.cfs_period_us").read_text())
            (d / "cpu.cfs_quota_us").write_text("-1" if cpus is None else str(max(1000, int(period * cpus))))
            return d
    raise StrikeError(f"process {pid} has no cgroup v1 cpu controller to throttle")


def _node(pod: dict[str, Any]) -> str:
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        raise StrikeError(f"pod {pod.get('metadata', {}).get('name')} is not on a node")
    return str(node)


def _pid(pod: dict[str, Any], timeout: float = 30.0) -> int:
    uid = (pod.get("metadata") or {}).get("uid", "")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = trainer_pid(uid)
        if pid is not None:
            return pid
        time.sleep(0.5)
    raise StrikeError(f"no training process of pod {pod.get('metadata', {}).get('name')} on this host")


def strike(s: Strike, pods_by_rank: dict[int, dict[str, Any]], state: Path,
           restore_cluster: Callable[[], None], say: Callable[[str], None] = print) -> Callable[[], None]:
    """Strike now; returns the undo (call it once the run ends; it never raises).

    Raises:
        StrikeError: the struck rank (or the peer) has no pod on a node, or no process.
    """
    if s.rank not in pods_by_rank or (s.peerRank is not None and s.peerRank not in pods_by_rank):
        raise StrikeError(f"no pod for rank {s.rank} or {s.peerRank} (have {sorted(pods_by_rank)})")
    pod = pods_by_rank[s.rank]
    node = _node(pod)
    if s.fault == "freeze":
        pid = _pid(pod)
        os.kill(pid, signal.SIGSTOP)
        say(f"  strike: rank {s.rank}'s training process {pid} on {node} stopped (SIGSTOP)")
        return _quiet(lambda: os.kill(pid, signal.SIGCONT))
    if s.fault == "throttle":
        pid = _pid(pod)
        d = throttle(pid, s.cpus)
        say(f"  strike: rank {s.rank}'s training container on {node} throttled to {s.cpus:g} CPU ({d.name[:12]})")
        return _quiet(lambda: throttle(pid, None))
    if s.fault == "partition":
        other = NodeSpec(node_index(_node(pods_by_rank[s.peerRank or 0])))
        mine = NodeSpec(node_index(node))
        firewall.apply(mine.netns, {"input": [{"saddr": other.mgmt_ip, "action": "drop"},
                                              {"saddr": other.data_ip, "action": "drop"}]})
        say(f"  strike: {node} drops everything from {other.name} (rank {s.peerRank})")
        return _quiet(lambda: firewall.clear(mine.netns))
    done = loss.lose_node(state, node)
    say(f"  strike: {node} (rank {s.rank}) lost: links {', '.join(done['links'])} down, "
        f"{done['killed']} processes killed")
    return _quiet(restore_cluster)


# Longer than the node lifecycle controller's --node-monitor-period (5 s): a taint it decided
# on from a heartbeat that was stale just before the node came back shows up within it.
NODES_STABLE_SECONDS = 6.0


def unsettled(nodes: list[dict[str, Any]]) -> list[str]:
    """The names of the nodes (as the API returns them) not Ready or carrying a taint the
    node lifecycle controller puts on a lost node (``node.kubernetes.io/...``). Pure."""
    out = []
    for n in nodes:
        taints = (n.get("spec") or {}).get("taints") or []
        conds = (n.get("status") or {}).get("conditions") or []
        if any(str(t.get("key", "")).startswith("node.kubernetes.io/") for t in taints) or not any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
            out.append(str((n.get("metadata") or {}).get("name")))
    return out


def wait_settled(list_nodes: Callable[[], list[dict[str, Any]]], timeout: float = 180.0) -> None:
    """Wait until :func:`unsettled` is empty for :data:`NODES_STABLE_SECONDS` in a row.
    Raises TimeoutError naming the nodes that are not."""
    deadline, calm_since, bad = time.monotonic() + timeout, None, ["?"]
    while time.monotonic() < deadline:
        bad = unsettled(list_nodes())
        calm_since = None if bad else (calm_since or time.monotonic())
        if calm_since is not None and time.monotonic() - calm_since >= NODES_STABLE_SECONDS:
            return
        time.sleep(0.5)
    raise TimeoutError(f"nodes not Ready or still tainted after {timeout:.0f}s: {bad}")


def _quiet(undo: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        try:
            undo()
        except Exception as e:  # noqa: BLE001 - an undo on a process or node already gone
            print(f"  strike: undo failed: {type(e).__name__}: {e}")
    return run
