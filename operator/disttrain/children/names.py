"""Names and identity of a job's children (pure): :class:`JobRef`, the pods' names and DNS
names, the label selector of one job's pods.

Children are validly named when :func:`disttrain.api.jobname.job_name_problem` accepts the
job's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec


@dataclass(frozen=True)
class JobRef:
    """Identity of the owning job: what a child needs to point back at it."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> "JobRef":
        meta = body["metadata"]
        return cls(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": constants.API_VERSION,
            "kind": constants.KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }



def probe_pod_name(job: str, rank: int) -> str:
    return f"{job}-probe-{rank}"


def worker_pod_name(job: str, rank: int) -> str:
    return f"{job}-worker-{rank}"


def uses_dns_hostnames(spec: DistTrainingJobSpec) -> bool:
    """Whether pods get DNS names and MASTER_ADDR is rank 0's name (network.enableDNSHostnames;
    default: true without hostNetwork)."""
    v = spec.network.enable_dns_hostnames
    return (not spec.network.host_network) if v is None else bool(v)


def service_name(job: JobRef, spec: DistTrainingJobSpec) -> str:
    """The headless Service (and pod subdomain): network.subdomain, else the job's name."""
    return spec.network.subdomain or job.name


def pod_hostname(job: str, rank: int) -> str:
    """Node rank ``rank``'s pod hostname, ``<job>-<rank>`` (a DNS label: at most 63
    characters, the job name shortened if needed). Probe and training pods of one rank
    share it; they never run at the same time."""
    suffix = f"-{rank}"
    return job[: 63 - len(suffix)].rstrip("-") + suffix


def master_dns_name(job: JobRef, spec: DistTrainingJobSpec) -> str:
    """MASTER_ADDR with DNS hostnames: ``<job>-0.<subdomain>``, which the pods' search path
    (``<namespace>.svc.<cluster domain>``) completes, as JobSet's pod names are used."""
    return pod_dns_name(job, spec, 0)


def pod_dns_name(job: JobRef, spec: DistTrainingJobSpec, rank: int) -> str:
    """Node rank ``rank``'s pod's DNS name, ``<job>-<rank>.<subdomain>``."""
    return f"{pod_hostname(job.name, rank)}.{service_name(job, spec)}"


_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def job_selector(job: JobRef) -> dict[str, str]:
    """The labels that select this job's pods and no other's: the job's name and, when it is
    a valid label value (a real metadata.uid is), its UID, so the pods of a deleted job with
    the same name that are still terminating are not selected."""
    sel = {constants.LABEL_JOB: job.name}
    if job.uid and _LABEL_VALUE.fullmatch(job.uid):
        sel[constants.LABEL_JOB_UID] = job.uid
    return sel
