#!/usr/bin/env python3
"""nslookup NAME: NAME's IPv4 addresses through the C library's resolver (so the pod's
resolv.conf search list applies, as busybox 1.30's nslookup applies it), printed as
busybox prints them, under the name that answered (the search domain appended); exit 0,
or 1 with busybox's NXDOMAIN line."""
import socket
import sys

if len(sys.argv) < 2:
    print("usage: nslookup NAME [SERVER]", file=sys.stderr)
    sys.exit(1)
name = sys.argv[1]
try:
    infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM, 0, socket.AI_CANONNAME)
except (socket.gaierror, UnicodeError):
    print(f"** server can't find {name}: NXDOMAIN")
    sys.exit(1)
addrs = sorted({a[4][0] for a in infos})
print(f"Name:\t{infos[0][3] or name}")
for a in addrs:
    print(f"Address: {a}")
