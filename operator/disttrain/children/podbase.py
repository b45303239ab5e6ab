"""The pieces both pod builders share: the template's pod spec copied into a child pod
(:func:`base_pod`), labels, env entries, host ports and the affinities that pin a pod to a
node or keep a gang one per node, plus the spec readings they need (the
probe's backend, the beacon port). Pure; the template is read as in :mod:`disttrain.children.pods`
(a null or an odd shape is absent)."""

from __future__ import annotations

import copy
from typing import Any, Sequence

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec, gpus_requested, trainer_index, trainer_of
from disttrain.children.names import JobRef, job_selector, pod_hostname, service_name, uses_dns_hostnames
from disttrain_probe.contract import probe_env, report_format


def dict_of(value: Any) -> dict:
    """``value`` if it is a dict, else a new empty one (null or a wrong shape is absent)."""
    return value if isinstance(value, dict) else {}


def list_of(value: Any) -> list:
    """``value`` if it is a list, else a new empty one."""
    return value if isinstance(value, list) else []

def own_address_field(spec: DistTrainingJobSpec) -> str:
    """The downward-API field carrying a pod's own address: status.hostIP with hostNetwork,
    status.podIP otherwise."""
    return "status.hostIP" if spec.network.host_network else "status.podIP"


def trainer_container(spec: DistTrainingJobSpec) -> dict[str, Any]:
    """A deep copy of the template's trainer container (:func:`disttrain.api.types.trainer_of`:
    the only one, the one ``spec.trainerContainer`` names, or the one named ``trainer``,
    ``pytorch`` or ``node``); {} when absent."""
    return copy.deepcopy(dict_of(trainer_of(spec)))


def with_trainer(spec: DistTrainingJobSpec, pod_spec: dict[str, Any], trainer: dict[str, Any]) -> None:
    """Put ``trainer`` in ``pod_spec``'s containers in the trainer's place; the sidecars
    keep theirs, untouched."""
    containers = list_of(pod_spec.get("containers"))
    i = trainer_index(spec)
    pod_spec["containers"] = containers[:i] + [trainer] + containers[i + 1:]


def template_labels(spec: DistTrainingJobSpec) -> dict[str, str]:
    labels = dict_of(dict(spec.template.metadata).get("labels"))
    return {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}


def probe_backend(spec: DistTrainingJobSpec) -> str:
    """``nccl`` or ``gloo``; ``auto`` is nccl exactly when the trainer requests GPUs."""
    if spec.probe.backend != "auto":
        return str(spec.probe.backend)
    return "nccl" if gpus_requested(trainer_container(spec)) > 0 else "gloo"


def pod_labels(job: JobRef, role: str, rank: int, attempt: int, extra: dict[str, str]) -> dict:
    labels = {k: v for k, v in dict_of(extra).items() if isinstance(k, str) and isinstance(v, str)}
    labels.update(job_selector(job))
    labels.update({constants.LABEL_ROLE: role, constants.LABEL_RANK: str(rank), constants.LABEL_ATTEMPT: str(attempt)})
    return labels


