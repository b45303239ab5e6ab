"""The stall watch on the real kubelets (issue 33): a job with
``runPolicy.stallTimeoutSeconds`` trains under the progress recorder and its readiness
sidecar; a stall after training started ends as ``Progressing=False`` naming the rank, its
node and the cause within the timeout + 30 s, and ``onStall`` acts.

`make test` runs one culprit (a rank stuck in Python) and one end of a partition (by the
day); `make test-stall` runs them all
(``DISTTRAIN_STALL_ALL=1``): the other rank stuck, the other end of the partition, a
restart that leaves a frozen rank's node out, a healthy job whose rank 0 checkpoints for
40 s under a 60 s timeout (a wait, never a stall verdict), and every stall scenario
(``scenarios/stall-*.yaml``, the scenario language's ``strike``: a frozen rank, a node lost,
a partition, a straggler throttled to a tenth of a CPU, a rank stuck in Python, a
checkpoint).
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Optional

import pytest
import yaml

from disttrain_probe.contract import vocabulary as V
from localcluster import bringup, scenariorun
from localcluster.common.config import NodeSpec, node_index
from localcluster.network import firewall
from localcluster.scenarios import loader

from .test_operator import EXAMPLE, apply, condition, get_job, wait_for

pytestmark = pytest.mark.e2e
ALL = os.environ.get("DISTTRAIN_STALL_ALL") == "1"
TIMEOUT_S = 30

SCRIPT = (Path(__file__).resolve().parents[2] / "scenarios" / "scripts" / "allreduce-loop.py").read_text()


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


STRIKES = [n for n in loader.all_names() if n.startswith("stall-")]


@pytest.mark.skipif(not ALL, reason="make test-stall (DISTTRAIN_STALL_ALL=1)")
@pytest.mark.parametrize("name", STRIKES)
def test_a_stall_scenario_ends_as_it_expects(cluster, operator, name):
    """The stall scenarios (``scenarios/stall-*.yaml``: a fault that strikes once training
    advances, or a script that sleeps on one rank) on the real kubelets: the expected
    Progressing within expect.withinSeconds of the strike (stallTimeoutSeconds + 30 s for a
    stall), and for a straggler no stall verdict on the way and its pod still Ready."""
    sc = loader.load(name)
    if sc.nodes > len(cluster.node_names):
        pytest.skip(f"needs {sc.nodes} nodes (make test-stall: DISTTRAIN_E2E_NODES=3)")
    ns = f"st-{name[6:30]}-{uuid.uuid4().hex[:5]}"
    lines: list[str] = []
    try:
        o = scenariorun.run_job(sc, ns, say=lines.append,
                                restore=lambda: bringup.up(nodes=len(cluster.node_names)))
        ready = cluster.kubectl("get", "pods", "-n", ns, "-o",
                                "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status} {end}",
                                check=False).stdout.split()
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert o.ok, (o.why, lines)
    if sc.strike is not None:
        assert o.struck_at is not None and o.seconds is not None and o.seconds <= sc.expect.withinSeconds
    if sc.expect.status != "False":  # a straggler, a checkpoint: never a stall verdict on the way
        assert not [x for x in lines if " Progressing " in x and " False " in x], lines
    if sc.expect.reason == V.STRAGGLER:
        assert ready and all(r == "True" for r in ready), ready  # its one failed check left it Ready
