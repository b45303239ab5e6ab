"""Routed links between segments: two routers joined by a middle link with its own MTU.

A scenario's ``routers`` entry ``{between: [data, datb], mtu: 1400, icmpFragNeeded: drop}``
builds, for the k-th entry::

    br-data --lan-- netns <prefix>rt<k>a --wan (MTU 1400)-- netns <prefix>rt<k>b --lan-- br-datb
                    10.101.0.1/24   169.254.254.<4k+1>/30  169.254.254.<4k+2>/30   10.102.0.1/24

Every node with a NIC on one of the two segments routes the other segment's subnet via
its router's lan address (``NodeTopology.routes``). The middle link is what real paths
have: a tunnel or an inter-switch link smaller than the nodes' MTU, where the router, not
the endpoint, must say "fragmentation needed" (ICMP type 3 code 4). With
``icmpFragNeeded: drop`` both routers drop that ICMP on output (an nftables table), which
makes the path a black hole for full-size packets; with ``pass`` path MTU discovery works.

:func:`plan` and :func:`node_routes` are pure; :func:`ensure` creates the routers (and
removes this cluster's routers no scenario needs any more). Router namespaces have no
default route: they forward between the two segments only.
"""
from __future__ import annotations

import ipaddress
import subprocess
import time
from dataclasses import dataclass
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

MAX_ROUTERS = 4
WAN_NET = ipaddress.ip_network("169.254.254.0/24")  # the middle links' /30s: never a node's


class RoutedLink(BaseModel):
    """One scenario ``routers`` entry: two segments joined through a middle link."""

    model_config = ConfigDict(extra="forbid")
    between: tuple[str, str] = Field(description="the two segments the routers join")
    mtu: int = Field(1500, ge=576, le=9000, description="the middle link's MTU (bytes)")
    icmpFragNeeded: Literal["pass", "drop"] = Field(
        "pass", description="whether the routers' ICMP 'fragmentation needed' reaches the sender")


@dataclass(frozen=True)
class Leg:
    """One router of a pair: its namespace, the segment it serves, its lan and wan
    addresses (CIDR), its peer's wan address and the subnet behind the peer."""

    netns: str
    segment: str
    lan: str
    wan: str
    peer_wan: str
    remote: str


@dataclass(frozen=True)
class RouterPair:
    """What :func:`ensure` builds for one :class:`RoutedLink`."""

    legs: tuple[Leg, Leg]
    mtu: int
    drop_icmp: bool


def plan(links: Sequence[RoutedLink], subnets: dict[str, str], prefix: str) -> list[RouterPair]:
    """The router pairs of ``links`` (``subnets``: segment -> IPv4 subnet; ``prefix``: the
    cluster's namespace prefix). Each router takes host .1 of its segment. Raises
    ValueError naming the entry for an unknown or repeated segment (one router per
    segment: both would take its .1), two segments whose subnets overlap, a subnet that
    overlaps the middle links' :data:`WAN_NET`, or too many entries. Pure."""
    if len(links) > MAX_ROUTERS:
        raise ValueError(f"routers: at most {MAX_ROUTERS} entries")
    out = []
    wans = list(WAN_NET.subnets(new_prefix=30))
    routed: dict[str, int] = {}
    for k, link in enumerate(links):
        a, b = link.between
        for seg in (a, b):
            if seg not in subnets:
                raise ValueError(f"routers.{k}.between: unknown segment {seg!r} "
                                 f"(segments: {', '.join(sorted(subnets))})")
        if a == b:
            raise ValueError(f"routers.{k}.between: two different segments, not {a} twice")
        for seg in (a, b):
            if seg in routed:
                raise ValueError(f"routers.{k}.between: segment {seg} already has a router "
                                 f"(routers.{routed[seg]}) on its host .1; one router per segment")
            routed[seg] = k
        nets = [ipaddress.ip_network(subnets[s]) for s in (a, b)]
        if nets[0].overlaps(nets[1]):
            raise ValueError(f"routers.{k}.between: {a} ({nets[0]}) and {b} ({nets[1]}) overlap: "
                             f"a router joins two different subnets")
        for seg, net in zip((a, b), nets):
            if net.overlaps(WAN_NET):
                raise ValueError(f"routers.{k}.between: {seg}'s subnet {net} overlaps the "
                                 f"routers' middle links ({WAN_NET}); pick another subnet")
        w = list(wans[k].hosts())
        lans = [f"{n.network_address + 1}/{n.prefixlen}" for n in nets]
        legs = (Leg(f"{prefix}rt{k}a", a, lans[0], f"{w[0]}/30", str(w[1]), str(nets[1])),
                Leg(f"{prefix}rt{k}b", b, lans[1], f"{w[1]}/30", str(w[0]), str(nets[0])))
        out.append(RouterPair(legs, link.mtu, link.icmpFragNeeded == "drop"))
    return out


