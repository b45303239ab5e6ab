"""Spec-aware fixes appended to a diagnosis (pure).

The probe sees the node; only the operator knows how the job asked for its network. This
module turns that knowledge into the fix a user can apply to the DistTrainingJob, e.g.
that with ``hostNetwork`` the operator cannot set ``net.ipv4.ip_local_port_range`` (the
API server refuses net.* sysctls on host-network pods), while on the pod network it sets
it to ``network.portRange`` (the sysctl is namespaced and on Kubernetes' safe list).
"""
from __future__ import annotations

from typing import Optional

from . import constants as c
from .api import DistTrainingJobSpec
from .builders import JobRef, service_name, uses_dns_hostnames
from .diagnosis import Diagnosis

_PORT_REASONS = {c.REASON_EPHEMERAL_PORTS_BLOCKED, c.REASON_PORT_RANGE_OUTSIDE_ALLOWED}


def advice(reason: str, job: JobRef, spec: DistTrainingJobSpec) -> Optional[str]:
    """The job-level fix for a false condition's ``reason``, or None when the probe's own
    message already says all there is to say."""
    net = spec.network
    if reason in _PORT_REASONS:
        if net.host_network and net.port_range:
            lo, hi = net.port_range.split("-")
            return (f"with hostNetwork the operator cannot set the pods' net.ipv4.ip_local_port_range "
                    f"(net.* sysctls are refused on host-network pods): set network.hostNetwork: false "
                    f"so the operator sets it to network.portRange {net.port_range}, or set the "
                    f"nodes' sysctl net.ipv4.ip_local_port_range=\"{lo} {hi}\"")
        if not net.port_range:
            return ("declare the ephemeral range the firewall admits in network.portRange"
                    + ("" if net.host_network else " (the operator then sets each pod's "
                       "net.ipv4.ip_local_port_range to it)")
                    + ", or open the nodes' ephemeral range between nodes")
    if reason == c.REASON_MASTER_ADDR_UNRESOLVABLE and uses_dns_hostnames(spec):
        svc = service_name(job, spec)
        who = ("network.subdomain names a Service you manage"
               if net.subdomain else "the operator creates it with rank 0's pod")
        return (f"check that the headless Service {svc} exists in namespace {job.namespace} ({who}), "
                f"selects the job's pods with publishNotReadyAddresses, and that cluster DNS answers")
    return None


def apply_advice(diag: Diagnosis, job: JobRef, spec: DistTrainingJobSpec) -> None:
    """Append :func:`advice` to every false condition of ``diag`` it applies to (in place)."""
    for v in diag.conditions.values():
        if v.status == "False":
            extra = advice(v.reason, job, spec)
            if extra and extra not in v.message:
                v.message = f"{v.message.rstrip('. ')}; {extra}"


__all__ = ["advice", "apply_advice"]
