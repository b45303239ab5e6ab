"""A service mesh on the proving ground: Istio's sidecar injection, as a MutatingAdmissionPolicy.

Istio's injector is a mutating webhook that adds, to every pod created in a namespace
labelled ``istio-injection=enabled`` (unless the pod opts out with ``sidecar.istio.io/inject:
"false"`` or runs with hostNetwork), the init container ``istio-init`` (nat rules that send
the pod's outbound TCP to the proxy's port 15001) and the proxy ``istio-proxy`` (a native
sidecar: an init container with ``restartPolicy: Always``), and marks the pod with the
annotation ``sidecar.istio.io/status``. Here the same mutation is declared as a
MutatingAdmissionPolicy (``admissionregistration.k8s.io/v1``, stable since Kubernetes 1.36:
CEL in the apiserver, so no webhook server, certificate or Service is needed), and both
containers run the image ``localcluster/images/mesh`` builds (``mesh-sidecar``):

- ``istio-init`` writes istio-iptables' outbound rules, leaving out what the pod's
  ``traffic.sidecar.istio.io/excludeOutboundIPRanges`` and ``excludeOutboundPorts``
  annotations exclude, as Istio's injector passes them on;
- ``istio-proxy`` accepts each captured connection and closes it, as Envoy's
  BlackHoleCluster does for an address outside the mesh's registry (Istio's
  ``outboundTrafficPolicy: REGISTRY_ONLY``; pod-to-pod addresses of a training job are in
  no registry). torch's TCPStore then reads ``recvValue failed ... got 0 bytes``
  (kubeflow/trainer#2794).

A scenario with ``mesh: istio`` installs the policy (:func:`ensure`, idempotent) and labels
its job's namespace (:func:`enable`); the policy touches no other namespace, so it stays
installed until ``down``.
"""
from __future__ import annotations

import json
import time
from typing import Any

NAME = "disttrain-mesh-istio"
IMAGE = "disttrain.dev/test/mesh-sidecar:v1"  # build-images.sh's archive name
NAMESPACE_LABEL = ("istio-injection", "enabled")
OPT_OUT = "sidecar.istio.io/inject"
STATUS_ANNOTATION = "sidecar.istio.io/status"
EXCLUDE_CIDRS = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
EXCLUDE_PORTS = "traffic.sidecar.istio.io/excludeOutboundPorts"
PROXY_UID = 1337  # Istio's proxy user


def _annotation(key: str) -> str:
    """CEL: the pod's annotation ``key``, or "" when absent (a string: the checker types
    the conditional dyn, and a command is a list of strings)."""
    return (f"string(has(object.metadata.annotations) && '{key}' in object.metadata.annotations"
            f" ? object.metadata.annotations['{key}'] : '')")


def _json_patch() -> str:
    """CEL: JSON patches adding what Istio's injector adds, in its order: ``istio-init``
    then ``istio-proxy`` at the front of the init containers (so the proxy runs before any
    of the pod's own init containers), and the status annotation. A JSON patch, not an
    apply configuration: server-side apply may not set atomic lists (a command,
    capabilities)."""
    status = json.dumps({"initContainers": ["istio-init"], "containers": ["istio-proxy"]})
    ic = "Object.spec.initContainers"
    return f"""(has(object.spec.initContainers) ? [] : [JSONPatch{{op: "add", path: "/spec/initContainers", value: []}}]) +
(has(object.metadata.annotations) ? [] : [JSONPatch{{op: "add", path: "/metadata/annotations", value: {{}}}}]) +
[
  JSONPatch{{op: "add", path: "/metadata/annotations/" + jsonpatch.escapeKey("{STATUS_ANNOTATION}"),
             value: {json.dumps(status)}}},
  JSONPatch{{op: "add", path: "/spec/initContainers/0", value: {ic}{{
    name: "istio-proxy", image: "{IMAGE}", restartPolicy: "Always",
    command: ["mesh-sidecar", "proxy"],
    securityContext: {ic}.securityContext{{runAsUser: {PROXY_UID}, runAsGroup: {PROXY_UID}}}}}}},
  JSONPatch{{op: "add", path: "/spec/initContainers/0", value: {ic}{{
    name: "istio-init", image: "{IMAGE}",
    command: ["mesh-sidecar", "init", "--exclude-cidrs", {_annotation(EXCLUDE_CIDRS)},
              "--exclude-ports", {_annotation(EXCLUDE_PORTS)}],
    securityContext: {ic}.securityContext{{
      runAsUser: 0, runAsNonRoot: false,
      capabilities: {ic}.securityContext.capabilities{{add: ["NET_ADMIN", "NET_RAW"], drop: ["ALL"]}}}}}}}}
]"""


def policy_documents() -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1)."""
    not_host_network = "!has(object.spec.hostNetwork) || !object.spec.hostNetwork"
    not_opted_out = (f"!has(object.metadata.annotations) || !('{OPT_OUT}' in object.metadata.annotations)"
                     f" || object.metadata.annotations['{OPT_OUT}'] != 'false'")
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": NAME},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "not-host-network", "expression": not_host_network},
                                {"name": "not-opted-out", "expression": not_opted_out}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": _json_patch()}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": NAME},
        "spec": {"policyName": NAME, "matchResources": {
            "namespaceSelector": {"matchLabels": dict([NAMESPACE_LABEL])}}},
    }
    return [policy, binding]


def _kubectl(*args: str, input: str | None = None):
    from localcluster.cluster.operator_install import kubectl
    return kubectl(*args, input=input, check=False)


class MeshError(RuntimeError):
    """The policy was refused, or no pod gets the sidecar."""


def ensure(say=print, timeout: float = 30.0) -> float:
    """Install the policy and its binding (server-side apply, idempotent) and wait until the
    apiserver applies it: a dry-run pod in a labelled namespace comes back with
    ``istio-proxy``. Returns the seconds it took. Raises MeshError."""
    t0 = time.monotonic()
    docs = policy_documents()
    out = _kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                   input="\n---\n".join(json.dumps(d) for d in docs))
    if out.returncode != 0:
        raise MeshError(f"the mesh's MutatingAdmissionPolicy was refused: {out.stderr.strip()[-500:]}")
    ns = "disttrain-mesh-check"
    _kubectl("create", "namespace", ns)
    _kubectl("label", "namespace", ns, "=".join(NAMESPACE_LABEL), "--overwrite")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mesh-check", "namespace": ns},
           "spec": {"containers": [{"name": "c", "image": IMAGE, "command": ["true"]}]}}
    last = ""
    while time.monotonic() - t0 < timeout:  # the policy reaches the admission chain within ~1 s
        out = _kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod))
        if out.returncode == 0:
            inits = [c.get("name") for c in json.loads(out.stdout)["spec"].get("initContainers") or []]
            if "istio-proxy" in inits:
                took = time.monotonic() - t0
                say(f"mesh: Istio's injection (MutatingAdmissionPolicy {NAME}) active in {took:.1f}s")
                return took
            last = f"a pod came back without istio-proxy (init containers {inits})"
        else:
            last = out.stderr.strip()[-500:]
        time.sleep(0.5)
    raise MeshError(f"the mesh's injection did not take effect within {timeout:g}s: {last}")


def enable(namespace: str) -> None:
    """Label ``namespace`` for injection (``istio-injection=enabled``). Raises MeshError."""
    out = _kubectl("label", "namespace", namespace, "=".join(NAMESPACE_LABEL), "--overwrite")
    if out.returncode != 0:
        raise MeshError(f"labelling namespace {namespace}: {out.stderr.strip()[-300:]}")
