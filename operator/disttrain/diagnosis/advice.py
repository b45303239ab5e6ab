"""Spec-aware fixes appended to a diagnosis (pure).

The probe sees the node; only the operator knows how the job asked for its network. This
module turns that knowledge into the fix a user can apply to the DistTrainingJob, e.g.
that with ``hostNetwork`` the operator cannot set ``net.ipv4.ip_local_port_range`` (the
API server refuses net.* sysctls on host-network pods), while on the pod network it sets
it to ``network.portRange`` (the sysctl is namespaced and on Kubernetes' safe list).
"""
from __future__ import annotations

from typing import Optional

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children.names import JobRef, service_name, uses_dns_hostnames
from disttrain.diagnosis import messages
from disttrain.diagnosis.diagnose import Diagnosis
from disttrain_probe.contract import vocabulary

_PORT_REASONS = {vocabulary.EPHEMERAL_PORTS_BLOCKED, vocabulary.PORT_RANGE_OUTSIDE_ALLOWED}


def advice(reason: str, job: JobRef, spec: DistTrainingJobSpec,
           explained: Optional[str] = None) -> Optional[str]:
    """The job-level fix for a false condition's ``reason``, or None when the probe's own
    message already says all there is to say, or the evidence explained the failure
    (``explained``: the attribution kind) so the spec is not the suspect."""
    net = spec.network
    if reason in _PORT_REASONS:
        if net.host_network and net.port_range:
            lo, hi = net.port_range.split("-")
            return (f"with hostNetwork the operator cannot set net.ipv4.ip_local_port_range: set "
                    f"network.hostNetwork: false (the pods' sysctl then becomes {net.port_range}), "
                    f"or set the nodes' net.ipv4.ip_local_port_range=\"{lo} {hi}\"")
        if not net.port_range:
            return ("declare the ephemeral range the firewall admits in network.portRange"
                    + ("" if net.host_network else " (the operator then sets the pods' "
                       "net.ipv4.ip_local_port_range to it)")
                    + ", or open the nodes' ephemeral range between nodes")
    if reason == vocabulary.MASTER_ADDR_UNRESOLVABLE and uses_dns_hostnames(spec) and not explained:
        svc = service_name(job, spec)
        who = ("network.subdomain names a Service you manage"
               if net.subdomain else "the operator creates it with rank 0's pod")
        return (f"check that the headless Service {svc} exists in namespace {job.namespace} ({who}) "
                f"and selects the job's pods (publishNotReadyAddresses)")
    return None


def dns_policy_cause(spec: DistTrainingJobSpec) -> Optional[str]:
    """The cause and the fix when the template's ``dnsPolicy`` keeps the pods off the
    cluster's DNS while MASTER_ADDR is rank 0's cluster DNS name: ``Default`` (the node's
    resolver, which does not know cluster names) or ``None`` without a ``dnsConfig``
    nameserver. None otherwise, and with ``network.hostNetwork`` (the operator then sets
    ``ClusterFirstWithHostNet`` itself, :func:`disttrain.children.podbase.base_pod`). The
    template is untrusted: any shape, never raises."""
    pod = spec.template.spec if isinstance(spec.template.spec, dict) else {}
    policy = pod.get("dnsPolicy")
    if spec.network.host_network or not uses_dns_hostnames(spec):
        return None
    if policy == "Default":
        gives = "the node's resolver, which does not know the cluster's names"
    elif policy == "None":
        config = pod.get("dnsConfig")
        servers = config.get("nameservers") if isinstance(config, dict) else None
        if isinstance(servers, list) and servers:
            return None
        gives = "no nameserver (no dnsConfig.nameservers)"
    else:
        return None
    return (f"spec.template.spec.dnsPolicy: {policy} gives the pods {gives}, so rank 0's cluster "
            f"DNS name (MASTER_ADDR) cannot resolve: remove dnsPolicy from the template or set it "
            f"to ClusterFirst")


def _apply_dns_policy(diag: Diagnosis, cause: str) -> None:
    """The template's dnsPolicy is the cause of MasterAddrUnresolvable (not a node's DNS
    path): ``cause`` first on the failing check, the evidence's first clause after it (who
    could not resolve, without the attribution's guess at a node's DNS path), and on ``Validated`` in place of the pointer (its ``<Check>=False (<Reason>)
    on <nodes>`` head kept)."""
    for ctype, v in diag.conditions.items():
        if v.status != constants.FALSE or v.reason != vocabulary.MASTER_ADDR_UNRESOLVABLE or cause in v.message:
            continue
        if ctype == constants.VALIDATED:
            head, sep, _ = v.message.partition(": see the ")
            v.message = messages.join([f"{head}: {cause}" if sep else cause, "" if sep else v.message],
                                      messages.SUMMARY_LIMIT)
        else:  # the evidence: who failed to resolve, without a guess at the node's DNS path
            first = (messages.clauses(v.message) or [""])[0].partition(": the record exists")[0]
            v.message = messages.join([cause, first.rstrip(". ")], messages.LIMIT)


def apply_advice(diag: Diagnosis, job: JobRef, spec: DistTrainingJobSpec) -> None:
    """Append :func:`advice` to every false check condition of ``diag`` it applies to (in
    place), shortening the probe's evidence so the message stays within
    :data:`messages.LIMIT`; ``Validated`` only points at the failing check, so it gets the
    advice only when the cause belongs to no check. Text only: no status or reason changes
    here (the spec's policies decided in :func:`~disttrain.diagnosis.diagnose.diagnose`).
    A template dnsPolicy that keeps the pods off the cluster's DNS (:func:`dns_policy_cause`)
    replaces the advice for MasterAddrUnresolvable, on ``Validated`` too."""
    dns_cause = dns_policy_cause(spec)
    if dns_cause:
        _apply_dns_policy(diag, dns_cause)
    for ctype, v in diag.conditions.items():
        if v.status != constants.FALSE:
            continue
        if ctype == constants.VALIDATED and constants.REASON_CONDITION.get(v.reason):
            continue
        if dns_cause and v.reason == vocabulary.MASTER_ADDR_UNRESOLVABLE:
            continue
        extra = advice(v.reason, job, spec, diag.explained)
        if v.reason in _PORT_REASONS and not spec.network.port_range and "network.portRange" in v.message:
            continue  # the probe already says to declare the range: its evidence stays whole
        if extra and extra not in v.message:
            limit = messages.SUMMARY_LIMIT if ctype == constants.VALIDATED else messages.LIMIT
            v.message = messages.join([messages.bound(v.message.rstrip(". "), limit - len(extra) - len(messages.SEP)), extra],
                               limit)


__all__ = ["advice", "apply_advice", "dns_policy_cause"]
