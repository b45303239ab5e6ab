"""The pure parts of running Kubeflow's training operator on the local cluster
(localcluster/localcluster/cluster/kubeflow.py) and of its init container's nslookup
(localcluster/localcluster/nodeimages/nslookup.py). No cluster, no binary."""
from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from localcluster.cluster import kubeflow
from localcluster.common import config, pki
from localcluster.nodeimages import nslookup
from localcluster.nodes import podspec
from localcluster.scenarios import loader

UPSTREAM_WEBHOOKS = [{
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
    "metadata": {"name": "validating-webhook-configuration"},
    "webhooks": [
        {"name": "validator.mxjob.training-operator.kubeflow.org", "admissionReviewVersions": ["v1"],
         "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                      "path": "/validate-kubeflow-org-v1-mxjob"}},
         "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["mxjobs"]}]},
        {"name": "validator.pytorchjob.training-operator.kubeflow.org",
         "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "sideEffects": "None",
         "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                      "path": "/validate-kubeflow-org-v1-pytorchjob"}},
         "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["pytorchjobs"]}]},
    ]}]


def _example_docs():
    return loader.job_documents(loader.load("healthy"))


def test_webhook_configuration_keeps_only_the_pytorchjob_hook_reached_by_url():
    vwc = kubeflow.webhook_configuration(UPSTREAM_WEBHOOKS, b"PEM", 18070)
    assert vwc["metadata"]["name"] == "validator.training-operator.kubeflow.org"
    [hook] = vwc["webhooks"]
    assert hook["name"] == "validator.pytorchjob.training-operator.kubeflow.org"
    assert hook["failurePolicy"] == "Fail" and hook["rules"][0]["resources"] == ["pytorchjobs"]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:18070/validate-kubeflow-org-v1-pytorchjob",
        "caBundle": base64.b64encode(b"PEM").decode()}
    assert "service" in UPSTREAM_WEBHOOKS[0]["webhooks"][1]["clientConfig"]  # input untouched
    with pytest.raises(ValueError, match="no PyTorchJob webhook"):
        kubeflow.webhook_configuration([{"kind": "ValidatingWebhookConfiguration",
                                         "webhooks": UPSTREAM_WEBHOOKS[0]["webhooks"][:1]}], b"", 1)


def test_cluster_role_is_upstreams_bound_to_the_certificate_user():
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "training-operator"},
            "rules": [{"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": ["get"]}]}
    out = kubeflow.cluster_role(role)
    assert out["rules"] == role["rules"] and out["metadata"]["labels"] == kubeflow.MANAGED
    assert "labels" not in role["metadata"]
    b = kubeflow.cluster_role_binding()
    assert b["roleRef"]["name"] == out["metadata"]["name"] == "training-operator"
    assert b["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": kubeflow.USER}]
    with pytest.raises(ValueError):
        kubeflow.cluster_role({"kind": "Role", "rules": []})


