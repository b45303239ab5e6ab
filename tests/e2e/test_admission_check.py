"""The preflight as a Kueue admission check (docs/admission-check.md), on the real cluster:
the chart installed with ``kueue.admissionCheck.enabled``, Kueue with the PyTorchJob,
TrainJob, JobSet and batch/Job integrations, Kubeflow's training operator, Trainer v2,
JobSet, and a
ClusterQueue that lists the check. A healthy PyTorchJob is probed, admitted and trains on
the validated nodes; with a firewall on one node's ephemeral range (either rank's node)
the Workload gets ``Retry`` with the verdict naming that node, in its status and in an
Event on the job, and no pod of the job is ever created; an indexed Job, a JobSet and a
TrainJob likewise.

The firewall lets the node's own Service relay (10.96.0.1:443) through: in a real cluster
pod traffic to a Service is forwarded after DNAT and never meets a host's input chain,
while here the relay listens in the node's namespace, and the operator's pod may run on
the node under test.
"""
from __future__ import annotations

import json
import time

import pytest
import yaml

from localcluster.cluster import kubeflow, operator_install
from localcluster.common.config import KUBERNETES_SERVICE_IP, REPO_ROOT, node_spec_by_name
from localcluster.network import firewall

from .conftest import _localcluster
from .test_helm import operator_pods
from .test_operator import wait_for

pytestmark = pytest.mark.e2e

CHECK = "disttrain-preflight"
CQ = "preflight-queue"
LQ = "preflight"
WORKLOADS = "workloads.kueue.x-k8s.io"
MASTER_PORT = 29500  # the example's pytorchjob-port
BLOCK_EPHEMERAL = {"input": [
    {"iifname": "lo", "action": "accept"},
    {"state": ["established", "related"], "action": "accept"},
    {"daddr": KUBERNETES_SERVICE_IP, "proto": "tcp", "dport": 443, "action": "accept"},
    {"proto": "tcp", "dport": MASTER_PORT, "action": "accept"},
    {"proto": "tcp", "state": ["new"], "action": "drop"}]}


def _cluster_queue() -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CQ},
            "spec": {"namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                         "name": "default-flavor", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                                                 {"name": "memory", "nominalQuota": "32Gi"}]}]}],
                     "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]}}}


def _up(cluster, *extra: str) -> None:
    p = _localcluster("up", "--nodes", str(len(cluster.node_names)), "--kubeflow", "--trainer", "--kueue",
                      "--kueue-integration", "batch/job", "--kueue-integration", "kubeflow.org/pytorchjob",
                      "--kueue-integration", "jobset.x-k8s.io/jobset",
                      "--kueue-integration", "trainer.kubeflow.org/trainjob", *extra)
    if p.returncode != 0:
        pytest.fail(f"localcluster up --kubeflow --trainer --kueue {' '.join(extra)} failed:\n"
                    f"{p.stderr}\n{p.stdout}")


@pytest.fixture(scope="module")
def checked(cluster):
    """Kueue (PyTorchJob, TrainJob, JobSet and Job integrations), Kubeflow's operator,
    Trainer v2 and JobSet, the chart with the
    admission check on, and the ClusterQueue that lists it; all taken down at the end."""
    _up(cluster)
    operator_install.stop()
    operator_install.helm_install("kueue.enabled=true", "kueue.admissionCheck.enabled=true",
                                  "kueue.admissionCheck.create=true")
    wait_for(lambda: [p for p in operator_pods(cluster) if p["status"].get("phase") == "Running"], 90,
             what="operator pod Running")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_cluster_queue()))
    wait_for(lambda: _true(json.loads(cluster.kubectl("get", "clusterqueue", CQ, "-o", "json").stdout), "Active"),
             60, what=f"ClusterQueue {CQ} Active (the operator marks {CHECK} Active)")
    yield cluster
    for n in cluster.node_names:
        firewall.clear(node_spec_by_name(n).netns)
    # the ClusterQueue first: Kueue keeps an AdmissionCheck a ClusterQueue lists (its
    # finalizer kueue.x-k8s.io/resource-in-use), and `helm uninstall --wait` waits for it
    cluster.kubectl("delete", "clusterqueue", CQ, "--timeout=60s", check=False, timeout=70)
    operator_install.helm_uninstall()


