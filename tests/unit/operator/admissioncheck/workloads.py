"""Workloads as Kueue v0.17.0 writes them for each job kind the check reads (shared by the
admission check's tests)."""
from __future__ import annotations

import copy
from typing import Any, Optional

OWNERS = {
    "PyTorchJob": "kubeflow.org/v1",
    "TrainJob": "trainer.kubeflow.org/v1alpha1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "Job": "batch/v1",
}


def template(container: str = "pytorch", env: Optional[list] = None, ports: Optional[list] = None,
             **spec: Any) -> dict:
    c: dict[str, Any] = {"name": container, "image": "train:1", "command": ["python", "train.py"]}
    if env is not None:
        c["env"] = env
    if ports is not None:
        c["ports"] = ports
    return {"metadata": {"labels": {"app": "t"}}, "spec": {"containers": [c], **spec}}


def pod_set(name: str, count: int, tmpl: Optional[dict] = None) -> dict:
    return {"name": name, "count": count, "template": tmpl or template()}


def workload(kind: str, pod_sets: list, admission: Optional[list] = None, owner: str = "train") -> dict:
    wl: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"{kind.lower()}-{owner}-abc12", "namespace": "team", "uid": "wl-uid-1",
                     "ownerReferences": [{"apiVersion": OWNERS[kind], "kind": kind, "name": owner,
                                          "uid": "job-uid", "controller": True}]},
        "spec": {"queueName": "user-queue", "podSets": copy.deepcopy(pod_sets)},
    }
    if admission is not None:
        wl["status"] = {"admission": {"clusterQueue": "cluster-queue", "podSetAssignments": admission}}
    return wl


def pytorchjob(workers: int = 3, master: bool = True, **kw: Any) -> dict:
    tmpl = template(ports=[{"name": "pytorchjob-port", "containerPort": 23456}])
    sets = ([pod_set("master", 1, tmpl)] if master else []) + [pod_set("worker", workers, template())]
    return workload("PyTorchJob", sets, **kw)


def hostname_assignment(name: str, nodes: list[str]) -> dict:
    """A v1beta2 topology assignment at the hostname level, one pod per node."""
    return {"name": name, "flavors": {"cpu": "default-flavor"}, "count": len(nodes),
            "topologyAssignment": {"levels": ["kubernetes.io/hostname"], "slices": [{
                "domainCount": len(nodes), "valuesPerLevel": [{"individual": {"roots": nodes}}],
                "podCounts": {"universal": 1}}]}}
