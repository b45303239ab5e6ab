"""Which Kubernetes NetworkPolicy drops the job's own traffic (pure).

A NetworkPolicy (networking.k8s.io/v1) drops traffic silently: a dial times out exactly as
behind a host firewall, so the probes' evidence alone cannot tell the two apart. The
operator reads the policies of the job's namespace (``list networkpolicies``, read-only)
and evaluates them the way the API defines them, for traffic between the job's own pods:

* a policy applies to a pod of its namespace whose labels match its ``podSelector`` (empty:
  every pod); its ``policyTypes`` default to Ingress, plus Egress when it has ``egress``
  rules;
* a pod that no policy of a direction applies to is not isolated in that direction;
* an isolated pod admits a connection when one rule of one of its policies admits it: the
  peer (``from``/``to``: absent or empty is every peer; ``podSelector`` alone is pods of the
  policy's namespace; ``namespaceSelector`` namespaces, with ``podSelector`` their pods;
  ``ipBlock`` a CIDR less ``except``) and the port (``ports`` absent or empty is every port;
  ``protocol`` defaults to TCP; ``port`` a number, with ``endPort`` a range, or a name of
  the destination pod's container ports; no ``port`` is every port of the protocol);
* a connection needs both the source's egress and the destination's ingress.

What cannot be decided from what the operator read (a namespace label other than
``kubernetes.io/metadata.name``, an ``ipBlock`` with the pod's address unknown, a named port
no container declares) counts as admitted: a verdict names a policy only when the policies
certainly drop the traffic. Malformed fields are skipped, never raised on.

:func:`blocked` returns, per port range the job needs, the policies that drop it between
two of the job's pods and which part of the range no rule admits; :func:`override` turns
that into the verdict when the probes' failure is the kind a dropped connection causes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from disttrain.api import constants
from disttrain.diagnosis import messages
from disttrain.diagnosis.diagnose import Diagnosis, Verdict
from disttrain_probe.contract import vocabulary

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace (1.22+)
MAX_POLICIES = 256  # evaluated per namespace, whatever the namespace holds
MAX_RULES = 64  # per policy and direction
MAX_PEERS = 64  # per rule
MAX_PORTS = 64  # per rule
PORT_MAX = 65535

# The probe failures a silently dropped connection produces: a timeout somewhere.
DROPPED_CONNECTION_REASONS = frozenset({
    vocabulary.MASTER_PORT_TIMEOUT, vocabulary.RENDEZVOUS_TIMEOUT,
    vocabulary.INTERFACE_UNREACHABLE, vocabulary.NO_COMMON_INTERFACE,
    vocabulary.EPHEMERAL_PORTS_BLOCKED, vocabulary.PROCESS_GROUP_INIT_FAILED,
    vocabulary.ALL_REDUCE_TIMEOUT, vocabulary.PROBE_TIMEOUT,
})


@dataclass(frozen=True)
class PodView:
    """One of the job's pods as the policies see it: ``name``, ``labels``, ``ips`` (its pod
    IPs, may be empty) and ``ports`` (container port name -> (number, protocol))."""

    name: str
    labels: Mapping[str, str]
    ips: tuple[str, ...] = ()
    ports: Mapping[str, tuple[int, str]] = ()  # type: ignore[assignment]

    @classmethod
    def of(cls, pod: Any) -> "PodView":
        """From a core/v1 Pod dict (untrusted: anything malformed is left out)."""
        meta = _d(_d(pod).get("metadata"))
        labels = {k: v for k, v in _d(meta.get("labels")).items() if isinstance(k, str) and isinstance(v, str)}
        ips = tuple(str(_d(x).get("ip")) for x in _l(_d(_d(pod).get("status")).get("podIPs"))[:4]
                    if isinstance(_d(x).get("ip"), str))
        ports: dict[str, tuple[int, str]] = {}
        for c in _l(_d(_d(pod).get("spec")).get("containers"))[:16]:
            for p in _l(_d(c).get("ports"))[:32]:
                p = _d(p)
                if isinstance(p.get("name"), str) and _port_int(p.get("containerPort")) is not None:
                    ports.setdefault(p["name"], (int(p["containerPort"]), str(p.get("protocol") or "TCP")))
        return cls(str(meta.get("name") or "?"), labels, ips, ports)


@dataclass(frozen=True)
class Need:
    """A port range the job's pods must reach each other on: ``lo``..``hi`` (TCP), ``what``
    it is for ("the rendezvous port", "the ephemeral range NCCL and gloo connect to")."""

    lo: int
    hi: int
    what: str


@dataclass(frozen=True)
class Block:
    """Traffic of a :class:`Need` the policies drop: ``direction`` ("ingress" into
    ``pod``, "egress" out of it), ``policies`` (names of the policies isolating the pod in
    that direction), ``admitted`` (the ranges of the need some rule admits, maybe none),
    ``peer`` the other pod."""

    need: Need
    direction: str
    pod: str
    peer: str
    policies: tuple[str, ...]
    admitted: tuple[tuple[int, int], ...]


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list:
    return v if isinstance(v, list) else []


def _port_int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= PORT_MAX else None


def selects(selector: Any, labels: Mapping[str, str]) -> Optional[bool]:
    """A LabelSelector (``matchLabels``, ``matchExpressions`` with In, NotIn, Exists,
    DoesNotExist) against ``labels``. An empty selector matches everything; a malformed
    one matches nothing (the API server refuses those, so only a hand-made object has one).
    None when ``labels`` is None (unknown)."""
    if labels is None:
        return None
    sel = _d(selector)
    for k, v in _d(sel.get("matchLabels")).items():
        if labels.get(k) != v:
            return False
    for e in _l(sel.get("matchExpressions"))[:32]:
        e = _d(e)
        key, op, values = e.get("key"), e.get("operator"), [x for x in _l(e.get("values")) if isinstance(x, str)]
        value = labels.get(key) if isinstance(key, str) else None
        has = value is not None
        if op == "In" and value not in values:
            return False
        if op == "NotIn" and has and value in values:
            return False
        if (op == "Exists" and not has) or (op == "DoesNotExist" and has):
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def _namespace_match(selector: Any, namespace: str) -> Optional[bool]:
    """``namespaceSelector`` against the job's namespace, whose only known label is
    ``kubernetes.io/metadata.name``: a selector on another key cannot be decided (None)."""
    sel = _d(selector)
    keys = set(_d(sel.get("matchLabels"))) | {_d(e).get("key") for e in _l(sel.get("matchExpressions"))}
    if keys - {NAMESPACE_NAME_LABEL}:
        return None
    return selects(sel, {NAMESPACE_NAME_LABEL: namespace})


def _in_block(block: Any, ips: Sequence[str]) -> Optional[bool]:
    if not ips:
        return None
    try:
        net = ipaddress.ip_network(str(_d(block).get("cidr")), strict=False)
        excepts = [ipaddress.ip_network(str(x), strict=False) for x in _l(_d(block).get("except"))[:32]]
        addrs = [ipaddress.ip_address(a) for a in ips]
    except ValueError:
        return False
    return any(a in net and not any(a in x for x in excepts if x.version == a.version)
               for a in addrs if a.version == net.version)


def peer_matches(peer: Any, other: PodView, namespace: str) -> Optional[bool]:
    """One ``from``/``to`` entry against the job's other pod (same namespace as the policy)."""
    p = _d(peer)
    if "ipBlock" in p:
        return _in_block(p.get("ipBlock"), other.ips)
    pods = selects(p["podSelector"], other.labels) if "podSelector" in p else True
    if "namespaceSelector" not in p:
        return pods if "podSelector" in p else False
    ns = _namespace_match(p.get("namespaceSelector"), namespace)
    if ns is False or pods is False:
        return False
    return None if ns is None or pods is None else True