@pytest.fixture
def queue(checked, ns):
    checked.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": LQ, "namespace": ns}, "spec": {"clusterQueue": CQ}}))
    yield ns
    for n in checked.node_names:
        firewall.clear(node_spec_by_name(n).netns)
    # the next test's probes need the nodes' hostNetwork port 29500: wait for these pods to go
    checked.kubectl("delete", "pytorchjobs,trainjobs,jobsets,jobs", "--all", "-n", ns, "--wait=true", "--timeout=60s",
                    check=False, timeout=70)
    wait_for(lambda: not json.loads(checked.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"],
             90, what=f"the pods of {ns} gone")


def _true(obj: dict, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _pytorchjob() -> list[dict]:
    docs = kubeflow.pytorchjob_documents(
        [d for d in yaml.safe_load_all((REPO_ROOT / "examples" / "ddp-digits.yaml").read_text()) if d])
    docs[-1]["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = LQ
    return docs


def _indexed_job_spec() -> dict:
    """Two ranks as an indexed Job's spec (rank = completion index): each prints where it ran."""
    return {"completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "trainer", "image": "ghcr.io/disttrain/examples-digits:0.1.0",
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "echo rank $JOB_COMPLETION_INDEX ifname $IFNAME"],
                "env": [{"name": "IFNAME", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['disttrain.dev/socket-ifname']"}}}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}


def _indexed_job() -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "ranks", "labels": {"kueue.x-k8s.io/queue-name": LQ}},
            "spec": _indexed_job_spec()}


def _jobset() -> dict:
    """The same two ranks as a JobSet: one replicated job ``node`` (Kueue's pod set of
    replicas x parallelism = 2 pods)."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "ranks-js", "labels": {"kueue.x-k8s.io/queue-name": LQ}},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1,
                                         "template": {"spec": _indexed_job_spec()}}]}}


def _trainjob() -> dict:
    """The same two ranks as a Trainer v2 TrainJob on the ``torch-distributed`` runtime
    (Kueue's pod set ``node``; the runtime sets PET_NODE_RANK)."""
    c = _indexed_job_spec()["template"]["spec"]["containers"][0]
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "ranks-tj", "labels": {"kueue.x-k8s.io/queue-name": LQ}},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, "image": c["image"],
                                 "command": ["sh", "-c", "echo rank $PET_NODE_RANK ifname $IFNAME"],
                                 "env": c["env"], "resourcesPerNode": c["resources"]}}}


def _docs(kind: str) -> list[dict]:
    return {"PyTorchJob": _pytorchjob, "indexed Job": lambda: [_indexed_job()],
            "JobSet": lambda: [_jobset()], "TrainJob": lambda: [_trainjob()]}[kind]()


def _workload(cluster, ns: str) -> dict:
    items = json.loads(cluster.kubectl("get", WORKLOADS, "-n", ns, "-o", "json").stdout)["items"]
    return items[0] if items else {}


def _entry(wl: dict) -> dict:
    return next((e for e in (wl.get("status") or {}).get("admissionChecks") or [] if e.get("name") == CHECK), {})


