"""What ``spec.network.hostNetwork`` forbids in the pod template, as the Pod API refuses it
in the pods the operator builds: a ``net.*`` sysctl (the node's network namespace is not the
pod's to tune), and a port of a container other than the trainer (:mod:`disttrain.api.trainer`)
on the rendezvous port (node rank 0's training pod declares it as the trainer's hostPort: two
containers cannot hold one host port). The
rules as CEL for the CRD's spec and as Python checks of a validated spec
(:data:`HOST_NETWORK_RULES`, entries of :data:`disttrain.api.types.SPEC_RULES`)."""
from __future__ import annotations

from typing import Any

from disttrain.api.trainer import TRAINER_NAMES, trainer_name

_HOST_NET = "has(self.network) && has(self.network.hostNetwork) && self.network.hostNetwork"
_PORT = ("(has(self.rendezvous) && has(self.rendezvous.port) ? self.rendezvous.port : "
         "29500)")
NET_SYSCTL_MESSAGE = ("spec.template.spec.securityContext.sysctls: a net.* sysctl cannot be set with "
                      "spec.network.hostNetwork (the pods share the node's network namespace); "
                      "remove it, or set it on the node")
SIDECAR_PORT_MESSAGE = ("spec.template.spec.containers: with spec.network.hostNetwork, node rank 0's "
                        "training pod holds spec.rendezvous.port on its node for the trainer, so no "
                        "other container may declare it (containerPort or hostPort); use another port")
# CEL: whether container ``c`` is the trainer (the rule of disttrain.api.trainer; where it
# names none, or several, the spec is refused by the trainer's own rules).
_IS_TRAINER = ("(has(self.trainerContainer) ? c.name == self.trainerContainer : "
               "(size(self.template.spec.containers) == 1 || c.name in ["
               + ", ".join(repr(n) for n in TRAINER_NAMES) + "]))")


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _net_sysctl_ok(spec: Any) -> bool:
    if not spec.network.host_network:
        return True
    sysctls = _list(_dict(_dict(spec.template.spec).get("securityContext")).get("sysctls"))
    return not any(str(_dict(s).get("name", "")).startswith("net.") for s in sysctls)


def _sidecar_port_ok(spec: Any) -> bool:
    if not spec.network.host_network:
        return True
    port = spec.rendezvous.port
    containers = _list(_dict(spec.template.spec).get("containers"))
    trainer = trainer_name(containers, spec.trainer_container)
    if trainer is None:
        return True  # refused by the trainer's own rule
    for ctr in containers:
        if _dict(ctr).get("name") == trainer:
            continue
        for p in _list(_dict(ctr).get("ports")):
            if _dict(p).get("containerPort") == port or _dict(p).get("hostPort") == port:
                return False
    return True


HOST_NETWORK_RULES: list[dict[str, Any]] = [
    {
        "rule": f"!({_HOST_NET}) || !has(self.template.spec.securityContext) || "
        "!has(self.template.spec.securityContext.sysctls) || "
        "self.template.spec.securityContext.sysctls.all(s, !s.name.startsWith('net.'))",
        "message": NET_SYSCTL_MESSAGE,
        "check": _net_sysctl_ok,
    },
    {
        "rule": f"!({_HOST_NET}) || self.template.spec.containers.all(c, "
        f"{_IS_TRAINER} || !has(c.ports) || "
        f"c.ports.all(p, p.containerPort != {_PORT} && (!has(p.hostPort) || p.hostPort != {_PORT})))",
        "message": SIDECAR_PORT_MESSAGE,
        "check": _sidecar_port_ok,
    },
]
