"""The direct path's pure parts (issue 31): which generated cases it can run faithfully
(:func:`cluster_only`), the job as the cluster runner applies it (:func:`job_body`), where
each rank runs (:func:`placement`), each probe's environment derived from the operator's own
probe pod (:func:`probe_env`), each node's ``/etc/hosts`` and ``resolv.conf``
(:func:`hosts_text`, :func:`resolv_text`), the probe pods as the kubelet would report them
finished (:func:`finished_pod`), and the operator's verdict on them (:func:`verdict_of`): the
reconcile step's own report collection (``verdict.collect``) and verdict
(``verdict.write``), without a cluster. ``direct.py`` does the I/O. Pure.
"""
from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import gang
from disttrain.children.names import JobRef, master_dns_name, pod_dns_name, probe_pod_name, uses_dns_hostnames
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.diagnosis.report import parse_report
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import verdict
from disttrain.reconcile.policies.gang import CAP_WORKLOAD_API, effective_spec
from disttrain.reconcile.policies.probelaunch import master_addr
from disttrain.reconcile.status_repair import repair
from disttrain.reconcile.step import Plan, ProbeRun, Step
from disttrain_probe.contract import probe_env as PE
from localcluster.common.config import CLUSTER_DOMAIN, DNS_SERVICE_IP
from localcluster.faults.generate import Case
from localcluster.network.topology import NodeTopology
from localcluster.scenarios import loader

NAMESPACE = "gen"  # the job's namespace (its DNS search path: <ns>.svc.cluster.local)
JOB_UID = "0d1ec7a5-0000-4000-8000-000000000031"  # echoed by every probe, checked by trust
ATTEMPT = 1
MESSAGE_LIMIT = 4096  # bytes of a termination message the kubelet keeps
LOG_TAIL_LINES = 80  # FallbackToLogsOnError: the last lines of the log
# What the proving ground's apiserver serves (controlplane.FEATURE_GATES: GenericWorkload):
# with it a job's gang is on (runPolicy.schedulingPolicy.gang auto), its pods get DNS names
# and every probe is created at once with rank 0's name as MASTER_ADDR.
CAPABILITIES = frozenset({CAP_WORKLOAD_API})


def job_body(case: Case) -> dict[str, Any]:
    """The DistTrainingJob the cluster runner applies for ``case`` (the example job with the
    scenario's ``job`` merged, ``loader.job_documents``), with a namespace and a UID as the
    apiserver would give it. Raises StopIteration if the example has no job (a repo bug)."""
    doc = next(d for d in loader.job_documents(case.scenario) if d.get("kind") == "DistTrainingJob")
    body = copy.deepcopy(doc)
    body["metadata"] = {**(body.get("metadata") or {}), "namespace": NAMESPACE, "uid": JOB_UID,
                        "generation": 1}
    return body


def spec_of(body: dict[str, Any]) -> DistTrainingJobSpec:
    """The spec a reconcile step acts on in the proving ground: parsed, then
    ``gang.effective_spec`` with :data:`CAPABILITIES` (a gang turns DNS hostnames on).
    Raises pydantic.ValidationError for a spec the CRD would refuse."""
    spec = DistTrainingJobSpec.model_validate(body["spec"])
    return effective_spec(spec, CAPABILITIES, JobRef.from_body(body).name)[0]


def all_at_once(body: dict[str, Any]) -> bool:
    """Whether the operator creates every probe pod at once (a gang: ``probelaunch.launch``),
    else rank 0 first and the others once its probe started."""
    return gang.provider(spec_of(body), CAP_WORKLOAD_API in CAPABILITIES) is not None


def cluster_only(case: Case) -> Optional[str]:
    """Why ``case`` needs the whole cluster (None: the direct path builds it faithfully):
    NetworkPolicies need the cluster's enforcer, a mesh needs pods with sidecars, the pod
    network needs pods, a node-local DNS cache needs CoreDNS. A job with DNS hostnames on the
    host network runs directly: cluster DNS's answers become hosts lines (:func:`hosts_text`)."""
    sc = case.scenario
    if sc.networkPolicies:
        return "NetworkPolicy needs the cluster's enforcer"
    if sc.mesh:
        return "a sidecar needs pods"
    if not spec_of(job_body(case)).network.host_network:
        return "the pod network needs pods (hostNetwork false)"
    dns = sorted(n for n, o in sc.nodeOverrides.items() if o.dns and o.dns.records)
    if (sc.defaults.dns and sc.defaults.dns.records) or dns:
        return f"a node-local DNS cache needs CoreDNS ({', '.join(dns) or 'every node'})"
    return None


