"""NetworkPolicy enforcement: kube-network-policies as a DaemonSet on the real nodes.

`kube-network-policies <https://github.com/kubernetes-sigs/kube-network-policies>`_
(``KUBE_NETWORK_POLICIES_VERSION`` in ``build/versions.env``; built by ``build-k8s.sh
netpol``, its image by ``build-images.sh netpol``, imported by every real node under
upstream's name) runs as upstream's ``install.yaml`` deploys it: a hostNetwork, privileged
DaemonSet in ``kube-system`` with its ServiceAccount, ClusterRole (list/watch pods,
namespaces, networkpolicies) and binding, ``--hostname-override`` from ``spec.nodeName``,
plus ``--disable-nri`` (containerd 1.6 has no NRI). Each pod runs in its node's network
namespace and judges (nfqueue) the first packet of every connection to or from a pod.

**This kernel has no ``nft_queue``** (``CONFIG_NFT_QUEUE`` is not set; it has
``nfnetlink_queue`` and iptables' ``NFQUEUE`` target through ``nft_compat``), so the
enforcer's own nftables table (``queue num 98`` rules) is refused with ENOENT and it never
diverts a packet, though its nfqueue listener runs. :func:`divert` puts the equivalent of
its postrouting chain into every node's namespace with iptables instead (chain
``KNP-DIVERT`` in ``mangle POSTROUTING``): DNS, root's own traffic and established or
related packets pass; every other packet from or to the pod network goes to queue 98.
Upstream queues only the local pods some policy selects (an nftables set it keeps); here
every pod's new connections are judged, and the enforcer accepts those no policy selects.
The rules carry ``--queue-bypass``: with no enforcer listening, packets pass (fail-open
while the DaemonSet pod restarts, so a shared cluster never loses its pod network).

A scenario's ``networkPolicies`` (a list of NetworkPolicy manifests, validated by
:func:`check_manifests` against :class:`NetworkPolicy`) turns it on: :func:`ensure` (scenariorun, after `up`) and
:func:`policy_documents` (applied in the job's namespace before the job). Without the
field nothing here runs. Once started the DaemonSet stays until `down` (it touches only
pods some policy selects).
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from localcluster.common import config

NAME = "kube-network-policies"
NAMESPACE = "kube-system"
DNS1123 = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
NFQUEUE_ID = 98  # upstream install.yaml's
ANNOTATION = "disttrain.dev/image-archive"


def image() -> str:
    """The name real nodes know the enforcer's image by (upstream's, imported by `up`)."""
    return f"registry.k8s.io/networking/kube-network-policies:{config.versions()['KUBE_NETWORK_POLICIES_VERSION']}"


# -- the NetworkPolicy manifest a scenario may give (networking.k8s.io/v1) ---------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LabelSelectorRequirement(_Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(_Strict):
    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class IPBlock(_Strict):
    cidr: str
    except_: list[str] = Field(default_factory=list, alias="except")


class Peer(_Strict):
    podSelector: Optional[LabelSelector] = None
    namespaceSelector: Optional[LabelSelector] = None
    ipBlock: Optional[IPBlock] = None


class PolicyPort(_Strict):
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    port: Optional[Union[int, str]] = None
    endPort: Optional[int] = Field(None, ge=1, le=65535)


class IngressRule(_Strict):
    from_: list[Peer] = Field(default_factory=list, alias="from")
    ports: list[PolicyPort] = Field(default_factory=list)


class EgressRule(_Strict):
    to: list[Peer] = Field(default_factory=list)
    ports: list[PolicyPort] = Field(default_factory=list)


class PolicySpec(_Strict):
    podSelector: LabelSelector
    policyTypes: list[Literal["Ingress", "Egress"]] = Field(default_factory=list)
    ingress: list[IngressRule] = Field(default_factory=list)
    egress: list[EgressRule] = Field(default_factory=list)


class PolicyMeta(_Strict):
    name: str = Field(pattern=DNS1123, max_length=253)
    namespace: Optional[str] = Field(None, pattern=DNS1123, max_length=63)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class NetworkPolicy(_Strict):
    """A NetworkPolicy manifest; ``metadata.namespace`` defaults to the job's namespace."""

    apiVersion: Literal["networking.k8s.io/v1"]
    kind: Literal["NetworkPolicy"]
    metadata: PolicyMeta
    spec: PolicySpec


def check_manifests(manifests: list[dict], where: str) -> list[dict]:
    """``manifests`` if each is a valid :class:`NetworkPolicy`, else ValueError
    ``<where>.<i>.<field>: why`` (the first problem of each bad one)."""
    problems = []
    for i, m in enumerate(manifests):
        try:
            NetworkPolicy.model_validate(m)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in (where, i, *err["loc"]))
            problems.append(f"{loc}: {err['msg']}")
    if problems:
        raise ValueError("; ".join(problems))
    return manifests


def policy_documents(policies: list[dict], namespace: str) -> list[dict]:
    """The manifests (validated: :func:`check_manifests`), each in ``namespace`` unless it
    names its own."""
    docs = []
    for p in check_manifests(policies, "networkPolicies"):
        d = json.loads(json.dumps(p))
        d.setdefault("metadata", {}).setdefault("namespace", namespace)
        docs.append(d)
    return docs


