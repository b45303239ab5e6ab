"""localcluster/cluster/kueue.py's pure parts: config, webhooks, CRD conversion, RBAC, queues."""
from __future__ import annotations

import base64
import json

import pytest

from localcluster.cluster import kueue, kueue_objects
from localcluster.common.config import kueue_dir

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def hook(name: str, group: str, resource: str, path: str) -> dict:
    """A webhook as Kueue's config/components/webhook/manifests.yaml writes it."""
    return {"admissionReviewVersions": ["v1"], "name": name, "failurePolicy": "Fail",
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                         "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": [resource]}]}


MANIFESTS = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"},
     "webhooks": [hook("mjob.kb.io", "batch", "jobs", "/mutate-batch-v1-job"),
                  hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
                  hook("mdeployment.kb.io", "apps", "deployments", "/mutate-apps-v1-deployment"),
                  hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads",
                       "/mutate-kueue-x-k8s-io-v1beta2-workload")]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"},
     "webhooks": [hook("vworkload.kb.io", "kueue.x-k8s.io", "workloads/status",
                       "/validate-kueue-x-k8s-io-v1beta2-workload"),
                  hook("vpytorchjob.kb.io", "kubeflow.org", "pytorchjobs",
                       "/validate-kubeflow-org-v1-pytorchjob")]},
]


def test_webhooks_point_at_loopback_with_the_ca_and_only_what_is_managed():
    mut, val = kueue_objects.webhook_configurations(MANIFESTS, CA, ["batch/job"], port=21471)
    assert mut["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert [w["name"] for w in mut["webhooks"]] == ["mjob.kb.io", "mworkload.kb.io"]
    assert mut["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:21471/mutate-batch-v1-job",
        "caBundle": base64.b64encode(CA).decode()}
    assert [w["name"] for w in val["webhooks"]] == ["vworkload.kb.io"]  # workloads/status too
    assert MANIFESTS[0]["webhooks"][0]["clientConfig"]["service"]  # the input is not modified


def test_pod_integration_webhook_skips_the_system_namespaces():
    mut, _ = kueue_objects.webhook_configurations(MANIFESTS, CA, ["pod"])
    [pod] = [w for w in mut["webhooks"] if w["name"] == "mpod.kb.io"]
    assert pod["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system",
                                                                           "kueue-system"]
    assert "mjob.kb.io" not in [w["name"] for w in mut["webhooks"]]
    with pytest.raises(KeyError):
        kueue_objects.webhook_configurations(MANIFESTS, CA, ["ray.io/rayjob"])


def test_conversion_webhook_only_on_the_converted_crds():
    crd = {"spec": {"names": {"plural": "workloads"}, "versions": []}}
    out = kueue_objects.with_conversion(crd, CA, port=16471)
    assert out["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == \
        "https://127.0.0.1:16471/convert"
    assert "conversion" not in crd["spec"]
    rf = {"spec": {"names": {"plural": "resourceflavors"}}}
    assert kueue_objects.with_conversion(rf, CA) == rf


def test_config_is_loopback_only_without_leader_election_or_internal_certs():
    cfg = kueue_objects.render_config("/s/kueue/certs", webhook_port=1, health_port=2)
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/s/kueue/certs"}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert cfg["metrics"]["bindAddress"] == "0"  # off
    assert cfg["leaderElection"]["leaderElect"] is False
    assert cfg["internalCertManagement"]["enable"] is False
    assert cfg["manageJobsWithoutQueueName"] is False
    assert cfg["integrations"]["frameworks"] == ["batch/job"]
    with pytest.raises(ValueError, match="unknown Kueue integration"):
        kueue_objects.render_config("/x", integrations=["foo/bar"])


def test_rbac_binds_kueues_own_rules_to_its_user():
    role, binding = kueue_objects.rbac_objects({"rules": [{"apiGroups": [""], "resources": ["pods"],
                                                   "verbs": ["get"]}]})
    assert role["metadata"]["name"] == kueue_objects.USER == "system:kueue"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "system:kueue"}]


