"""The job's name rules (:data:`NAME_RULES`): CEL at the CRD's root, where
``self.metadata.name`` is visible, and the same checks in Python (:func:`job_name_problem`),
plus the explicit-gang test the spec's cross-field rules share with them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from disttrain.api.types import DistTrainingJobSpec

# An explicit gang provider (workload, coscheduling, volcano; not auto or none) creates a
# gang's pods together, so it gives them DNS names (policies/gang.py effective_spec): CEL on
# the spec (self) and the same in Python.
CEL_EXPLICIT_GANG = ("(has(self.runPolicy) && has(self.runPolicy.schedulingPolicy) && "
                      "has(self.runPolicy.schedulingPolicy.gang) && "
                      "!(self.runPolicy.schedulingPolicy.gang in ['auto', 'none']))")


def explicit_gang(spec: DistTrainingJobSpec) -> bool:
    """Whether runPolicy.schedulingPolicy.gang names a provider (not auto or none)."""
    v = spec.run_policy.scheduling_policy.gang
    return str(getattr(v, "value", v)) not in ("auto", "none")


# Cross-field rules: CEL for the apiserver (admission) and the same check in Python.


# Children: pods <job>-probe-<rank> and <job>-worker-<rank> (DNS subdomains, always short
# enough when the name is a label), pod hostnames <job>-<rank> (DNS labels, with DNS
# hostnames), the headless Service <job> (a DNS-1035 label, when the operator creates it)
# and the label disttrain.dev/job-name=<job> (a label value, at most 63 characters).
# CEL at the CRD's root (where self.metadata.name is visible) and the same checks in Python.
# DNS hostnames: enableDNSHostnames when set, else on with an explicit gang or without
# hostNetwork (_dns below). A null is never seen here: the spec's schema has no nullable
# field, so the apiserver drops a null (unset) before the rules run, as the models read it.
_CEL_DNS = ("(has(self.spec.network) && has(self.spec.network.enableDNSHostnames) ? "
            "self.spec.network.enableDNSHostnames : ("
            + CEL_EXPLICIT_GANG.replace("self.", "self.spec.") + " || !(has(self.spec.network) && "
            "has(self.spec.network.hostNetwork) && self.spec.network.hostNetwork)))")
_CEL_OWN_SERVICE = (f"({_CEL_DNS} && !(has(self.spec.network) && "
                    "has(self.spec.network.subdomain)))")
NAME_RULES: list[dict[str, Any]] = [
    {
        "rule": "self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "message": "must be a DNS label (lowercase letters, digits and '-', no "
        "dots): it names the job's pods' hostnames <name>-<rank>, its headless Service and "
        "the disttrain.dev/job-name label",
        "check": lambda name, spec: bool(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)),
    },
    {
        "rule": "size(self.metadata.name) <= 63",
        "message": "is longer than 63 characters, the limit of a label value "
        "(every pod carries disttrain.dev/job-name=<name>); shorten it",
        "check": lambda name, spec: len(name) <= 63,
    },
    {
        "needs_spec": True,
        "rule": f"!{_CEL_DNS} || size(self.metadata.name) + "
        "size(string(self.spec.numNodes - 1)) <= 62",
        # A static message at admission: the apiserver refuses string concatenation here (its
        # cost estimate); the operator's message (message_of) gives the numbers.
        "message": "is too long: the pod hostname <name>-<last rank> would exceed 63 "
        "characters; shorten the name (at most 62 minus the digits of numNodes - 1) or set "
        "spec.network.enableDNSHostnames: false",
        "check": lambda name, spec: not _dns(spec) or len(name) + len(str(spec.num_nodes - 1)) <= 62,
        "message_of": lambda name, spec: (
            f"is too long: the pod hostname <name>-{spec.num_nodes - 1} would exceed 63 characters; "
            f"shorten the name to at most {62 - len(str(spec.num_nodes - 1))} characters or set "
            "spec.network.enableDNSHostnames: false"),
    },
    {
        "needs_spec": True,
        "rule": f"!{_CEL_OWN_SERVICE} || self.metadata.name.matches('^[a-z]')",
        "message": "must start with a letter: it names the job's headless "
        "Service (a DNS-1035 label); rename the job, or set spec.network.subdomain to a "
        "Service you manage",
        "check": lambda name, spec: not (_dns(spec) and not spec.network.subdomain)
        or bool(re.match(r"[a-z]", name)),
    },
]


def _dns(spec: DistTrainingJobSpec) -> bool:
    """Whether the job's pods get DNS hostnames: network.enableDNSHostnames when set, else
    with an explicit gang (it turns them on) or without hostNetwork. As _CEL_DNS."""
    v = spec.network.enable_dns_hostnames
    if v is not None:
        return bool(v)
    return explicit_gang(spec) or not spec.network.host_network


def job_name_problem(name: Any, spec: Optional[DistTrainingJobSpec] = None) -> Optional[str]:
    """Why a job named ``name`` cannot name its children, or None when it can.

    The same rules as the CRD's CEL rules on ``metadata.name`` (NAME_RULES): a DNS label
    (no dots) of at most 63 characters; with DNS hostnames, ``<name>-<rank>`` within 63
    characters for the last rank; with an operator-created headless Service, a leading
    letter. ``spec`` is the validated spec (its numNodes and network decide the last two);
    without it only the first two are checked, so pass it once the spec is valid.
    Pure; never raises. The message names metadata.name, why and the fix."""
    if not isinstance(name, str) or not name:
        return "metadata.name is missing"
    for rule in NAME_RULES:
        if spec is None and rule.get("needs_spec"):
            continue
        if not rule["check"](name, spec):
            why = rule["message_of"](name, spec) if "message_of" in rule else rule["message"]
            return f"metadata.name {name[:80]!r} {why}"
    return None


def name_rules_cel() -> list[dict[str, str]]:
    """NAME_RULES as the CRD writes them (x-kubernetes-validations at the root)."""
    keep = ("rule", "message", "messageExpression")
    return [{k: r[k] for k in keep if k in r} | {"fieldPath": ".metadata.name"} for r in NAME_RULES]