# -- the enforcer: upstream install.yaml, adapted ----------------------------------------
def manifests(archive: str = "") -> list[dict]:
    """ServiceAccount, ClusterRole, ClusterRoleBinding and DaemonSet (upstream's install.yaml
    with this build's image, ``--disable-nri`` and no NRI/netns volumes, real nodes only).
    ``archive`` (the image's docker-archive, named by content) is a pod annotation, so a
    rebuilt image rolls the pods."""
    labels = {"tier": "node", "app": NAME, "k8s-app": NAME}
    meta = {"name": NAME}
    container = {
        "name": NAME, "image": image(), "imagePullPolicy": "IfNotPresent",
        "args": ["/bin/netpol", "--hostname-override=$(MY_NODE_NAME)", "--v=2",
                 f"--nfqueue-id={NFQUEUE_ID}", "--disable-nri"],
        "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}},
        "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}},
        "env": [{"name": "MY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
                   {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {**meta, "namespace": NAMESPACE, "labels": labels},
         "spec": {"selector": {"matchLabels": {"app": NAME}}, "template": {
             "metadata": {"labels": labels, "annotations": {ANNOTATION: archive}},
             "spec": {"hostNetwork": True, "dnsPolicy": "ClusterFirst",
                      "nodeSelector": {"kubernetes.io/os": "linux", "disttrain.dev/runtime": "containerd"},
                      "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                      "serviceAccountName": NAME, "containers": [container]}}}},
    ]


DIVERT_CHAIN = "KNP-DIVERT"


def divert_rules(queue: int = NFQUEUE_ID) -> list[list[str]]:
    """iptables arguments (table mangle) of the enforcer's postrouting chain, as upstream's
    nftables rules say it (udp dport 53, meta skuid 0, ct state established,related accept;
    then queue), with the pod network instead of its set of selected local pods."""
    q = ["-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
    return [["-p", "udp", "--dport", "53", "-j", "RETURN"],
            ["-m", "owner", "--uid-owner", "0", "-j", "RETURN"],
            ["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"],
            ["-s", config.POD_NETWORK_CIDR, *q], ["-d", config.POD_NETWORK_CIDR, *q]]


def divert(netns: str) -> None:
    """Install :func:`divert_rules` in ``netns`` (replacing an earlier copy). Raises
    NetpolError."""
    def ipt(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(["nsenter", f"--net=/run/netns/{netns}", "iptables", "-w", "-t", "mangle",
                            *args], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise NetpolError(f"{netns}: iptables {' '.join(args)}: {p.stderr.strip()}")
        return p
    if ipt("-N", DIVERT_CHAIN, check=False).returncode != 0:
        ipt("-F", DIVERT_CHAIN)
    for rule in divert_rules():
        ipt("-A", DIVERT_CHAIN, *rule)
    if ipt("-C", "POSTROUTING", "-j", DIVERT_CHAIN, check=False).returncode != 0:
        ipt("-A", "POSTROUTING", "-j", DIVERT_CHAIN)


class NetpolError(RuntimeError):
    """The enforcer did not come up on every node."""


def _kubectl(*args: str, input: Optional[str] = None):
    from localcluster.cluster.operator_install import kubectl
    return kubectl(*args, input=input, check=False)


def _json(*args: str) -> Any:
    out = _kubectl(*args, "-o", "json")
    return json.loads(out.stdout) if out.returncode == 0 else None


def ensure(timeout: float = 90.0, say=print) -> float:
    """Apply the enforcer, divert each node's pod traffic to it (:func:`divert`) and wait
    until its pod runs on every node, each synced with the apiserver (its log says
    "Syncing nftables rules"). Returns the seconds it took.
    Raises NetpolError naming the nodes without one."""
    from localcluster.nodeimages import archives
    t0 = time.monotonic()
    try:
        archive = dict(archives.image_archives(config.state_dir())).get(image())
    except OSError:
        archive = None
    if not archive:
        raise NetpolError(f"the nodes have no {image()} (make images; real nodes only)")
    out = _kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                   input="\n---\n".join(json.dumps(d) for d in manifests(Path(archive).name)))
    if out.returncode != 0:
        raise NetpolError(f"applying {NAME}: {out.stderr.strip()}")
    nodes = {n["metadata"]["name"] for n in (_json("get", "nodes") or {}).get("items", [])}
    for n in sorted(nodes):
        divert(config.NODE_NS_PREFIX + n)
    pending = nodes
    while time.monotonic() - t0 < timeout:
        pods = (_json("get", "pods", "-n", NAMESPACE, "-l", f"app={NAME}") or {}).get("items", [])
        running = {p["spec"].get("nodeName"): p["metadata"]["name"] for p in pods
                   if (p.get("status") or {}).get("phase") == "Running"
                   and not p["metadata"].get("deletionTimestamp")  # not one being replaced
                   and (p["metadata"].get("annotations") or {}).get(ANNOTATION) == Path(archive).name}
        pending = {n for n in nodes if n not in running or "Syncing nftables rules" not in
                   _kubectl("logs", "-n", NAMESPACE, running[n]).stdout}
        if not pending:
            took = time.monotonic() - t0
            say(f"  {NAME} enforcing on {len(nodes)} node(s) ({took:.1f}s)")
            return took
        time.sleep(1)
    raise NetpolError(f"{NAME} not running on {', '.join(sorted(pending))} after {timeout:.0f}s "
                      f"(kubectl -n {NAMESPACE} describe ds {NAME}; real nodes only)")


def apply_policies(policies: list[dict], namespace: str) -> None:
    """Apply the scenario's policies (``namespace`` unless one names its own)."""
    docs = policy_documents(policies, namespace)
    out = _kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))
    if out.returncode != 0:
        raise NetpolError(f"applying networkPolicies: {out.stderr.strip()}")
