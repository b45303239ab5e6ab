"""End to end: the operator on the real local cluster validates nodes, then trains.

Every test runs in its own namespace; jobs run one at a time (they use hostNetwork and the
same rendezvous port on the same two nodes).
"""

from __future__ import annotations

import ipaddress
import json
import re
import signal
import time
from pathlib import Path

import pytest
import yaml

from localcluster.cluster import operator_install

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ddp-digits.yaml"


def example_docs(**spec_overrides):
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for d in docs:
        if d["kind"] == "DistTrainingJob":
            for k, v in spec_overrides.items():
                d["spec"][k] = v
    return docs


def apply(cluster, ns, docs, check=True):
    return cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs), check=check)


def get_job(cluster, ns, name="ddp-digits"):
    return json.loads(cluster.kubectl("get", "dtj", name, "-n", ns, "-o", "json").stdout)


def condition(job, ctype):
    for c in (job.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def wait_for(fn, timeout, interval=0.5, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


def pods(cluster, ns, selector="disttrain.dev/job-name=ddp-digits"):
    out = cluster.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout
    return json.loads(out)["items"]


def test_example_validates_then_trains(cluster, operator, ns):
    t0 = time.monotonic()
    apply(cluster, ns, example_docs())
    # The user's way to wait: kubectl wait on the Validated condition.
    cluster.kubectl("wait", "--for=condition=Validated", "dtj/ddp-digits", "-n", ns, "--timeout=120s", timeout=130)
    validated_after = time.monotonic() - t0
    cluster.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=300s", timeout=310)
    job = get_job(cluster, ns)
    st = job["status"]
    assert st["phase"] == "Succeeded"
    for ctype in ("ProbesScheduled", "MasterReachable", "NetworkValidated", "VersionsConsistent",
                  "CollectiveValidated", "Validated", "TrainingStarted", "Succeeded"):
        c = condition(job, ctype)
        assert c and c["status"] == "True", (ctype, c)
        assert c["observedGeneration"] == job["metadata"]["generation"] and c["lastTransitionTime"]
    ifname = st["rendezvous"]["socketIfname"]
    assert ifname and ifname not in ("docker0", "lo"), ifname
    addr = st["rendezvous"]["masterAddr"]
    try:
        master = ipaddress.ip_address(addr)
    except ValueError:  # gang mode: rank 0's stable DNS name through the job's headless Service
        assert addr == "ddp-digits-0.ddp-digits", addr
    else:
        assert not master.is_loopback and master not in ipaddress.ip_network("172.17.0.0/16")
    assert len({n["name"] for n in st["nodes"]}) == 2
    assert st["probe"]["busBandwidthGBps"] > 0 and st["probe"]["phaseSeconds"]
    # the rejected decoy is explained in the status (and explain), not in the one-sentence verdict
    assert any("docker0" in line for line in st["probe"]["interfacesNotChosen"]), st["probe"]

    # The training pods: one per validated node, pinned, with the validated settings.
    workers = sorted(pods(cluster, ns, "disttrain.dev/role=worker"), key=lambda p: p["metadata"]["name"])
    assert [p["metadata"]["name"] for p in workers] == ["ddp-digits-worker-0", "ddp-digits-worker-1"]
    for rank, p in enumerate(workers):
        assert p["spec"]["nodeName"] == st["nodes"][rank]["name"]
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        assert env["GLOO_SOCKET_IFNAME"] == st["nodes"][rank]["interface"]
        assert env["NCCL_SOCKET_IFNAME"] == "=" + st["nodes"][rank]["interface"]  # exact match
        assert env["MASTER_ADDR"] == st["rendezvous"]["masterAddr"]
        assert f"--node-rank={rank}" in p["spec"]["containers"][0]["command"]
        assert p["metadata"]["ownerReferences"][0]["kind"] == "DistTrainingJob"
    # Probe pods are gone after a pass (keepPods: OnFailure).
    wait_for(lambda: not pods(cluster, ns, "disttrain.dev/role=probe"), 30, what="probe pods deleted")

    # Real training on real data: the accuracy line in the rank 0 log.
    log = cluster.kubectl("logs", "ddp-digits-worker-0", "-n", ns).stdout
    acc = float(re.search(r"test accuracy ([0-9.]+)", log).group(1))
    assert acc >= 0.9, log

    # kubectl shows the diagnosis: printer columns and events.
    row = cluster.kubectl("get", "dtj", "ddp-digits", "-n", ns).stdout
    assert "Succeeded" in row and ifname in row
    events = cluster.kubectl("get", "events", "-n", ns, "--field-selector",
                             "involvedObject.kind=DistTrainingJob", "-o", "json").stdout
    reasons = {e["reason"] for e in json.loads(events)["items"]}
    assert "AllChecksPassed" in reasons and "AllRanksSucceeded" in reasons
    # Prometheus metrics from the running operator.
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{operator_install.METRICS_PORT}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert re.search(r'disttrain_probe_outcomes_total\{reason="AllChecksPassed"\} [1-9]', metrics), metrics
    assert f'disttrain_job_bus_bandwidth_gbps{{job="ddp-digits",namespace="{ns}"}}' in metrics
    assert "disttrain_probe_duration_seconds_count" in metrics
    print(f"Validated after {validated_after:.1f}s, bus bandwidth {st['probe']['busBandwidthGBps']} GB/s")


BAD = [
    ({"numNodes": 0}, "spec.numNodes"),
    ({"template": None}, "spec.template"),
    ({"template": {"spec": {"containers": []}}}, "spec.template.spec.containers"),
    ({"launcher": "mpirun"}, "spec.launcher"),
    ({"network": {"portRange": "sixty-thousand"}}, "spec.network.portRange"),
    ({"network": {"portRange": "61000-60000"}}, "spec.network.portRange"),
    ({"launcher": "env", "numProcPerNode": 4}, "numProcPerNode"),
    ({"numProcPerNode": "many"}, "spec.numProcPerNode"),
]


@pytest.mark.parametrize("override,field", BAD, ids=[f for _, f in BAD])
def test_bad_manifest_rejected_at_apply_naming_the_field(cluster, operator, ns, override, field):
    docs = [d for d in example_docs() if d["kind"] == "DistTrainingJob"]
    for k, v in override.items():
        if v is None:
            docs[0]["spec"].pop(k)
        else:
            docs[0]["spec"][k] = v
    p = apply(cluster, ns, docs, check=False)
    assert p.returncode != 0, p.stdout
    assert field in p.stderr, p.stderr
    assert cluster.kubectl("get", "dtj", "-n", ns, "-o", "name").stdout.strip() == ""


def test_reserved_env_rejected(cluster, operator, ns):
    docs = [d for d in example_docs() if d["kind"] == "DistTrainingJob"]
    docs[0]["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "MASTER_ADDR", "value": "x"}]
    p = apply(cluster, ns, docs, check=False)
    assert p.returncode != 0 and "MASTER_ADDR" in p.stderr, p.stderr


def test_template_host_network_rejected_at_admission(cluster, operator, ns):
    """The operator sets hostNetwork on probe and training pods from spec.network: a
    template that sets it is refused by the CRD's CEL rule, naming the field to use."""
    docs = [d for d in example_docs() if d["kind"] == "DistTrainingJob"]
    docs[0]["spec"]["template"]["spec"]["hostNetwork"] = True
    p = apply(cluster, ns, docs, check=False)
    assert p.returncode != 0 and "spec.network.hostNetwork" in p.stderr, p.stderr
    assert cluster.kubectl("get", "dtj", "-n", ns, "-o", "name").stdout.strip() == ""


def test_garbage_probe_report_is_a_false_condition(cluster, operator, ns):
    docs = example_docs(probe={"useTrainingImage": False, "image": "disttrain.dev/test/garbage-probe:v1",
                               "timeoutSeconds": 30})
    apply(cluster, ns, docs)
    job = wait_for(lambda: (lambda j: j if (condition(j, "Validated") or {}).get("status") == "False" else None)(
        get_job(cluster, ns)), 90, what="Validated=False")
    v = condition(job, "Validated")
    assert v["reason"] == "ProbeReportInvalid", v
    assert "report invalid" in v["message"]
    assert job["status"]["phase"] == "Failed"
    assert not pods(cluster, ns, "disttrain.dev/role=worker")
    # The operator survived the garbage and still answers.
    assert operator.pid() is not None


def test_not_enough_nodes_fails_in_seconds(cluster, operator, ns):
    t0 = time.monotonic()
    apply(cluster, ns, example_docs(numNodes=len(cluster.node_names) + 1))
    job = wait_for(lambda: (lambda j: j if (condition(j, "Validated") or {}).get("status") == "False" else None)(
        get_job(cluster, ns)), 60, what="Validated=False")
    took = time.monotonic() - t0
    ps = condition(job, "ProbesScheduled")
    assert (ps["status"], ps["reason"]) == ("False", "NotEnoughNodes"), ps
    assert f"numNodes={len(cluster.node_names) + 1}" in ps["message"]
    assert took < 60  # well before the probe's 60 s timeout would fire
    wait_for(lambda: not pods(cluster, ns), 60, what="probe pods cleaned up")


def test_operator_restarts_mid_probe_and_mid_training_without_duplicates(cluster, operator, ns):
    apply(cluster, ns, example_docs())
    wait_for(lambda: pods(cluster, ns, "disttrain.dev/role=probe"), 60, what="probe pods")
    operator.stop(signal.SIGKILL)
    time.sleep(2)
    operator.start()
    cluster.kubectl("wait", "--for=condition=Validated", "dtj/ddp-digits", "-n", ns, "--timeout=120s", timeout=130)
    wait_for(lambda: pods(cluster, ns, "disttrain.dev/role=worker"), 60, what="worker pods")
    operator.stop(signal.SIGKILL)
    time.sleep(2)
    operator.start()
    cluster.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=300s", timeout=310)
    names = sorted(p["metadata"]["name"] for p in pods(cluster, ns))
    assert names == ["ddp-digits-worker-0", "ddp-digits-worker-1"], names
    all_pods = json.loads(cluster.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    assert all(p["metadata"].get("ownerReferences") for p in all_pods)
    job = get_job(cluster, ns)
    assert job["status"]["restarts"] == 0 and job["status"]["probe"]["attempt"] == 1


def test_deleting_the_job_removes_its_pods(cluster, operator, ns):
    apply(cluster, ns, example_docs())
    wait_for(lambda: pods(cluster, ns), 60, what="pods")
    cluster.kubectl("delete", "dtj", "ddp-digits", "-n", ns, "--timeout=30s", timeout=40)
    wait_for(lambda: not pods(cluster, ns), 90, what="garbage collection of the job's pods")
    # No finalizer kept the job alive.
    assert cluster.kubectl("get", "dtj", "-n", ns, "-o", "name").stdout.strip() == ""


def test_job_deleted_and_reapplied_while_its_probe_pods_remain(cluster, operator, ns):
    """kubectl delete --cascade=orphan leaves the old job's probe pods behind: the new job
    with the same name is never judged on them; within 30 s it says which pods hold its
    names, and once they are deleted it probes and validates on its own pods."""
    apply(cluster, ns, example_docs())
    wait_for(lambda: len(pods(cluster, ns, "disttrain.dev/role=probe")) == 2, 60, what="probe pods")
    old_uid = get_job(cluster, ns)["metadata"]["uid"]
    cluster.kubectl("delete", "dtj", "ddp-digits", "-n", ns, "--cascade=orphan", "--timeout=30s", timeout=40)
    apply(cluster, ns, example_docs())
    t0 = time.monotonic()
    new = wait_for(lambda: (j := get_job(cluster, ns)) and j["metadata"]["uid"] != old_uid
                   and (condition(j, "ProbesScheduled") or {}).get("reason") == "NameConflict" and j, 30,
                   what="NameConflict on the new job")
    assert time.monotonic() - t0 < 30
    assert "ddp-digits-probe-0" in condition(new, "ProbesScheduled")["message"]
    assert condition(new, "Validated")["status"] == "Unknown"
    # the old pods go one at a time: while rank 1's name is still held, rank 0's probe is not
    # created (alone it would wait for a peer that cannot start, and the budget run out)
    cluster.kubectl("delete", "pod", "ddp-digits-probe-0", "-n", ns, "--timeout=60s", timeout=70)
    time.sleep(6)
    assert [p["metadata"]["name"] for p in pods(cluster, ns)] == ["ddp-digits-probe-1"]
    assert (condition(get_job(cluster, ns), "ProbesScheduled") or {}).get("reason") == "NameConflict"
    for p in pods(cluster, ns):
        cluster.kubectl("delete", "pod", p["metadata"]["name"], "-n", ns, "--wait=false")
    # on real kubelets the old pods first terminate (their grace period), then the new
    # probes start and run: minutes on a loaded 2-core machine, so the wait is generous and
    # a timeout shows what the job said
    out = cluster.kubectl("wait", "--for=condition=Validated", "dtj/ddp-digits", "-n", ns,
                          "--timeout=240s", timeout=250, check=False)
    job = get_job(cluster, ns)
    assert out.returncode == 0, (out.stderr, (job.get("status") or {}).get("conditions"),
                                 [(p["metadata"]["name"], p["status"].get("phase")) for p in pods(cluster, ns)])
    owners = {r["uid"] for p in pods(cluster, ns) for r in p["metadata"].get("ownerReferences") or []}
    assert owners <= {job["metadata"]["uid"]}


def test_job_deleted_and_applied_again_at_once_validates_on_its_own_pods(cluster, operator, ns):
    """kubectl delete dtj x && kubectl apply -f x.yaml while x's probe pods run (the garbage
    collector deletes them, they terminate): the new job validates on its own pods, or says
    NameConflict while it waits; its probe budget never runs out on the old job's pods
    (never ProbeTimeout), and their anti-affinity does not repel the new probes."""
    apply(cluster, ns, example_docs())
    wait_for(lambda: len([p for p in pods(cluster, ns, "disttrain.dev/role=probe")
                          if p["status"].get("phase") == "Running"]) == 2, 60, what="running probe pods")
    old_uid = get_job(cluster, ns)["metadata"]["uid"]
    cluster.kubectl("delete", "dtj", "ddp-digits", "-n", ns, "--wait=false")
    apply(cluster, ns, example_docs())
    reasons: set[str] = set()

    def decided():
        out = cluster.kubectl("get", "dtj", "ddp-digits", "-n", ns, "-o", "json", check=False)
        if out.returncode != 0:
            return None
        j = json.loads(out.stdout)
        if j["metadata"]["uid"] == old_uid:
            return None
        reasons.update(x.get("reason") for x in (j.get("status") or {}).get("conditions") or [])
        v = condition(j, "Validated")
        return j if v and v["status"] != "Unknown" else None

    job = wait_for(decided, 180, what="the new job's verdict")
    v = condition(job, "Validated")
    assert v["status"] == "True", (v, sorted(reasons))
    assert "ProbeTimeout" not in reasons, sorted(reasons)
    new_uid = job["metadata"]["uid"]
    probes = [p for p in pods(cluster, ns, "disttrain.dev/role=probe") if not p["metadata"].get("deletionTimestamp")]
    assert all(p["metadata"]["labels"]["disttrain.dev/job-uid"] == new_uid for p in probes)


def test_a_resource_only_a_tainted_node_offers_is_not_offered(cluster, operator, ns):
    """node-b advertises example.com/foo (an extended resource on its status, as Kubernetes'
    "Advertise Extended Resources for a Node" does) and carries a NoSchedule taint the job
    does not tolerate: no node the job may use offers it, so the job says so within seconds,
    naming node-b and its taint, instead of waiting for capacity for ever."""
    resource, path = "example.com/foo", "/status/capacity/example.com~1foo"
    cluster.kubectl("patch", "node", "node-b", "--subresource=status", "--type=json",
                    "-p", json.dumps([{"op": "add", "path": path, "value": "4"}]))
    cluster.kubectl("taint", "node", "node-b", "dedicated=ml:NoSchedule", "--overwrite")
    try:
        wait_for(lambda: json.loads(cluster.kubectl("get", "node", "node-b", "-o", "json").stdout)
                 ["status"].get("allocatable", {}).get(resource) == "4", 30, what="node-b's allocatable")
        docs = example_docs()
        for d in docs:
            if d["kind"] == "DistTrainingJob":
                res = d["spec"]["template"]["spec"]["containers"][0].setdefault("resources", {})
                res.setdefault("limits", {})[resource] = 1
        apply(cluster, ns, docs)
        # the operator reads the nodes at most every 30 s for all jobs: a read from before
        # node-b advertised the resource says "no node offers" until the next one
        job = wait_for(lambda: (j := get_job(cluster, ns)) and (c := condition(j, "ProbesScheduled") or {})
                       .get("reason") == "ResourceNotOffered" and "ruled out" in c.get("message", "") and j,
                       90, what="ResourceNotOffered naming the ruled-out node")
        msg = condition(job, "ProbesScheduled")["message"]
        assert "no node the pod may use offers 1 example.com/foo" in msg, msg
        assert "node-b (taint dedicated=ml:NoSchedule)" in msg and "let the pods onto node-b" in msg, msg
        assert len(msg) <= 400
    finally:
        cluster.kubectl("taint", "node", "node-b", "dedicated=ml:NoSchedule-", check=False)
        cluster.kubectl("patch", "node", "node-b", "--subresource=status", "--type=json",
                        "-p", json.dumps([{"op": "remove", "path": path}]), check=False)
