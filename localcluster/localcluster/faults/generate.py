"""The seeded generator: case ``i`` of seed ``s`` draws a fault class (from the classes
asked for), a node count (2-8, at least what the class needs), the culprit(s) among the nodes
and the fault's shape, and writes it as a scenario the loader accepts (its ``expect`` is the
oracle's: what a right verdict meets). The same (seed, i, classes) gives the same case on
every machine (``random.Random`` seeded with a string). Pure.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import yaml

from localcluster.common.config import node_name, pod_cidr
from localcluster.faults import grammar as G
from localcluster.faults import oracle
from localcluster.scenarios import loader
from localcluster.scenarios.scenario import Scenario

MIN_NODES, MAX_NODES = 2, 8  # the proving ground builds 8 nodes in a minute or two
JOB_LABEL = {"disttrain.dev/job-name": "ddp-digits"}


@dataclass(frozen=True)
class Case:
    """One generated case: its name (``gen-<seed>-<i>-<class>``), the fault, the scenario
    (checked by ``loader.parse``; ``text`` is its YAML) and the oracle's expectation."""

    name: str
    fault: G.Fault
    scenario: Scenario
    expectation: oracle.Expectation
    text: str


def _subset(rnd: random.Random, pool: Sequence[str], lo: int, hi: int) -> tuple[str, ...]:
    """A random subset of ``pool`` of lo..hi members, in the pool's order."""
    k = rnd.randint(lo, min(hi, len(pool)))
    chosen = set(rnd.sample(list(pool), k))
    return tuple(n for n in pool if n in chosen)


def _ephemeral_span(rnd: random.Random) -> tuple[int, int]:
    """A port range of at least 3000 ports in or around the ephemeral range 32768-60999."""
    lo, hi = G.EPHEMERAL
    shape = rnd.choice(["full", "lower", "upper", "straddle-low", "straddle-high", "middle"])
    if shape == "full":
        return lo, hi
    if shape == "lower":
        return lo, rnd.randint(36000, 57000)
    if shape == "upper":
        return rnd.randint(35000, 57000), hi
    if shape == "straddle-low":
        return rnd.randint(30000, lo - 1), rnd.randint(36000, hi)
    if shape == "straddle-high":
        return rnd.randint(33000, 57000), rnd.randint(hi + 1, 65000)
    a = rnd.randint(lo + 1, hi - 3001)
    return a, rnd.randint(a + 3000, min(a + 15000, hi - 1))


def draw_firewall(rnd: random.Random, nodes: tuple[str, ...]) -> G.FirewallFault:
    if rnd.random() < 0.25:
        return G.FirewallFault("*", (), (G.MASTER_PORT, G.MASTER_PORT), rnd.choice(["eth0", None]),
                               rnd.choice(["drop", "reject"]), "master")
    node = rnd.choice(nodes)
    peers = tuple(n for n in nodes if n != node)
    sources = () if rnd.random() < 0.4 else _subset(rnd, peers, 1, len(peers))
    if sources == peers:
        sources = ()
    nic = rnd.choice([None, "eth0", "eth1"])
    forced = rnd.choice([None, *G.NICS]) if nic else rnd.choice([None, None, *G.NICS])
    return G.FirewallFault(node, sources, _ephemeral_span(rnd), nic, rnd.choice(["drop", "reject"]),
                           "ephemeral", forced, "out" if rnd.random() < 0.3 else "in")


def draw_portrange(rnd: random.Random, nodes: tuple[str, ...]) -> G.PortRangeFault:
    """A node's own ephemeral range below the master port or above the default range."""
    if rnd.random() < 0.5:
        lo = rnd.randint(10000, 22000)
        span = (lo, rnd.randint(lo + 2000, G.MASTER_PORT - 1))
    else:
        lo = rnd.randint(G.EPHEMERAL[1] + 1, 62000)
        span = (lo, rnd.randint(lo + 2000, 65000))
    return G.PortRangeFault(rnd.choice(nodes), span, rnd.random() < 0.7)


def draw_names(rnd: random.Random, nodes: tuple[str, ...]) -> G.NamesFault:
    what = rnd.choice(["hostname", "master-stale", "master-stale", "master-loopback"])
    most = len(nodes) - 1 if what == "master-stale" else len(nodes)  # someone resolves it right
    odd = _subset(rnd, nodes, 1, most)
    dns = () if what != "master-stale" else rnd.choice([(), odd, _subset(rnd, odd, 0, len(odd))])
    return G.NamesFault(odd, what, dns)


