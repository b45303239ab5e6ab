"""Phase 4, interface choice: a pure function of every rank's inventory and the mesh.

Every rank runs :func:`choose` over the same all-gathered inputs, so all ranks agree. This
module is the entry; the steps live beside it: the candidate networks and their checks
(``networks.py``), their ranking (``ranking.py``), the failure when none is usable
(``choicefailure.py``) and the warnings about the chosen one (``choicewarnings.py``).

Networks are IPv4 subnets (plus, for routed pod networks where each node has its own
subnet, interfaces of the same name on every node). A network is usable when it is on
every node, with exactly one interface per node, a distinct address per node, up, and
every rank reached every peer on it (nonce-checked). Rejections carry a sub-reason
(``vocabulary.REJ_*``) and a message naming the nodes and the evidence.

A pod-network or overlay device (cni0, flannel.*, cali*, cilium_*, vxlan*, tunl0, weave,
kube-bridge, genev_sys_*: :data:`~disttrain_probe.phases.networks.POD_NETWORK_DEVICES`; present on the node with
hostNetwork) is never chosen while a network of other interfaces joins the same nodes: its
traffic crosses those NICs anyway (``PodNetworkDevice``).

A usable network that loses full-size packets on some path (a path-MTU black hole), or
where part of a node's ephemeral range is blocked or a pair blocked elsewhere went
unsampled (``portrange``), gives way to one without either, and its rejection says why;
when every usable network has one, the best one's failure is the verdict.

Preference among usable networks: highest minimum link speed (as the kernel reports it;
only when every usable network's speed is known on every node), then measured throughput
(the slowest measured pair, Mb/s, from the connectivity phase's timed transfers; capped at
the kernel's link speed when every compared network's is known: a link cannot beat its
line rate, and above it the measurement only shows CPU speed; sorted, the networks fall
into tiers wherever one is faster than the next by at least
:data:`~disttrain_probe.phases.ranking.MEASURED_MARGIN` times and its typical round (the middle
of three) still beats the next one's best by :data:`~disttrain_probe.phases.ranking.NOISE_MARGIN`,
so noise cannot decide), then the network that carries the nodes' HOST_IP / the kernel's route to the
master, then name. The result is the same on every run of the same cluster.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, TypedDict

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.config import ifname_matches, parse_ifname_spec
from disttrain_probe.ground.shapes import Chosen, Iface, Mesh, Peer
from disttrain_probe.phases.choicefailure import interface_not_found, no_network_failure
from disttrain_probe.phases.choicewarnings import warn
from disttrain_probe.phases.networks import (
    ChoiceInputs,
    Network,
    build_networks,
    evaluate,
)
from disttrain_probe.phases.pathmtu import black_hole_failure
from disttrain_probe.phases.portrange import partial_range_failure, untested_failure
from disttrain_probe.phases.ranking import (
    rank_usable,
    reject_pod_network_devices,
    score,
    why_better,
)

NCCL_SKIP = ("lo", "docker", "virbr")


# Which rejection says most about an interface rejected on several networks (stable sort).
REJECTION_PRIORITY = {r: i for i, r in enumerate((
    vocabulary.REJ_NOT_PREFERRED, vocabulary.REJ_POD_NETWORK_DEVICE, vocabulary.REJ_UNREACHABLE, vocabulary.REJ_DOWN,
    vocabulary.REJ_MULTIPLE_ON_NODE, vocabulary.REJ_DUPLICATE_ADDRESS, vocabulary.REJ_NOT_ON_ALL_NODES, vocabulary.REJ_NOT_REQUESTED,
    vocabulary.REJ_LOOPBACK, vocabulary.REJ_NO_IPV4))}


def default_ifname(peer: Peer) -> Optional[str]:
    """What NCCL would use on this rank with NCCL_SOCKET_IFNAME unset: NCCL's own answer
    when the probe could ask it (``ncclDefault`` published by the rank: its ifname, None
    when NCCL found none), else the re-implemented rule (:func:`nccl_default`)."""
    asked = peer.get("ncclDefault")
    if isinstance(asked, dict):
        return asked.get("ifname")
    return nccl_default(peer.get("interfaces") or [])


def nccl_default(interfaces: Sequence[Iface]) -> Optional[str]:
    """Predict NCCL's pick without NCCL_SOCKET_IFNAME: ib*, else the first interface
    (IPv4 addresses first, in index order, as getifaddrs lists them) not lo/docker*/virbr*,
    else docker*, else lo."""
    v4 = [i["name"] for i in interfaces
          if any(":" not in a.partition("/")[0] for a in i.get("addrs") or [])]
    v6 = [i["name"] for i in interfaces if i["name"] not in v4 and any(
        ":" in a.partition("/")[0] and a.partition("/")[0] != "::1" for a in i.get("addrs") or [])]
    names = v4 + v6
    for n in names:
        if n.startswith("ib"):
            return n
    for n in names:
        if not n.startswith(NCCL_SKIP):
            return n
    for n in names:
        if n.startswith("docker"):
            return n
    for n in names:
        if n.startswith("lo"):
            return n
    return None


def missing_here(node: str, spec: str, interfaces: Sequence[Iface]) -> Optional[str]:
    """The InterfaceNotFound message when the NCCL_SOCKET_IFNAME-style ``spec`` names
    interfaces (include mode) and none of this node's ``interfaces`` (inventory entries with
    ``name``) matches, else None. Decided at the inventory, before torch and the rendezvous:
    no peer's evidence can change it (gloo refuses such a job as it starts). The wording is
    :func:`choose`'s for the same finding. Pure; never raises."""
    mode, pats = parse_ifname_spec(spec)
    names = [str(i.get("name")) for i in interfaces or [] if isinstance(i, dict) and i.get("name")]
    if mode != "include" or any(ifname_matches(n, pats) for n in names):
        return None
    return (f"{node}: no interface matches socketIfname={spec} (it has {', '.join(names) or 'none'}); "
            f"set network.socketIfname to an interface every node has, or auto")


