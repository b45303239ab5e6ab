"""Cluster DNS: CoreDNS (built from its Go module) in its own network namespace.

Layout (instance 0 names; instance N uses ``dtjN-``)::

    netns dtj-dns:     lo 10.96.0.10/32 (kube-dns ClusterIP), 10.96.0.1/32 (`kubernetes`)
                       eth-mgmt 10.100.0.254/24 --veth-- mgmt-dns on br-mgmt (dtj-fabric)
                       route 10.244.i.0/24 via <node i's InternalIP>   (replies to pods)
                       coredns -conf <state>/dns/Corefile  (listens on :53, udp+tcp)
    netns dtj-node-x:  route 10.96.0.10/32 via 10.100.0.254

The DNS namespace gets a veth on the fabric bridge of every segment that carries a node's
InternalIP, with the subnet's last usable host that no node uses (:func:`plan`). There is
no kube-proxy: the kube-dns ClusterIP sits on the DNS namespace's loopback and the nodes
route it there. CoreDNS talks to the apiserver through ``https://10.96.0.1:443`` inside
its namespace, served by a relay process (``python -m localcluster.network.dns relay``, a
:class:`serviceproxy.ServiceProxy`) to the apiserver on the root namespace's loopback, as
user ``system:coredns`` (client certificate, ClusterRole like upstream's). Nothing routes
from the DNS namespace to the root namespace, and there is no upstream forwarding (names
outside the cluster get NXDOMAIN).

``python -m localcluster.network.dns query NAME [--type A] [--server 10.96.0.10]`` is a tiny
``dig`` (standard library only); run it with ``ip netns exec <namespace>``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from localcluster.common import pki, procs
from localcluster.common.config import (
    APISERVER_PORT,
    CLUSTER_DOMAIN,
    DNS_NS,
    DNS_SERVICE_IP,
    FABRIC_NS,
    KUBERNETES_SERVICE_IP,
    KUBERNETES_SERVICE_PORT,
    NodeSpec,
    coredns_bin,
    venv_python,
)
from localcluster.common.kubeconfig import write_kubeconfig
from localcluster.network.dnsplan import Plan, plan
from localcluster.network.dnsquery import query
from localcluster.network.netns import _ip, list_netns
from localcluster.network.setns import run_in

log = logging.getLogger("localcluster.network.dns")

COREDNS = "coredns"  # tracked process names (procs.py): <state>/run/<name>.pid, logs/<name>.log
RELAY = "dns-relay"
USER = "system:coredns"
# Inside the DNS namespace only, so every cluster instance can use the same ports.
HEALTH_PORT = 8080
READY_PORT = 8181
RECORD_TTL = 1  # seconds: the kubernetes plugin's answers (new pods show up fast)
CACHE_TTL = 5  # seconds: the cache plugin's cap
CACHE_MIN_TTL = 1  # seconds: the cache's floor (its default, 5, would outlive RECORD_TTL)


class DnsError(RuntimeError):
    """Cluster DNS could not be set up, or CoreDNS did not start answering."""


# -- pure parts -------------------------------------------------------------------------
def render_corefile(kubeconfig: Path | str, domain: str = CLUSTER_DOMAIN, *,
                    record_ttl: int = RECORD_TTL, cache_ttl: int = CACHE_TTL,
                    cache_min_ttl: int = CACHE_MIN_TTL) -> str:
    """The Corefile: the kubernetes plugin for ``domain`` and the reverse zones with a
    small cache, health/ready on 127.0.0.1 inside the namespace (HEALTH_PORT, READY_PORT); no forwarding (nothing
    outside the cluster can be reached). TTLs are in seconds, ports are TCP ports.

    Every other name gets NXDOMAIN at once from a ``.`` block (the template plugin), as
    an air-gapped cluster's upstream would say: a resolver then reports "name not known"
    (EAI_NONAME) instead of a temporary failure (EAI_AGAIN, what SERVFAIL gives), so a
    wrong name fails fast and clearly. Reverse lookups of addresses that are no Service
    or endpoint get NXDOMAIN from the kubernetes plugin (no ``fallthrough``: there is no
    upstream to fall through to). Raises ValueError for a negative TTL.
    """
    if min(record_ttl, cache_ttl, cache_min_ttl) < 0:
        raise ValueError("TTLs must be >= 0 seconds")
    return (
        f"{domain}:53 in-addr.arpa:53 ip6.arpa:53 {{\n"
        "    errors\n"
        f"    health 127.0.0.1:{HEALTH_PORT}\n"
        f"    ready 127.0.0.1:{READY_PORT}\n"
        f"    kubernetes {domain} in-addr.arpa ip6.arpa {{\n"
        f"        kubeconfig {kubeconfig} localcluster\n"
        "        pods insecure\n"
        f"        ttl {record_ttl}\n"
        "    }\n"
        f"    cache {cache_ttl} {{\n"
        f"        success 9984 {cache_ttl} {cache_min_ttl}\n"
        f"        denial 9984 {cache_ttl} {cache_min_ttl}\n"
        "    }\n"
        "    loadbalance\n"
        "}\n"
        ".:53 {\n"
        "    errors\n"
        "    template ANY ANY {\n"
        "        rcode NXDOMAIN\n"
        "    }\n"
        "}\n")


# -- network ---------------------------------------------------------------------------
def _links(ns: str) -> list[str]:
    return [x["ifname"] for x in json.loads(_ip("-n", ns, "-j", "link", "show").stdout or "[]")]


def _addrs(ns: str, dev: str) -> set[str]:
    out = json.loads(_ip("-n", ns, "-j", "-4", "addr", "show", "dev", dev).stdout or "[]")
    return {f"{a['local']}/{a['prefixlen']}" for x in out for a in x.get("addr_info", [])}


def ensure_node_route(node_netns: str, gateway: str) -> None:
    """Route the kube-dns ClusterIP from node namespace ``node_netns`` via the DNS
    namespace's address ``gateway`` on that node's InternalIP subnet (idempotent; call it
    again after (re)creating a node's namespace; :func:`gateway_for` gives ``gateway``).
    Raises NetworkError if `ip` fails (e.g. no such namespace, gateway not on-link)."""
    _ip("-n", node_netns, "route", "replace", f"{DNS_SERVICE_IP}/32", "via", gateway)


def ensure_network(p: Plan, nodes: list[NodeSpec]) -> None:
    """Create or update the DNS namespace as ``p`` says (ClusterIPs on lo, one veth per
    segment on the fabric bridges, routes to the pod CIDRs) and the route to the DNS
    ClusterIP in every node namespace in ``nodes``. Links, addresses and routes that ``p``
    no longer names are removed. Needs the fabric's bridges (network.ensure_fabric).
    Raises NetworkError if an `ip` command fails."""
    if DNS_NS not in list_netns():
        _ip("netns", "add", DNS_NS)
    _ip("-n", DNS_NS, "link", "set", "lo", "up")
    have = _addrs(DNS_NS, "lo")
    for a in (DNS_SERVICE_IP, KUBERNETES_SERVICE_IP):
        if f"{a}/32" not in have:
            _ip("-n", DNS_NS, "addr", "add", f"{a}/32", "dev", "lo")
    want = {a.ifname: a for a in p.attachments}
    for dev in _links(DNS_NS):
        if dev.startswith("eth-") and dev not in want:
            _ip("-n", DNS_NS, "link", "del", dev, check=False)
    fresh = False
    for dev, att in want.items():
        if dev not in _links(DNS_NS):
            _ip("-n", FABRIC_NS, "link", "del", att.fabric_peer, check=False)  # a stray end
            _ip("-n", FABRIC_NS, "link", "add", att.fabric_peer, "type", "veth", "peer", "name",
                dev, "netns", DNS_NS)
            fresh = True
        _ip("-n", FABRIC_NS, "link", "set", att.fabric_peer, "master", f"br-{att.segment}")
        _ip("-n", FABRIC_NS, "link", "set", att.fabric_peer, "up")
        cur = _addrs(DNS_NS, dev)
        for a in cur - set(att.addresses):
            _ip("-n", DNS_NS, "addr", "del", a, "dev", dev)
        for a in att.addresses:
            if a not in cur:
                _ip("-n", DNS_NS, "addr", "add", a, "dev", dev)
        _ip("-n", DNS_NS, "link", "set", dev, "up")
    routes = {cidr: via for cidr, via in p.pod_routes.values()}
    for r in json.loads(_ip("-n", DNS_NS, "-j", "-4", "route", "show").stdout or "[]"):
        if r.get("gateway") and r.get("dst") not in routes:
            _ip("-n", DNS_NS, "route", "del", r["dst"], check=False)
    for cidr, via in routes.items():
        _ip("-n", DNS_NS, "route", "replace", cidr, "via", via)
    for n in nodes:
        gw = p.gateways.get(n.name)
        if gw is None:
            continue
        ensure_node_route(n.netns, gw)
        if fresh:  # the DNS NIC has a new MAC: nodes must not use a cached one
            _ip("-n", n.netns, "neigh", "flush", "to", gw, check=False)


def gateway_for(state: Path, node: str) -> Optional[str]:
    """The DNS namespace's address that node ``node`` (e.g. "node-a") routes the kube-dns
    ClusterIP through, from the last `up`'s plan (``<state>/dns/plan.json``); None if
    cluster DNS is not set up or does not know the node."""
    try:
        return Plan.from_json(json.loads((state / "dns" / "plan.json").read_text())) \
            .gateways.get(node)
    except (OSError, ValueError, KeyError, TypeError):
        return None


# -- Kubernetes objects -------------------------------------------------------------------
CLUSTER_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": USER, "labels": {"app.kubernetes.io/managed-by": "localcluster"}},
    "rules": [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["list", "watch"]},
    ],
}
CLUSTER_ROLE_BINDING = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
    "metadata": {"name": USER, "labels": {"app.kubernetes.io/managed-by": "localcluster"}},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
}
KUBE_DNS_SERVICE = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "kube-dns", "namespace": "kube-system",
                 "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS",
                            "app.kubernetes.io/managed-by": "localcluster"}},
    # No selector: CoreDNS is no pod here, and no kube-proxy would use endpoints anyway.
    "spec": {"clusterIP": DNS_SERVICE_IP, "clusterIPs": [DNS_SERVICE_IP],
             "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                       {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]},
}


def ensure_api_objects(client) -> None:
    """Create (or update) the ``system:coredns`` ClusterRole and ClusterRoleBinding and
    create the ``kube-system/kube-dns`` Service (ClusterIP 10.96.0.10) if missing.
    ``client`` is an admin ``kubeapi.KubeClient``. Raises kubeapi.ApiError (e.g. the
    ClusterIP is taken by another Service) or OSError."""
    from localcluster.common.kubeapi import ApiError
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for coll, obj in ((f"{rbac}/clusterroles", CLUSTER_ROLE),
                      (f"{rbac}/clusterrolebindings", CLUSTER_ROLE_BINDING)):
        try:
            client.post(coll, obj)
        except ApiError as e:
            if e.status != 409:
                raise
            cur = client.get(f"{coll}/{obj['metadata']['name']}")
            body = json.loads(json.dumps(obj))
            body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            client.put(f"{coll}/{obj['metadata']['name']}", body)
    svc = "/api/v1/namespaces/kube-system/services"
    try:  # GET first: a second POST fails on the ClusterIP (422) before the name (409)
        client.get(f"{svc}/kube-dns")
        return
    except ApiError as e:
        if e.status != 404:
            raise
    try:
        client.post(svc, KUBE_DNS_SERVICE)
    except ApiError as e:
        if e.status != 409:
            raise


# -- processes ----------------------------------------------------------------------------
def dns_dir(state: Path) -> Path:
    """``<state>/dns``: Corefile, kubeconfig, plan.json."""
    return state / "dns"


def _corefile_path(state: Path) -> Path:
    return dns_dir(state) / "Corefile"


def ensure_credentials(state: Path) -> Path:
    """The client certificate for ``system:coredns`` (``<state>/pki/coredns.{crt,key}``)
    and ``<state>/dns/coredns.kubeconfig`` pointing at https://10.96.0.1:443; returns the
    kubeconfig path. Raises FileNotFoundError if the cluster CA does not exist yet."""
    p = state / "pki"
    crt, key = pki.ensure_cert(p, "coredns", USER)
    return write_kubeconfig(dns_dir(state) / "coredns.kubeconfig", USER, p / "ca.crt", crt, key,
                            server=f"https://{KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT}")


def relay_healthy(state: Path) -> bool:
    """True if the relay process runs and accepts on 10.96.0.1:443 in the DNS namespace."""
    if procs.tracked_pid(state, RELAY) is None:
        return False
    try:
        def conn() -> socket.socket:
            s = socket.socket()
            s.settimeout(2)
            return s
        with run_in(DNS_NS, conn) as s:
            s.connect((KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT))
        return True
    except OSError:
        return False


def answers(timeout: float = 2.0) -> bool:
    """True if CoreDNS, asked from inside the DNS namespace, resolves the ``kubernetes``
    Service to 10.96.0.1 (so it runs and has synced with the apiserver). ``timeout`` in
    seconds."""
    try:
        r = query(f"kubernetes.default.svc.{CLUSTER_DOMAIN}", "A", timeout=timeout, netns=DNS_NS)
    except (OSError, ValueError):
        return False
    return r["rcode"] == "NOERROR" and any(a["data"] == KUBERNETES_SERVICE_IP
                                           for a in r["answers"])


def dns_healthy(state: Path) -> bool:
    """True if the relay and CoreDNS run and CoreDNS answers (see :func:`answers`)."""
    return (procs.tracked_pid(state, COREDNS) is not None and relay_healthy(state)
            and answers())


def _log_tail(state: Path, name: str, n: int = 20) -> str:
    try:
        lines = (state / "logs" / f"{name}.log").read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])
    except OSError:
        return "(no log)"


def ensure_dns(state: Path, nodes: list[NodeSpec], topos: list, client,
               timeout: float = 60.0) -> Plan:
    """Bring cluster DNS up for ``nodes`` (with ``topos``, their ``topology.NodeTopology``
    in the same order) and wait until CoreDNS answers; idempotent (a healthy CoreDNS with
    an unchanged Corefile keeps running). ``client`` is an admin ``kubeapi.KubeClient``;
    ``timeout`` in seconds. Returns the :class:`Plan`.

    Raises DnsError (binary missing, CoreDNS exited or did not answer in time),
    NetworkError, ValueError (no address for DNS, see :func:`plan`), kubeapi.ApiError.
    """
    binary = coredns_bin()
    if not binary.exists():
        raise DnsError(f"missing {binary} (run `make build-cluster`)")
    p = plan(topos)
    d = dns_dir(state)
    d.mkdir(parents=True, exist_ok=True)
    ensure_network(p, nodes)
    (d / "plan.json").write_text(json.dumps(p.to_json(), indent=1))
    ensure_api_objects(client)
    kubeconfig = ensure_credentials(state)
    corefile = render_corefile(kubeconfig)
    changed = not _corefile_path(state).exists() or _corefile_path(state).read_text() != corefile
    if changed:
        _corefile_path(state).write_text(corefile)
    if not relay_healthy(state):
        procs.stop_tracked(state, RELAY, grace=2)
        procs.start_detached(state, RELAY, [venv_python(), "-m", "localcluster.network.dns", "relay",
                                            "--state", str(state)])
    if changed or procs.tracked_pid(state, COREDNS) is None or not answers(timeout=1.0):
        procs.stop_tracked(state, COREDNS, grace=2)
        procs.start_detached(state, COREDNS, ["ip", "netns", "exec", DNS_NS, str(binary),
                                              "-conf", str(_corefile_path(state))])
    deadline = time.monotonic() + timeout
    while not answers(timeout=1.0):
        for name in (COREDNS, RELAY):
            if procs.tracked_pid(state, name) is None:
                raise DnsError(f"{name} exited; {state}/logs/{name}.log:\n"
                               + _log_tail(state, name))
        if time.monotonic() > deadline:
            raise DnsError(f"CoreDNS did not answer within {timeout:.0f}s; "
                           f"{state}/logs/{COREDNS}.log:\n" + _log_tail(state, COREDNS))
        time.sleep(0.2)
    return p


def stop_dns(state: Path) -> list[str]:
    """Stop CoreDNS and the relay, delete the DNS namespace and ``<state>/dns/plan.json``.
    Safe when nothing runs. Returns the names of the processes that were running."""
    stopped = [n for n in (COREDNS, RELAY) if procs.stop_tracked(state, n, grace=2)]
    for pid in _netns_pids(DNS_NS):
        procs.stop_pid(pid, grace=1)
    _ip("netns", "del", DNS_NS, check=False)
    (dns_dir(state) / "plan.json").unlink(missing_ok=True)
    return stopped


def _netns_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(x) for x in out.split() if x.isdigit() and int(x) != os.getpid()]


# -- entry points -------------------------------------------------------------------------
def _relay(state: Path) -> int:
    from localcluster.network.serviceproxy import ServiceProxy
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    proxy = ServiceProxy(DNS_NS, KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT,
                         ("127.0.0.1", APISERVER_PORT))
    proxy.start()
    log.info("relaying %s:%s in %s to 127.0.0.1:%s (state %s)", KUBERNETES_SERVICE_IP,
             KUBERNETES_SERVICE_PORT, DNS_NS, APISERVER_PORT, state)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


def main(argv: Optional[list[str]] = None) -> int:
    """``relay --state DIR`` (the apiserver relay CoreDNS uses; runs until SIGTERM) or
    ``query NAME [--type T] [--server IP] [--timeout S]`` (prints the answer as JSON; exit
    status 0 if an answer came, 1 on timeout or error)."""
    ap = argparse.ArgumentParser(prog="python -m localcluster.network.dns")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay")
    r.add_argument("--state", required=True)
    q = sub.add_parser("query")
    q.add_argument("name")
    q.add_argument("--type", default="A")
    q.add_argument("--server", default=DNS_SERVICE_IP)
    q.add_argument("--timeout", type=float, default=2.0)
    a = ap.parse_args(argv)
    if a.cmd == "relay":
        return _relay(Path(a.state))
    try:
        print(json.dumps(query(a.name, a.type, a.server, timeout=a.timeout)))
    except (OSError, ValueError) as e:
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