def draw_islands(rnd: random.Random, nodes: tuple[str, ...]) -> G.IslandsFault:
    k = rnd.randint(2, min(4, len(nodes)))
    order = list(nodes)
    rnd.shuffle(order)
    cuts = sorted(rnd.sample(range(1, len(order)), k - 1))
    parts = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]
    groups = sorted(tuple(sorted(p)) for p in parts)
    return G.IslandsFault(tuple(groups), rnd.random() < 0.6)


def draw(rnd: random.Random, cls: str, n: int) -> G.Fault:
    """A fault of class ``cls`` in a cluster of ``n`` nodes."""
    nodes = tuple(node_name(i) for i in range(n))
    if cls == "firewall":
        return draw_firewall(rnd, nodes)
    if cls == "names":
        return draw_names(rnd, nodes)
    if cls == "islands":
        return draw_islands(rnd, nodes)
    if cls == "nicdown":
        return G.NicDownFault(_subset(rnd, nodes, 1, n - 1), rnd.random() < 0.6)
    if cls == "sysctl":
        return draw_portrange(rnd, nodes)
    if cls == "slow":
        return G.SlowLinkFault(rnd.choice(nodes), rnd.choice([100, 200]), rnd.random() < 0.5)
    if cls == "mtu":
        return G.MtuFault(_subset(rnd, nodes, 1, n - 1), rnd.choice([1280, 1400]),
                          rnd.choice(["drop", "drop", "pass"]), rnd.random() < 0.6)
    if cls == "combo":  # a first fault on the node network (hosts lines reach hostNetwork pods)
        first = draw(rnd, rnd.choice(["firewall", "firewall", "names", "islands", "mtu", "healthy"]), n)
        while isinstance(first, G.Healthy) and first.shape == "port-range" or \
                isinstance(first, G.NamesFault) and first.what == "hostname":
            first = draw(rnd, "healthy", n)
        return G.Combo(first, G.NamesFault(_subset(rnd, nodes, 1, n), "hostname"))
    if cls == "netpol":
        return G.PolicyFault(rnd.choice(["default-deny", "rendezvous-only", "namespace-label", "admits-job"]))
    shape = rnd.choice(["plain", "closed-ports", "port-range"])
    if shape == "closed-ports":
        a = rnd.randint(61000, 63000)
        return G.Healthy(shape, rnd.choice(nodes), (a, rnd.randint(a + 500, 65535)))
    return G.Healthy(shape, rnd.choice(nodes) if shape == "port-range" else "")


WEIGHTS = {"firewall": 3, "names": 2}  # the classes with the most shapes get the most cases
MIN_FOR = {"slow": 3, "netpol": 2}  # a straggler needs a median: 3 nodes
MAX_FOR = {"netpol": 4}  # pod-network cases start the enforcer on every node


def case(seed: int, i: int, classes: Optional[Sequence[str]] = None) -> Case:
    """Case ``i`` of ``seed``, of one of ``classes`` (default: every class of
    ``grammar.CLASSES``). Raises ValueError for an unknown class; a generated scenario the
    loader refuses raises its ScenarioError (a generator bug)."""
    classes = list(classes or G.CLASSES)
    unknown = [c for c in classes if c not in G.CLASSES]
    if unknown:
        raise ValueError(f"unknown fault class(es) {unknown}; known: {', '.join(G.CLASSES)}")
    rnd = random.Random(f"disttrain-faults:{seed}:{i}")
    cls = rnd.choices(classes, [WEIGHTS.get(c, 1) for c in classes])[0]
    n = rnd.randint(MIN_FOR.get(cls, MIN_NODES), MAX_FOR.get(cls, MAX_NODES))
    fault = draw(rnd, cls, n)
    exp = oracle.expectation(fault, n)
    data = scenario_data(fault, n)
    data["description"] = f"generated (seed {seed}, case {i}, {cls}): {fault.describe()}. Right: {exp.why}."
    data["expect"] = exp.expect().model_dump(exclude_defaults=True)
    name = f"gen-{seed}-{i:03d}-{cls}"
    text = yaml.safe_dump(data, sort_keys=False, width=100)
    return Case(name, fault, loader.parse(text, f"{name}.yaml"), exp, text)


def cases(seed: int, count: int, classes: Optional[Sequence[str]] = None) -> list[Case]:
    return [case(seed, i, classes) for i in range(count)]


