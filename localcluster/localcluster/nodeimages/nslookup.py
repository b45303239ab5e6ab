"""``nslookup NAME [SERVER]`` as the ``alpine:3.10`` image's busybox answers it, for
containers on the local cluster (``images.yaml`` puts ``localcluster/images/alpine/bin``,
whose ``nslookup`` runs this, on that image's PATH).

Kubeflow's training operator gives every PyTorchJob worker an init container in that image
that loops ``nslookup <job>-master-0`` until the master's Service name resolves. The name
is short: it resolves through the pod's ``/etc/resolv.conf`` search list (busybox 1.30
applies it, which is why upstream pins alpine 3.10), so this does the same: the
candidates in resolv.conf's order (:func:`candidates`), asked over UDP of the first
nameserver (``localcluster.network.dnsquery.query``). Exit status 0 with the answer printed as busybox
prints it, 1 with ``** server can't find NAME: NXDOMAIN`` (or a timeout line).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ResolvConf:
    """What a resolver reads from resolv.conf: nameservers, search list, ndots."""

    nameservers: list[str] = field(default_factory=list)
    search: list[str] = field(default_factory=list)
    ndots: int = 1


def parse_resolv_conf(text: str) -> ResolvConf:
    """Parse resolv.conf text (``nameserver``, ``search``/``domain`` (the last one wins, as
    in glibc), ``options ndots:N``; other lines ignored). Pure."""
    rc = ResolvConf()
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split(";", 1)[0].split()
        if not parts:
            continue
        key, args = parts[0], parts[1:]
        if key == "nameserver" and args:
            rc.nameservers.append(args[0])
        elif key in ("search", "domain"):
            rc.search = list(args)
        elif key == "options":
            for opt in args:
                if opt.startswith("ndots:") and opt[6:].isdigit():
                    rc.ndots = min(int(opt[6:]), 15)
    return rc


def candidates(name: str, rc: ResolvConf) -> list[str]:
    """Fully qualified names to try, in order: a name ending in '.' as is; one with at
    least ``ndots`` dots as is first, then with each search domain; else each search
    domain first, then as is. Pure."""
    if name.endswith("."):
        return [name.rstrip(".")]
    searched = [f"{name}.{d.strip('.')}" for d in rc.search if d.strip(".")]
    return [name, *searched] if name.count(".") >= rc.ndots else [*searched, name]


def lookup(name: str, server: Optional[str] = None, resolv_path: str = "/etc/resolv.conf",
           timeout: float = 2.0) -> tuple[int, str]:
    """Resolve ``name`` as busybox's nslookup does; returns (exit status, output text)."""
    from localcluster.network.dnsquery import query

    try:
        with open(resolv_path) as f:
            rc = parse_resolv_conf(f.read())
    except OSError:
        rc = ResolvConf()
    server = server or (rc.nameservers[0] if rc.nameservers else "127.0.0.1")
    head = f"Server:\t\t{server}\nAddress:\t{server}:53\n\n"
    timed_out = False
    for fqdn in candidates(name, rc):
        try:
            answer = query(fqdn, "A", server=server, timeout=timeout)
        except (TimeoutError, OSError):
            timed_out = True
            continue
        except ValueError as e:
            return 1, head + f"** server can't find {name}: {e}\n"
        addrs = [a["data"] for a in answer["answers"] if a["type"] == "A"]
        if answer["rcode"] == "NOERROR" and addrs:
            return 0, head + "".join(f"Name:\t{fqdn}\nAddress: {a}\n\n" for a in addrs)
    if timed_out:
        return 1, ";; connection timed out; no servers could be reached\n"
    return 1, head + f"** server can't find {name}: NXDOMAIN\n"


def main(argv: Optional[list[str]] = None) -> int:
    """``nslookup NAME [SERVER]``; returns the exit status (2 for a usage error)."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    if not 1 <= len(args) <= 2:
        print("usage: nslookup HOST [DNS_SERVER]", file=sys.stderr)
        return 2
    code, text = lookup(args[0], args[1] if len(args) > 1 else None)
    sys.stdout.write(text)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
