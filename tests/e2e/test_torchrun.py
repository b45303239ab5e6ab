"""End to end: a job whose container command is already `torchrun ...` (the Kubeflow way)
validates and trains. The operator leaves the command as written and hands torchrun the
validated rendezvous in PET_* variables (docs/admission.md, "torchrun in your command")."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp-digits.yaml"
COMMAND = ["torchrun", "--nproc-per-node=1", "/workspace/train_digits.py"]


def test_users_torchrun_command_trains(cluster, operator, ns):  # noqa: F811
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    job = next(d for d in docs if d["kind"] == "DistTrainingJob")
    job["spec"]["template"]["spec"]["containers"][0]["command"] = COMMAND
    job["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "EPOCHS", "value": "5"})
    t0 = time.monotonic()
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    cluster.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=240s",
                    timeout=250)
    took = time.monotonic() - t0
    st = json.loads(cluster.kubectl("get", "dtj", "ddp-digits", "-n", ns, "-o", "json").stdout)["status"]
    assert st["phase"] == "Succeeded"
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", "disttrain.dev/role=worker", "-o", "json").stdout
    workers = sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])
    assert len(workers) == 2
    for rank, p in enumerate(workers):
        ctr = p["spec"]["containers"][0]
        assert ctr["command"] == COMMAND and not ctr.get("args"), ctr["command"]  # as written
        env = {e["name"]: e.get("value") for e in ctr["env"]}
        assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"]) == ("2", str(rank), "1")
        assert env["PET_MASTER_ADDR"] == st["rendezvous"]["masterAddr"]
        assert env["PET_MASTER_PORT"] == str(st["rendezvous"]["masterPort"])
    log = cluster.kubectl("logs", "ddp-digits-worker-0", "-n", ns).stdout
    # torchrun started the script with the rendezvous it read from PET_*: both ranks met.
    assert "rank 0/2" in log and re.search(r"test accuracy ([0-9.]+)", log), log
    print(f"torchrun command: Succeeded {took:.1f}s after apply")


FAILING = ["torchrun", "--nproc-per-node=1", "--no-python", "python", "-c",
           "raise ValueError('bad shape: expected (4, 8), got (4, 9)')"]


def test_a_failing_torchrun_trainer_is_quoted_by_its_exception(cluster, operator, ns):  # noqa: F811
    """Each rank's torchrun runs a script that raises: the job fails quoting the script's
    ValueError from the kubelet's log tail (FallbackToLogsOnError), not torchrun's
    ChildFailedError summary table."""
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    job = next(d for d in docs if d["kind"] == "DistTrainingJob")
    job["spec"]["template"]["spec"]["containers"][0]["command"] = FAILING
    job["spec"].setdefault("runPolicy", {})["backoffLimit"] = 0
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    cluster.kubectl("wait", "--for=condition=Failed", "dtj/ddp-digits", "-n", ns, "--timeout=240s",
                    timeout=250)
    st = json.loads(cluster.kubectl("get", "dtj", "ddp-digits", "-n", ns, "-o", "json").stdout)["status"]
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RankFailed", failed
    assert "exited 1: ValueError: bad shape: expected (4, 8), got (4, 9)" in failed["message"], failed
    assert "To enable traceback" not in failed["message"] and "====" not in failed["message"], failed
