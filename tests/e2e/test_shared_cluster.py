"""A shared cluster, end to end on the local cluster with the real scheduler and Kueue:
a queued job waits holding nothing and trains when the quota frees, an eviction stops it and
the readmitted job probes again, suspend and resume at each stage, two hostNetwork jobs at
once (their rank 0 never share a node: hostPort), and two jobs that together need more nodes
than exist (gang scheduling: one runs, the other waits with no pod placed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from localcluster.cluster import kueue_objects
from localcluster.common.config import UTILITY_IMAGE

from .test_operator import apply, condition, get_job, pods, wait_for
from .test_operator import example_docs as _example_docs

pytestmark = pytest.mark.e2e

QUOTA = "cpu=2,memory=8Gi,nvidia.com/gpu=0"  # the example needs 2 x 1 CPU


@pytest.fixture(scope="module")
def kueue_cluster(cluster):
    p = subprocess.run([sys.executable, "-m", "localcluster", "up", "--nodes", str(len(cluster.node_names)),
                        "--kueue", "--kueue-quota", QUOTA], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.fail(f"localcluster up --kueue failed:\n{p.stderr}")
    return cluster


def example_docs(**spec):
    """The example job, training 3 epochs (these tests are about scheduling, not accuracy)."""
    docs = _example_docs(**spec)
    for d in docs:
        if d["kind"] == "DistTrainingJob":
            d["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "EPOCHS", "value": "3"})
    return docs


def named(docs, name):
    for d in docs:
        if d["kind"] == "DistTrainingJob":
            d["metadata"]["name"] = name
    return docs


def status_of(cluster, ns, name, ctype):
    return (condition(get_job(cluster, ns, name), ctype) or {})


def placed(cluster, ns, name):
    return [p for p in pods(cluster, ns, f"disttrain.dev/job-name={name}") if p["spec"].get("nodeName")]


def blocker(cpu: str) -> dict:
    """A batch/v1 Job queued in the same LocalQueue, holding ``cpu`` of the quota."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "blocker", "labels": {kueue_objects.QUEUE_LABEL: kueue_objects.LOCAL_QUEUE}},
            "spec": {"suspend": True, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "main", "image": UTILITY_IMAGE, "command": ["sleep", "600"],
                    "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]}}}}


def test_queued_job_waits_with_no_pod_then_trains_and_an_eviction_makes_it_probe_again(
        kueue_cluster, operator, ns):
    c = kueue_cluster
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(kueue_objects.local_queue(ns)))
    c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(blocker("1500m")))
    wait_for(lambda: c.kubectl("get", "job", "blocker", "-n", ns, "-o", "jsonpath={.spec.suspend}").stdout == "false",
             60, what="the blocker admitted")
    docs = example_docs()
    for d in docs:
        if d["kind"] == "DistTrainingJob":
            d["metadata"]["labels"] = {kueue_objects.QUEUE_LABEL: kueue_objects.LOCAL_QUEUE}
    apply(c, ns, docs)
    adm = wait_for(lambda: status_of(c, ns, "ddp-digits", "Admitted").get("reason") == "WaitingForQuota"
                   and "insufficient" in status_of(c, ns, "ddp-digits", "Admitted")["message"]
                   and status_of(c, ns, "ddp-digits", "Admitted"), 60, what="WaitingForQuota with Kueue's words")
    assert "user-queue" in adm["message"]
    time.sleep(3)
    assert pods(c, ns) == [], "a queued job creates no pod"
    c.kubectl("delete", "job", "blocker", "-n", ns, "--wait=false")
    # admitted once the quota frees: probes, then training
    wait_for(lambda: status_of(c, ns, "ddp-digits", "TrainingStarted").get("status") == "True", 180,
             what="training after admission")
    assert status_of(c, ns, "ddp-digits", "Admitted")["reason"] == "WorkloadAdmitted"
    # evict it: stopping its LocalQueue with HoldAndDrain evicts the admitted Workload
    c.kubectl("patch", "localqueue", kueue_objects.LOCAL_QUEUE, "-n", ns, "--type=merge",
              "-p", '{"spec":{"stopPolicy":"HoldAndDrain"}}')
    wait_for(lambda: status_of(c, ns, "ddp-digits", "Admitted").get("reason") == "WorkloadEvicted", 60,
             what="WorkloadEvicted")
    wait_for(lambda: not pods(c, ns, "disttrain.dev/role=worker"), 90, what="the training pods deleted")
    job = get_job(c, ns)
    assert condition(job, "Failed")["status"] != "True"
    c.kubectl("patch", "localqueue", kueue_objects.LOCAL_QUEUE, "-n", ns, "--type=merge",
              "-p", '{"spec":{"stopPolicy":"None"}}')
    c.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=300s", timeout=310)
    job = get_job(c, ns)
    assert job["status"]["probe"]["attempt"] == 2, "readmitted: it probed again before training"
    wl = json.loads(c.kubectl("get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json").stdout)["items"]
    mine = [w for w in wl if w["metadata"]["name"].startswith("ddp-digits-")]
    assert mine and condition(mine[0], "Finished")["status"] == "True"