def test_argv_binds_a_private_tmp_and_names_this_instances_ports(tmp_path):
    cmd = kubeflow.argv(tmp_path / "training-operator.v1", tmp_path / "kc", tmp_path / "tmp")
    assert cmd[:4] == ["unshare", "--mount", "--propagation", "private"]
    i = cmd.index(str(tmp_path / "training-operator.v1"))
    assert cmd[i - 1] == str(tmp_path / "tmp") and cmd[i + 1:] == kubeflow.operator_args(tmp_path / "kc")
    flags = " ".join(cmd[i + 1:])
    assert "--enable-scheme=pytorchjob" in flags
    assert f"--webhook-server-port={config.KUBEFLOW_WEBHOOK_PORT}" in flags
    assert f"--health-probe-bind-address=127.0.0.1:{config.KUBEFLOW_HEALTH_PORT}" in flags
    assert f"--metrics-bind-address=127.0.0.1:{config.KUBEFLOW_METRICS_PORT}" in flags


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_argv_keeps_a_kubeconfig_under_tmp_visible_and_serves_the_certificate(tmp_path):
    """Seen on a checkout under /tmp: binding the private directory over all of /tmp hid the
    kubeconfig (``stat ...: no such file``). The binary (here a script) sees both."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        root = Path(d)
        kc = root / "kc"
        kc.write_text("kubeconfig")
        certs = root / "tmp" / kubeflow.WEBHOOK_DIR / "serving-certs"
        certs.mkdir(parents=True)
        (certs / "tls.crt").write_text("cert")
        fake = root / "operator"
        fake.write_text('#!/bin/sh\ncat "${1#--kubeconfig=}" /tmp/k8s-webhook-server/serving-certs/tls.crt\n')
        fake.chmod(0o755)
        out = subprocess.run(kubeflow.argv(fake, kc, root / "tmp"), capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0 and out.stdout == "kubeconfigcert", out


def test_kubeflow_ports_never_collide_with_another_instances_ports():
    # every host port of instance N is base + 1000 N: distinct bases modulo 1000 suffice
    bases = [23790, 23800, 16443, 16457, 16459, 18080, 18090,
             *range(16500, 16500 + config.MAX_NODES), 18070, 18071, 18072]
    assert len({b % 1000 for b in bases}) == len(bases)
    off = 1000 * config.INSTANCE
    assert (config.KUBEFLOW_WEBHOOK_PORT - off, config.KUBEFLOW_METRICS_PORT - off,
            config.KUBEFLOW_HEALTH_PORT - off) == (18070, 18071, 18072)


def test_webhook_certificates_satisfy_the_rotator(tmp_path):
    """cert-controller keeps a Secret whose CA is RSA in PKCS#1 PEM, valid for its own name,
    and whose serving cert is valid for <service>.<namespace>.svc; ours must also serve
    127.0.0.1 (the apiserver calls the webhook by URL)."""
    ca_crt, ca_key = pki.ensure_ca(tmp_path, cn=kubeflow.WEBHOOK_CA_NAME,
                                   dns=[kubeflow.WEBHOOK_CA_NAME], rsa_pkcs1=True)
    assert ca_key.read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")
    ca = x509.load_pem_x509_certificate(ca_crt.read_bytes())
    assert ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.DNSName) == [kubeflow.WEBHOOK_CA_NAME]
    crt, _ = pki.ensure_cert(tmp_path, "serving", "training-operator", serving=[
        "training-operator.kubeflow.svc", "127.0.0.1"])
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    cert.verify_directly_issued_by(ca)
    # the cluster CA stays as it was: ECDSA, PKCS#8, no SAN
    cl_crt, cl_key = pki.ensure_ca(tmp_path / "cluster")
    assert cl_key.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    with pytest.raises(x509.ExtensionNotFound):
        x509.load_pem_x509_certificate(cl_crt.read_bytes()).extensions \
            .get_extension_for_class(x509.SubjectAlternativeName)
    sec = kubeflow.webhook_secret(b"a", b"b", b"c", b"d")
    assert {k: base64.b64decode(v) for k, v in sec["data"].items()} == \
        {"ca.crt": b"a", "ca.key": b"b", "tls.crt": b"c", "tls.key": b"d"}
    assert sec["metadata"] == {"name": "training-operator-webhook-cert", "namespace": "kubeflow",
                               "labels": kubeflow.MANAGED}


def test_pytorchjob_documents_translate_the_example():
    docs = _example_docs()
    out = kubeflow.pytorchjob_documents(docs)
    assert [d["kind"] for d in out] == ["ConfigMap", "PyTorchJob"]
    assert out[0] == docs[0]
    pj = out[1]
    dtj = docs[1]
    assert pj["apiVersion"] == "kubeflow.org/v1" and pj["metadata"]["name"] == dtj["metadata"]["name"]
    specs = pj["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == dtj["spec"]["numNodes"] - 1
    assert specs["Master"]["restartPolicy"] == specs["Worker"]["restartPolicy"] == "OnFailure"
    for rtype in ("Master", "Worker"):
        pod = specs[rtype]["template"]["spec"]
        [c] = pod["containers"]
        src = dtj["spec"]["template"]["spec"]["containers"][0]
        assert c["name"] == "pytorch"
        assert (c["image"], c["command"], c["env"], c["resources"], c["volumeMounts"]) == \
            (src["image"], src["command"], src["env"], src["resources"], src["volumeMounts"])
        assert c["ports"] == [{"name": "pytorchjob-port", "containerPort": 29500}]
        assert pod["volumes"] == dtj["spec"]["template"]["spec"]["volumes"]
        # the example uses the node's network: the master's Service name must still resolve
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert dtj["spec"]["template"]["spec"]["containers"][0]["name"] == "trainer"  # input untouched


def test_pytorchjob_documents_carry_what_a_user_would_set():
    docs = loader.job_documents(loader.load("ifname-missing"))
    pj = kubeflow.pytorchjob_documents(docs, master_port=23456)[-1]
    c = pj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "eth2"
    assert c["ports"][0]["containerPort"] == 23456
    pod_net = loader.job_documents(loader.load("firewall-ephemeral-port-range"))
    pod = kubeflow.pytorchjob_documents(pod_net)[-1]["spec"]["pytorchReplicaSpecs"]["Master"][
        "template"]["spec"]
    assert "hostNetwork" not in pod
    assert pod["securityContext"]["sysctls"] == [{"name": "net.ipv4.ip_local_port_range",
                                                  "value": "61000 62000"}]
    three = loader.job_documents(loader.load("not-enough-nodes"))
    assert kubeflow.pytorchjob_documents(three)[-1]["spec"]["pytorchReplicaSpecs"]["Worker"][
        "replicas"] == 2
    with pytest.raises(ValueError, match="no DistTrainingJob"):
        kubeflow.pytorchjob_documents([docs[0]])


def test_pytorchjob_documents_name_the_trainer_pytorch_not_the_first_sidecar():
    docs = loader.job_documents(loader.load("sidecar-first"))
    pod = kubeflow.pytorchjob_documents(docs)[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["log-shipper", "pytorch"]
    assert pod["containers"][1]["command"] == ["python", "/workspace/train_digits.py"]


def test_the_init_container_image_gets_nslookup_on_its_path():
    ent = podspec.image_entry(kubeflow.INIT_CONTAINER_IMAGE, podspec.load_image_map())
    [bindir] = ent["path"]
    assert bindir.endswith("localcluster/images/alpine/bin")
    env = podspec.container_process_env({}, ent, "/venv/bin", "p")
    assert env["PATH"].split(":")[:2] == [bindir, "/venv/bin"]
    assert (config.REPO_ROOT / "localcluster/images/alpine/bin/nslookup").stat().st_mode & 0o111
    plain = podspec.container_process_env({}, {}, "/venv/bin", "p")
    assert plain["PATH"].startswith("/venv/bin:")


RESOLV = """nameserver 10.96.0.10
search ns1.svc.cluster.local svc.cluster.local cluster.local
options ndots:5
"""


def test_nslookup_uses_the_search_list_as_busybox_does():
    rc = nslookup.parse_resolv_conf(RESOLV)
    assert rc.nameservers == ["10.96.0.10"] and rc.ndots == 5
    assert nslookup.candidates("job-master-0", rc) == [
        "job-master-0.ns1.svc.cluster.local", "job-master-0.svc.cluster.local",
        "job-master-0.cluster.local", "job-master-0"]
    assert nslookup.candidates("a.b.c.d.e.f", rc)[0] == "a.b.c.d.e.f"
    assert nslookup.candidates("absolute.name.", rc) == ["absolute.name"]
    assert nslookup.candidates("x", nslookup.parse_resolv_conf("domain a\nsearch b c\n")) == \
        ["x.b", "x.c", "x"]


@pytest.mark.parametrize("text", ["", "nameserver", "options ndots:x ndots:99", "search",
                                  "# nameserver 1.1.1.1\n; x", "\x00\nnameserver\t10.0.0.1 extra",
                                  "options ndots:-1 attempts:2"])
def test_parse_resolv_conf_takes_odd_files(text):
    rc = nslookup.parse_resolv_conf(text)
    assert 0 <= rc.ndots <= 15 and all(s for s in rc.search)
    assert rc.nameservers in ([], ["10.0.0.1"])


def test_nslookup_answers_and_fails_like_busybox(tmp_path, monkeypatch):
    from localcluster.network import dnsquery

    (tmp_path / "resolv.conf").write_text(RESOLV)
    asked = []

    def fake_query(name, qtype="A", server="", timeout=2.0):
        asked.append((name, server))
        if name == "m-0.svc.cluster.local":
            return {"rcode": "NOERROR", "answers": [{"type": "A", "data": "10.244.0.5"}]}
        return {"rcode": "NXDOMAIN", "answers": []}

    monkeypatch.setattr(dnsquery, "query", fake_query)
    code, out = nslookup.lookup("m-0", resolv_path=str(tmp_path / "resolv.conf"))
    assert code == 0 and "Name:\tm-0.svc.cluster.local\nAddress: 10.244.0.5" in out
    assert asked[:2] == [("m-0.ns1.svc.cluster.local", "10.96.0.10"),
                         ("m-0.svc.cluster.local", "10.96.0.10")]
    code, out = nslookup.lookup("nope", resolv_path=str(tmp_path / "resolv.conf"))
    assert code == 1 and out.endswith("** server can't find nope: NXDOMAIN\n")

    def timeout(*a, **k):
        raise TimeoutError("timed out")

    monkeypatch.setattr(dnsquery, "query", timeout)
    code, out = nslookup.lookup("m-0", resolv_path=str(tmp_path / "resolv.conf"))
    assert code == 1 and "no servers could be reached" in out
    assert nslookup.main([]) == 2


def test_check_built_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTTRAIN_CACHE", str(tmp_path))
    with pytest.raises(kubeflow.KubeflowError, match="build-k8s.sh kubeflow.*training-operator.v1"):
        kubeflow.check_built()
    with pytest.raises(kubeflow.KubeflowError, match="kubeflow.org_pytorchjobs.yaml"):
        kubeflow.manifest("crd")
    d = config.training_operator_dir() / "manifests" / "rbac"
    d.mkdir(parents=True)
    (d / "role.yaml").write_text(yaml.safe_dump({"kind": "ClusterRole", "rules": [{}]}) + "---\n")
    assert kubeflow.manifest("role") == [{"kind": "ClusterRole", "rules": [{}]}]
    assert json.dumps(kubeflow.manifest("role"))