def test_queues():
    flavor, cq, lq = kueue_objects.queue_objects({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"},
                                         ["team-a"])
    assert flavor["kind"] == "ResourceFlavor" and cq["spec"]["namespaceSelector"] == {}
    [group] = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert group["flavors"][0]["resources"][2] == {"name": "nvidia.com/gpu", "nominalQuota": "2"}
    assert lq["metadata"] == {"name": "user-queue", "namespace": "team-a",
                              "labels": kueue_objects.MANAGED_BY}
    assert lq["spec"] == {"clusterQueue": "cluster-queue"}
    assert kueue_objects.object_path(lq) == \
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/localqueues/user-queue"
    assert kueue_objects.object_path(cq) == "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cluster-queue"
    assert kueue_objects.object_path({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": "x"}}) == "/api/v1/namespaces/x"


def test_parse_quota():
    assert kueue_objects.parse_quota("cpu=4, nvidia.com/gpu=2") == {"cpu": "4", "memory": "32Gi",
                                                            "nvidia.com/gpu": "2"}
    assert kueue_objects.parse_quota("") == kueue_objects.DEFAULT_QUOTA
    for bad in ("cpu", "cpu=four", "=4", "cpu=4x", "Bad Name=1"):
        with pytest.raises(ValueError):
            kueue_objects.parse_quota(bad)


def test_the_overlay_command_names_the_state_dir(tmp_path):
    argv = kueue.argv(tmp_path)
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[-2:] == [str(kueue.kueue_bin()), f"--config={tmp_path}/kueue/config.yaml"]
    assert str(tmp_path / "kueue" / "etc") in argv


def test_real_manifests_when_built():
    """Against the module's own manifests (after `build-k8s.sh kueue`)."""
    m = kueue_dir() / "config"
    if not (m / "webhook" / "manifests.yaml").exists():
        pytest.skip("Kueue not built")
    docs = kueue._load_yaml_docs(m / "webhook" / "manifests.yaml")
    mut, val = kueue_objects.webhook_configurations(docs, CA)
    names = {w["name"] for d in (mut, val) for w in d["webhooks"]}
    assert {"mjob.kb.io", "vjob.kb.io", "mworkload.kb.io", "vworkload.kb.io",
            "mclusterqueue.kb.io", "vresourceflavor.kb.io"} <= names
    assert not names & {"mpod.kb.io", "mdeployment.kb.io", "mrayjob.kb.io"}
    role = kueue._load_yaml_docs(m / "rbac" / "role.yaml")[0]
    assert any("workloads" in r.get("resources", []) for r in role["rules"])


def test_scenario_kueue_key():
    from localcluster.scenarios import loader
    from localcluster.scenarios import scenario as scn
    sc = loader.parse("kueue:\n  quota: {cpu: 4, nvidia.com/gpu: 2}\nexpect: {status: \"True\"}\n")
    o = sc.kueue.options()
    assert dict(o.quota) == {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "2"}
    assert o.namespaces == () and o.integrations == ("batch/job",)
    assert loader.parse("expect: {status: \"True\"}\n").kueue is None
    with pytest.raises(scn.ScenarioError, match=r"<scenario>:2: kueue.quota: 'memory=lots'"):
        loader.parse("kueue:\n  quota:\n    memory: lots\nexpect: {status: \"True\"}\n")
    with pytest.raises(scn.ScenarioError, match="kueue.integrations: .*unknown integration"):
        loader.parse("kueue: {integrations: [ray]}\nexpect: {status: \"True\"}\n")


def test_options_round_trip_through_cluster_json():
    o = kueue_objects.Options((("cpu", "2"), ("memory", "4Gi")), ("a", "b"), ("batch/job", "pod"))
    assert kueue_objects.Options.from_json(json.loads(json.dumps(o.to_json()))) == o


def test_wait_for_pods_ready_is_off_unless_asked_and_then_blocks_admission():
    assert "waitForPodsReady" not in kueue_objects.render_config("/c")
    cfg = kueue_objects.render_config("/c", wait_for_pods_ready="1m30s")
    assert cfg["waitForPodsReady"] == {"timeout": "1m30s", "blockAdmission": True}
    for bad in ("10", "-5s", "5 m", "soon"):
        with pytest.raises(ValueError, match="no duration"):
            kueue_objects.render_config("/c", wait_for_pods_ready=bad)


def test_an_older_cluster_json_without_wait_for_pods_ready_reads_as_off():
    o = kueue_objects.Options(wait_for_pods_ready="10s")
    assert kueue_objects.Options.from_json(json.loads(json.dumps(o.to_json()))) == o
    old = {k: v for k, v in kueue_objects.Options().to_json().items() if k != "waitForPodsReady"}
    assert kueue_objects.Options.from_json(old).wait_for_pods_ready == ""
