"""The chart, installed for real: the operator runs as a pod under the chart's
ServiceAccount and RBAC, and the real apiserver decides every request it makes."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from localcluster.cluster import operator_install

from .test_operator import apply, condition, example_docs, get_job, pods, wait_for

pytestmark = pytest.mark.e2e

RELEASE = "disttrain"
NS = "disttrain-system"
SA = f"system:serviceaccount:{NS}:{RELEASE}"
CHART = str(operator_install.CHART)


def helm(cluster, *args, check=True, timeout=180):
    p = subprocess.run([str(operator_install.helm_bin()), *args], env=cluster.env,
                       capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}")
    return p


def operator_pods(cluster):
    out = cluster.kubectl("get", "pods", "-n", NS, "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
def release(cluster):
    """`helm install` on the local cluster, the host-process operator stopped first."""
    operator_install.stop()
    operator_install.helm_install()
    wait_for(lambda: [p for p in operator_pods(cluster) if p["status"].get("phase") == "Running"], 90,
             what="operator pod Running")
    yield RELEASE
    operator_install.helm_uninstall()


def test_rendered_chart_accepted_by_apiserver(cluster):
    rendered = helm(cluster, "template", RELEASE, CHART, "-n", NS, "--kube-version", "v1.37.2",
                    "--set", "metrics.serviceMonitor.enabled=false").stdout
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered) if d}
    assert {"Deployment", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Service"} <= kinds
    cluster.kubectl("create", "namespace", NS, check=False)
    p = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
    assert p.returncode == 0, p.stderr


def test_operator_pod_trains_the_example_under_its_service_account(cluster, release, ns):
    op = operator_pods(cluster)[0]
    assert op["spec"]["serviceAccountName"] == RELEASE
    assert operator_install.pid() is None  # no host-process operator: the pod does the work
    apply(cluster, ns, example_docs())
    cluster.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=300s", timeout=310)
    job = get_job(cluster, ns)
    assert condition(job, "Validated")["status"] == "True"
    # The pods were created by the operator's ServiceAccount (managedFields record the client).
    w = pods(cluster, ns, "disttrain.dev/role=worker")[0]
    assert w["metadata"]["ownerReferences"][0]["kind"] == "DistTrainingJob"
    logs = cluster.kubectl("logs", "-n", NS, op["metadata"]["name"]).stdout
    assert "ddp-digits" in logs


@pytest.mark.parametrize("verb,resource,allowed", [
    ("create", "pods", "yes"),
    ("create", "services", "yes"),
    ("get", "services", "yes"),
    ("delete", "services", "no"),
    ("update", "services", "no"),
    ("patch", "disttrainingjobs.disttrain.dev --subresource=status", "yes"),
    ("patch", "disttrainingjobs.disttrain.dev", "no"),
    ("get", "secrets", "no"),
    ("list", "secrets", "no"),
    ("get", "nodes", "no"),
    ("create", "deployments.apps", "no"),
    ("delete", "disttrainingjobs.disttrain.dev", "yes"),  # runPolicy.ttlSecondsAfterFinished
    ("update", "disttrainingjobs.disttrain.dev", "no"),
    ("create", "clusterroles.rbac.authorization.k8s.io", "no"),
    ("get", "configmaps", "no"),
    ("get", "namespaces", "yes"),  # the job's namespace labels, for NetworkPolicies (issue 31)
    ("update", "namespaces", "no"),
    ("delete", "namespaces", "no"),
])
def test_rbac_allows_exactly_what_is_needed(cluster, release, verb, resource, allowed):
    p = cluster.kubectl("auth", "can-i", verb, *resource.split(), "--as", SA, "-A", check=False)
    assert p.stdout.strip() == allowed, (verb, resource, p.stdout, p.stderr)


def test_upgrade_rolls_the_operator_without_losing_a_running_job(cluster, release, ns):
    docs = example_docs()
    docs[1]["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "EPOCHS", "value": "400"})
    apply(cluster, ns, docs)
    wait_for(lambda: (condition(get_job(cluster, ns), "TrainingStarted") or {}).get("status") == "True", 120,
             what="training started")
    before = {p["metadata"]["name"] for p in operator_pods(cluster)}
    helm(cluster, "upgrade", RELEASE, CHART, "-n", NS, "--set", "logFormat=json", "--wait", "--timeout", "120s")
    wait_for(lambda: {p["metadata"]["name"] for p in operator_pods(cluster)
                      if p["status"].get("phase") == "Running"} - before, 90, what="new operator pod")
    cluster.kubectl("wait", "--for=condition=Succeeded", "dtj/ddp-digits", "-n", ns, "--timeout=300s", timeout=310)
    job = get_job(cluster, ns)
    assert job["status"]["restarts"] == 0
    assert sorted(p["metadata"]["name"] for p in pods(cluster, ns)) == ["ddp-digits-worker-0", "ddp-digits-worker-1"]


def test_uninstall_removes_the_operator_and_keeps_the_crd(cluster, release):
    helm(cluster, "uninstall", RELEASE, "-n", NS, "--wait")
    wait_for(lambda: not operator_pods(cluster), 90, what="operator pods gone")
    assert cluster.kubectl("get", "crd", "disttrainingjobs.disttrain.dev", check=False).returncode == 0
    assert cluster.kubectl("get", "clusterrole", RELEASE, check=False).returncode != 0
    # No orphans: the operator's pod finishes its graceful shutdown and is gone.
    wait_for(lambda: not json.loads(cluster.kubectl("get", "pods", "-n", NS, "-o", "json").stdout)["items"],
             90, what="no pods left in the operator's namespace")
