"""Small builders for unit tests: jobs, pods and probe reports as the API returns them."""

from __future__ import annotations

import copy
import json
import string
from typing import Any, Optional

from disttrain.api import constants
from disttrain.diagnosis.report import ProbeReport

TEMPLATE = {
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "image": "example/train:1",
                "command": ["python", "/workspace/train.py", "--epochs", "3"],
                "resources": {"limits": {"cpu": "2"}},
                "env": [{"name": "FOO", "value": "bar"}],
            }
        ],
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }
}


def job(num_nodes: int = 2, status: Optional[dict] = None, generation: int = 1, **spec: Any) -> dict:
    body = {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1", "generation": generation},
        # hostNetwork as in the example; tests of the pod network pass network=... themselves
        "spec": {"numNodes": num_nodes, "template": copy.deepcopy(TEMPLATE),
                 "network": {"hostNetwork": True}, **spec},
    }
    if status is not None:
        body["status"] = status
    return body


JOB_UID = "uid-1"


def node_name(rank: int) -> str:
    """The node the tests put rank ``rank`` on: node-a, node-b, ..."""
    return f"node-{string.ascii_lowercase[rank]}"


def report(rank: int, node: str, ok: bool = True, *, ifname: str = "eth1", addr: Optional[str] = None,
           failure: Optional[dict] = None, warnings: Optional[list] = None, torch: str = "2.8.0",
           nccl: Optional[str] = None, busbw: float = 1.5, world_size: int = 2, attempt: int = 1,
           job_uid: str = JOB_UID) -> dict:
    """A probe report as the probe writes it (camelCase), echoing the job's UID and attempt."""
    return {
        "v": 1,
        "rank": rank,
        "worldSize": world_size,
        "jobUid": job_uid,
        "attempt": attempt,
        "node": node,
        "hostname": node,
        "ok": ok,
        "phase": "report" if ok else (failure or {}).get("phase", "rendezvous"),
        "failure": failure,
        "warnings": warnings or [],
        "versions": {"python": "3.11.7", "torch": torch, "cuda": None, "nccl": nccl, "driver": None},
        "master": {"addr": "10.100.0.10", "port": 29500, "resolved": ["10.100.0.10"], "route": None},
        "portRange": [32768, 60999],
        "interfaces": [],
        "chosen": {"ifname": ifname, "addr": addr or f"10.101.0.{10 + rank}", "subnet": "10.101.0.0/24"} if ok else None,
        "rejected": [{"ifname": "docker0", "reason": "DuplicateAddress", "message": "172.17.0.1 on every node"}],
        "ncclDefaultIfname": "eth0",
        "backend": "gloo",
        "allreduce": {"bytes": 4194304, "iterations": 10, "seconds": 0.01, "algbwGBps": busbw, "busbwGBps": busbw, "correct": True} if ok else None,
        "timings": {"inventory": 0.01, "rendezvous": 0.2},
        "truncated": False,
    }


def pod(name: str, role: str, rank: int, *, attempt: int = 1, phase: str = "Pending", node: Optional[str] = None,
        host_ip: Optional[str] = None, pod_ip: Optional[str] = None, message: Optional[str] = None, exit_code: Optional[int] = None,
        container: str = "probe", unschedulable: Optional[str] = None, deleting: bool = False,
        started_at: Optional[str] = None, finished_at: Optional[str] = None,
        owner_uid: Optional[str] = JOB_UID, created: Optional[str] = None) -> dict:
    """A pod as the API returns it, owned (controller ownerReference) by the job with
    ``owner_uid`` (None: no owner)."""
    p: dict[str, Any] = {
        "metadata": {
            "name": name,
            "ownerReferences": [] if owner_uid is None else [
                {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "j", "uid": owner_uid,
                 "controller": True}],
            **({"creationTimestamp": created} if created else {}),
            "labels": {constants.LABEL_JOB: "j", constants.LABEL_ROLE: role, constants.LABEL_RANK: str(rank), constants.LABEL_ATTEMPT: str(attempt)},
        },
        "spec": {"nodeName": node, "containers": [{"name": container}]},
        "status": {"phase": phase, "hostIP": host_ip, "podIP": pod_ip or host_ip, "conditions": []},
    }
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if unschedulable:
        p["status"]["conditions"].append(
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable})
    if started_at is not None:  # the container runs (or ran) since then
        p["status"]["containerStatuses"] = [
            {"name": container, "state": {"running": {"startedAt": started_at}}}]
    if exit_code is not None or message is not None:
        term = {"exitCode": exit_code, "message": message}
        term.update({k: v for k, v in (("startedAt", started_at), ("finishedAt", finished_at)) if v})
        p["status"]["containerStatuses"] = [{"name": container, "state": {"terminated": term}}]
    return p


def json_parser(raw: str) -> ProbeReport:
    """A stand-in for the report parser where a test is about reconcile, not the parser's
    limits: any JSON object of version 1 that the model takes (ValueError otherwise)."""
    try:
        data = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("v") != 1:
        raise ValueError("not a v1 report")
    return ProbeReport.model_validate(data)


def typed_report(rep: Optional[dict[str, Any]]) -> Optional[ProbeReport]:
    """A report as the probe writes it (:func:`report`'s camelCase dict) as the operator
    carries it once parsed: the model (ProbeOutcome.report, trust.check); None stays None."""
    return None if rep is None else ProbeReport.model_validate(rep)


def load_benchmark(name: str):
    """Import ``benchmarks/<name>.py`` (not a package) as a module, for its pure parts."""
    import importlib.util

    from localcluster.common.config import REPO_ROOT

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
