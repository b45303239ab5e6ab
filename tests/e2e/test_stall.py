"""The stall watch on the real kubelets (issue 33): a job with
``runPolicy.stallTimeoutSeconds`` trains under the progress recorder and its readiness
sidecar; a stall after training started ends as ``Progressing=False`` naming the rank, its
node and the cause within the timeout + 30 s, and ``onStall`` acts.

`make test` runs one culprit (a rank stuck in Python) and one end of a partition (by the
day); `make test-stall` runs them all
(``DISTTRAIN_STALL_ALL=1``): the other rank stuck, a frozen rank (SIGSTOP), a pair of nodes
partitioned mid-training (an nft drop rule), a node lost mid-training, a restart that leaves a frozen rank's node out,
a healthy job whose rank 0 checkpoints for 40 s under a 60 s timeout (a wait, never a
stall verdict), and a straggler (one rank's training container throttled to a tenth of a
CPU: Progressing stays True, reason Straggler, naming it).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Optional

import pytest
import yaml

from disttrain_probe.contract import vocabulary as V
from localcluster.common.config import NodeSpec, node_index
from localcluster.network import firewall

from . import chaos
from .test_operator import EXAMPLE, apply, condition, get_job, wait_for

pytestmark = pytest.mark.e2e
ALL = os.environ.get("DISTTRAIN_STALL_ALL") == "1"
TIMEOUT_S = 30

SCRIPT = '''import os, time
import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    stall_rank, stall_at = int(os.environ.get("STALL_RANK", "-1")), int(os.environ.get("STALL_AT", "50"))
    t = torch.ones(1000)
    work = int(os.environ.get("MATMULS", "0"))  # a compute step instead of a sleep (the straggler case)
    torch.set_num_threads(1)
    m = torch.rand(256, 256)
    for step in range(int(os.environ.get("STEPS", "100000"))):
        if rank == stall_rank and step == stall_at:
            print(f"rank {rank}: sleeping at step {step}", flush=True)
            time.sleep(float(os.environ.get("STALL_SECONDS", "600")))
        dist.all_reduce(t)
        for _ in range(work):
            m = torch.tanh(m @ m)
        if not work:
            time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def docs(on_stall: str = "Fail", timeout: int = TIMEOUT_S, **env: str) -> list[dict]:
    """The example job, its script replaced by an all_reduce loop whose ``STALL_RANK``
    sleeps ``STALL_SECONDS`` at step ``STALL_AT``; watched with ``timeout``."""
    out = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for d in out:
        if d["kind"] == "ConfigMap":
            d["data"] = {"train_digits.py": SCRIPT}
        else:
            d["spec"]["runPolicy"] = {"stallTimeoutSeconds": timeout, "onStall": on_stall}
            trainer = d["spec"]["template"]["spec"]["containers"][0]
            trainer["env"] = trainer.get("env", []) + [{"name": k, "value": v} for k, v in env.items()]
    return out


def _started_at(job: dict) -> float:
    c = condition(job, "TrainingStarted")
    assert c and c["status"] == "True", c
    return time.mktime(time.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone


def _started(cluster, ns: str) -> Optional[dict]:
    j = get_job(cluster, ns)
    c = condition(j, "TrainingStarted")
    return j if c and c["status"] == "True" else None


def _node_of(cluster, ns: str, rank: int) -> str:
    return cluster.kubectl("get", "pod", f"ddp-digits-worker-{rank}", "-n", ns, "-o",
                           "jsonpath={.spec.nodeName}").stdout.strip()


def _stall_verdict(cluster, ns: str, within: float) -> dict:
    return wait_for(lambda: (c := condition(get_job(cluster, ns), "Progressing")) and c["status"] == "False" and c,
                    within, interval=1.0, what="Progressing=False")


@pytest.mark.parametrize("culprit", [0] + ([1] if ALL else []))
def test_a_rank_stuck_in_python_is_named_with_its_frame_and_the_job_fails(cluster, operator, ns, culprit):
    apply(cluster, ns, docs(STALL_RANK=str(culprit)))
    job = wait_for(lambda: _started(cluster, ns), 240, what="TrainingStarted")
    c = _stall_verdict(cluster, ns, TIMEOUT_S + 60)
    node = _node_of(cluster, ns, culprit)
    assert c["reason"] == V.RANK_STUCK_IN_PYTHON, c
    assert c["message"].startswith(f"rank {culprit} ({node}) is in Python at "), c["message"]
    assert "train_digits.py:" in c["message"] and f"rank {1 - culprit} waits in all_reduce" in c["message"]
    failed = wait_for(lambda: (f := condition(get_job(cluster, ns), "Failed")) and f["status"] == "True" and f,
                      30, what="Failed=True")
    assert failed["reason"] == V.TRAINING_STALLED
    # the stall began within a few seconds of the start (step 50 of 50 ms steps)
    assert time.time() - _started_at(job) <= TIMEOUT_S + 30 + 15


def _trainer_pid(node_rank: int) -> Optional[int]:
    """The host pid of the training process (torchrun's worker) of node rank ``node_rank``."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"train_digits.py") for a in cmd) and b"torch.distributed.run" not in cmd \
                and f"PET_NODE_RANK={node_rank}".encode() in env and b"DISTTRAIN_PROGRESS_DIR=" in b"\0".join(env):
            return int(d.name)
    return None


@pytest.mark.skipif(not ALL, reason="make test-stall (DISTTRAIN_STALL_ALL=1)")
def test_a_frozen_rank_is_named_as_unresponsive(cluster, operator, ns):
    apply(cluster, ns, docs())
    wait_for(lambda: (c := condition(get_job(cluster, ns), "Progressing")) and c["status"] == "True",
             240, what="Progressing=True")
    pid = wait_for(lambda: _trainer_pid(1), 30, what="rank 1's training process")
    os.kill(pid, signal.SIGSTOP)
    try:
        c = _stall_verdict(cluster, ns, TIMEOUT_S + 30)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert c["reason"] == V.RANK_UNRESPONSIVE, c
    assert c["message"].startswith(f"rank 1 ({_node_of(cluster, ns, 1)}) stopped answering"), c["message"]


# `make test` runs one end of the partition, by the day (or DISTTRAIN_STALL_SEED); make test-stall both
STALL_SEED = int(os.environ.get("DISTTRAIN_STALL_SEED") or time.time() // 86400)


@pytest.mark.parametrize("dropping_rank", [1, 0])
def test_a_pair_partitioned_mid_training_is_named_as_the_link(cluster, operator, ns, dropping_rank):
    """The node of ``dropping_rank`` starts dropping everything from the other's addresses
    (both NICs) while the job trains: every rank ends in all_reduce and the verdict names the
    pair from the kernel's retransmissions, whichever end drops."""
    if not ALL and dropping_rank != STALL_SEED % 2:
        pytest.skip("make test runs one end by the day (DISTTRAIN_STALL_SEED); make test-stall both")
    apply(cluster, ns, docs())
    wait_for(lambda: (c := condition(get_job(cluster, ns), "Progressing")) and c["status"] == "True",
             240, what="Progressing=True")
    nodes = [_node_of(cluster, ns, r) for r in (0, 1)]
    dropping, other = NodeSpec(node_index(nodes[dropping_rank])), NodeSpec(node_index(nodes[1 - dropping_rank]))
    firewall.apply(dropping.netns, {"input": [{"saddr": other.mgmt_ip, "action": "drop"},
                                              {"saddr": other.data_ip, "action": "drop"}]})
    try:
        c = _stall_verdict(cluster, ns, TIMEOUT_S + 30)
    finally:
        firewall.clear(dropping.netns)
    assert c["reason"] == V.COLLECTIVE_STALLED, c
    a, b = sorted(nodes)
    assert f"{a} <-> {b} on " in c["message"] and "loses packets" in c["message"], c["message"]
    failed = wait_for(lambda: (f := condition(get_job(cluster, ns), "Failed")) and f["status"] == "True" and f,
                      30, what="Failed=True")
    assert failed["reason"] == V.TRAINING_STALLED


@pytest.mark.skipif(not ALL, reason="make test-stall (DISTTRAIN_STALL_ALL=1)")
def test_a_node_lost_mid_training_is_named_as_unresponsive(cluster, operator, ns):
    """Rank 1's node dies while the job trains (links down, agent and pod processes killed:
    its pod's last status, sidecar Ready, stays in the API). Rank 0 waits, its connections
    to the lost node lose packets, and the verdict names rank 1 and its node."""
    apply(cluster, ns, docs())
    wait_for(lambda: (c := condition(get_job(cluster, ns), "Progressing")) and c["status"] == "True",
             240, what="Progressing=True")
    lost = _node_of(cluster, ns, 1)
    try:
        chaos.lose_node(cluster.state_dir, lost)
        c = _stall_verdict(cluster, ns, TIMEOUT_S + 30)
        assert c["reason"] == V.RANK_UNRESPONSIVE, c
        assert c["message"].startswith(f"rank 1 ({lost}) "), c["message"]
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        chaos.restore_nodes(len(cluster.node_names), chaos.client.CoreV1Api(chaos.api_client(cluster.state_dir)))


@pytest.mark.skipif(not ALL, reason="make test-stall (DISTTRAIN_STALL_ALL=1)")
def test_a_checkpoint_under_the_timeout_is_a_wait_and_the_job_succeeds(cluster, operator, ns):
    apply(cluster, ns, docs(timeout=60, STALL_RANK="0", STALL_SECONDS="40", STEPS="300"))
    seen: list[tuple[str, str]] = []

    def done():
        j = get_job(cluster, ns)
        c = condition(j, "Progressing")
        if c:
            seen.append((c["status"], c["reason"]))
        s = condition(j, "Succeeded")
        return s if s and s["status"] != "Unknown" else None

    s = wait_for(done, 300, interval=1.0, what="the job's end")
    assert s["status"] == "True", s
    assert ("False", V.RANK_STUCK_IN_PYTHON) not in seen and all(st != "False" for st, _ in seen), seen
    assert ("Unknown", V.RANKS_WAITING) in seen, seen  # who waits for whom, said while it lasted


@pytest.mark.skipif(not ALL, reason="make test-stall (DISTTRAIN_STALL_ALL=1)")
def test_a_restart_after_a_frozen_rank_leaves_its_node_out_and_trains(cluster, operator, ns):
    """onStall Restart: rank 1 frozen (SIGSTOP) is named RankUnresponsive; the restart
    records its node in status.excludedNodes, probes again and places both ranks on the
    other nodes (the scheduler honours the required NotIn), and the job trains to the end.
    Needs a spare node: `make test-stall` runs with 3."""
    if len(cluster.node_names) < 3:
        pytest.skip("needs 3 nodes for numNodes 2 (make test-stall: DISTTRAIN_E2E_NODES=3)")
    job_docs = docs(on_stall="Restart", STEPS="1200")
    for d in job_docs:
        if d["kind"] != "ConfigMap":
            d["spec"]["runPolicy"]["backoffLimit"] = 1
    apply(cluster, ns, job_docs)
    wait_for(lambda: (c := condition(get_job(cluster, ns), "Progressing")) and c["status"] == "True",
             240, what="Progressing=True")
    frozen = _node_of(cluster, ns, 1)
    pid = wait_for(lambda: _trainer_pid(1), 30, what="rank 1's training process")
    os.kill(pid, signal.SIGSTOP)
    try:
        restarted = wait_for(lambda: (j := get_job(cluster, ns)).get("status", {}).get("excludedNodes") and j,
                             TIMEOUT_S + 45, interval=1.0, what="status.excludedNodes")
    except AssertionError as e:
        conds = [(c["type"], c["status"], c["reason"], c["message"][:200])
                 for c in get_job(cluster, ns).get("status", {}).get("conditions", [])]
        raise AssertionError(f"{e}: {conds}") from None
    finally:
        os.kill(pid, signal.SIGCONT)
    assert restarted["status"]["excludedNodes"] == [{"node": frozen, "reason": V.RANK_UNRESPONSIVE, "restart": 1}]
    done = wait_for(lambda: (s := condition(get_job(cluster, ns), "Succeeded")) and s["status"] != "Unknown" and s,
                    300, interval=2.0, what="the job's end")
    job = get_job(cluster, ns)
    assert done["status"] == "True", (done, condition(job, "Failed"))
    assert job["status"]["restarts"] == 1
    placed = [n["name"] for n in job["status"].get("nodes") or []]
    assert len(placed) == 2 and frozen not in placed, placed


def _throttle(pid: int, cpus: Optional[float]) -> Path:
    """Set the CFS quota of ``pid``'s cpu cgroup (cgroup v1, its container's) to ``cpus``
    CPUs (None: no limit); the cgroup's directory."""
    line = next(x for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                if "cpu" in x.split(":")[1].split(","))
    d = Path("/sys/fs/cgroup/cpu") / line.split(":", 2)[2].lstrip("/")
    period = int((d / "cpu.cfs_period_us").read_text())
    (d / "cpu.cfs_quota_us").write_text("-1" if cpus is None else str(int(period * cpus)))
    return d


@pytest.mark.skipif(not ALL, reason="make test-stall (DISTTRAIN_STALL_ALL=1)")
@pytest.mark.parametrize("slow_rank", [1])
def test_a_throttled_rank_is_named_as_the_straggler_while_the_job_trains(cluster, operator, ns, slow_rank):
    """Rank ``slow_rank``'s training container gets a tenth of a CPU while the job trains
    (each step about 25 ms of compute, then all_reduce): the other rank waits for it most of the
    time, its recorder learns from the pooled wait shares that it is the straggler, its
    sidecar says so in one failed check (the pod stays Ready), and Progressing stays True
    with reason Straggler naming the rank and its node; no stall verdict, no restart."""
    apply(cluster, ns, docs(MATMULS="30"))  # about 25 ms of compute a step here
    wait_for(lambda: (c := condition(get_job(cluster, ns), "Progressing")) and c["status"] == "True",
             240, what="Progressing=True")
    pid = wait_for(lambda: _trainer_pid(slow_rank), 30, what=f"rank {slow_rank}'s training process")
    _throttle(pid, 0.1)
    seen: list[tuple[str, str]] = []

    def straggler():
        c = condition(get_job(cluster, ns), "Progressing") or {}
        seen.append((c.get("status", ""), c.get("reason", "")))
        return c if c.get("reason") == V.STRAGGLER else None

    try:
        c = wait_for(straggler, 240, interval=2.0, what="Progressing Straggler")
        pod = cluster.kubectl("get", "pod", f"ddp-digits-worker-{slow_rank}", "-n", ns, "-o",
                              "jsonpath={.status.conditions[?(@.type=='Ready')].status}").stdout.strip()
    finally:
        try:
            _throttle(pid, None)
        except (OSError, StopIteration):
            pass
    assert c["status"] == "True", c
    assert c["message"].startswith(f"collectives advance, but rank {slow_rank} ({_node_of(cluster, ns, slow_rank)}) "
                                   "waits in them "), c["message"]
    assert all(st != "False" for st, _ in seen), seen  # never a stall verdict
    assert pod == "True"  # the straggler's one failed check left its pod Ready
    assert (get_job(cluster, ns).get("status") or {}).get("restarts", 0) == 0
