"""Phase 4, interface choice: the candidate networks and the checks that make one usable.

A network is an IPv4 subnet, or, for routed pod networks (one subnet per node), the
interfaces of one name on every node (key ``ifname:X``). :func:`evaluate` rejects a network
with the first failed check (``vocabulary.REJ_*`` and a message naming nodes and evidence):
loopback, not requested by socketIfname, missing on a node, several interfaces on a node,
the same address on several nodes, down, unreachable between dialled pairs. Pure.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.config import ifname_matches
from disttrain_probe.ground.shapes import NetEntry, Peer

# Pod-network and overlay devices (CNI bridges and tunnels) a host-network pod sees.
POD_NETWORK_DEVICES = ("cni*", "flannel*", "cali*", "cilium_*", "vxlan*", "tunl*", "weave*",
                       "kube-bridge", "genev_sys_*")


def is_pod_network_device(name: str) -> bool:
    """A CNI bridge or overlay tunnel (:data:`POD_NETWORK_DEVICES`)."""
    return any(fnmatchcase(name, p) for p in POD_NETWORK_DEVICES)


def entries(peer: Peer) -> List[NetEntry]:
    """This rank's (ifname, addr, prefix, subnet, up, speed, loopback) per IPv4 address."""
    out: List[NetEntry] = []
    for i in peer.get("interfaces") or []:
        for a in i.get("addrs") or []:
            ip, _, pl = a.partition("/")
            if ":" in ip:
                continue
            try:
                net = ipaddress.IPv4Network(f"{ip}/{pl or 32}", strict=False)
            except ValueError:
                continue
            out.append({
                "ifname": i["name"], "addr": ip, "prefix": int(pl or 32), "subnet": str(net),
                "up": bool(i.get("up")), "speed": i.get("speedMbps"),
                "loopback": bool(i.get("loopback")) or ipaddress.ip_address(ip).is_loopback,
            })
    return out


NODES_NAMED = 6  # a list of nodes in a message names this many, then counts the rest


def nodes_text(peers: Dict[int, Peer], ranks: Sequence[int]) -> str:
    """``node-a, node-b`` (rank order), or the first few and ``and N more``."""
    names: List[str] = []
    for r in sorted(ranks):
        n = peers[r].get("node") or f"rank-{r}"
        if n not in names:
            names.append(n)
    if len(names) > NODES_NAMED:
        return f"{', '.join(names[:NODES_NAMED - 1])} and {len(names) - NODES_NAMED + 1} more"
    return ", ".join(names)


def others_text(peers: Dict[int, Peer], ranks: Sequence[int], besides: Sequence[int],
                lone: bool = True) -> str:
    """The witnesses ``ranks``: ``every other node`` (``the other node`` when there is one
    and ``lone``) when their nodes are every node but those of ``besides`` (the culprits
    named already), else :func:`nodes_text`: witnesses are no list of suspects. ``lone``
    False: one witness node is named (a lone dialler may be the culprit by its outbound
    rule: with two nodes, nothing tells the two apart)."""
    def node(r: int) -> str:
        return peers[r].get("node") or f"rank-{r}"
    named, rest = {node(r) for r in ranks}, {node(r) for r in peers} - {node(r) for r in besides}
    if named and named == rest and (lone or len(rest) > 1):
        return "the other node" if len(rest) == 1 else "every other node"
    return nodes_text(peers, ranks)