def _rule_ranges(ports: Any, target: PodView) -> list[tuple[int, int]]:
    """The TCP port ranges one rule's ``ports`` admit on ``target`` (absent or empty: all)."""
    entries = _l(ports)
    if not entries:
        return [(1, PORT_MAX)]
    out = []
    for e in entries[:MAX_PORTS]:
        e = _d(e)
        if str(e.get("protocol") or "TCP") != "TCP":
            continue
        port = e.get("port")
        if port is None:
            out.append((1, PORT_MAX))
        elif isinstance(port, str):
            named = target.ports.get(port) if port.isdigit() is False else None
            if port.isdigit() and _port_int(int(port)) is not None:
                out.append((int(port), int(port)))
            elif named is None:
                out.append((1, PORT_MAX))  # unknown name: cannot decide, count it admitted
            elif named[1] == "TCP":
                out.append((named[0], named[0]))
        elif _port_int(port) is not None:
            end = _port_int(e.get("endPort"))
            out.append((port, end if end is not None and end >= port else port))
    return out


def _types(spec: dict) -> set[str]:
    given = [t for t in _l(spec.get("policyTypes")) if t in ("Ingress", "Egress")]
    if given:
        return set(given)
    return {"Ingress", "Egress"} if "egress" in spec else {"Ingress"}