class Choice(TypedDict):
    """Phase 4's answer (:func:`choose`), every rank's: the ``failure`` (or None), the
    chosen ``network``, per rank the ``chosen`` interface, the Mb/s ``measured`` per
    interface, the ``rejected`` interfaces, NCCL's default (``ncclDefault``) and the
    ``warnings``."""
    failure: Optional[Dict[str, str]]
    network: Optional[str]
    chosen: Dict[int, Chosen]
    measured: Dict[int, Dict[str, float]]
    rejected: Dict[int, List[Dict[str, str]]]
    ncclDefault: Dict[int, Optional[str]]
    warnings: Dict[int, List[Dict[str, str]]]


def choose(peers: Dict[int, Peer], mesh: Mesh,
           spec: str = "auto", master_port: Optional[int] = None,
           dial_plan: Optional[Dict[int, List[int]]] = None) -> Choice:
    """Choose the network and each rank's interface.

    ``peers``: rank -> published summary (node, interfaces, hostIp, masterRoute, ...).
    ``mesh``: rank -> peer -> addr -> {r, src, ms}.
    ``dial_plan``: rank -> the peers it dialled (default: all pairs); reachability is
    required on exactly those pairs.
    Returns {failure, network, chosen{rank}, measured{rank: {ifname: Mb/s}} (usable networks
    that were measured), rejected{rank}, ncclDefault{rank}, warnings{rank}}.
    """
    inputs = _inputs(peers, mesh, spec, master_port, dial_plan)
    ranks = sorted(peers)
    nets, usable = _rank_networks(inputs)
    holes = [black_hole_failure(peers, mesh, u.pick) for u in usable]
    ranges = [_range_failure(peers, mesh, u) for u in usable]
    best = _give_way(usable, holes, ranges)
    failure = interface_not_found(inputs)
    if best is not None and failure is None:  # part of a node's range blocked on the best network
        failure = ranges[usable.index(best)]
    if best is not None and failure is None:  # full-size packets lost on a path of it
        failure = holes[usable.index(best)]
    if best is None and failure is None:
        failure = partial_range_failure(peers, mesh) or no_network_failure(
            inputs, nets, lambda: choose(peers, mesh, "auto", master_port, inputs.dial_plan))
    chosen: Dict[int, Chosen] = {}
    if best is not None and failure is None:
        chosen = {r: {"ifname": e["ifname"], "addr": e["addr"], "subnet": e["subnet"]}
                  for r, e in best.pick.items()}
    rejected = _rejected(inputs, nets, chosen)
    defaults = {r: default_ifname(peers[r]) for r in ranks}
    warnings: Dict[int, List[Dict[str, str]]] = {r: [] for r in ranks}
    if chosen:
        warn(inputs, chosen, defaults, rejected, warnings)
    return {
        "failure": failure,
        "network": (best.where() if best.routed else best.label)
        if (best is not None and failure is None) else None,
        "chosen": chosen,
        "measured": _measured(usable, ranks),
        "rejected": rejected,
        "ncclDefault": defaults,
        "warnings": warnings,
    }


def _give_way(usable: List[Network], holes: List[Optional[Dict[str, str]]],
              ranges: List[Optional[Dict[str, str]]]) -> Optional[Network]:
    """The best usable network (``usable`` best first): a network that loses full-size
    packets (``holes``), or blocks part of a node's ephemeral range (``ranges``), on some
    path gives way to one without, and its NotPreferred rejection says so (not "equal
    speed") where the chosen one has not that failure. None when nothing is usable."""
    whole = [u for u, h in zip(usable, holes) if h is None]
    clean = [u for u, h, g in zip(usable, holes, ranges) if h is None and g is None]
    best = (clean or whole or usable)[0] if usable else None
    if best is None:
        return None
    i = usable.index(best)
    for u, h, g in zip(usable, holes, ranges):
        if u is best:
            continue
        if h is not None and holes[i] is None:
            what, f = "loses full-size packets", h
        elif g is not None and ranges[i] is None:
            what, f = "blocks part of an ephemeral range", g
        else:
            continue
        u.reason, u.message = vocabulary.REJ_NOT_PREFERRED, f"{u.where()} {what}, {best.where()} does not: {f['message']}"
    return best


