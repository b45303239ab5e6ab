"""A node-local DNS cache on one node, answering some names itself: split-horizon DNS.

A scenario's ``dns: {records: {NAME: ADDRESS}}`` on a node (:class:`~.scenario.NodeDns`)
runs, in that node's namespace, a CoreDNS (the binary of ``make build-cluster``) on
:data:`NODE_LOCAL_DNS` = 169.254.20.10, the address NodeLocal DNSCache listens on in real
clusters. It answers those names (template plugin) and forwards everything else
to cluster DNS (10.96.0.10); the node's kubelet (``clusterDNS``, ``nodes/realnode/``) or node
agent (the pods' resolv.conf, ``nodeagent/sandbox.py``) points the node's pods at it. One
node thus gets a different answer for a name than the others: a stale record in a
node-local cache, a split-horizon resolver. Nodes without ``dns`` use cluster DNS as
before.

Layout (instance 0; process and file names carry the node's name)::

    netns dtj-node-c:  lo 169.254.20.10/32
                       coredns -conf <state>/dns/node-c.Corefile   (:53 udp+tcp)
                       route 10.96.0.10/32 via 10.100.0.254 (dns.py) for the rest
"""
from __future__ import annotations

import ipaddress
import re
import time
from pathlib import Path
from typing import Mapping

from localcluster.common import procs
from localcluster.common.config import CLUSTER_DOMAIN, DNS_SERVICE_IP, NodeSpec, coredns_bin
from localcluster.network.dnsquery import query
from localcluster.network.netns import _ip

NODE_LOCAL_DNS = "169.254.20.10"  # NodeLocal DNSCache's link-local listen address


class NodeDnsError(RuntimeError):
    """A node's DNS could not be started, or did not answer in time."""


def process_name(node: str) -> str:
    """The tracked process name (``procs``) of ``node``'s DNS."""
    return f"nodedns-{node}"


def server_for(records: Mapping[str, str]) -> str:
    """The DNS server a node's pods use: :data:`NODE_LOCAL_DNS` when the node answers
    ``records`` itself, else cluster DNS."""
    return NODE_LOCAL_DNS if records else DNS_SERVICE_IP


def render_corefile(records: Mapping[str, str], upstream: str = DNS_SERVICE_IP,
                    domain: str = CLUSTER_DOMAIN) -> str:
    """The node's Corefile, bound to :data:`NODE_LOCAL_DNS` only: each of ``records`` (name
    -> IPv4 or IPv6 address) answered by the template plugin, TTL 1 s, for the name as
    given and with any namespace's search suffix (``NAME.<ns>.svc.<domain>``, what a pod's
    resolver asks first), everything else forwarded to ``upstream``. Raises ValueError
    for an address that is not one or a name with whitespace."""
    blocks = []
    for name, addr in sorted(records.items()):
        ip = ipaddress.ip_address(addr)
        if not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?", name):
            raise ValueError(f"dns record name {name!r}: letters, digits, '-', '_' and dots only")
        qtype = "A" if ip.version == 4 else "AAAA"
        base = name.rstrip(".").replace(".", "[.]")  # [.]: no backslashes in the Corefile
        suffix = f"svc.{domain}.".replace(".", "[.]")
        blocks.append(
            f"    template IN {qtype} {{\n"
            f'        match "^{base}[.](([a-z0-9-]+[.])?{suffix})?$"\n'
            f'        answer "{{{{ .Name }}}} 1 IN {qtype} {addr}"\n'
            "        fallthrough\n"
            "    }\n")
    return (
        ".:53 {\n"
        f"    bind {NODE_LOCAL_DNS}\n"
        "    errors\n"
        + "".join(blocks) +
        f"    forward . {upstream}\n"
        "}\n")


def _corefile(state: Path, node: str) -> Path:
    return state / "dns" / f"{node}.Corefile"


def _answers(netns: str, timeout: float) -> bool:
    try:
        query("kubernetes.default.svc.cluster.local", server=NODE_LOCAL_DNS, timeout=timeout,
              netns=netns)
        return True
    except (OSError, ValueError):
        return False


def ensure(state: Path, node: NodeSpec, records: Mapping[str, str], timeout: float = 30.0) -> bool:
    """Run ``node``'s DNS for ``records`` (idempotent: a running one with the same
    Corefile is kept), or stop it when ``records`` is empty; True when one runs. Waits
    until it answers (``timeout`` seconds). Raises NodeDnsError (binary missing, exited,
    no answer in time), NetworkError, ValueError (a bad record)."""
    name, path = process_name(node.name), _corefile(state, node.name)
    if not records:
        procs.stop_tracked(state, name, grace=2)
        path.unlink(missing_ok=True)
        return False
    binary = coredns_bin()
    if not binary.exists():
        raise NodeDnsError(f"missing {binary} (run `make build-cluster`)")
    text = render_corefile(records)
    if NODE_LOCAL_DNS not in _ip("-n", node.netns, "addr", "show", "dev", "lo").stdout:
        _ip("-n", node.netns, "addr", "add", f"{NODE_LOCAL_DNS}/32", "dev", "lo")
    changed = not path.exists() or path.read_text() != text
    path.parent.mkdir(parents=True, exist_ok=True)
    if changed:
        path.write_text(text)
    if changed or procs.tracked_pid(state, name) is None:
        procs.stop_tracked(state, name, grace=2)
        procs.start_detached(state, name, ["ip", "netns", "exec", node.netns, str(binary),
                                           "-conf", str(path)])
    deadline = time.monotonic() + timeout
    while not _answers(node.netns, 1.0):
        if procs.tracked_pid(state, name) is None:
            raise NodeDnsError(f"{name} exited; see {state}/logs/{name}.log")
        if time.monotonic() > deadline:
            raise NodeDnsError(f"{name} did not answer on {NODE_LOCAL_DNS} within {timeout:.0f}s; "
                               f"see {state}/logs/{name}.log")
        time.sleep(0.2)
    return True


def stop(state: Path, node: str) -> None:
    """Stop ``node``'s DNS, if one runs."""
    procs.stop_tracked(state, process_name(node), grace=2)


__all__ = ["NODE_LOCAL_DNS", "NodeDnsError", "ensure", "process_name", "render_corefile",
           "server_for", "stop"]