class Network:
    def __init__(self, key: str, label: str, members: Dict[int, List[NetEntry]]):
        self.key = key            # "10.1.0.0/24" or "ifname:eth0"
        self.label = label        # shown in messages
        self.members = members    # rank -> entries
        self.active = members    # rank -> entries socketIfname leaves in play
        self.reason: Optional[str] = None
        self.message = ""
        self.pick: Dict[int, NetEntry] = {}
        self.kspeed: Optional[int] = None     # slowest kernel link speed, Mb/s (None: unknown)
        self.measured: Optional[float] = None  # slowest measured pair, Mb/s (None: unmeasured)
        self.low: Optional[float] = None       # slowest pair's typical round, Mb/s
        self.rank_speed = 0                   # the speed that ranks it (0: not comparable)
        self.effective: Optional[float] = None  # measured, capped at kspeed (Mb/s)
        self.tier = 0                         # 0: the measurably fastest tier, 1: next, ...

    def ifnames(self) -> List[str]:
        out: List[str] = []
        for r in sorted(self.members):
            for e in self.members[r]:
                if e["ifname"] not in out:
                    out.append(e["ifname"])
        return out

    @property
    def routed(self) -> bool:
        """A pod network: one subnet per node, grouped by interface name (key ``ifname:X``)."""
        return self.key.startswith("ifname:")

    def where(self, names: Optional[str] = None) -> str:
        """How messages name this network: "eth0 on 10.100.0.0/24" for a shared subnet,
        "cni0 (routed, per-node subnets)" for a pod network grouped by interface name."""
        names = names or "/".join(self.ifnames())
        if self.routed:
            return f"{names} (routed, per-node subnets)"
        return f"{names} on {self.label}"

    def reject(self, reason: str, message: str) -> None:
        if self.reason is None:
            self.reason, self.message = reason, message


def build_networks(peers: Dict[int, Peer]) -> List[Network]:
    by_subnet: Dict[str, Dict[int, List[NetEntry]]] = {}
    by_name: Dict[str, Dict[int, List[NetEntry]]] = {}
    for r, p in peers.items():
        for e in entries(p):
            by_subnet.setdefault(e["subnet"], {}).setdefault(r, []).append(e)
            by_name.setdefault(e["ifname"], {}).setdefault(r, [])
            if not by_name[e["ifname"]][r]:
                by_name[e["ifname"]][r].append(e)
    nets = [Network(k, k, m) for k, m in sorted(by_subnet.items())]
    # Routed networks (pod networks: one subnet per node) are grouped by interface name.
    for name, m in sorted(by_name.items()):
        if len(m) < 2 or len({es[0]["subnet"] for es in m.values()}) < 2:
            continue
        if any(es[0]["loopback"] for es in m.values()):
            continue
        nets.append(Network(f"ifname:{name}", "routed, per-node subnets", m))
    return nets


@dataclass(frozen=True)
class ChoiceInputs:
    """What every rank's choice is computed from (the same on every rank).

    ``peers``: rank -> published summary; ``mesh``: rank -> peer -> addr -> {r, src, ms,
    mbps, mbpsLow}; ``dial_plan``: rank -> the peers it dialled; ``spec``: socketIfname as
    given; ``mode``/``pats``: its parse (``parse_ifname_spec``); ``loopback_ok``: lo may
    carry traffic (named, and every rank on one host); ``master_port``: for messages."""
    peers: Dict[int, Peer]
    mesh: Dict[int, Dict[int, Any]]
    dial_plan: Dict[int, List[int]]
    spec: str
    mode: str
    pats: List[Tuple[str, bool]]
    loopback_ok: bool
    master_port: Optional[int]


def evaluate(net: Network, inputs: ChoiceInputs) -> None:
    """Reject ``net`` (``net.reject``) with the first check it fails; set ``net.active`` (the
    entries socketIfname leaves in play) and ``net.pick`` (rank -> its one entry) as far as
    the checks get. Pure apart from ``net``; never raises."""
    names = "/".join(net.ifnames())
    if all(e["loopback"] for es in net.members.values() for e in es) and not inputs.loopback_ok:
        net.reject(vocabulary.REJ_LOOPBACK, f"{names} is loopback ({net.label}): it never leaves the node")
        return
    if inputs.mode != "auto":
        narrowed = _narrow_to_requested(net, inputs, names)
        if narrowed is None:
            return
        names = narrowed
    steps: Sequence[Callable[[Network, ChoiceInputs, str], bool]] = (
        _check_one_per_node, _check_distinct_addresses, _check_up, _check_reachable)
    for step in steps:
        if step(net, inputs, names):
            return


