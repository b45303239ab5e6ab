"""The pure parts of running JobSet on the local cluster
(localcluster/localcluster/cluster/jobset.py). No cluster, no binary."""
from __future__ import annotations

import base64
from pathlib import Path

import pytest

from localcluster.cluster import gomanager, jobset


def _hook(name: str, path: str, resources: list[str], group: str = "") -> dict:
    return {"name": name, "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
            "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": resources}]}


# upstream's config/components/webhook/manifests.yaml, shortened
UPSTREAM = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"},
     "webhooks": [_hook("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", ["jobsets"],
                        "jobset.x-k8s.io"),
                  _hook("mpod.kb.io", "/mutate--v1-pod", ["pods"])]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"},
     "webhooks": [_hook("vjobset.kb.io", "/validate-jobset-x-k8s-io-v1alpha2-jobset", ["jobsets"],
                        "jobset.x-k8s.io"),
                  _hook("vpod.kb.io", "/validate--v1-pod", ["pods"])]},
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook-service"}},
]


def test_every_webhook_is_reached_by_url_with_the_ca_and_pod_hooks_only_see_jobset_pods():
    out = jobset.webhook_configurations(UPSTREAM, b"PEM", port=18073)
    assert [d["kind"] for d in out] == ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
    assert [d["metadata"]["name"] for d in out] == ["jobset-mutating-webhook-configuration",
                                                    "jobset-validating-webhook-configuration"]
    hooks = [w for d in out for w in d["webhooks"]]
    assert len(hooks) == 4
    for w in hooks:
        assert w["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
        assert w["clientConfig"]["url"].startswith("https://127.0.0.1:18073/")
        assert "service" not in w["clientConfig"]
        pods = w["rules"][0]["resources"] == ["pods"]
        # upstream's kustomize patch: without it every pod in the cluster needs JobSet up
        assert ("objectSelector" in w) == pods
        if pods:
            assert w["objectSelector"]["matchExpressions"][0]["key"] == jobset.POD_LABEL
            assert w["rules"][0]["operations"] == ["CREATE"]
        else:
            assert w["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert hooks[0]["clientConfig"]["url"].endswith("/mutate-jobset-x-k8s-io-v1alpha2-jobset")


def test_the_input_is_not_modified():
    before = repr(UPSTREAM)
    jobset.webhook_configurations(UPSTREAM, b"PEM")
    assert repr(UPSTREAM) == before


def test_a_webhook_without_a_service_path_is_refused():
    bad = [{"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "v"},
            "webhooks": [{"name": "x", "clientConfig": {}, "rules": []}]}]
    with pytest.raises(KeyError):
        jobset.webhook_configurations(bad, b"PEM")


def test_the_config_serves_on_loopback_without_cert_rotation_or_leader_election():
    cfg = jobset.render_config(Path("/s/jobset/certs"), webhook_port=1, health_port=2)
    assert cfg["kind"] == "Configuration" and cfg["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert cfg["internalCertManagement"] == {"enable": False}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/s/jobset/certs"}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert cfg["metrics"]["bindAddress"] == "0"


def test_rbac_binds_upstreams_rules_to_the_certificate_user():
    rules = [{"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]}]
    role, binding = jobset.rbac_objects({"kind": "ClusterRole", "metadata": {"name": "manager-role"},
                                         "rules": rules})
    assert role["rules"] == rules and role["rules"] is not rules
    assert role["metadata"]["name"] == binding["roleRef"]["name"] == jobset.CLUSTER_ROLE
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": jobset.USER}]
    with pytest.raises(ValueError):
        jobset.rbac_objects({"kind": "Role", "rules": rules})


# -- Trainer v2 (trainer.py) and what it shares with JobSet (gomanager.py) -----------------
def test_trainer_webhooks_get_upstreams_patched_names_and_no_pod_patch():
    from localcluster.cluster import trainer
    out = gomanager.url_webhooks(UPSTREAM, b"PEM", 18075, trainer.WEBHOOK_NAMES)
    assert [d["metadata"]["name"] for d in out] == ["defaulter.trainer.kubeflow.org",
                                                    "validator.trainer.kubeflow.org"]
    assert not any("objectSelector" in w for d in out for w in d["webhooks"])
    with pytest.raises(KeyError):  # a configuration kind with no name given
        gomanager.url_webhooks(UPSTREAM, b"PEM", 1, {"MutatingWebhookConfiguration": "m"})


def test_trainer_config_turns_off_what_a_host_process_cannot_use():
    from localcluster.cluster import trainer
    cfg = trainer.render_config(webhook_port=7, health_port=8)
    assert cfg["apiVersion"] == "config.trainer.kubeflow.org/v1alpha1"
    assert cfg["certManagement"] == {"enable": False} and cfg["leaderElection"] == {"leaderElect": False}
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 7}
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:8" and cfg["metrics"]["bindAddress"] == "0"


def test_the_private_cert_dir_binds_only_the_webhook_dir_and_execs_the_command():
    argv = gomanager.with_private_cert_dir(Path("/s/trainer/tmp"), ["/bin/mgr", "--config=/c"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    script = argv[6]
    assert 'mount --bind "$0/k8s-webhook-server" /tmp/k8s-webhook-server' in script
    assert script.endswith('exec "$@"')
    assert argv[7:] == ["/s/trainer/tmp", "/bin/mgr", "--config=/c"]  # $0, then "$@"