def placement(case: Case, nodes: int) -> list[int]:
    """Node index of each rank: a permutation seeded by the case's name (the scheduler's
    choice in the cluster, so rank 0 is not always node-a)."""
    order = list(range(nodes))
    random.Random(f"placement:{case.name}").shuffle(order)
    return order


@dataclass(frozen=True)
class RankPlace:
    """Where one rank runs: its node's name and InternalIP, and its probe pod's name."""

    rank: int
    node: str
    ip: str
    pod: str


def places(case: Case, body: dict[str, Any], topos: list[NodeTopology]) -> list[RankPlace]:
    """Each rank's place (rank order), nodes as :func:`placement` chooses them."""
    name = JobRef.from_body(body).name
    return [RankPlace(r, topos[i].name, topos[i].internal_ip, probe_pod_name(name, r))
            for r, i in enumerate(placement(case, len(topos)))]


def _field(path: str, place: RankPlace) -> str:
    values = {"spec.nodeName": place.node, "metadata.name": place.pod, "status.hostIP": place.ip,
              "status.podIP": place.ip}  # hostNetwork: the pod's address is the node's
    if path not in values:
        raise ValueError(f"no direct value for the downward-API field {path}")
    return values[path]


def probe_pod(body: dict[str, Any], rank: int, master: Optional[str],
              started_at: Optional[str]) -> dict[str, Any]:
    """The operator's probe pod of ``rank`` (``build_probe_pod``; ``master``/``started_at``:
    what it tells ranks > 0 of rank 0, as ``probelaunch.launch`` does: a gang's ranks get
    rank 0's name and no start time)."""
    return build_probe_pod(JobRef.from_body(body), spec_of(body), rank,
                           ProbeMaster(master if rank else None, started_at if rank else None), ATTEMPT)


def probe_env(pod: dict[str, Any], place: RankPlace, report_path: str) -> dict[str, str]:
    """The probe container's environment in ``pod`` as the kubelet would resolve it on
    ``place`` (downward-API fields: the node's name and address, the pod's name), with only
    the report path changed (the kubelet's termination-message path is outside a pod a
    file of ours). Raises ValueError for a value from a source with no direct meaning (a
    Secret, a ConfigMap, a resource field)."""
    probe = next(c for c in pod["spec"]["containers"] if c["name"] == "probe")
    out: dict[str, str] = {}
    for e in probe.get("env") or []:
        if "value" in e:
            out[e["name"]] = str(e["value"])
            continue
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        if not ref:
            raise ValueError(f"env {e['name']}: no direct value for {e.get('valueFrom')}")
        out[e["name"]] = _field(ref["fieldPath"], place)
    out[PE.REPORT_PATH] = report_path
    return out


def rank0_master(body: dict[str, Any], rank0: RankPlace) -> Optional[str]:
    """MASTER_ADDR the operator gives ranks > 0: a gang's rank 0's DNS name, else
    ``probelaunch.master_addr`` on rank 0's pod with its hostIP."""
    if all_at_once(body):
        return master_dns_name(JobRef.from_body(body), spec_of(body))
    pod = {"status": {"hostIP": rank0.ip, "podIP": rank0.ip}}
    return master_addr(JobRef.from_body(body), spec_of(body), pod)


def cluster_dns_lines(body: dict[str, Any], places: list[RankPlace]) -> list[str]:
    """What cluster DNS answers for the job's pods (with DNS hostnames: each rank's
    ``<job>-<r>.<subdomain>`` and ``...<ns>.svc.<domain>``), as hosts lines for
    :func:`hosts_text` (which leaves out the names a node maps itself, as its own line wins
    over DNS in the cluster). The one difference: a healthy node's probe reports the
    answer's source as hosts, not dns. [] without DNS hostnames."""
    job, spec = JobRef.from_body(body), spec_of(body)
    if not uses_dns_hostnames(spec):
        return []
    return [f"{p.ip} {pod_dns_name(job, spec, p.rank)} {pod_dns_name(job, spec, p.rank)}.{job.namespace}"
            f".svc.{CLUSTER_DOMAIN}" for p in places]


