"""The verdict of the namespace's NetworkPolicies on a failed probe run (pure).

:mod:`disttrain.diagnosis.networkpolicy` finds what the policies certainly drop
(:func:`~disttrain.diagnosis.networkpolicy.blocked`) and what only a selector or port the
operator cannot decide admits (:func:`~disttrain.diagnosis.networkpolicy.undecided`). Here
those become the message and the conditions:

* a certain drop: :func:`override` gives the failed check and Validated the reason
  ``NetworkPolicyBlocks`` with :func:`message` (the policy, the ports, what it admits, the
  label its ``namespaceSelector`` needs that the namespace lacks, the fix);
* an undecided one: :func:`override_undecided` keeps the probes' reason (the timeout is
  certain, its cause is not) but replaces a message that would blame a host firewall with
  :func:`undecided_message`: the policies that may drop the traffic, why the operator
  cannot tell, and the command that decides. A firewall is never named while a policy that
  selects the job's pods could explain the drop.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from disttrain.api import constants
from disttrain.diagnosis import messages
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.diagnose import Diagnosis
from disttrain.diagnosis.networkpolicy import DROPPED_CONNECTION_REASONS, Block, Need, PodView, blocked, undecided
from disttrain_probe.contract import vocabulary


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _names(policies: Sequence[str]) -> str:
    return ", ".join(policies[:3]) + (f" (+{len(policies) - 3})" if len(policies) > 3 else "")


def _needs(blocks: Sequence[Block]) -> str:
    needs = list({x.need: None for x in blocks})
    spans = [f"{_span(n.lo, n.hi)} ({n.what})" for n in needs[:3]]
    return ", ".join(spans[:-1]) + (" and " if len(spans) > 1 else "") + spans[-1]


def message(blocks: Sequence[Block], namespace: str, selector: Mapping[str, str]) -> str:
    """One sentence (at most 400 characters) naming the policies, what they drop, the
    namespace label a ``namespaceSelector`` needs that the namespace lacks, and the fix.
    ``blocks`` is not empty."""
    b = blocks[0]
    part = ("it admits only " + ", ".join(_span(a, c) for a, c in b.admitted[:3])
            + (" and more" if len(b.admitted) > 3 else "")) if b.admitted else "it admits no TCP port"
    sel = ", ".join(f"{k}: {v}" for k, v in list(selector.items())[:1])
    if b.why:  # the namespace lacks what a namespaceSelector needs: that is the cause
        text = (f"NetworkPolicy {_names(b.policies)} drops the job's own traffic: {b.why[0]} "
                f"(TCP {_needs(blocks)}, {b.direction} of {b.pod}); give namespace {namespace} the "
                f"label it needs, or add an {b.direction} rule admitting pods matching {{{sel}}} on "
                f"those ports")
    else:
        text = (f"NetworkPolicy {_names(b.policies)} in namespace {namespace} drops TCP {_needs(blocks)} "
                f"between the job's pods ({b.direction} of {b.pod}; {part}); add an "
                f"{b.direction} rule admitting pods matching {{{sel}}} on those ports, or all ports "
                f"between the job's pods")
    return messages.bound(text, messages.LIMIT)


def _decides(why: str, namespace: str) -> str:
    if "could not be read" in why:
        return f"`kubectl get namespace {namespace} --show-labels` decides (or grant the operator get on namespaces)"
    if "ipBlock" in why:
        return f"`kubectl get pods -n {namespace} -o wide` decides whether the pods' addresses are in it"
    return "the training pods' containerPorts decide whether the name is one of those ports"


def undecided_message(doubts: Sequence[Block], namespace: str) -> str:
    """One sentence (at most 400 characters): the policies that may drop the job's traffic,
    why the operator cannot decide, what else remains and what decides. ``doubts`` (from
    :func:`~disttrain.diagnosis.networkpolicy.undecided`) is not empty."""
    d = doubts[0]
    pols = sorted({p for x in doubts for p in x.policies}) or list(d.policies)
    text = (f"NetworkPolicy {_names(pols)} may drop the job's own traffic: "
            f"{d.why[0] if d.why else 'undecided'} (TCP {_needs(doubts)}, {d.direction}); "
            f"else a drop on the nodes' path (the timeouts look alike); "
            f"{_decides(d.why[0] if d.why else '', namespace)}")
    return messages.bound(text, messages.LIMIT)


def override(diag: Diagnosis, blocks: Sequence[Block], namespace: str,
             selector: Mapping[str, str]) -> bool:
    """When the policies drop the job's traffic and the probes failed the way a dropped
    connection makes them fail (:data:`DROPPED_CONNECTION_REASONS`), name the policies:
    the failed check and Validated get ``NetworkPolicyBlocks``. Returns True when it
    changed ``diag``; a passing probe run, or a failure of another kind, is left alone."""
    if not blocks or diag.validated:
        return False
    top = diag.conditions.get(constants.VALIDATED)
    if top is None or top.reason not in DROPPED_CONNECTION_REASONS:
        return False
    text = message(blocks, namespace, selector)
    for ctype, v in list(diag.conditions.items()):
        if v.status == constants.FALSE and v.reason in DROPPED_CONNECTION_REASONS:
            diag.conditions[ctype] = Verdict(constants.FALSE, vocabulary.NETWORK_POLICY_BLOCKS, text)
    diag.failures.insert(0, text)
    return True


def override_undecided(diag: Diagnosis, doubts: Sequence[Block], namespace: str, rendezvous_port: int) -> bool:
    """When the probes failed the way a dropped connection makes them fail and a policy that
    selects the job's pods may drop the traffic of the failed check (the rendezvous port for
    ``MasterReachable``, any port the job needs for the other checks), the check (and
    Validated) keep their reason and get :func:`undecided_message`. Returns True when it
    changed ``diag``; a failed check the policies cannot explain is left alone."""
    if not doubts or diag.validated:
        return False
    top = diag.conditions.get(constants.VALIDATED)
    if top is None or top.reason not in DROPPED_CONNECTION_REASONS:
        return False
    rdzv = [d for d in doubts if d.need.lo <= rendezvous_port <= d.need.hi]
    changed, failing = False, False
    for ctype, v in list(diag.conditions.items()):
        if ctype == constants.VALIDATED or v.status != constants.FALSE:
            continue
        failing = True
        mine = rdzv if ctype == constants.MASTER_REACHABLE else list(doubts)
        if v.reason in DROPPED_CONNECTION_REASONS and mine:
            diag.conditions[ctype] = Verdict(v.status, v.reason, undecided_message(mine, namespace))
            changed = True
    if not changed and failing:  # the failed check is not one the policies may explain
        return False
    text = undecided_message(doubts, namespace)
    diag.conditions[constants.VALIDATED] = Verdict(top.status, top.reason,
                                                   messages.bound(text, messages.SUMMARY_LIMIT))
    diag.failures.insert(0, text)
    return True


def judge(diag: Diagnosis, policies: Sequence[dict], pods: Sequence[PodView], namespace: str,  # noqa: PLR0913
          needs: Sequence[Need], namespace_labels: Optional[Mapping[str, str]],
          selector: Mapping[str, str], rendezvous_port: int) -> bool:
    """The policies' verdict on a failed probe run of the job's ``pods``: a certain drop
    (:func:`override`), else an undecided one (:func:`override_undecided`); arguments as
    :func:`~disttrain.diagnosis.networkpolicy.blocked` takes them, ``selector`` the job's pod
    labels for the fix. Returns True when it changed ``diag``."""
    if diag.validated or not policies:
        return False
    blocks = blocked(policies, pods, namespace, needs, namespace_labels)
    if blocks:
        return override(diag, blocks, namespace, selector)
    doubts = undecided(policies, pods, namespace, needs, namespace_labels)
    return override_undecided(diag, doubts, namespace, rendezvous_port)