def _range_failure(peers: Dict[int, Peer], mesh: Mesh, net: Network) -> Optional[Dict[str, str]]:
    """EphemeralPortsBlocked when part of a node's range is blocked on ``net``, or a pair
    blocked on another network was not sampled clean on it (a rule on one NIC is often on
    the others too), else None."""
    at = {r: e["addr"] for r, e in net.pick.items()}
    return partial_range_failure(peers, mesh, at) or untested_failure(peers, mesh, at)


def _inputs(peers: Dict[int, Peer], mesh: Mesh,
            spec: str, master_port: Optional[int],
            dial_plan: Optional[Dict[int, List[int]]]) -> ChoiceInputs:
    """The parsed socketIfname, whether lo may carry traffic, and the dial plan (default:
    every rank dialled every other)."""
    mode, pats = parse_ifname_spec(spec)
    # lo carries traffic between ranks only when they share one host (tests, laptops).
    one_host = len({p.get("node") for p in peers.values()}) <= 1
    loopback_ok = mode == "include" and any(ifname_matches("lo", [p]) for p in pats) and one_host
    ranks = sorted(peers)
    if dial_plan is None:
        dial_plan = {i: [j for j in ranks if j != i] for i in ranks}
    return ChoiceInputs(peers=peers, mesh=mesh, dial_plan=dial_plan, spec=spec, mode=mode,
                        pats=pats, loopback_ok=loopback_ok, master_port=master_port)


def _rank_networks(inputs: ChoiceInputs) -> Tuple[List[Network], List[Network]]:
    """(every candidate network, the usable ones best first); all but the best usable one
    are rejected as NotPreferred, saying which criterion decided."""
    nets = build_networks(inputs.peers)
    for n in nets:
        evaluate(n, inputs)
    usable = [n for n in nets if n.reason is None]
    reject_pod_network_devices(usable)
    usable = [n for n in usable if n.reason is None]
    rank_usable(usable, inputs.mesh, inputs.dial_plan)
    usable.sort(key=lambda n: score(n, inputs.peers))
    if usable:
        best = usable[0]
        for n in usable[1:]:
            # the deciding criterion first: a report cut to fit 4 KiB keeps the start
            n.reject(vocabulary.REJ_NOT_PREFERRED, f"{why_better(best, n, inputs.peers)}; ranked below "
                                          f"{best.where()}, though {n.where()} is usable")
    return nets, usable


def _rejected(inputs: ChoiceInputs, nets: List[Network],
              chosen: Dict[int, Chosen]) -> Dict[int, List[Dict[str, str]]]:
    """rank -> [{ifname, reason, message}]: interfaces without IPv4, then each network's
    rejection per interface; never a chosen interface; the telling reason first."""
    peers, spec, ranks = inputs.peers, inputs.spec, sorted(inputs.peers)
    rejected: Dict[int, List[Dict[str, str]]] = {r: [] for r in ranks}
    for r in ranks:
        for i in peers[r].get("interfaces") or []:
            if not any(":" not in a.partition("/")[0] for a in i.get("addrs") or []):
                rejected[r].append({"ifname": i["name"], "reason": vocabulary.REJ_NO_IPV4,
                                    "message": f"{i['name']} has no IPv4 address"})
        for n in nets:
            if r not in n.members:
                continue
            in_play = {e["ifname"] for e in n.active.get(r, [])}
            for ifn in sorted({e["ifname"] for e in n.members[r]}):
                if n.reason == vocabulary.REJ_NOT_REQUESTED or (n.active is not n.members
                                                       and ifn not in in_play):
                    rejected[r].append({"ifname": ifn, "reason": vocabulary.REJ_NOT_REQUESTED,
                                        "message": f"{ifn} not selected by socketIfname={spec}"})
                elif n.reason is not None:
                    rejected[r].append({"ifname": ifn, "reason": n.reason, "message": n.message})
    for r, c in chosen.items():  # an interface is either chosen or rejected, never both
        rejected[r] = [x for x in rejected[r] if x["ifname"] != c["ifname"]]
    for r in ranks:  # an interface rejected twice (cni0: its /24 and the routed net): the telling reason first
        rejected[r].sort(key=lambda x: REJECTION_PRIORITY.get(x["reason"], len(REJECTION_PRIORITY)))
    return rejected


def _measured(usable: List[Network], ranks: List[int]) -> Dict[int, Dict[str, float]]:
    """rank -> {ifname: the network's slowest measured pair, Mb/s, to 0.1} over the usable
    networks that were measured."""
    measured: Dict[int, Dict[str, float]] = {r: {} for r in ranks}
    for n in usable:
        if n.measured is not None:
            for r, e in n.pick.items():
                measured[r][e["ifname"]] = round(n.measured, 1)
    return measured