def _job_pods(cluster, ns: str) -> list[dict]:
    """The job's own pods (not the preflight's probe pods)."""
    items = json.loads(cluster.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    return [p for p in items if "disttrain.dev/role" not in (p["metadata"].get("labels") or {})]


def _events(cluster, ns: str, reason: str) -> list[str]:
    out = json.loads(cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout)["items"]
    return [e.get("message") or "" for e in out if e.get("reason") == reason]


@pytest.mark.parametrize("kind", ["PyTorchJob", "indexed Job", "JobSet", "TrainJob"])
def test_a_healthy_job_is_validated_admitted_and_runs_on_the_validated_nodes(checked, queue, kind):
    cluster, ns = checked, queue
    docs = _docs(kind)
    t0 = time.monotonic()
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    wait_for(lambda: _entry(_workload(cluster, ns)).get("state") == "Ready", 120, what="check Ready")
    ready_s = time.monotonic() - t0
    wl = _workload(cluster, ns)
    wait_for(lambda: _true(_workload(cluster, ns), "Finished"), 240, what="Workload Finished")
    entry = _entry(wl)
    assert "nodes validated" in entry["message"] and "MASTER_ADDR" not in entry["message"], entry
    [key] = {k for u in entry["podSetUpdates"] for k in u["nodeSelector"]}
    # Kubeflow marks a PyTorchJob Succeeded (so Kueue the Workload Finished) when the master
    # ends; a worker may still be running for a moment: wait until every pod has ended
    wait_for(lambda: all(p["status"].get("phase") in ("Succeeded", "Failed") for p in _job_pods(cluster, ns)),
             60, what="every pod of the job ended")
    pods = _job_pods(cluster, ns)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for p in pods:  # pinned to what was validated, and told the interface
        assert p["spec"]["nodeSelector"][key] == "true"
        assert p["metadata"]["annotations"]["disttrain.dev/socket-ifname"]
        assert p["status"]["phase"] == "Succeeded", p["status"]
    if kind == "PyTorchJob":  # its hostNetwork port keeps one pod per node; a Job may share one
        assert {p["spec"]["nodeName"] for p in pods} == set(cluster.node_names)
    assert _events(cluster, ns, "PreflightReady")
    print(f"\n{kind}: apply -> check Ready in {ready_s:.1f}s")


@pytest.mark.parametrize("culprit", ["node-a", "node-b"])
def test_a_blocked_ephemeral_range_holds_the_pytorchjob_with_retry_naming_the_node(checked, queue, culprit):
    cluster, ns = checked, queue
    firewall.apply(node_spec_by_name(culprit).netns, BLOCK_EPHEMERAL)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(_pytorchjob()))
    wait_for(lambda: _entry(_workload(cluster, ns)).get("state") == "Retry", 120, what="check Retry")
    entry = _entry(_workload(cluster, ns))
    msg = entry["message"]
    assert msg.startswith("EphemeralPortsBlocked") and culprit in msg and len(msg) <= 400, msg
    other = next(n for n in cluster.node_names if n != culprit)
    assert f"{other}:" not in msg  # the bystander is not blamed
    assert any(culprit in m for m in _events(cluster, ns, "PreflightRetry"))
    wl = _workload(cluster, ns)
    assert not _true(wl, "Admitted")
    # Kueue queues it again; the next round keeps the culprit out, which leaves too few
    # nodes: the answer still names the culprit's verdict, never the scheduler's guess
    seen: list[str] = []

    def second_round() -> bool:
        m = _entry(_workload(cluster, ns)).get("message") or ""
        if not seen or seen[-1] != m:
            seen.append(m)
        return m.startswith(f"{culprit} kept out")
    try:
        wait_for(second_round, 150, what="the second round's Retry")
    except AssertionError as e:
        where = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in operator_pods(cluster)}
        print(cluster.kubectl("get", "dtj,pods", "-A", "-o", "wide").stdout)
        print(cluster.kubectl("describe", "dtj", "-n", ns).stdout[-3000:])
        raise AssertionError(f"{e}; messages seen: {seen}; operator pods: {where}") from None
    msg2 = _entry(_workload(cluster, ns))["message"]
    assert "EphemeralPortsBlocked" in msg2 and "affinity" not in msg2, msg2
    assert not _job_pods(cluster, ns), "a pod of the job was created although the check never said Ready"
    assert not _true(_workload(cluster, ns), "Admitted")


@pytest.mark.parametrize("kind,culprit", [("indexed Job", "node-b"), ("JobSet", "node-a"),
                                          ("TrainJob", "node-b")])
