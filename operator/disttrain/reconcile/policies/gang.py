"""Which gang (if any) the job's pods join (pure); see :mod:`disttrain.children.gang` for the objects.

With a gang provider, every pod of a gang instance is created in the same step (a gang is
placed only once all its pods exist), so the ranks cannot wait for rank 0's address: the
pods get DNS names (``network.enableDNSHostnames`` defaults to true) and MASTER_ADDR is
rank 0's name. The probe pods then start without the evidence of rank 0's start time, so a
silent master port is reported at the dialling ranks' rendezvous deadline rather than after
the short grace (see docs/scheduling.md).
"""

from __future__ import annotations

from typing import Any, Optional

from disttrain.api import constants
from disttrain.api.jobname import job_name_problem
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children import gang
from disttrain.reconcile.step import Step

CAP_WORKLOAD_API = "workload-api"  # the apiserver serves scheduling.k8s.io/v1beta1 podgroups


def effective_spec(spec: DistTrainingJobSpec, capabilities: frozenset[str], name: Any = None
                   ) -> tuple[DistTrainingJobSpec, Optional[str]]:
    """The spec the step acts on, and a problem (InvalidSpec) if the gang cannot work.
    A gang needs DNS hostnames: unset, they are turned on; explicitly off, or when the job's
    ``name`` cannot name DNS hostnames (:func:`disttrain.api.jobname.job_name_problem`), ``auto``
    falls back to no gang and an explicit provider is a spec error."""
    provider = gang.provider(spec, CAP_WORKLOAD_API in capabilities)
    wanted = gang.gang_setting(spec)
    if provider is None:
        return spec, None
    if provider == "workload" and CAP_WORKLOAD_API not in capabilities:
        return spec, ("runPolicy.schedulingPolicy.gang is workload, but the apiserver does not serve "
                      "scheduling.k8s.io/v1beta1 PodGroups (feature gate GenericWorkload): use auto, "
                      "or enable the API")
    if spec.network.enable_dns_hostnames is False:
        if wanted == "auto":
            return _without_gang(spec), None
        return spec, ("runPolicy.schedulingPolicy.gang creates a gang's pods together, before rank 0 "
                      "has an address: it needs DNS hostnames; unset network.enableDNSHostnames")
    if spec.network.enable_dns_hostnames is None:
        net = spec.network.model_copy(update={"enable_dns_hostnames": True})
        with_dns = spec.model_copy(update={"network": net})
        if name is not None and job_name_problem(name, with_dns) and not job_name_problem(name, spec):
            if wanted == "auto":
                return _without_gang(spec), None
            return spec, f"{job_name_problem(name, with_dns)} (gang scheduling gives the pods DNS names)"
        spec = with_dns
    return spec, None


def _without_gang(spec: DistTrainingJobSpec) -> DistTrainingJobSpec:
    sp = spec.run_policy.scheduling_policy.model_copy(update={"gang": "none"})
    rp = spec.run_policy.model_copy(update={"scheduling_policy": sp})
    return spec.model_copy(update={"run_policy": rp})


def gangs(s: Step) -> dict[str, gang.Gang]:
    """The gang instance each role's pods join now (by role label), or {} without gangs."""
    provider = gang.provider(s.spec, CAP_WORKLOAD_API in s.capabilities)
    if provider is None:
        return {}
    attempt = s.st.probe.attempt or 1
    restarts, suspensions = s.st.restarts, s.st.suspensions
    n = s.spec.num_nodes
    return {
        constants.ROLE_PROBE: gang.Gang(provider, gang.group_name(s.job.name, "probe", attempt), "probe", n),
        constants.ROLE_WORKER: gang.Gang(provider, gang.group_name(s.job.name, "training", restarts, suspensions),
                              "training", n),
    }
