"""Which service-mesh sidecar intercepts the job's connections (pure).

A mesh's admission webhook injects a proxy into every pod of a labelled namespace, the
probe pods and the training pods alike, with traffic redirection rules that send every
TCP connection through it (Istio's ``istio-init`` writes nat rules to 15001 outbound and
15006 inbound; Linkerd's ``linkerd-init`` to its own ports). A proxy with no route for a
pod-to-pod connection accepts it and closes it, so torch's TCPStore reads ``recvValue
failed ... got 0 bytes`` (kubeflow/trainer#2794). The probe tells that apart from a
refusal or a firewall (``ConnectionIntercepted``: accepted, then closed before rank 0's
probe answered, which a probe never does); this module names the sidecar the pods carry
and the fix that mesh offers.

What counts as injected, from the pods as the API returns them (after the webhook): a
container or init container (a native sidecar) named after the mesh's proxy, its init
container, or the annotation the injector writes (``sidecar.istio.io/status``,
``linkerd.io/proxy-version``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from disttrain.api import constants
from disttrain.diagnosis import messages
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.diagnose import Diagnosis
from disttrain_probe.contract import vocabulary


@dataclass(frozen=True)
class Mesh:
    """One mesh: its ``name``, its proxy container, its init containers, the annotation its
    injector writes, the pod annotation that turns injection off and what excludes the
    job's traffic from interception (Istio documents excludeOutboundPorts as a list of ports,
    and NCCL and gloo connect on any ephemeral port, so its fix is the pod network's address
    range; Linkerd's skip-ports take ranges)."""

    name: str
    proxy: str
    inits: tuple[str, ...]
    marker: str
    opt_out: str
    exclude: str


MESHES = (
    Mesh("Istio", "istio-proxy", ("istio-init", "istio-validation"), "sidecar.istio.io/status",
         'sidecar.istio.io/inject: "false"',
         "traffic.sidecar.istio.io/excludeOutboundIPRanges: the pod CIDR"),
    Mesh("Linkerd", "linkerd-proxy", ("linkerd-init", "linkerd-network-validator"),
         "linkerd.io/proxy-version", "linkerd.io/inject: disabled",
         "config.linkerd.io/skip-outbound-ports and skip-inbound-ports: the rendezvous port and the "
         "ephemeral range"),
)


@dataclass(frozen=True)
class Injected:
    """A mesh found on the job's pods: the ``mesh``, the pods carrying it (names, at most
    8) and what gave it away (``evidence``: a container name or the annotation)."""

    mesh: Mesh
    pods: tuple[str, ...]
    evidence: str


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _names(spec: dict, field: str) -> list[str]:
    items = spec.get(field)
    return [str(c.get("name")) for c in (items if isinstance(items, list) else [])[:32]
            if isinstance(c, dict) and isinstance(c.get("name"), str)]


def evidence(pod: Any, mesh: Mesh) -> Optional[str]:
    """What shows ``mesh`` injected into ``pod`` (a core/v1 Pod dict, untrusted), or None."""
    spec = _d(_d(pod).get("spec"))
    containers, inits = _names(spec, "containers"), _names(spec, "initContainers")
    if mesh.proxy in containers or mesh.proxy in inits:
        return f"container {mesh.proxy}"
    found = next((n for n in inits if n in mesh.inits), None)
    if found:
        return f"init container {found}"
    if mesh.marker in _d(_d(_d(pod).get("metadata")).get("annotations")):
        return f"annotation {mesh.marker}"
    return None


def injected(pods: Sequence[Any]) -> Optional[Injected]:
    """The first mesh any of ``pods`` carries (checked in :data:`MESHES` order), or None."""
    for mesh in MESHES:
        hits = [(str(_d(_d(p).get("metadata")).get("name") or "?"), e) for p in pods[:256]
                if (e := evidence(p, mesh)) is not None]
        if hits:
            return Injected(mesh, tuple(n for n, _ in hits[:8]), hits[0][1])
    return None


def message(found: Injected, cause: str) -> str:
    """One sentence (at most 400 characters): the sidecar and the pods, the probe's own
    evidence (``cause``: which node's connections, to which address) as far as it fits, then
    the fix, which is always whole."""
    m = found.mesh
    pods = ", ".join(found.pods[:2]) + (f" and {len(found.pods) - 2} more" if len(found.pods) > 2 else "")
    head = (f"the {m.name} sidecar ({found.evidence}) injected into the job's pods ({pods}) "
            f"intercepts their connections (")
    fix = (f"); set {m.opt_out} in spec.template.metadata.annotations, or exclude the job's "
           f"traffic from its capture ({m.exclude})")
    room = messages.LIMIT - len(head) - len(fix)
    cause = cause.strip()
    if len(cause) > room:
        cause = cause[:max(0, room - 3)].rstrip() + "..."
    return messages.bound(head + cause + fix, messages.LIMIT)


def override(diag: Diagnosis, pods: Sequence[Any]) -> bool:
    """When the probes found their connections intercepted (``ConnectionIntercepted``) and
    the job's pods carry a mesh's sidecar, name it and its fix in the failed check and in
    Validated. True when it changed ``diag``; any other verdict is left alone, and without
    a sidecar on the pods the probe's own message (a proxy, such as a sidecar) stands."""
    top = diag.conditions.get(constants.VALIDATED)
    if top is None or top.reason != vocabulary.CONNECTION_INTERCEPTED:
        return False
    found = injected(pods)
    if found is None:
        return False
    cause = next((v.message for c, v in diag.conditions.items() if c != constants.VALIDATED
                  and v.reason == vocabulary.CONNECTION_INTERCEPTED), top.message)
    text = message(found, cause)
    for ctype, v in list(diag.conditions.items()):
        if v.status == constants.FALSE and v.reason == vocabulary.CONNECTION_INTERCEPTED:
            diag.conditions[ctype] = Verdict(constants.FALSE, vocabulary.CONNECTION_INTERCEPTED, text)
    diag.failures.insert(0, text)
    return True
