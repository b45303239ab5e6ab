"""Kubeflow's training operator (the peer of the benchmarks) on the local cluster: the
digits example as a PyTorchJob (Master + Worker, the same image, command and env) trains
to Succeeded, with the worker's init container waiting for the master's name as upstream
builds it; its validating webhook is served and answers.

``DISTTRAIN_CLUSTER_INSTANCE=N .venv/bin/python -m pytest -q tests/e2e/test_kubeflow.py``
"""
from __future__ import annotations

import json
import time

import pytest
import yaml

from localcluster.cluster import kubeflow
from localcluster.common.config import REPO_ROOT

pytestmark = pytest.mark.e2e

EXAMPLE = REPO_ROOT / "examples" / "ddp-digits.yaml"


def _job(cluster, ns: str) -> dict:
    out = cluster.kubectl("get", "pytorchjob", "ddp-digits", "-n", ns, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def _true(job: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def test_digits_example_as_a_pytorchjob_succeeds(kubeflow_operator, ns):
    cluster = kubeflow_operator
    docs = kubeflow.pytorchjob_documents([d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d])
    t0 = time.monotonic()
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    job: dict = {}
    while time.monotonic() - t0 < 240:
        job = _job(cluster, ns)
        if _true(job, "Succeeded") or _true(job, "Failed"):
            break
        time.sleep(1)
    took = time.monotonic() - t0
    pods = json.loads(cluster.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    logs = {p["metadata"]["name"]: cluster.kubectl("logs", "-n", ns, p["metadata"]["name"],
                                                   "-c", "pytorch", check=False).stdout
            for p in pods}
    assert _true(job, "Succeeded"), (f"PyTorchJob not Succeeded after {took:.0f}s: "
                                     f"{json.dumps(job.get('status'), indent=1)}\n{logs}")
    print(f"\nPyTorchJob ddp-digits: apply -> Succeeded in {took:.1f}s")
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert set(by_name) == {"ddp-digits-master-0", "ddp-digits-worker-0"}
    # upstream's pod: the operator's rendezvous env, and on the worker the init container
    # (alpine:3.10, nslookup of the master's Service name) that ran to completion here
    env = {e["name"]: e.get("value") for e in
           by_name["ddp-digits-worker-0"]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "ddp-digits-master-0" and env["MASTER_PORT"] == "29500"
    assert (env["WORLD_SIZE"], env["RANK"], env["PET_NNODES"]) == ("2", "1", "2")
    [init] = by_name["ddp-digits-worker-0"]["status"]["initContainerStatuses"]
    # a real kubelet reports the image reference normalized
    assert init["image"] in (kubeflow.INIT_CONTAINER_IMAGE, f"docker.io/library/{kubeflow.INIT_CONTAINER_IMAGE}")
    assert init["state"]["terminated"]["exitCode"] == 0
    init_log = cluster.kubectl("logs", "-n", ns, "ddp-digits-worker-0", "-c", "init-pytorch").stdout
    assert f"Name:\tddp-digits-master-0.{ns}.svc.cluster.local" in init_log
    assert "test accuracy" in logs["ddp-digits-master-0"], logs
    assert "rank 1/2" in logs["ddp-digits-worker-0"], logs


def test_its_webhook_is_served_and_refuses_a_job_without_a_pytorch_container(kubeflow_operator, ns):
    docs = kubeflow.pytorchjob_documents([d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d])
    pj = docs[-1]
    for spec in pj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["name"] = "trainer"
    out = kubeflow_operator.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(pj),
                                    check=False)
    assert out.returncode != 0
    assert "validator.pytorchjob.training-operator.kubeflow.org" in out.stderr, out.stderr
    assert "must have at least one container with name pytorch" in out.stderr, out.stderr