def test_a_blocked_ephemeral_range_holds_an_indexed_job_a_jobset_and_a_trainjob(checked, queue, kind, culprit):
    cluster, ns = checked, queue
    firewall.apply(node_spec_by_name(culprit).netns, BLOCK_EPHEMERAL)
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(_docs(kind)))
    wait_for(lambda: _entry(_workload(cluster, ns)).get("state") == "Retry", 120, what="check Retry")
    msg = _entry(_workload(cluster, ns))["message"]
    assert msg.startswith("EphemeralPortsBlocked") and culprit in msg, msg
    other = next(n for n in cluster.node_names if n != culprit)
    assert f"{other}:" not in msg
    assert any(culprit in m for m in _events(cluster, ns, "PreflightRetry"))
    assert not _job_pods(cluster, ns)


def test_a_validated_node_label_left_by_a_workload_that_went_is_taken_off_after_a_restart(checked):
    """The labels the Ready answers select on outlive their Workload when it goes while
    the operator is down: a restarted operator takes them off (and nothing else)."""
    cluster = checked
    orphan, kept = "preflight.disttrain.dev/gone-pf-0123abcd", "example.com/pool"
    node = cluster.node_names[-1]
    cluster.kubectl("label", "node", node, f"{orphan}=true", f"{kept}=a", "--overwrite")
    try:
        before = {p["metadata"]["name"] for p in operator_pods(cluster)}
        cluster.kubectl("delete", "pod", "-n", operator_install.NAMESPACE, *before, "--wait=false")
        wait_for(lambda: [p for p in operator_pods(cluster) if p["metadata"]["name"] not in before
                          and p["status"].get("phase") == "Running"], 90, what="a new operator pod Running")

        def labels() -> dict:
            return json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)["metadata"]["labels"]
        wait_for(lambda: orphan not in labels(), 60, what=f"{orphan} taken off {node}")
        assert labels()[kept] == "a"
    finally:
        cluster.kubectl("label", "node", node, f"{orphan}-", f"{kept}-", check=False)

PODS_READY_TIMEOUT = 5  # seconds: shorter than a probe round (6 to 8 s at 2 nodes), longer than pod start (1 s)


def test_the_probe_does_not_count_against_kueues_wait_for_pods_ready(checked, queue):
    """Kueue's waitForPodsReady timeout runs from the Workload's admission, which the
    check's Ready precedes: with a timeout shorter than the probe round, a healthy job is
    still admitted, its pods become ready in time and it is never evicted."""
    cluster, ns = checked, queue
    _up(cluster, "--kueue-wait-for-pods-ready", f"{PODS_READY_TIMEOUT}s")
    try:
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(_pytorchjob()))
        t0 = time.monotonic()
        seen: dict[str, float] = {}
        while "Finished" not in seen:
            assert time.monotonic() - t0 < 240, f"not Finished in 240 s; seen {seen}"
            wl = _workload(cluster, ns)
            for c in ("QuotaReserved", "Admitted", "PodsReady", "Evicted", "Finished"):
                if c not in seen and _true(wl, c):
                    seen[c] = time.monotonic() - t0
            assert "Evicted" not in seen, f"evicted: {(wl.get('status') or {}).get('conditions')}"
            time.sleep(0.2)
        # the probe round outlasted the timeout: had it counted, the job would be evicted
        assert seen["Admitted"] - seen["QuotaReserved"] > PODS_READY_TIMEOUT, seen
        assert "PodsReady" in seen and seen["PodsReady"] - seen["Admitted"] < PODS_READY_TIMEOUT, seen
        assert all(p["status"]["phase"] == "Succeeded" for p in _job_pods(cluster, ns))
        print(f"\nwaitForPodsReady {PODS_READY_TIMEOUT}s: " + ", ".join(f"{k} {v:.1f}s" for k, v in seen.items()))
    finally:
        _up(cluster)  # Kueue as the other tests run it
