"""A probe verdict as the admission check's answer (pure): the conditions the diagnosis
produced (``disttrain.diagnosis.diagnose.Diagnosis.conditions`` after the reconcile verdict's
rules: type -> Verdict) -> :class:`Answer`, the state, message and ``podSetUpdates`` Kueue
reads from ``status.admissionChecks[]``.

- ``Validated`` True: **Ready**, with one podSetUpdate per pod set that holds ranks: the
  nodeSelector ``preflight.disttrain.dev/<probe job>: "true"`` (:func:`validated_label`;
  the controller puts that label on the nodes the probes validated, so the job's pods land
  on them and nowhere else), and the annotation ``disttrain.dev/socket-ifname`` with the
  interface the probes chose (a comma list when nodes name it differently), for the pod
  template to read through the downward API. A key the template already sets is left out
  (Kueue refuses an update that changes a key).
- ``Validated`` False: the first False probe check's message (cause, node, fix), or
  Validated's own; **Rejected** when the job itself is wrong (:data:`JOB_FAULTS`, and
  :data:`JOB_FAULTS_EVERYWHERE` when the verdict names every probed node), else **Retry**
  (a node at fault, or a cause that may pass on other nodes or later): Kueue releases the
  quota and queues the Workload again after :data:`RETRY_AFTER_SECONDS`, and the next
  probes keep off the nodes the verdict named (``Answer.avoid``).
- ``Validated`` Unknown or absent: **Pending** (the probes are running).

Which reasons the job is at fault for (every other failure is Retry):

| reason | answer | why |
|---|---|---|
| `InvalidSpec`, `InvalidPodTemplate` | Rejected | the job's own settings are refused |
| `NetworkPolicyBlocks` | Rejected | the namespace's NetworkPolicies drop the job's own traffic: other nodes cannot help |
| `InterfaceNotFound`, `NoCommonInterface` | Rejected when the job set `NCCL_SOCKET_IFNAME` and every probed node is named; else Retry | the job's interface matches nothing anywhere |
| `MasterPortRefused` | Rejected when every probed node but rank 0's is named and Kueue already retried once (`retryCount` >= 1); else Retry | a firewall on rank 0's node alone looks the same the first time |
| the Workload's own problems (`.workload`, `.probespec` reasons) | Rejected | the check cannot read the job |

Messages are at most 400 characters (``disttrain.diagnosis.messages.bound``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from disttrain.admissioncheck.probespec import probe_job
from disttrain.admissioncheck.workload import Plan, Problem
from disttrain.api import constants
from disttrain.diagnosis import messages
from disttrain.diagnosis.attribution import culprits
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.netsummary import summarize_ifnames
from disttrain_probe.contract import vocabulary

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
RETRY_AFTER_SECONDS = 30
LABEL_PREFIX = "preflight.disttrain.dev"
SOCKET_IFNAME_ANNOTATION = "disttrain.dev/socket-ifname"

JOB_FAULTS = frozenset({vocabulary.INVALID_SPEC, vocabulary.INVALID_POD_TEMPLATE, vocabulary.NETWORK_POLICY_BLOCKS})
# the job's own interface, when it set one: at fault if no probed node has it
JOB_FAULTS_EVERYWHERE = frozenset({vocabulary.INTERFACE_NOT_FOUND, vocabulary.NO_COMMON_INTERFACE})


@dataclass(frozen=True)
class Answer:
    """What goes into the Workload's ``status.admissionChecks[]`` entry of our check:
    ``state`` (Pending, Ready, Retry, Rejected), ``message`` (<= 400 characters),
    ``pod_set_updates`` (Ready only) and ``requeue_after_seconds`` (Retry only); ``avoid``
    (Retry only) the nodes the verdict named, for the next probes of this Workload to
    keep off (:func:`disttrain.admissioncheck.probespec.probe_pod`)."""

    state: str
    message: str
    pod_set_updates: list[dict[str, Any]] = field(default_factory=list)
    requeue_after_seconds: Optional[int] = None
    avoid: tuple[str, ...] = ()


def validated_label(plan: Plan) -> tuple[str, str]:
    """The node label (key, value) that marks the nodes validated for ``plan``'s Workload."""
    return f"{LABEL_PREFIX}/{probe_job(plan).name}", "true"


def failed(verdicts: Mapping[str, Verdict]) -> Verdict:
    """The first False probe check (its message has the cause and the fix), else Validated."""
    for ctype in vocabulary.CHECK_CONDITIONS:
        v = verdicts.get(ctype)
        if v is not None and v.status == constants.FALSE:
            return v
    return verdicts[vocabulary.VALIDATED]


