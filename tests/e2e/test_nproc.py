"""End to end: the example with numProcPerNode 2. Each probe pod runs 2 processes (world
size 4: the all-reduce among each node's local ranks, then over all 4) and writes one report
naming both, the job validates, and training runs torchrun --nproc-per-node=2 with world
size 4."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp-digits.yaml"


def test_example_with_two_processes_per_node_validates_and_trains(cluster, operator, ns):
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    job = next(d for d in docs if d["kind"] == "DistTrainingJob")
    job["spec"]["numProcPerNode"] = 2
    job["spec"]["probe"]["keepPods"] = "Always"  # to read their reports after the pass
    job["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "EPOCHS", "value": "5"})
    t0 = time.monotonic()
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    cluster.kubectl("wait", "--for=condition=Validated", "dtj/ddp-digits", "-n", ns,
                    "--timeout=180s", timeout=190)
    validated = time.monotonic() - t0
    cluster.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns,
                    "--timeout=240s", timeout=250)
    took = time.monotonic() - t0
    st = json.loads(cluster.kubectl("get", "dtj", "ddp-digits", "-n", ns, "-o", "json").stdout)["status"]
    conds = {x["type"]: x for x in st["conditions"]}
    # the probes ran 2 processes on each node, each checked, and the collective spanned 4 ranks
    assert [(n["rank"], n.get("localRanks")) for n in st["nodes"]] == [(0, 2), (1, 2)], st["nodes"]
    assert all(n.get("intraNodeBusBandwidthGBps", 0) > 0 for n in st["nodes"]), st["nodes"]
    coll = conds["CollectiveValidated"]["message"]
    assert "among each node's 2 local ranks" in coll and "over 4 ranks (2 nodes x 2, gloo)" in coll, coll
    # each probe pod's one report (its termination message) carries both local ranks' pass
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", "disttrain.dev/role=probe", "-o", "json").stdout
    probes = sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])
    assert len(probes) == 2
    for rank, p in enumerate(probes):
        term = p["status"]["containerStatuses"][0]["state"]["terminated"]
        rep = json.loads(term["message"])
        assert (rep["rank"], rep["worldSize"], rep["localWorldSize"], rep["ok"]) == (rank, 2, 2, True)
        assert [(e["localRank"], e["ok"]) for e in rep["localRanks"]] == [(0, True), (1, True)]
        assert rep["intraNode"]["correct"] is True and rep["allreduce"]["correct"] is True
    print(json.dumps({k: rep.get(k) for k in ("rank", "worldSize", "node", "ok", "allreduce",
                                              "localWorldSize", "intraNode", "localRanks")}))
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", "disttrain.dev/role=worker", "-o", "json").stdout
    workers = sorted(json.loads(out)["items"], key=lambda p: p["metadata"]["name"])
    assert len(workers) == 2
    for p in workers:
        assert "--nproc-per-node=2" in p["spec"]["containers"][0]["command"]
    log = cluster.kubectl("logs", "ddp-digits-worker-0", "-n", ns).stdout
    # torchrun started 2 processes per pod: rank 0 of a world of 4
    assert "rank 0/4" in log and re.search(r"test accuracy ([0-9.]+)", log), log
    print(f"numProcPerNode 2: Validated {validated:.1f}s, Succeeded {took:.1f}s after apply; "
          f"{coll}")
