"""The `kubernetes` Service for pods: a TCP relay from 10.96.0.1:443 inside a node's
network namespace to the apiserver on the host's loopback.

Pods live in network namespaces with no route out of the cluster's own addresses, so
they cannot reach the apiserver on 127.0.0.1:16443. Real clusters solve this with
kube-proxy and the `kubernetes` Service's ClusterIP; we do the same in miniature: the
ClusterIP (10.96.0.1, the first address of --service-cluster-ip-range, in the
apiserver's serving certificate) sits on the node namespace's `lo` (as kube-proxy's IPVS
mode puts service IPs on a dummy device), and the node agent listens there and relays
raw TCP (TLS passes through untouched) to the apiserver. No route to the machine's real
interfaces is added; the isolation test still holds.

The listening socket is created by a thread that enters the namespace with setns(2)
(:mod:`localcluster.network.setns`) and leaves again; a socket stays in the
namespace it was created in, so accepting and relaying run in the host namespace.
"""

from __future__ import annotations

import logging
import socket
import threading

from localcluster.network.setns import run_in

log = logging.getLogger("localcluster.network.serviceproxy")

def socket_in_netns(netns: str) -> socket.socket:
    """A new TCP socket made inside the named network namespace (``/run/netns/<netns>``),
    usable from any thread afterwards (:func:`localcluster.network.setns.run_in`). Raises
    OSError (no such namespace...)."""
    return run_in(netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))


def listen_in_netns(netns: str, addr: str, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``addr:port`` inside the named network namespace
    (``/run/netns/<netns>``). Raises OSError (no such namespace, address not assigned...)."""
    s = socket_in_netns(netns)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(backlog)
    except OSError:
        s.close()
        raise
    return s


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class ServiceProxy(threading.Thread):
    """Relay every connection to ``netns``:``addr``:``port`` to ``upstream`` (host side)."""

    def __init__(self, netns: str, addr: str, port: int, upstream: tuple[str, int]):
        super().__init__(name=f"svc-{addr}:{port}", daemon=True)
        self.sock = listen_in_netns(netns, addr, port)
        self.upstream = upstream

    def run(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
        except OSError as e:
            log.warning("service proxy: upstream %s unreachable: %s", self.upstream, e)
            client.close()
            return
        t = threading.Thread(target=_pipe, args=(server, client), daemon=True)
        t.start()
        _pipe(client, server)
        t.join()
        client.close()
        server.close()