def test_suspend_at_creation_while_probing_and_while_training(cluster, operator, ns):
    c = cluster
    docs = example_docs(suspend=True)
    apply(c, ns, docs)
    wait_for(lambda: status_of(c, ns, "ddp-digits", "Suspended").get("status") == "True", 60, what="Suspended")
    time.sleep(2)
    assert pods(c, ns) == []
    c.kubectl("patch", "dtj", "ddp-digits", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: pods(c, ns, "disttrain.dev/role=probe"), 60, what="probes after resume")
    c.kubectl("patch", "dtj", "ddp-digits", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: not pods(c, ns), 90, what="the probe pods deleted while suspended")
    c.kubectl("patch", "dtj", "ddp-digits", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    wait_for(lambda: status_of(c, ns, "ddp-digits", "TrainingStarted").get("status") == "True", 180,
             what="training")
    c.kubectl("patch", "dtj", "ddp-digits", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: not pods(c, ns), 90, what="the training pods deleted while suspended")
    job = get_job(c, ns)
    assert job["status"]["phase"] == "Suspended" and job["status"]["restarts"] == 0
    c.kubectl("patch", "dtj", "ddp-digits", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
    c.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=300s", timeout=310)
    job = get_job(c, ns)
    assert condition(job, "Suspended")["reason"] == "JobResumed" and job["status"]["suspensions"] == 3


def test_two_host_network_jobs_at_once_never_share_a_rendezvous_port(cluster, operator, ns):
    c = cluster
    apply(c, ns, named(example_docs(), "alpha") + named(example_docs(), "beta")[1:])
    for name in ("alpha", "beta"):
        c.kubectl("wait", "--for=condition=Succeeded", f"dtj/{name}", "-n", ns, "--timeout=300s", timeout=310)
    for name in ("alpha", "beta"):
        assert status_of(c, ns, name, "Validated")["status"] == "True"


def test_two_jobs_that_need_more_nodes_than_exist_one_waits_holding_nothing(cluster, operator, ns):
    """Every pod asks for 60% of a node's allocatable CPU, so one pod per node and one job at
    a time: a job's gang is placed whole or not at all, so no job ever keeps some pods on
    nodes while others of the same gang wait for a node (a partial placement lasting more
    than a moment), and both jobs train, one after the other. (Real kubelets report the
    machine's CPUs, 2 here; the node agent 8.)"""
    c = cluster
    node = json.loads(c.kubectl("get", "node", c.node_names[0], "-o", "json").stdout)
    alloc = node["status"]["allocatable"]["cpu"]
    milli = int(alloc[:-1]) if alloc.endswith("m") else int(float(alloc) * 1000)
    cpu = f"{milli * 6 // 10}m"
    jobs = []
    for name in ("first", "second"):
        docs = named(example_docs(), name)
        for d in docs:
            if d["kind"] == "DistTrainingJob":
                d["spec"]["template"]["spec"]["containers"][0]["resources"] = {
                    "requests": {"cpu": cpu, "memory": "1Gi"}}
        jobs += docs if not jobs else docs[1:]
    apply(c, ns, jobs)
    partial_since: dict[str, float] = {}
    waited = False
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        if all(status_of(c, ns, n, "Succeeded").get("status") == "True" for n in ("first", "second")):
            break
        for name in ("first", "second"):
            live = [p for p in pods(c, ns, f"disttrain.dev/job-name={name}")
                    if p["status"].get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")]
            bound = [p for p in live if p["spec"].get("nodeName")]
            waited |= bool(live) and not bound
            if bound and len(bound) < len(live):
                since = partial_since.setdefault(name, time.monotonic())
                assert time.monotonic() - since < 5, f"{name} holds {len(bound)} node(s) while its gang waits"
            else:
                partial_since.pop(name, None)
        time.sleep(0.5)
    for name in ("first", "second"):
        assert status_of(c, ns, name, "Succeeded").get("status") == "True", name
    assert waited, "one job's pods waited, unplaced, for the other's nodes"
