"""The scenario field ``networkPolicies`` and the enforcer's manifests (localcluster/cluster/netpol.py)."""
from __future__ import annotations

import pytest

from localcluster.cluster import netpol
from localcluster.scenarios import loader
from localcluster.scenarios import scenario as scn

DENY = """
networkPolicies:
  - apiVersion: networking.k8s.io/v1
    kind: NetworkPolicy
    metadata: {name: default-deny-ingress}
    spec: {podSelector: {}, policyTypes: [Ingress]}
  - apiVersion: networking.k8s.io/v1
    kind: NetworkPolicy
    metadata: {name: allow-rank0, namespace: other}
    spec:
      podSelector: {matchLabels: {app: server}}
      ingress:
        - from: [{podSelector: {matchLabels: {role: client}}}, {ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}]
          ports: [{protocol: TCP, port: 29500}, {port: http}]
expect: {status: 'True'}
"""


def test_policies_parse_and_default_to_the_jobs_namespace():
    sc = loader.parse(DENY, "t.yaml")
    docs = netpol.policy_documents(sc.networkPolicies, "sc-ns")
    assert docs[0] == {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                       "metadata": {"name": "default-deny-ingress", "namespace": "sc-ns"},
                       "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    rule = docs[1]["spec"]["ingress"][0]
    assert docs[1]["metadata"]["namespace"] == "other"
    assert rule["from"][1] == {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}
    assert rule["ports"] == [{"protocol": "TCP", "port": 29500}, {"port": "http"}]
    assert loader.parse("expect: {status: 'True'}\n", "t.yaml").networkPolicies == []


@pytest.mark.parametrize("policy, where", [
    ("{apiVersion: v1, kind: NetworkPolicy, metadata: {name: a}, spec: {podSelector: {}}}",
     "networkPolicies.0.apiVersion"),
    ("{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: a}, spec: {}}",
     "networkPolicies.0.spec.podSelector"),
    ("{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: Bad_Name}, spec: {podSelector: {}}}",
     "networkPolicies.0.metadata.name"),
    ("{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: a}, "
     "spec: {podSelector: {}, policyTypes: [ingress]}}", "networkPolicies.0.spec.policyTypes.0"),
    ("{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: a}, "
     "spec: {podSelector: {}, ingress: [{ports: [{protocol: ICMP}]}]}}",
     "networkPolicies.0.spec.ingress.0.ports.0.protocol"),
    ("{apiVersion: networking.k8s.io/v1, kind: NetworkPolicy, metadata: {name: a}, "
     "spec: {podSelector: {matchLabel: {a: b}}}}", "networkPolicies.0.spec.podSelector.matchLabel"),
])
def test_a_bad_manifest_is_refused_naming_the_field(policy, where):
    with pytest.raises(scn.ScenarioError) as e:
        loader.parse(f"expect: {{status: 'True'}}\nnetworkPolicies:\n  - {policy}\n", "t.yaml")
    assert f"t.yaml:3: {where}" in str(e.value)


def test_daemonset_as_upstream_with_nri_off_and_divert_rules():
    ds = next(d for d in netpol.manifests("k.tar") if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["hostNetwork"] and pod["serviceAccountName"] == netpol.NAME
    assert c["args"][:2] == ["/bin/netpol", "--hostname-override=$(MY_NODE_NAME)"]
    assert "--disable-nri" in c["args"] and c["securityContext"]["privileged"]
    assert c["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert ds["spec"]["template"]["metadata"]["annotations"] == {netpol.ANNOTATION: "k.tar"}
    rules = netpol.divert_rules()
    assert rules[-1][:2] == ["-d", "10.244.0.0/16"] and "--queue-bypass" in rules[-1]
    assert rules[2][-1] == "RETURN" and "ESTABLISHED,RELATED" in rules[2]
