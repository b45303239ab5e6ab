"""The apiserver's way to the nodes: an HTTP CONNECT proxy on a unix socket, which the
apiserver's egress selector (``EgressSelectorConfiguration``, egress ``cluster``) dials for
every connection to a kubelet, a pod or a webhook, as Konnectivity serves clusters whose
control plane has no route to the node network.

The control plane runs in the machine's own network namespace, which has no route to the
simulated nodes (10.100/10.101) or their pods (10.244), by design (``test_isolation``). A
real kubelet listens on its node's InternalIP:10250 inside the node's namespace, so the
apiserver could not reach it for ``kubectl logs`` or ``exec``. This proxy reads the target
of each ``CONNECT host:port``, picks the network namespace that holds it (a node's
InternalIP or NIC address, or an address in its pod CIDR, from ``<state>/cluster.json``)
and opens the TCP connection from inside that namespace (``serviceproxy.socket_in_netns``); any
other target (127.0.0.1: the node agents' log servers, webhooks of host processes) is
dialled from the machine's namespace as before. TLS passes through untouched.

Started by ``controlplane.ensure_control_plane`` before the apiserver (process
``egress-proxy``, socket ``<state>/run/egress.sock``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Optional

from localcluster.common.config import node_spec_by_name, pod_cidr
from localcluster.network.serviceproxy import _pipe, socket_in_netns

log = logging.getLogger("localcluster.cluster.egress")

SOCKET_NAME = "egress.sock"


def socket_path(state: Path) -> Path:
    return state / "run" / SOCKET_NAME


def config_yaml(state: Path) -> str:
    """The apiserver's ``--egress-selector-config-file`` content: egress ``cluster`` through
    this proxy (HTTP CONNECT over a unix socket)."""
    return (
        "apiVersion: apiserver.k8s.io/v1beta1\n"
        "kind: EgressSelectorConfiguration\n"
        "egressSelections:\n"
        "- name: cluster\n"
        "  connection:\n"
        "    proxyProtocol: HTTPConnect\n"
        "    transport:\n"
        "      uds:\n"
        f"        udsName: {socket_path(state)}\n"
    )


def netns_for(state: Path, host: str) -> Optional[str]:
    """The node namespace that holds address ``host`` (an InternalIP, a NIC address or a pod
    address of a node in ``<state>/cluster.json``), or None (dial from the machine's own
    namespace). Pure apart from reading that file; never raises."""
    try:
        addr = ipaddress.ip_address(host)
        nodes = json.loads((state / "cluster.json").read_text()).get("nodes") or {}
    except (ValueError, OSError):
        return None
    for name, info in nodes.items():
        try:
            spec = node_spec_by_name(name)
        except (ValueError, KeyError):
            continue
        own = {str(info.get("internalIP"))} | {str(a) for a in (info.get("nics") or {}).values()}
        if host in own or addr in ipaddress.ip_network(pod_cidr(spec.index)):
            return spec.netns
    return None


def dial(netns: Optional[str], host: str, port: int, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to ``host:port`` made inside ``netns`` (None: this namespace).
    Raises OSError."""
    if netns is None:
        return socket.create_connection((host, port), timeout=timeout)
    s = socket_in_netns(netns)
    try:
        s.settimeout(timeout)
        s.connect((host, port))  # the socket keeps the namespace it was made in
        s.settimeout(None)
        return s
    except OSError:
        s.close()
        raise


def _read_head(conn: socket.socket, limit: int = 8192) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(1024)
        if not chunk or len(buf) > limit:
            raise OSError("incomplete CONNECT request")
        buf += chunk
    return buf


def handle(state: Path, conn: socket.socket) -> None:
    """Serve one CONNECT: answer 200 and relay both ways, or 502 with the reason."""
    try:
        head = _read_head(conn).split(b"\r\n\r\n", 1)[0].decode("latin-1")
        method, target, _ = head.split("\r\n", 1)[0].split(" ", 2)
        host, _, port = target.rpartition(":")
        host = host.strip("[]")
        if method != "CONNECT" or not port.isdigit():
            raise ValueError(f"not a CONNECT: {head[:80]!r}")
        upstream = dial(netns_for(state, host), host, int(port))
    except (OSError, ValueError) as e:
        try:
            conn.sendall(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{e}".encode())
        except OSError:
            pass
        conn.close()
        log.info("refused: %s", e)
        return
    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    t = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
    t.start()
    _pipe(conn, upstream)
    t.join()
    conn.close()
    upstream.close()


def serve(state: Path) -> None:
    """Listen on ``<state>/run/egress.sock`` until killed. Raises OSError if it cannot bind."""
    path = socket_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    os.chmod(path, 0o600)
    srv.listen(256)
    log.info("egress proxy on %s", path)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(state, conn), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="localcluster.cluster.egress")
    ap.add_argument("--state", required=True)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(message)s")
    serve(Path(a.state).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