def hosts_text(topo: NodeTopology, peers: list[str], dns_lines: list[str]) -> str:
    """The node's /etc/hosts as the node agent writes it (localhost, the scenario's own
    lines first, every node's names), then the cluster DNS stand-in lines without the names
    the node's own lines map: glibc's files backend answers a name with every line that
    names it and then asks no DNS, so in the cluster a node's own entry is its only answer."""
    own = {name for ln in topo.hosts for name in ln.split()[1:]}
    extra = []
    for ln in dns_lines:
        addr, *names = ln.split()
        left = [n for n in names if n not in own]
        if left:
            extra.append(" ".join([addr, *left]))
    lines = ["127.0.0.1 localhost", *topo.hosts, *peers, *extra]
    return "".join(f"{ln}\n" for ln in lines)


def resolv_text() -> str:
    """resolv.conf of a hostNetwork pod with ClusterFirstWithHostNet: cluster DNS (no
    route to it here: lookups past /etc/hosts fail at once) and the pod's search path."""
    return (f"nameserver {DNS_SERVICE_IP}\nsearch {NAMESPACE}.svc.{CLUSTER_DOMAIN} "
            f"svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\noptions ndots:5 timeout:1 attempts:1\n")


def termination_message(report: str, log: str, code: Optional[int]) -> str:
    """What the kubelet keeps as the probe's termination message: the report file (at most
    :data:`MESSAGE_LIMIT` bytes), else with a failed exit (FallbackToLogsOnError) the log's
    last lines (same limit)."""
    if report.strip():
        return report.encode()[:MESSAGE_LIMIT].decode(errors="ignore")
    if code not in (0, None):
        tail = "\n".join(log.splitlines()[-LOG_TAIL_LINES:])
        return tail.encode()[-MESSAGE_LIMIT:].decode(errors="ignore")
    return ""


def finished_pod(pod: dict[str, Any], place: RankPlace, message: str, code: Optional[int],
                 started_at: str) -> dict[str, Any]:
    """``pod`` as observed once its probe ended: scheduled on ``place``'s node, Succeeded or
    Failed by ``code`` (None: killed past its deadline, exit 137), the termination message."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = place.node
    exit_code = 137 if code is None else code
    out["status"] = {
        "phase": "Succeeded" if exit_code == 0 else "Failed", "hostIP": place.ip, "podIP": place.ip,
        "podIPs": [{"ip": place.ip}], "startTime": started_at,
        "containerStatuses": [{"name": "probe", "state": {"terminated": {
            "exitCode": exit_code, "message": message, "startedAt": started_at,
            "reason": "Completed" if exit_code == 0 else "Error"}}}]}
    return out


@dataclass(frozen=True)
class Verdict:
    """The job's conditions after the verdict, rank -> node, status.rendezvous.socketIfname."""

    conditions: list[dict[str, Any]]
    rank_nodes: dict[int, str]
    socket_ifname: Optional[str]


def verdict_of(body: dict[str, Any], pods: list[dict[str, Any]], master: Optional[str],
               now: datetime) -> Verdict:
    """The operator's verdict on the finished probe ``pods`` (one per rank, rank order): a
    reconcile Step as the loop builds it, the reports collected and checked as
    ``verdict.collect`` does, then ``verdict.write``. Never raises for a bad report
    (it becomes ProbeReportInvalid, as in the cluster)."""
    spec = spec_of(body)
    ts = cond.now_rfc3339(now)
    plan = Plan(status=repair({}, ts))
    plan.status["conditions"] = cond.initial(1, ts, spec.probe.enabled)
    s = Step(job=JobRef.from_body(body), spec=spec, generation=1, now=now, plan=plan, pods=list(pods),
             services=[], parse_report=parse_report, capabilities=CAPABILITIES)
    by_rank = dict(enumerate(pods))
    outcomes = verdict.collect(s, ProbeRun(master, by_rank))
    verdict.write(s, outcomes, master)
    rdzv = s.plan.status.get("rendezvous") or {}
    return Verdict(s.plan.status["conditions"], {r: p["spec"]["nodeName"] for r, p in by_rank.items()},
                   rdzv.get("socketIfname"))