# -- writing a fault as a scenario --------------------------------------------------------
def _rule(ports: tuple[int, int], action: str, nic: Optional[str], saddr: Optional[str] = None,
          new_only: bool = True, out: bool = False) -> dict[str, Any]:
    """One input rule (``out``: an output rule, ``saddr`` then the destination)."""
    lo, hi = ports
    r: dict[str, Any] = {"proto": "tcp", "dport": lo if lo == hi else f"{lo}-{hi}"}
    if saddr:
        r["daddr" if out else "saddr"] = saddr
    if nic:
        r["oifname" if out else "iifname"] = nic
    if new_only:
        r["state"] = ["new"]
    r["action"] = action
    return r


def _firewall(f: G.FirewallFault, n: int) -> dict[str, Any]:
    nics = (f.nic,) if f.nic else G.NICS  # always by interface: lo (a node's own dials) stays open
    job: dict[str, Any] = {"numNodes": n}
    if f.forced:
        job["network"] = {"socketIfname": f.forced}
    if f.target == "master":
        rules = [_rule(f.ports, f.action, nic, new_only=False) for nic in nics]
        return {"job": job, "defaults": {"firewall": {"input": rules}}}
    index = {node_name(i): i for i in range(n)}
    out = f.direction == "out"
    rules = [_rule(f.ports, f.action, nic, G.node_ip(nic, index[s]) if s else None, out=out)
             for nic in nics for s in (f.sources or (None,))]
    if out and f.sources:  # a rule against a peer covers its pod bridge too (reached by the pod routes)
        rules += [_rule(f.ports, f.action, nic, pod_cidr(index[s]), out=True) for nic in nics for s in f.sources]
    return {"job": job, "nodeOverrides": {f.node: {"firewall": {"output" if out else "input": rules}}}}


def _portrange(f: G.PortRangeFault, n: int) -> dict[str, Any]:
    """The node's own range; hardened: every node admits new TCP on its NICs only to the
    master port and the default range."""
    body: dict[str, Any] = {"job": {"numNodes": n}, "nodeOverrides": {
        f.node: {"sysctls": {"net.ipv4.ip_local_port_range": f"{f.ports[0]} {f.ports[1]}"}}}}
    if f.hardened:
        rules = [{"state": ["established", "related"], "action": "accept"}]
        for nic in G.NICS:
            rules += [_rule((G.MASTER_PORT, G.MASTER_PORT), "accept", nic),
                      _rule(G.EPHEMERAL, "accept", nic),
                      {"proto": "tcp", "iifname": nic, "state": ["new"], "action": "drop"}]
        body["defaults"] = {"firewall": {"input": rules}}
        body["nodeOverrides"][f.node]["firewall"] = {"input": rules}
    return body


def _names(f: G.NamesFault, n: int) -> dict[str, Any]:
    job: dict[str, Any] = {"numNodes": n}
    if f.what == "hostname":
        cfg: dict[str, Any] = {"hosts": ["127.0.1.1 {node}"]}
    elif f.what == "master-loopback":
        cfg = {"hosts": [f"127.0.0.1 {G.MASTER_NAME}"]}
        job["network"] = {"hostNetwork": True, "enableDNSHostnames": True}
    else:
        cfg = {"hosts": [f"{G.STALE_ADDRESS} {G.MASTER_NAME}"]}
    dns = {"dns": {"records": {G.MASTER_NAME: G.STALE_ADDRESS}}}
    return {"job": job, "nodeOverrides": {node: dns if node in f.dns_nodes else cfg for node in f.nodes}}


def _islands(f: G.IslandsFault, n: int) -> dict[str, Any]:
    segments = {"mgmt": {"subnet": "10.100.0.0/24"}, "data": {"subnet": f.subnet(0)}}
    over = {}
    for g, group in enumerate(f.groups[1:], start=1):
        segments[f"isl{g}"] = {"subnet": f.subnet(g)}
        over.update({node: {"nics": [{"name": "eth0", "segment": "mgmt"},
                                     {"name": "eth1", "segment": f"isl{g}"}]} for node in group})
    job: dict[str, Any] = {"numNodes": n}
    if f.forced:
        job["network"] = {"socketIfname": "eth1"}
    return {"job": job, "segments": segments, "nodeOverrides": over}


def _mtu(f: G.MtuFault, n: int) -> dict[str, Any]:
    job: dict[str, Any] = {"numNodes": n}
    if f.forced:
        job["network"] = {"socketIfname": "eth1"}
    nics = [{"name": "eth0", "segment": "mgmt"}, {"name": "eth1", "segment": "datb"}]
    return {"job": job, "segments": {"mgmt": {"subnet": "10.100.0.0/24"}, "data": {"subnet": "10.101.0.0/24"},
                                     "datb": {"subnet": "10.102.0.0/24"}},
            "nodeOverrides": {node: {"nics": nics} for node in f.behind},
            "routers": [{"between": ["data", "datb"], "mtu": f.mtu, "icmpFragNeeded": f.icmp}]}