def env_var(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "value": str(value)}


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def report_budget_env(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """``DISTTRAIN_PROBE_REPORT_BYTES`` for the container that writes the probe's report in
    ``pod_spec`` (the pod as it will be created): the kubelet shares 12 KiB of termination
    messages evenly among a pod's containers (init and regular), so a pod of more than 3
    keeps less than 4096 bytes of the report (:func:`report_format.report_budget`)."""
    n = sum(len(v) for k in ("initContainers", "containers", "ephemeralContainers")
            if isinstance(v := pod_spec.get(k), list))
    return env_var(probe_env.REPORT_BYTES, report_format.report_budget(n))


def refresh_report_budget(pod_spec: dict[str, Any]) -> None:
    """Once containers were added to ``pod_spec`` (the stall watch's), give the container
    that carries ``DISTTRAIN_PROBE_REPORT_BYTES`` the pod's new share
    (:func:`report_budget_env`). In place; never raises."""
    budget = report_budget_env(pod_spec)
    for c in list_of(pod_spec.get("containers")):
        if isinstance(c, dict) and any(isinstance(e, dict) and e.get("name") == probe_env.REPORT_BYTES
                                       for e in list_of(c.get("env"))):
            c["env"] = merge_env(c.get("env"), [budget])


def merge_env(existing: Any, add: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {e["name"] for e in add}
    return [e for e in list_of(existing) if isinstance(e, dict) and e.get("name") not in names] + add


def base_pod(
    job: JobRef, spec: DistTrainingJobSpec, name: str, labels: dict[str, str], rank: int
) -> dict[str, Any]:
    tmpl_meta = dict_of(spec.template.metadata)
    pod_spec = copy.deepcopy(dict_of(spec.template.spec))
    pod_spec["restartPolicy"] = "Never"
    if spec.network.host_network:
        pod_spec["hostNetwork"] = True
        pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if uses_dns_hostnames(spec):
        pod_spec["hostname"] = pod_hostname(job.name, rank)
        pod_spec["subdomain"] = service_name(job, spec)
    if spec.network.port_range and not spec.network.host_network:
        # NCCL and gloo take their listening ports from the kernel's ephemeral range; the
        # sysctl is namespaced and on Kubernetes' safe list, so a pod may set its own.
        sc = pod_spec["securityContext"] = dict_of(pod_spec.get("securityContext"))
        lo, hi = spec.network.port_range.split("-")
        sc["sysctls"] = [x for x in list_of(sc.get("sysctls"))
                         if isinstance(x, dict) and x.get("name") != "net.ipv4.ip_local_port_range"]
        sc["sysctls"].append({"name": "net.ipv4.ip_local_port_range", "value": f"{lo} {hi}"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": {k: v for k, v in dict_of(tmpl_meta.get("annotations")).items()
                            if isinstance(k, str) and isinstance(v, str)},
            "ownerReferences": [job.owner_reference()],
        },
        "spec": pod_spec,
    }


def declare_rendezvous_port(ctr: dict[str, Any], spec: DistTrainingJobSpec, rank: int) -> None:
    """With hostNetwork, node rank 0's pod binds the rendezvous port on its node: declare it
    as a hostPort (equal to containerPort, as hostNetwork requires), so the scheduler never
    puts two jobs' rank 0 on one node (their stores would collide: Address already in use);
    it places the second elsewhere, or it waits. Other ranks bind no fixed port."""
    if not spec.network.host_network or rank != 0:
        return
    declare_host_port(ctr, "rendezvous", spec.rendezvous.port)


def declare_host_port(ctr: dict[str, Any], name: str, port: int) -> None:
    """Add TCP ``port`` to ``ctr``'s ports as containerPort and hostPort ``name``, replacing
    an entry of the container's that already names that port."""
    ports = [p for p in list_of(ctr.get("ports")) if isinstance(p, dict)
             and p.get("containerPort") != port and p.get("hostPort") != port]
    ports.append({"name": name, "containerPort": port, "hostPort": port, "protocol": "TCP"})
    ctr["ports"] = ports


def _require_hostname(pod_spec: dict[str, Any], operator: str, nodes: Sequence[str]) -> None:
    """Add ``kubernetes.io/hostname <operator> nodes`` to every required nodeAffinity term
    of ``pod_spec`` (terms are ORed: each must still require it)."""
    affinity = pod_spec["affinity"] = dict_of(pod_spec.get("affinity"))
    na = affinity["nodeAffinity"] = dict_of(affinity.get("nodeAffinity"))
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    req = na[key] = dict_of(na.get(key))
    term = {"key": "kubernetes.io/hostname", "operator": operator, "values": list(nodes)}
    terms = [t for t in list_of(req.get("nodeSelectorTerms")) if isinstance(t, dict)] or [{}]
    req["nodeSelectorTerms"] = [
        {**t, "matchExpressions": list_of(t.get("matchExpressions")) + [term]} for t in terms
    ]


def require_node_affinity(pod_spec: dict[str, Any], node: str) -> None:
    """Pin to one node through the scheduler (nodeAffinity on kubernetes.io/hostname)."""
    _require_hostname(pod_spec, "In", [node])


def avoid_nodes(pod_spec: dict[str, Any], nodes: Sequence[str]) -> None:
    """Keep the pod off ``nodes`` through the scheduler (a required nodeAffinity
    ``kubernetes.io/hostname NotIn nodes``). No change when ``nodes`` is empty."""
    if nodes:
        _require_hostname(pod_spec, "NotIn", nodes)


def one_per_node(pod_spec: dict[str, Any], match_labels: dict[str, str]) -> None:
    affinity = pod_spec["affinity"] = dict_of(pod_spec.get("affinity"))
    pa = affinity["podAntiAffinity"] = dict_of(affinity.get("podAntiAffinity"))
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    req = pa[key] = list_of(pa.get(key))
    req.append(
        {"labelSelector": {"matchLabels": match_labels}, "topologyKey": "kubernetes.io/hostname"}
    )


def beacon_port(spec: DistTrainingJobSpec) -> int:
    """The TCP port rank 0's probe also listens on, right after rendezvous.port (the next
    port, or the one before 65535), so a rank refused on the rendezvous port can tell "rank
    0 not listening yet" from "a rule rejects it" without evidence of rank 0's start (gang
    probes start together). With hostNetwork rank 0's probe declares it as a hostPort
    (:func:`declare_beacon_port`), so the scheduler keeps it off a node where another pod
    (another job's rank 0) declares that port."""
    port = spec.rendezvous.port
    return port + 1 if port < 65535 else port - 1


def declare_beacon_port(ctr: dict[str, Any], spec: DistTrainingJobSpec, rank: int) -> None:
    """With hostNetwork, node rank 0's probe binds :func:`beacon_port` on its node: declare
    it as a hostPort, as the rendezvous port is (:func:`declare_rendezvous_port`)."""
    if not spec.network.host_network or rank != 0:
        return
    declare_host_port(ctr, "probe-beacon", beacon_port(spec))
