"""KEP-4671's workload scheduling API on the local control plane (GenericWorkload on): the
real kube-scheduler places a gang (PodGroup with a gang policy) all or nothing.

Plain pods, one per node by required anti-affinity, on the 2-node cluster: a group of 3
cannot fit, so none of its pods is bound (not 2 of 3); a group of 2 is placed. The
objects have the shapes the operator will create (localcluster/README.md)."""
from __future__ import annotations

import json
import time

import pytest
import yaml

from localcluster.common.config import UTILITY_IMAGE

pytestmark = pytest.mark.e2e

API = "scheduling.k8s.io/v1beta1"


def workload(name: str, size: int) -> dict:
    return {"apiVersion": API, "kind": "Workload", "metadata": {"name": name},
            "spec": {"podGroupTemplates": [{"name": "nodes", "schedulingPolicy": {
                "gang": {"minCount": size}}}]}}


def pod_group(name: str, size: int) -> dict:
    return {"apiVersion": API, "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"workloadRef": {"workloadName": name, "templateName": "nodes"},
                     "schedulingPolicy": {"gang": {"minCount": size}}}}


def pod(group: str, i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{i}", "labels": {"gang": group}},
            "spec": {"schedulingGroup": {"podGroupName": group},
                     "restartPolicy": "Never",
                     "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                         {"labelSelector": {"matchLabels": {"gang": group}},
                          "topologyKey": "kubernetes.io/hostname"}]}},
                     "containers": [{"name": "main", "image": UTILITY_IMAGE,
                                     "command": ["sleep", "60"]}]}}


def apply(cluster, ns: str, group: str, size: int, pods: int) -> None:
    docs = [workload(group, size), pod_group(group, size)] + [pod(group, i) for i in range(pods)]
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))


def pods_of(cluster, ns: str, group: str) -> list[dict]:
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", f"gang={group}", "-o", "json").stdout
    return json.loads(out)["items"]


def test_the_api_is_served(cluster):
    out = cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").stdout
    assert {"workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"} <= set(out.split())


def test_a_gang_that_cannot_fit_holds_no_node_and_one_that_fits_runs(cluster, ns):
    assert len(cluster.node_names) == 2
    apply(cluster, ns, "three", 3, 3)  # 3 pods, one per node, 2 nodes
    apply(cluster, ns, "two", 2, 2)
    deadline = time.monotonic() + 60
    while True:
        two = pods_of(cluster, ns, "two")
        if len(two) == 2 and all(p["spec"].get("nodeName") for p in two):
            break
        assert time.monotonic() < deadline, [p.get("status") for p in two]
        time.sleep(0.5)
    assert sorted(p["spec"]["nodeName"] for p in two) == sorted(cluster.node_names)
    time.sleep(3)  # the scheduler had every chance to place part of the bigger gang
    three = pods_of(cluster, ns, "three")
    assert len(three) == 3
    assert [p["spec"].get("nodeName") for p in three] == [None, None, None], three
    assert all(p["status"]["phase"] == "Pending" for p in three)
    # the field survived admission (the apiserver drops it when GenericWorkload is off)
    assert three[0]["spec"]["schedulingGroup"] == {"podGroupName": "three"}
    # the scheduler says why on the PodGroup, e.g. "minCount (3) cannot be satisfied: 2
    # scheduled, 0 remaining, ..." (reason Unschedulable)
    deadline = time.monotonic() + 30
    while True:
        pg = json.loads(cluster.kubectl("get", "podgroups.scheduling.k8s.io", "three", "-n", ns,
                                        "-o", "json").stdout)
        conds = {c["type"]: c for c in (pg.get("status") or {}).get("conditions") or []}
        if "PodGroupInitiallyScheduled" in conds or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    c = conds.get("PodGroupInitiallyScheduled") or {}
    assert (c.get("status"), c.get("reason")) == ("False", "Unschedulable"), pg.get("status")
    assert "minCount (3)" in c["message"]
    assert "scheduling.k8s.io/podgroup-protection" in pg["metadata"].get("finalizers", [])