def _policy_doc(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": name},
            "spec": spec}


def _policies(f: G.PolicyFault, n: int) -> dict[str, Any]:
    deny = _policy_doc("default-deny", {"podSelector": {}, "policyTypes": ["Ingress"]})
    job_pods = {"matchLabels": dict(JOB_LABEL)}
    if f.shape == "default-deny":
        docs = [deny]
    elif f.shape == "rendezvous-only":
        docs = [_policy_doc(f.policy_name(), {"podSelector": job_pods, "policyTypes": ["Ingress"], "ingress": [
            {"from": [{"podSelector": job_pods}], "ports": [{"protocol": "TCP", "port": G.MASTER_PORT}]}]})]
    elif f.shape == "namespace-label":
        docs = [_policy_doc(f.policy_name(), {"podSelector": job_pods, "policyTypes": ["Ingress"], "ingress": [
            {"from": [{"namespaceSelector": {"matchLabels": {"team": "research"}}, "podSelector": job_pods}]}]})]
    else:
        lo, hi = G.EPHEMERAL
        docs = [deny, _policy_doc(f.policy_name(), {"podSelector": job_pods, "policyTypes": ["Ingress"], "ingress": [
            {"from": [{"podSelector": job_pods}],
             "ports": [{"protocol": "TCP", "port": G.MASTER_PORT, "endPort": G.MASTER_PORT + 1},
                       {"protocol": "TCP", "port": lo, "endPort": hi}]}]})]
    return {"job": {"numNodes": n, "network": {"hostNetwork": False}}, "networkPolicies": docs}


def _healthy(f: G.Healthy, n: int) -> dict[str, Any]:
    job: dict[str, Any] = {"numNodes": n}
    if f.shape == "closed-ports":
        rules = [_rule(f.ports, "drop", nic) for nic in G.NICS]
        return {"job": job, "nodeOverrides": {f.node: {"firewall": {"input": rules}}}}
    if f.shape == "port-range":
        rules = [{"iifname": "lo", "action": "accept"},
                 {"state": ["established", "related"], "action": "accept"},
                 _rule((G.MASTER_PORT, G.MASTER_PORT), "accept", None, new_only=False),
                 _rule((61000, 62000), "accept", None, new_only=False),
                 {"proto": "tcp", "state": ["new"], "action": "drop"}]
        job["network"] = {"hostNetwork": False, "portRange": "61000-62000"}
        return {"job": job, "nodeOverrides": {f.node: {"firewall": {"input": rules}}}}
    return {"job": job}


def scenario_data(fault: G.Fault, n: int) -> dict[str, Any]:
    """The scenario mapping (without description and expect) that builds ``fault`` on ``n``
    nodes."""
    body: dict[str, Any]
    if isinstance(fault, G.FirewallFault):
        body = _firewall(fault, n)
    elif isinstance(fault, G.NamesFault):
        body = _names(fault, n)
    elif isinstance(fault, G.IslandsFault):
        body = _islands(fault, n)
    elif isinstance(fault, G.NicDownFault):
        body = {"job": {"numNodes": n, **({"network": {"socketIfname": "eth1"}} if fault.forced else {})},
                "nodeOverrides": {node: {"nics": [{"name": "eth0", "segment": "mgmt"},
                                                  {"name": "eth1", "segment": "data", "up": False}]}
                                  for node in fault.nodes}}
    elif isinstance(fault, G.PortRangeFault):
        body = _portrange(fault, n)
    elif isinstance(fault, G.SlowLinkFault):
        body = {"job": {"numNodes": n, **({"probe": {"maxLinkImbalance": 4}} if fault.refuse else {})},
                "defaults": {"nics": [{"name": "eth0", "segment": "mgmt"}]},
                "nodeOverrides": {fault.node: {"nics": [{"name": "eth0", "segment": "mgmt",
                                                         "rateMbit": fault.mbit}]}}}
    elif isinstance(fault, G.MtuFault):
        body = _mtu(fault, n)
    elif isinstance(fault, G.PolicyFault):
        body = _policies(fault, n)
    elif isinstance(fault, G.Combo):
        body = scenario_data(fault.first, n)
        over = body.setdefault("nodeOverrides", {})
        for node in fault.second.nodes:  # the hostname line joins the node's own lines
            cfg = over.setdefault(node, {})
            cfg["hosts"] = [*cfg.get("hosts", []), "127.0.1.1 {node}"]
    else:
        body = _healthy(fault, n)
    return {"description": "", "nodes": n, **body}