def admitted(policies: Sequence[dict], direction: str, pod: PodView, peer: PodView,
             namespace: str) -> tuple[list[str], list[tuple[int, int]]]:
    """(names of the policies isolating ``pod`` in ``direction`` ("ingress" | "egress"),
    the TCP ranges they admit from/to ``peer``). No policy: ``([], [(1, 65535)])``."""
    names: list[str] = []
    ranges: list[tuple[int, int]] = []
    field, peers_key = ("ingress", "from") if direction == "ingress" else ("egress", "to")
    target = pod if direction == "ingress" else peer  # whose container ports a name refers to
    for pol in policies[:MAX_POLICIES]:
        spec = _d(_d(pol).get("spec"))
        if not isinstance(spec.get("podSelector"), dict):
            continue  # required by the API: a policy without one is malformed, not "all pods"
        if direction.capitalize() not in _types(spec) or selects(spec.get("podSelector"), pod.labels) is not True:
            continue
        names.append(str(_d(_d(pol).get("metadata")).get("name") or "?"))
        for rule in _l(spec.get(field))[:MAX_RULES]:
            rule = _d(rule)
            peers = _l(rule.get(peers_key))
            if peers and not any(peer_matches(x, peer, namespace) is not False for x in peers[:MAX_PEERS]):
                continue
            ranges.extend(_rule_ranges(rule.get("ports"), target))
    if not names:
        return [], [(1, PORT_MAX)]
    return sorted(names), _merge(ranges)


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _covers(ranges: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return any(a <= lo and hi <= b for a, b in ranges)


def blocked(policies: Sequence[dict], pods: Sequence[PodView], namespace: str,
            needs: Sequence[Need]) -> list[Block]:
    """Every (need, direction) some pair of the job's ``pods`` is certainly denied, one
    :class:`Block` each (the first pair found), in the order of ``needs``. Cost: at most
    :data:`MAX_POLICIES` policies for each of the distinct label sets, pairs and needs (the
    pods of one job share their labels but for their rank)."""
    out: list[Block] = []
    views = list({tuple(sorted(p.labels.items())) + p.ips: p for p in pods[:64]}.values())
    for need in needs:
        for direction in ("ingress", "egress"):
            hit = _first_block(policies, views, namespace, need, direction)
            if hit is not None:
                out.append(hit)
    return out


def _first_block(policies: Sequence[dict], views: list[PodView], namespace: str, need: Need,
                 direction: str) -> Optional[Block]:
    for pod in views:
        for peer in views:
            if peer is pod and len(views) > 1:
                continue
            names, ranges = admitted(policies, direction, pod, peer, namespace)
            if names and not _covers(ranges, need.lo, need.hi):
                return Block(need, direction, pod.name, peer.name, tuple(names), tuple(ranges))
    return None


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def message(blocks: Sequence[Block], namespace: str, selector: Mapping[str, str]) -> str:
    """One sentence (at most 400 characters) naming the policies, what they drop and the fix."""
    b = blocks[0]
    pols = ", ".join(b.policies[:3]) + (f" (+{len(b.policies) - 3})" if len(b.policies) > 3 else "")
    needs = list({x.need: None for x in blocks})
    spans = [f"{_span(n.lo, n.hi)} ({n.what})" for n in needs[:3]]
    what = ", ".join(spans[:-1]) + (" and " if len(spans) > 1 else "") + spans[-1]
    part = ("it admits only " + ", ".join(_span(a, c) for a, c in b.admitted[:3])
            + (" and more" if len(b.admitted) > 3 else "")) if b.admitted else "it admits no TCP port"
    sel = ", ".join(f"{k}: {v}" for k, v in list(selector.items())[:1])
    text = (f"NetworkPolicy {pols} in namespace {namespace} drops TCP {what} between the job's "
            f"pods ({b.direction} of {b.pod}; {part}); add an "
            f"{b.direction} rule admitting pods matching {{{sel}}} on those ports, or all ports "
            f"between the job's pods")
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