def _job_at_fault(v: Verdict, plan: Plan, placed: Mapping[int, str], named: Sequence[str],
                  retry_count: int) -> bool:
    if v.reason in JOB_FAULTS:
        return True
    nodes = set(placed.values())
    if v.reason in JOB_FAULTS_EVERYWHERE:
        return plan.socket_ifname is not None and bool(nodes) and nodes <= set(named)
    if v.reason == vocabulary.MASTER_PORT_REFUSED:
        others = nodes - {placed.get(0)}
        return retry_count >= 1 and bool(others) and others <= set(named)
    return False


def _updates(plan: Plan, socket_ifnames: Mapping[int, Optional[str]]) -> list[dict[str, Any]]:
    key, value = validated_label(plan)
    ifname = summarize_ifnames(list(socket_ifnames.values()))
    out = []
    for p in plan.pod_sets:
        meta = p.template.get("metadata")
        ann = meta.get("annotations") if isinstance(meta, dict) else None
        has_ann = isinstance(ann, dict) and SOCKET_IFNAME_ANNOTATION in ann
        sel = p.template["spec"].get("nodeSelector")
        update: dict[str, Any] = {"name": p.name}
        if not (isinstance(sel, dict) and key in sel):
            update["nodeSelector"] = {key: value}
        if ifname and not has_ann:
            update["annotations"] = {SOCKET_IFNAME_ANNOTATION: ifname}
        out.append(update)
    return out


# While the probes wait to be placed, the check's message says why (capacity, a resource)
WAITING_REASONS = (vocabulary.WAITING_FOR_RESOURCES, vocabulary.RESOURCE_NOT_OFFERED)
# The probes' own master (a pod of the preflight, gone once it ends) in the Validated
# message (checkconditions); the job's operator gives the job its own MASTER_ADDR.
_SHADOW_MASTER = re.compile(r"; MASTER_ADDR=[^;]*")


def answer(verdicts: Mapping[str, Verdict], plan: Plan, placed: Mapping[int, str],
           named: Sequence[str] = (), socket_ifnames: Optional[Mapping[int, Optional[str]]] = None,
           retry_count: int = 0) -> Answer:
    """The check's answer to ``verdicts`` (the module docstring). ``placed``: rank -> the
    node its probe ran on; ``named``: the nodes the verdict names (:func:`named_nodes`);
    ``socket_ifnames``: rank -> the interface chosen (``Diagnosis.socket_ifnames``);
    ``retry_count``: the check's ``retryCount`` in the Workload."""
    summary = verdicts.get(vocabulary.VALIDATED)
    if summary is None or summary.status not in (constants.TRUE, constants.FALSE):
        placing = verdicts.get(vocabulary.PROBES_SCHEDULED)
        if placing is not None and placing.status == constants.UNKNOWN and placing.reason in WAITING_REASONS:
            return Answer(PENDING, messages.bound(placing.message))  # why the probes cannot start yet
        return Answer(PENDING, messages.bound(summary.message if summary else "the preflight probes are running"))
    if summary.status == constants.TRUE:
        return Answer(READY, messages.bound(_SHADOW_MASTER.sub("", summary.message)),
                      _updates(plan, socket_ifnames or {}))
    v = failed(verdicts)
    msg = messages.bound(f"{v.reason}: {v.message}")
    if _job_at_fault(v, plan, placed, named, retry_count):
        return Answer(REJECTED, msg)
    return Answer(RETRY, msg, requeue_after_seconds=RETRY_AFTER_SECONDS,
                  avoid=tuple(n for n in dict.fromkeys(named) if n in set(placed.values())))


def named_nodes(verdicts: Mapping[str, Verdict], placed: Mapping[int, str]) -> list[str]:
    """The probed nodes the False conditions' messages single out
    (:func:`disttrain.diagnosis.attribution.culprits`: the node a message starts with, else
    those its fix names, else all it names); a peer a message only mentions ("nothing from
    node-b got through") is not one: a Retry would keep that bystander out next round."""
    nodes = list(placed.values())
    out: list[str] = []
    for v in verdicts.values():
        if v.status == constants.FALSE:
            out += [n for n in culprits(v.message, nodes) if n not in out]
    return out


def problem_answer(problem: Problem) -> Answer:
    """A Workload the check cannot read or probe (:class:`Problem`): Rejected, naming the
    field (retrying would read the same Workload)."""
    return Answer(REJECTED, messages.bound(f"{problem.reason}: {problem.message}"))
