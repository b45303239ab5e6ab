"""Scenarios: a declarative YAML file that describes the simulated cluster and the job.

A scenario (``scenarios/<name>.yaml``) gives the number of nodes, each node's NICs
(name, IPv4/IPv6 addresses, MTU, an optional rate limit, the fabric segment it is plugged
into), node-local decoy bridges, extra hosts-file lines, a node-local DNS answering some
names itself (``dns``), an nftables input firewall, extra
environment and library paths for every container, GPU capacity, routed links between
segments through a middle link with its own MTU (``routers``, routing.py), overrides of the example
job's spec (``examples/ddp-digits.yaml``), NetworkPolicies enforced for real
(``networkPolicies``, ``netpol.py``), Istio's sidecar injected into the job's pods
(``mesh: istio``, ``mesh.py``), and the expected outcome. In env values,
libraryPaths and pythonpath, ``{nccl:VERSION}`` stands for the directory holding
``libnccl.so.2`` of that NCCL release (the nvidia-nccl-cu12 wheel, installed on demand
under the cache by ``altlibs.py``). Example::

    description: node A's firewall admits only the master port
    nodes: 2
    defaults:                      # every node (each field: see NodeConfig)
      nics:
        - {name: eth0, segment: mgmt}
        - {name: eth1, segment: data}
    nodeOverrides:
      node-a:                      # a field given here replaces the default's
        firewall:
          input:
            - {iifname: lo, action: accept}
            - {state: [established, related], action: accept}
            - {proto: tcp, dport: 29500, action: accept}
            - {proto: tcp, state: [new], action: drop}
    job: {network: {socketIfname: auto}}      # deep-merged into the example's spec
    expect:
      condition: NetworkValidated
      status: "False"
      reason: EphemeralPortsBlocked
      messageContains: [node-a, ip_local_port_range]

Everything here is pure: ``loader.load`` returns a validated :class:`Scenario` or raises
:class:`ScenarioError` naming the file, line and field. ``nodeplan.topology`` turns it into
one ``NodeTopology`` per node (``network/topology.py``: what ``network/netns.py`` builds and
the node, real or agent, reads).
"""
from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from localcluster.cluster.kueue_objects import INTEGRATION_RESOURCES, Options, parse_quota
from localcluster.cluster.netpol import check_manifests
from localcluster.common.config import (
    MAX_NODES,
    POD_NETWORK_CIDR,
    SERVICE_CIDR,
    node_name,
)
from localcluster.network import routing
from localcluster.network.routing import RoutedLink
from localcluster.network.topology import DEFAULT_NICS, DEFAULT_SEGMENTS
from localcluster.scenarios.strike import Strike, Training

IFNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$"
SEGMENT_PATTERN = r"^[a-z][a-z0-9]{0,6}$"  # br-<segment> and <segment>N-node-x fit in 15 chars
NODE_NAME_PATTERN = r"^node-[a-z]{1,2}$"  # config.node_name: node-a .. node-z, node-aa ..
IFNAMSIZ = 15  # the longest Linux interface name, in bytes
# Ranges of the cluster's own that no segment, NIC or decoy may overlap: a node routes them
# elsewhere (pod CIDRs to their nodes, the DNS and `kubernetes` ClusterIPs to the services).
RESERVED_RANGES = {"pod network": POD_NETWORK_CIDR, "Service range": SERVICE_CIDR}


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names file, line and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Segment(_Strict):
    """A network segment: a bridge ``br-<name>`` in the fabric namespace."""

    subnet: str = Field(description="IPv4 subnet; node i gets host .(11+i) unless a NIC names addresses")
    subnet6: Optional[str] = Field(None, description="IPv6 subnet; node i gets host ::(11+i)")

    @field_validator("subnet")
    @classmethod
    def _v4(cls, v: str) -> str:
        net = ipaddress.ip_network(v, strict=True)
        if net.version != 4 or net.prefixlen > 28:
            raise ValueError("must be an IPv4 subnet of at least /28")
        return str(net)

    @field_validator("subnet6")
    @classmethod
    def _v6(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        net = ipaddress.ip_network(v, strict=True)
        if net.version != 6:
            raise ValueError("must be an IPv6 subnet")
        return str(net)


NCCL_TOKEN = re.compile(r"\{nccl:([^}]*)\}")
NCCL_VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+(\.post[0-9]+)?$"


def _check_tokens(value: str) -> str:
    for ver in NCCL_TOKEN.findall(value):
        if not re.match(NCCL_VERSION_PATTERN, ver):
            raise ValueError(f"{{nccl:{ver}}}: not an NCCL release (like {{nccl:2.28.9}})")
    return value


def nccl_dir(version: str) -> Path:
    """Where NCCL ``version``'s ``libnccl.so.2`` lives once installed (see altlibs.py):
    ``<cache>/nccl-<version>/nvidia/nccl/lib``."""
    from localcluster.common.config import cache_dir
    return cache_dir() / f"nccl-{version}" / "nvidia" / "nccl" / "lib"


def expand(value: str) -> str:
    """``value`` with every ``{nccl:VERSION}`` replaced by :func:`nccl_dir`."""
    return NCCL_TOKEN.sub(lambda m: str(nccl_dir(m.group(1))), value)


def required_nccl(sc: "Scenario") -> list[str]:
    """NCCL releases the scenario's ``{nccl:VERSION}`` tokens need installed, sorted."""
    found: set[str] = set()
    for cfg in [sc.defaults, *sc.nodeOverrides.values()]:
        for val in [*(cfg.env or {}).values(), *(cfg.libraryPaths or []), *(cfg.pythonpath or [])]:
            found.update(NCCL_TOKEN.findall(val))
    return sorted(found)


def _check_cidrs(v: list[str]) -> list[str]:
    for a in v:
        ipaddress.ip_interface(a)
        if "/" not in a:
            raise ValueError(f"{a!r}: give the prefix length (addr/prefix)")
    return v


class Nic(_Strict):
    """A NIC: a veth whose other end is on the segment's bridge."""

    name: str = Field(pattern=IFNAME_PATTERN)
    segment: str = Field(pattern=SEGMENT_PATTERN)
    addresses: Optional[list[str]] = Field(
        None, description="addr/prefix list (v4 and v6); default: the segment's host for this node")
    mtu: Optional[int] = Field(None, ge=68, le=65535)
    rateMbit: Optional[int] = Field(
        None, ge=1, le=400000, description="rate limit in Mb/s (a tbf qdisc on both veth ends); "
        "the kernel still reports the veth's 10000 Mb/s")
    up: bool = Field(True, description="false: the NIC is down (its addresses kept, as after `ip link set down`)")

    @field_validator("addresses")
    @classmethod
    def _cidrs(cls, v):
        return v if v is None else _check_cidrs(v)


class Decoy(_Strict):
    """A node-local bridge (like docker0, virbr0): up, with addresses, reaching nothing."""

    name: str = Field(pattern=IFNAME_PATTERN)
    addresses: list[str] = Field(default_factory=list)
    mtu: Optional[int] = Field(None, ge=68, le=65535)

    @field_validator("addresses")
    @classmethod
    def _cidrs(cls, v):
        return _check_cidrs(v)


class FirewallRule(_Strict):
    """One nftables rule of the node's input or output chain (all given matches must hold)."""

    proto: Optional[Literal["tcp", "udp"]] = None
    dport: Optional[Union[StrictInt, str]] = Field(None, description="port or 'lo-hi'; needs proto")
    saddr: Optional[str] = Field(None, description="source address or subnet")
    daddr: Optional[str] = Field(None, description="destination address or subnet")
    iifname: Optional[str] = Field(None, pattern=IFNAME_PATTERN)
    oifname: Optional[str] = Field(None, pattern=IFNAME_PATTERN)
    state: Optional[list[Literal["new", "established", "related", "invalid"]]] = None
    action: Literal["accept", "drop", "reject"]

    @field_validator("dport")
    @classmethod
    def _port(cls, v):
        if v is None:
            return v
        parts = str(v).split("-")
        if len(parts) > 2 or not all(re.fullmatch(r"[1-9][0-9]{0,4}", p) and int(p) <= 65535
                                     for p in parts) \
                or (len(parts) == 2 and int(parts[0]) > int(parts[1])):
            raise ValueError(f"{v!r} is not a port (1-65535, no leading zeros: nft reads those "
                             f"as octal) or a range 'lo-hi'")
        return v

    @field_validator("saddr", "daddr")
    @classmethod
    def _addr(cls, v):
        if v is not None:
            ipaddress.ip_network(v, strict=False)
            # nft reads neither an IPv6 zone (fe80::1%eth0) nor a netmask (/255.255.0.0)
            if "%" in v or not re.fullmatch(r"[^/]+(/[0-9]{1,3})?", v):
                raise ValueError(f"{v!r}: an address or subnet addr/prefix-length, without a zone")
        return v

    @model_validator(mode="after")
    def _dport_needs_proto(self):
        if self.dport is not None and self.proto is None:
            raise ValueError("dport needs proto (tcp or udp)")
        if self.saddr and self.daddr and (":" in self.saddr) != (":" in self.daddr):
            raise ValueError("saddr and daddr must both be IPv4 or both IPv6 (nft: conflicting protocols)")
        return self


class Firewall(_Strict):
    """The node's nftables filter (table ``inet disttrain``): ``input`` for what reaches the
    node, ``output`` for what the node sends (an egress rule; ``policy`` is the input's)."""

    policy: Literal["accept", "drop"] = "accept"
    input: list[FirewallRule] = Field(default_factory=list)
    output: list[FirewallRule] = Field(default_factory=list)


class NodeDns(_Strict):
    """A node-local DNS cache on the node (``nodedns.py``: CoreDNS on 169.254.20.10, as
    NodeLocal DNSCache) that answers ``records`` itself and forwards the rest to cluster
    DNS; the node's pods use it. One node then resolves a name differently."""

    records: dict[str, str] = Field(..., min_length=1, max_length=64, description=(
        "name -> the address it answers, for the name as given and with any namespace's "
        "search suffix (NAME.<ns>.svc.cluster.local)"))

    @field_validator("records")
    @classmethod
    def _addresses(cls, v):
        for name, addr in v.items():
            try:
                ipaddress.ip_address(addr)
            except ValueError:
                raise ValueError(f"records.{name}: {addr!r} is not an IP address") from None
            if len(name) > 253 or not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?", name):
                raise ValueError(f"records: {name!r} is not a DNS name")
        return v


class NodeConfig(_Strict):
    """What one node looks like; every field is optional (unset = the default's)."""

    nics: Optional[list[Nic]] = Field(None, min_length=1)
    decoys: Optional[list[Decoy]] = None
    hosts: Optional[list[str]] = Field(
        None, description="extra /etc/hosts lines, put first; {node} = the node's name")
    firewall: Optional[Firewall] = None
    dns: Optional[NodeDns] = None
    env: Optional[dict[str, str]] = Field(None, description="extra env; {nccl:VERSION} is expanded")
    libraryPaths: Optional[list[str]] = Field(None, description="appended to LD_LIBRARY_PATH")
    pythonpath: Optional[list[str]] = Field(None, description="appended to PYTHONPATH")
    gpus: Optional[int] = Field(None, ge=0, le=64)
    sysctls: Optional[dict[Literal["net.ipv4.ip_local_port_range"], str]] = Field(None, description=(
        "the node's own network sysctls, e.g. net.ipv4.ip_local_port_range: '20000 29999' "
        "(1024 <= lo <= hi <= 65535)"))

    @field_validator("sysctls")
    @classmethod
    def _sysctl_values(cls, v):
        # digits and one space only (netns.py writes it with sh); and what the kernel takes:
        # lo <= hi, lo not below ip_unprivileged_port_start (1024), else EINVAL during `up`
        for key, val in (v or {}).items():
            m = re.fullmatch(r"([0-9]{1,5}) ([0-9]{1,5})", val)
            if not m or not 1024 <= int(m[1]) <= int(m[2]) <= 65535:
                raise ValueError(f"{key}: {val!r} is not a range 'lo hi' with 1024 <= lo <= hi <= 65535")
        return v

    @field_validator("env")
    @classmethod
    def _env_tokens(cls, v):
        for val in (v or {}).values():
            _check_tokens(val)
        return v

    @field_validator("libraryPaths", "pythonpath")
    @classmethod
    def _path_tokens(cls, v):
        for val in v or []:
            _check_tokens(val)
        return v


class Expect(_Strict):
    """The expected outcome: condition ``condition`` reaches ``status``/``reason`` and its
    message contains every ``messageContains`` string ({node:N} = the node of probe rank
    N) and none of ``messageLacks``, ``status.probe.interfacesNotChosen`` every
    ``notChosenContains`` string; ``phase`` (e.g. Succeeded) must be reached too."""

    condition: str = "Validated"
    status: Literal["True", "False", "Unknown"]
    reason: Optional[str] = None
    messageContains: list[str] = Field(default_factory=list)
    messageLacks: list[str] = Field(default_factory=list, description="strings the message must not contain")
    notChosenContains: list[str] = Field(
        default_factory=list, description="strings status.probe.interfacesNotChosen must hold "
        "(each within one of its lines): why the interfaces not chosen were not")
    phase: Optional[Literal["Validated", "Running", "Succeeded", "Failed"]] = None
    socketIfname: Optional[str] = Field(
        None, description="the job's status.rendezvous.socketIfname once validated (the "
        "interface every node's probe chose; a comma list when names differ)")
    withinSeconds: float = Field(60.0, gt=0, le=1800)
    repeat: int = Field(1, ge=1, le=10, description="run the job this many times (each in a "
                        "fresh namespace); every run must meet the expectation with the same "
                        "status.rendezvous.socketIfname (a choice that must not depend on noise); "
                        "runs after the first stop at the condition (phase is checked once)")

    def for_run(self, i: int) -> "Expect":
        """The expectation of run ``i`` (0-based) of :attr:`repeat`: the phase only on the first."""
        return self if i == 0 else self.model_copy(update={"phase": None})

    @model_validator(mode="after")
    def _known_condition_and_reason(self):
        """A misspelt condition or reason would only show as a timeout after a full run."""
        from disttrain_probe.contract import vocabulary as V

        conditions = V.ALL_CONDITIONS + V.OPTIONAL_CONDITIONS
        if self.condition not in conditions:
            raise ValueError(f"expect.condition: {self.condition!r} is not a condition "
                             f"({', '.join(conditions)})")
        if self.reason is None:
            return self
        r = V.get(self.reason)
        if r is None or r.kinds == (V.REJECTION,):
            raise ValueError(f"expect.reason: {self.reason!r} is not a reason the operator or "
                             f"the probe writes on a condition (docs/conditions.md lists them)")
        if self.condition != V.VALIDATED and self.condition not in r.conditions:
            raise ValueError(f"expect.reason: {self.reason} is reported on "
                             f"{' or '.join(r.conditions)}, not {self.condition}")
        if self.condition == V.VALIDATED and self.status == "False" and V.FAILURE not in r.kinds:
            raise ValueError(f"expect.reason: {self.reason} is a {r.kind} reason, never the "
                             f"cause of Validated=False")
        return self


class KueueSettings(_Strict):
    """Kueue on the cluster (``localcluster/cluster/kueue.py``): the ClusterQueue's nominal quota
    and Kueue's integrations; the job's namespace gets the LocalQueue ``user-queue``."""

    quota: dict[str, Union[StrictInt, str]] = Field(
        default_factory=dict, description="resource -> quantity (cpu, memory, nvidia.com/gpu); "
        "unnamed resources keep kueue_objects.DEFAULT_QUOTA")
    integrations: list[str] = Field(default_factory=lambda: ["batch/job"])
    holdSeconds: StrictInt = Field(
        0, ge=0, le=600, description="before the job is applied, a batch/v1 Job in the same queue "
        "holds all of the quota's CPU for this many seconds, so the job is seen waiting in its "
        "queue, then admitted")

    @field_validator("quota")
    @classmethod
    def _quota(cls, v):
        parse_quota(",".join(f"{k}={q}" for k, q in v.items()))
        return {k: str(q) for k, q in v.items()}

    @field_validator("integrations")
    @classmethod
    def _integrations(cls, v):
        bad = [i for i in v if i not in INTEGRATION_RESOURCES]
        if bad:
            raise ValueError(f"unknown integration(s) {bad}; known: {sorted(INTEGRATION_RESOURCES)}")
        return v

    def options(self):
        """The ``kueue_objects.Options`` for `up` (no namespace: scenariorun adds the job's)."""
        quota = parse_quota(",".join(f"{k}={q}" for k, q in self.quota.items()))
        return Options(tuple(sorted(quota.items())), (), tuple(self.integrations))


class Scenario(_Strict):
    """A whole scenario file."""

    description: str = ""
    nodes: int = Field(2, ge=1, le=MAX_NODES)
    segments: dict[str, Segment] = Field(default_factory=lambda: {
        k: Segment(**v) for k, v in DEFAULT_SEGMENTS.items()})
    defaults: NodeConfig = Field(default_factory=NodeConfig)
    nodeOverrides: dict[str, NodeConfig] = Field(default_factory=dict)
    job: dict[str, Any] = Field(default_factory=dict, description="deep-merged into the example job's spec")
    kueue: Optional[KueueSettings] = Field(None, description="run Kueue; the job's namespace gets its LocalQueue")
    routers: list[RoutedLink] = Field(default_factory=list, description="routed links between "
                                      "segments, each through a middle link with its own MTU "
                                      "(routing.py)")
    networkPolicies: list[dict[str, Any]] = Field(
        default_factory=list, description="NetworkPolicy manifests (metadata.namespace: the "
        "job's by default), applied before the job; any turns the enforcer on (netpol.py)")
    mesh: Optional[Literal["istio"]] = Field(
        None, description="inject Istio's sidecar (istio-init's outbound capture, an "
        "istio-proxy that closes what it captures) into the pods of the job's namespace, as "
        "Istio's injector does: a MutatingAdmissionPolicy (mesh.py)")
    training: Optional[Training] = Field(None, description="the script the job trains and its env (strike.py)")
    strike: Optional[Strike] = Field(None, description="a fault once training advances (strike.py); "
                                     "expect.withinSeconds then counts from it")
    slow: bool = Field(False, description="takes minutes: run by `make test-scale` "
                       "(DISTTRAIN_SLOW_SCENARIOS=1), left out of `make test`")
    expect: Expect
    name: str = Field("", exclude=True)

    @field_validator("networkPolicies")
    @classmethod
    def _policies(cls, v):
        return check_manifests(v, "networkPolicies")

    @model_validator(mode="after")
    def _cross(self):
        for k in self.segments:
            if not re.match(SEGMENT_PATTERN, k):
                raise ValueError(f"segments.{k}: segment names match {SEGMENT_PATTERN}")
        names = {node_name(i) for i in range(self.nodes)}
        for k, cfg in self.nodeOverrides.items():
            if k not in names:
                raise ValueError(f"nodeOverrides.{k}: no such node (nodes: {', '.join(sorted(names))})")
        for where, cfg in [("defaults", self.defaults)] + [(f"nodeOverrides.{k}", v) for k, v in
                                                          self.nodeOverrides.items()]:
            for i, nic in enumerate(cfg.nics or []):
                if nic.segment not in self.segments:
                    raise ValueError(f"{where}.nics.{i}.segment: unknown segment {nic.segment!r} "
                                     f"(segments: {', '.join(sorted(self.segments))})")
        routing.plan(self.routers, {k: v.subnet for k, v in self.segments.items()}, "")
        if self.strike is not None:
            ranks = [r for r in (self.strike.rank, self.strike.peerRank) if r is not None]
            if max(ranks) >= self.nodes:
                raise ValueError(f"strike: rank {max(ranks)} needs more than {self.nodes} nodes")
            if not (self.job.get("runPolicy") or {}).get("stallTimeoutSeconds"):
                raise ValueError("strike: needs job.runPolicy.stallTimeoutSeconds (no Progressing without it)")
        if self.defaults.nics is None:  # some node keeps the default eth0/eth1
            missing = [n["segment"] for n in DEFAULT_NICS if n["segment"] not in self.segments]
            if missing and any(self.nodeOverrides.get(n) is None or self.nodeOverrides[n].nics is None
                               for n in names):
                raise ValueError(f"segments: the default NICs (eth0 on mgmt, eth1 on data) need "
                                 f"segment(s) {', '.join(missing)}; define them or give "
                                 f"defaults.nics on your segments")
        return self


