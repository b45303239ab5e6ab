"""Kueue on the local cluster: it admits a suspended batch/v1 Job labelled with its queue,
and holds a second one while the first uses the quota (the Job controller of the local
controller-manager runs the admitted Job's pod)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from localcluster.cluster import kueue_objects
from localcluster.common.config import UTILITY_IMAGE

pytestmark = pytest.mark.e2e

QUOTA = "cpu=2,memory=4Gi,nvidia.com/gpu=0"


@pytest.fixture(scope="module")
def kueue_cluster(cluster):
    """The session's cluster with Kueue and a ClusterQueue of 2 CPUs."""
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "localcluster", "up", "--nodes",
                        str(len(cluster.node_names)), "--kueue", "--kueue-quota", QUOTA],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.fail(f"localcluster up --kueue failed:\n{p.stderr}")
    print(f"up --kueue: {time.monotonic() - t0:.1f}s\n{p.stderr}")
    return cluster


def job(name: str, cpu: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": {kueue_objects.QUEUE_LABEL: kueue_objects.LOCAL_QUEUE}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{
                         "name": "main", "image": UTILITY_IMAGE, "command": ["sleep", "120"],
                         "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]}}}}


def get(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def workload_of(cluster, ns: str, job_name: str) -> dict | None:
    for w in get(cluster, "workloads.kueue.x-k8s.io", "-n", ns)["items"]:
        if any(o.get("name") == job_name for o in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def condition(obj: dict | None, ctype: str) -> dict:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return {}


def wait_for(what: str, fn, timeout: float = 60.0, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def test_kueue_admits_one_job_and_holds_the_next_while_the_quota_is_used(kueue_cluster, ns):
    c = kueue_cluster
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(kueue_objects.local_queue(ns)))
    c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job("first", "1500m")))
    t0 = time.monotonic()
    wait_for("the first Job to be admitted and unsuspended", lambda: (
        condition(workload_of(c, ns, "first"), "Admitted").get("status") == "True"
        and get(c, "job", "first", "-n", ns)["spec"]["suspend"] is False))
    admitted_after = time.monotonic() - t0
    pods = wait_for("the first Job's pod", lambda: get(c, "pods", "-n", ns, "-l",
                                                       "job-name=first")["items"])
    assert pods[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1500m"

    c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job("second", "1")))
    held = wait_for("the second Job's Workload to be refused quota", lambda: (
        condition(workload_of(c, ns, "second"), "QuotaReserved").get("status") == "False"
        and workload_of(c, ns, "second")))
    assert "insufficient" in condition(held, "QuotaReserved")["message"], held["status"]
    time.sleep(2)  # still held, and still nothing running for it
    assert get(c, "job", "second", "-n", ns)["spec"]["suspend"] is True
    assert get(c, "pods", "-n", ns, "-l", "job-name=second")["items"] == []
    lq = get(c, "localqueues.kueue.x-k8s.io", kueue_objects.LOCAL_QUEUE, "-n", ns)
    assert lq["status"]["pendingWorkloads"] == 1 and lq["status"]["admittedWorkloads"] == 1

    c.kubectl("delete", "job", "first", "-n", ns, "--cascade=background", "--wait=false")
    wait_for("the second Job to be admitted once the quota is free", lambda: (
        get(c, "job", "second", "-n", ns)["spec"]["suspend"] is False), timeout=60)
    print(f"first Job admitted {admitted_after:.1f}s after apply")


def test_a_workload_created_directly_is_admitted_with_its_flavor(kueue_cluster, ns):
    """The shape the operator will create for a DistTrainingJob: one pod set of numNodes
    pods with the template's resources, in the job's LocalQueue (no Job integration)."""
    c = kueue_cluster
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(kueue_objects.local_queue(ns)))
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "ddp"},
          "spec": {"queueName": kueue_objects.LOCAL_QUEUE, "podSets": [{
              "name": "nodes", "count": 2, "template": {"spec": {
                  "restartPolicy": "Never", "containers": [{
                      "name": "main", "image": UTILITY_IMAGE,
                      "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}}]}}}]}}
    c.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(wl))
    got = wait_for("the Workload to be admitted", lambda: (
        condition(w := get(c, "workloads.kueue.x-k8s.io", "ddp", "-n", ns), "Admitted")
        .get("status") == "True" and w))
    [assignment] = got["status"]["admission"]["podSetAssignments"]
    assert got["status"]["admission"]["clusterQueue"] == kueue_objects.CLUSTER_QUEUE
    assert assignment["name"] == "nodes" and assignment["count"] == 2
    assert assignment["flavors"] == {"cpu": kueue_objects.FLAVOR, "memory": kueue_objects.FLAVOR}
    assert assignment["resourceUsage"]["cpu"] == "1"
