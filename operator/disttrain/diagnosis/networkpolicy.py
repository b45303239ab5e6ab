"""Which Kubernetes NetworkPolicy drops the job's own traffic (pure).

A NetworkPolicy (networking.k8s.io/v1) drops traffic silently: a dial times out exactly as
behind a host firewall, so the probes' evidence alone cannot tell the two apart. The
operator reads the policies of the job's namespace (``list networkpolicies``, read-only)
and its labels, and evaluates them the way the API defines them, for traffic between the job's own pods:

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

The job's namespace is judged by its labels as the operator read them (``get namespaces``,
with ``kubernetes.io/metadata.name``); when they could not be read only that name label is
known. What cannot be decided from what the operator read (a namespace label not read, an
``ipBlock`` with the pod's address unknown, a named port no container declares) is never a
certain drop: :func:`blocked` counts it admitted, :func:`undecided` names it as a candidate
with why. Malformed fields are skipped, never raised on.

:func:`blocked` returns, per port range the job needs, the policies that certainly drop it
between two of the job's pods, which part of the range some rule admits and the label a
``namespaceSelector`` needs that the namespace lacks; :mod:`disttrain.diagnosis.netpolverdict`
turns those into the verdict when the probes' failure is the kind a dropped connection causes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

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
    why: tuple[str, ...] = ()


def _d(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list:
    return v if isinstance(v, list) else []


def _port_int(v: Any) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= PORT_MAX else None


Term = tuple[Any, str, str, tuple[Any, ...]]  # (key, how it reads, operator, values)


def _terms(selector: Any) -> list[Term]:
    """A LabelSelector as its terms (``matchLabels`` pairs read as ``=``)."""
    sel = _d(selector)
    out: list[Term] = [(k, f"{k}={v}", "=", (v,)) for k, v in _d(sel.get("matchLabels")).items()]
    for e in _l(sel.get("matchExpressions"))[:32]:
        e = _d(e)
        key, op = e.get("key"), str(e.get("operator"))
        vals = tuple(x for x in _l(e.get("values")) if isinstance(x, str))
        shown = {"In": f"{key} in ({','.join(vals[:3])})", "NotIn": f"{key} not in ({','.join(vals[:3])})",
                 "Exists": f"{key}", "DoesNotExist": f"!{key}"}.get(op, f"{key} {op[:16]}")
        out.append((key, shown, op if op in ("In", "NotIn", "Exists", "DoesNotExist") else "?", vals))
    return out


def _holds(term: Term, labels: Mapping[str, str]) -> bool:
    """One term against ``labels``; an operator the API server would refuse holds nowhere."""
    key, _, op, vals = term
    value = labels.get(key) if isinstance(key, str) else None
    if op == "=":
        return value == vals[0]
    if op in ("In", "NotIn"):
        return (value in vals) == (op == "In")
    if op in ("Exists", "DoesNotExist"):
        return (value is not None) == (op == "Exists")
    return False


def selects(selector: Any, labels: Optional[Mapping[str, str]]) -> Optional[bool]:
    """A LabelSelector (``matchLabels``, ``matchExpressions`` with In, NotIn, Exists,
    DoesNotExist) against ``labels``. An empty selector matches everything; a malformed
    one matches nothing (the API server refuses those, so only a hand-made object has one).
    None when ``labels`` is None (unknown)."""
    if labels is None:
        return None
    return all(_holds(t, labels) for t in _terms(selector))


def _namespace_match(selector: Any, namespace: str,
                     labels: Optional[Mapping[str, str]]) -> tuple[Optional[bool], str]:
    """``namespaceSelector`` against the job's namespace: ``labels`` its labels as read
    (with ``kubernetes.io/metadata.name``), None when they could not be read (then only the
    name label is known and a term on another key cannot be decided). Returns (match, why
    not or why undecided: "" when it matches)."""
    terms = _terms(selector)
    known = labels if labels is not None else {NAMESPACE_NAME_LABEL: namespace}
    failed = [t[1] for t in terms if (labels is not None or t[0] == NAMESPACE_NAME_LABEL) and not _holds(t, known)]
    if failed:
        return False, f"its namespaceSelector needs {', '.join(failed[:2])}, which namespace {namespace} lacks"
    unknown = [t[1] for t in terms if labels is None and t[0] != NAMESPACE_NAME_LABEL]
    if unknown:
        return None, (f"its namespaceSelector needs {', '.join(unknown[:2])}, and namespace {namespace}'s "
                      f"labels could not be read")
    return True, ""


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


def peer_matches(peer: Any, other: PodView, namespace: str,
                 namespace_labels: Optional[Mapping[str, str]] = None) -> Optional[bool]:
    """One ``from``/``to`` entry against the job's other pod (same namespace as the policy);
    ``namespace_labels`` as :func:`blocked` takes them. None: cannot be decided."""
    return _peer(peer, other, namespace, _ns_labels(namespace, namespace_labels))[0]


def _ns_labels(namespace: str, labels: Optional[Mapping[str, str]]) -> Optional[dict[str, str]]:
    if labels is None:
        return None
    return {**{k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)},
            NAMESPACE_NAME_LABEL: namespace}


def _peer(peer: Any, other: PodView, namespace: str,
          ns_labels: Optional[Mapping[str, str]]) -> tuple[Optional[bool], str]:
    """(admits ``other``, why it is undecided or why the namespace excludes it: "" else)."""
    p = _d(peer)
    if "ipBlock" in p:
        inside = _in_block(p.get("ipBlock"), other.ips)
        cidr = str(_d(p.get("ipBlock")).get("cidr"))[:48]
        return inside, ("" if inside is not None else
                        f"its ipBlock {cidr} may hold pod {other.name}, whose address is unknown")
    pods = selects(p["podSelector"], other.labels) if "podSelector" in p else True
    if "namespaceSelector" not in p:
        return (pods if "podSelector" in p else False), ""
    if pods is False:
        return False, ""
    return _namespace_match(p.get("namespaceSelector"), namespace, ns_labels)


def _rule_ranges(ports: Any, target: PodView) -> tuple[list[tuple[int, int]], list[tuple[int, int, str]]]:
    """The TCP port ranges one rule's ``ports`` admit on ``target`` (absent or empty: all):
    (certain ranges, ranges that cannot be decided with why: a port name no container of
    ``target`` declares)."""
    entries = _l(ports)
    if not entries:
        return [(1, PORT_MAX)], []
    out: list[tuple[int, int]] = []
    maybe: list[tuple[int, int, str]] = []
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
            elif named is None:  # unknown name: cannot decide
                maybe.append((1, PORT_MAX, f"its port name {port[:32]!r} no container of pod "
                                           f"{target.name} declares may be a training pod's"))
            elif named[1] == "TCP":
                out.append((named[0], named[0]))
        elif _port_int(port) is not None:
            end = _port_int(e.get("endPort"))
            out.append((port, end if end is not None and end >= port else port))
    return out, maybe


def _types(spec: dict) -> set[str]:
    given = [t for t in _l(spec.get("policyTypes")) if t in ("Ingress", "Egress")]
    if given:
        return set(given)
    return {"Ingress", "Egress"} if "egress" in spec else {"Ingress"}


@dataclass
class Admission:
    """What the policies isolating a pod in one direction admit from/to a peer: ``names``
    (of those policies), ``sure`` (TCP ranges certainly admitted), ``maybe`` ((lo, hi,
    policy, why) admitted unless an undecided selector or port says otherwise) and
    ``excluded`` ((lo, hi, why): what a peer would admit but for the namespace)."""

    names: list[str]
    sure: list[tuple[int, int]]
    maybe: list[tuple[int, int, str, str]]
    excluded: list[tuple[int, int, str]]


def evaluate(policies: Sequence[dict], direction: str, pod: PodView, peer: PodView, namespace: str,
             namespace_labels: Optional[Mapping[str, str]] = None) -> Admission:
    """The policies of ``namespace`` for ``pod`` in ``direction`` ("ingress" | "egress")
    against the job's other pod ``peer``; ``namespace_labels`` as :func:`blocked` takes
    them. No policy isolates the pod: ``names`` empty and everything admitted."""
    ns_labels = _ns_labels(namespace, namespace_labels)
    out = Admission([], [], [], [])
    field, peers_key = ("ingress", "from") if direction == "ingress" else ("egress", "to")
    target = pod if direction == "ingress" else peer  # whose container ports a name refers to
    for pol in policies[:MAX_POLICIES]:
        spec = _d(_d(pol).get("spec"))
        if not isinstance(spec.get("podSelector"), dict):
            continue  # required by the API: a policy without one is malformed, not "all pods"
        if direction.capitalize() not in _types(spec) or selects(spec.get("podSelector"), pod.labels) is not True:
            continue
        name = str(_d(_d(pol).get("metadata")).get("name") or "?")
        out.names.append(name)
        for rule in _l(spec.get(field))[:MAX_RULES]:
            rule = _d(rule)
            peers = _l(rule.get(peers_key))[:MAX_PEERS]
            seen = [_peer(x, peer, namespace, ns_labels) for x in peers] or [(True, "")]
            sure, maybe = _rule_ranges(rule.get("ports"), target)
            if any(v is True for v, _ in seen):
                out.sure.extend(sure)
                out.maybe.extend((lo, hi, name, why) for lo, hi, why in maybe)
            elif any(v is None for v, _ in seen):
                why = next(w for v, w in seen if v is None)
                out.maybe.extend((lo, hi, name, why) for lo, hi in sure + [(x[0], x[1]) for x in maybe])
            out.excluded.extend((lo, hi, w) for v, w in seen if v is False and w
                                for lo, hi in sure + [(x[0], x[1]) for x in maybe])
    if not out.names:
        out.sure.append((1, PORT_MAX))
    out.names.sort()
    out.sure[:] = _merge(out.sure)
    return out


def admitted(policies: Sequence[dict], direction: str, pod: PodView, peer: PodView,
             namespace: str, namespace_labels: Optional[Mapping[str, str]] = None
             ) -> tuple[list[str], list[tuple[int, int]]]:
    """(names of the policies isolating ``pod`` in ``direction`` ("ingress" | "egress"),
    the TCP ranges they admit from/to ``peer``, what cannot be decided counted as admitted).
    No policy: ``([], [(1, 65535)])``."""
    a = evaluate(policies, direction, pod, peer, namespace, namespace_labels)
    return a.names, _merge(a.sure + [(lo, hi) for lo, hi, _, _ in a.maybe])


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


def _views(pods: Sequence[PodView]) -> list[PodView]:
    return list({tuple(sorted(p.labels.items())) + p.ips: p for p in pods[:64]}.values())


def blocked(policies: Sequence[dict], pods: Sequence[PodView], namespace: str,
            needs: Sequence[Need], namespace_labels: Optional[Mapping[str, str]] = None) -> list[Block]:
    """Every (need, direction) some pair of the job's ``pods`` is certainly denied, one
    :class:`Block` each (the first pair found), in the order of ``needs``.
    ``namespace_labels``: the labels of the job's namespace as read (None: not read; only
    ``kubernetes.io/metadata.name`` is then known). Cost: at most :data:`MAX_POLICIES`
    policies for each of the distinct label sets, pairs and needs (the pods of one job share
    their labels but for their rank)."""
    return _scan(policies, _views(pods), namespace, needs, namespace_labels, certain=True)


def undecided(policies: Sequence[dict], pods: Sequence[PodView], namespace: str,
              needs: Sequence[Need], namespace_labels: Optional[Mapping[str, str]] = None) -> list[Block]:
    """Every (need, direction) that is not certainly denied but that only an undecided
    selector or port admits (a namespace label not read, an ipBlock with the pod's address
    unknown, a port name no container declares), as :class:`Block` s whose ``why`` says
    what is undecided and ``policies`` names the policies it belongs to; arguments as
    :func:`blocked`."""
    return _scan(policies, _views(pods), namespace, needs, namespace_labels, certain=False)


def _scan(policies: Sequence[dict], views: list[PodView], namespace: str, needs: Sequence[Need],
          labels: Optional[Mapping[str, str]], certain: bool) -> list[Block]:
    out: list[Block] = []
    for need in needs:
        for direction in ("ingress", "egress"):
            hit = _first(policies, views, namespace, labels, need, direction, certain)
            if hit is not None:
                out.append(hit)
    return out


def _first(policies: Sequence[dict], views: list[PodView], namespace: str,  # noqa: PLR0913
           labels: Optional[Mapping[str, str]], need: Need, direction: str, certain: bool) -> Optional[Block]:
    for pod in views:
        for peer in views:
            if peer is pod and len(views) > 1:
                continue
            a = evaluate(policies, direction, pod, peer, namespace, labels)
            if not a.names or _covers(a.sure, need.lo, need.hi):
                continue
            allowed = _merge(a.sure + [(lo, hi) for lo, hi, _, _ in a.maybe])
            if certain and not _covers(allowed, need.lo, need.hi):
                return Block(need, direction, pod.name, peer.name, tuple(a.names), tuple(allowed),
                             tuple(dict.fromkeys(w for lo, hi, w in a.excluded if lo <= need.hi and need.lo <= hi)))
            if not certain and _covers(allowed, need.lo, need.hi):
                hits = [(n, w) for lo, hi, n, w in a.maybe if lo <= need.hi and need.lo <= hi]
                return Block(need, direction, pod.name, peer.name, tuple(sorted({n for n, _ in hits})),
                             tuple(a.sure), tuple(dict.fromkeys(w for _, w in hits)))
    return None
