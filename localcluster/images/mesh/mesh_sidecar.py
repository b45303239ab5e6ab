#!/usr/bin/env python3
"""A service-mesh sidecar for the proving ground, as Istio injects one (``mesh-sidecar init``
for istio-init, ``mesh-sidecar proxy`` for istio-proxy). Only the behaviour that breaks a
training job is modelled: outbound TCP captured by nat rules and ended by the proxy.

``init [--exclude-cidrs A,B] [--exclude-ports P,Q]``: writes istio-iptables' outbound rules
(chains ISTIO_OUTPUT and ISTIO_REDIRECT in the nat table): traffic leaving through lo, to
127.0.0.0/8, to an excluded CIDR (``traffic.sidecar.istio.io/excludeOutboundIPRanges``) or
port (``excludeOutboundPorts``) passes; every other TCP connection is redirected to 15001.
Inbound capture (15006) is not written: Istio passes inbound through in PERMISSIVE mode,
so it changes nothing here. Exits non-zero when a rule is refused.

``proxy``: listens on 15001 and, like Envoy's BlackHoleCluster (outboundTrafficPolicy
REGISTRY_ONLY: a pod-to-pod address is in no registry), accepts each connection and closes
it with no byte sent. Exits on SIGTERM (the kubelet stops a native sidecar after the main
container ends).
"""
import argparse
import signal
import socket
import subprocess
import sys

PROXY_PORT = 15001


def rules(exclude_cidrs: list, exclude_ports: list) -> list:
    """The iptables commands (argument lists), in order."""
    nat = ["iptables", "-w", "-t", "nat"]
    out = [nat + ["-N", "ISTIO_REDIRECT"], nat + ["-N", "ISTIO_OUTPUT"],
           nat + ["-A", "ISTIO_REDIRECT", "-p", "tcp", "-j", "REDIRECT", "--to-ports", str(PROXY_PORT)],
           nat + ["-A", "OUTPUT", "-p", "tcp", "-j", "ISTIO_OUTPUT"],
           nat + ["-A", "ISTIO_OUTPUT", "-o", "lo", "-j", "RETURN"],
           nat + ["-A", "ISTIO_OUTPUT", "-d", "127.0.0.0/8", "-j", "RETURN"]]
    out += [nat + ["-A", "ISTIO_OUTPUT", "-d", c, "-j", "RETURN"] for c in exclude_cidrs]
    out += [nat + ["-A", "ISTIO_OUTPUT", "-p", "tcp", "--dport", p, "-j", "RETURN"] for p in exclude_ports]
    out.append(nat + ["-A", "ISTIO_OUTPUT", "-j", "ISTIO_REDIRECT"])
    return out


def split(text: str) -> list:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def init(a: argparse.Namespace) -> int:
    for cmd in rules(split(a.exclude_cidrs), split(a.exclude_ports)):
        p = subprocess.run(cmd, capture_output=True, text=True)
        print(" ".join(cmd[2:]), flush=True)
        if p.returncode != 0:
            print(f"refused: {p.stderr.strip()}", file=sys.stderr)
            return 1
    return 0


def proxy(_: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", PROXY_PORT))
    s.listen(128)
    print(f"listening on {PROXY_PORT}: every redirected connection is closed", flush=True)
    n = 0
    while True:
        c, peer = s.accept()
        n += 1
        if n <= 20 or n % 100 == 0:
            print(f"closed connection {n} from {peer[0]}:{peer[1]}", flush=True)
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(prog="mesh-sidecar")
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init")
    i.add_argument("--exclude-cidrs", default="")
    i.add_argument("--exclude-ports", default="")
    sub.add_parser("proxy")
    a = ap.parse_args()
    return init(a) if a.cmd == "init" else proxy(a)


if __name__ == "__main__":
    sys.exit(main())