def _narrow_to_requested(net: Network, inputs: ChoiceInputs, names: str) -> Optional[str]:
    """socketIfname narrows the interfaces considered on this network (so naming one of two
    NICs on a subnet resolves MultipleOnNode); what it filters out is NotRequested. The
    names left in play, or None when the network was rejected."""
    mode, pats, peers = inputs.mode, inputs.pats, inputs.peers
    keep = (lambda e: ifname_matches(e["ifname"], pats)) if mode == "include" else \
        (lambda e: not ifname_matches(e["ifname"], pats))
    active = {r: [e for e in es if keep(e)] for r, es in net.members.items()}
    net.active = {r: es for r, es in active.items() if es}
    if len(net.active) < len(net.members) or not net.active:
        lost = [r for r in net.members if r not in net.active]
        verb = "not named by" if mode == "include" else "excluded by"
        net.reject(vocabulary.REJ_NOT_REQUESTED, (
            f"{names} {verb} socketIfname={inputs.spec}"
            + (f" on {nodes_text(peers, lost)}" if net.active else "")))
        return None
    return "/".join(sorted({e["ifname"] for es in net.active.values() for e in es}))


def _check_one_per_node(net: Network, inputs: ChoiceInputs, names: str) -> bool:
    """Present on every rank, with one interface each; sets ``net.pick``. True: rejected."""
    peers, members = inputs.peers, net.active
    missing = [r for r in sorted(peers) if r not in members]
    if missing:
        net.reject(vocabulary.REJ_NOT_ON_ALL_NODES,
                   f"{net.where(names)} is missing on {nodes_text(peers, missing)}")
        return True
    multi = [r for r, es in members.items() if len({e["ifname"] for e in es}) > 1]
    if multi:
        r = multi[0]
        net.reject(vocabulary.REJ_MULTIPLE_ON_NODE, (
            f"{nodes_text(peers, multi)}: several interfaces on {net.label} "
            f"({', '.join(sorted({e['ifname'] for e in members[r]}))}); traffic may leave by "
            f"either; name one in network.socketIfname"))
        return True
    net.pick = {r: es[0] for r, es in members.items()}
    return False


def _check_distinct_addresses(net: Network, inputs: ChoiceInputs, names: str) -> bool:
    """No address picked on two nodes (a node-local bridge), unless all is loopback and
    loopback is allowed. True: rejected."""
    if inputs.loopback_ok and all(e["loopback"] for e in net.pick.values()):
        return False
    owners: Dict[str, List[int]] = {}
    for r, e in net.pick.items():
        owners.setdefault(e["addr"], []).append(r)
    for addr, rs in sorted(owners.items()):
        nodes = {inputs.peers[r].get("node") for r in rs}
        if len(nodes) > 1:
            net.reject(vocabulary.REJ_DUPLICATE_ADDRESS, (
                f"{names} excluded (same address {addr} on {nodes_text(inputs.peers, rs)}): a "
                f"node-local bridge, it cannot carry traffic between nodes"))
            return True
    return False


def _check_up(net: Network, inputs: ChoiceInputs, names: str) -> bool:
    """Every pick has carrier. True: rejected."""
    down = [r for r, e in net.pick.items() if not e["up"]]
    if down:
        net.reject(vocabulary.REJ_DOWN, f"{names} is down (no carrier) on {nodes_text(inputs.peers, down)}")
        return True
    return False


def _check_reachable(net: Network, inputs: ChoiceInputs, names: str) -> bool:
    """Every dialled pair connected on the picks (``r == "ok"``). True: rejected."""
    peers, mesh = inputs.peers, inputs.mesh
    fails = []
    for i in sorted(peers):
        for j in inputs.dial_plan.get(i, []):
            if i == j or j not in net.pick:
                continue
            addr = net.pick[j]["addr"]
            res = (mesh.get(i) or {}).get(j, {}).get(addr)
            code = res.get("r") if isinstance(res, dict) else None
            if code != "ok":
                fails.append((i, j, addr, code or "untested"))
    if not fails:
        return False
    parts = [f"{peers[i].get('node')}->{peers[j].get('node')} {addr}: {code}"
             for i, j, addr, code in fails[:4]]
    more = f" (+{len(fails) - 4} more)" if len(fails) > 4 else ""
    tgt = sorted({j for _, j, _, _ in fails})
    net.reject(vocabulary.REJ_UNREACHABLE, (
        f"{net.where(names)} unreachable: {'; '.join(parts)}{more}; "
        f"unreachable peers: {nodes_text(peers, tgt)}"))
    return True