def node_routes(pairs: Sequence[RouterPair], nics: dict[str, str]) -> list[dict[str, str]]:
    """The routes of a node whose NICs are ``nics`` (name -> segment): for each router leg on
    one of its segments, ``{"to": the other segment's subnet, "via": the leg's lan address,
    "dev": the NIC}``; none through a pair whose other side the node is on too (its own
    connected route reaches it; ``ip route replace`` would replace that). Pure."""
    out = []
    on = set(nics.values())
    for pair in pairs:
        if all(leg.segment in on for leg in pair.legs):
            continue
        for leg in pair.legs:
            for nic, seg in sorted(nics.items()):
                if seg == leg.segment:
                    out.append({"to": leg.remote, "via": leg.lan.split("/")[0], "dev": nic})
                    break
    return out


def leg_addresses(pairs: Sequence[RouterPair]) -> dict[str, str]:
    """Router lan address -> what holds it ("router rt0a on data"), for the address plan."""
    return {leg.lan.split("/")[0]: f"router {leg.netns} on {leg.segment}"
            for pair in pairs for leg in pair.legs}


NFT_DROP_FRAG_NEEDED = """table inet dtj_pmtu
delete table inet dtj_pmtu
table inet dtj_pmtu {
  chain out {
    type filter hook output priority 0; policy accept;
    icmp type destination-unreachable icmp code frag-needed drop
  }
}
"""


def _run(*args: str, stdin: str | None = None) -> None:
    p = subprocess.run(list(args), input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {p.stderr.strip()}")


def _free(ns: str, dev: str, seconds: float = 10.0) -> None:
    """Delete ``dev`` in ``ns`` if it is there and wait until its name is free: a router
    namespace just deleted takes its veths with it asynchronously."""
    subprocess.run(["ip", "-n", ns, "link", "del", dev], capture_output=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end and subprocess.run(
            ["ip", "-n", ns, "link", "show", dev], capture_output=True).returncode == 0:
        time.sleep(0.1)


def _build(pair: RouterPair, fabric_ns: str) -> None:
    a, b = pair.legs
    for leg in pair.legs:
        _run("ip", "netns", "add", leg.netns)
        _run("ip", "-n", leg.netns, "link", "set", "lo", "up")
        port = leg.netns.rsplit("-", 1)[-1][-5:] + "-lan"  # rt0a-lan: at most 15 bytes
        _free(fabric_ns, port)
        _run("ip", "-n", fabric_ns, "link", "add", port, "type", "veth", "peer", "name", "lan",
             "netns", leg.netns)
        _run("ip", "-n", fabric_ns, "link", "set", port, "master", f"br-{leg.segment}")
        _run("ip", "-n", fabric_ns, "link", "set", port, "up")
        _run("ip", "-n", leg.netns, "addr", "add", leg.lan, "dev", "lan")
        _run("ip", "-n", leg.netns, "link", "set", "lan", "up")
        _run("ip", "netns", "exec", leg.netns, "sh", "-c",
             "echo 1 > /proc/sys/net/ipv4/ip_forward")
    _run("ip", "-n", a.netns, "link", "add", "wan", "mtu", str(pair.mtu), "type", "veth", "peer",
         "name", "wan", "netns", b.netns)
    _run("ip", "-n", b.netns, "link", "set", "wan", "mtu", str(pair.mtu))
    for leg in pair.legs:
        _run("ip", "-n", leg.netns, "addr", "add", leg.wan, "dev", "wan")
        _run("ip", "-n", leg.netns, "link", "set", "wan", "up")
        _run("ip", "-n", leg.netns, "route", "replace", leg.remote, "via", leg.peer_wan, "dev", "wan")
        if pair.drop_icmp:
            _run("ip", "netns", "exec", leg.netns, "nft", "-f", "-", stdin=NFT_DROP_FRAG_NEEDED)


def ensure(pairs: Sequence[RouterPair], fabric_ns: str, existing: Sequence[str], prefix: str) -> bool:
    """Rebuild this cluster's routers as ``pairs`` say: every namespace in ``existing``
    named ``<prefix>rt*`` is deleted first (its fabric ports go with it), then each pair is
    created. Returns whether any router went or came: the nodes' neighbour and route
    caches then hold a gone router's MAC address and a path MTU learnt through it, and
    must be flushed (the caller does). Raises RuntimeError naming the command that failed."""
    gone = [ns for ns in existing if ns.startswith(prefix + "rt")]
    for ns in gone:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for pair in pairs:
        _build(pair, fabric_ns)
    return bool(gone or pairs)


__all__ = ["MAX_ROUTERS", "RoutedLink", "RouterPair", "ensure", "leg_addresses", "node_routes", "plan"]
