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
(Python 3.11 has no os.setns; ctypes calls libc) and leaves again; a socket stays in the
namespace it was created in, so accepting and relaying run in the host namespace.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import threading

log = logging.getLogger("localcluster.network.serviceproxy")

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in_netns(netns: str) -> socket.socket:
    """A new TCP socket made inside the named network namespace (``/run/netns/<netns>``).
    A socket keeps the namespace it was made in, so binding, listening and connecting work
    from any thread afterwards. A thread of its own switches namespace (setns(2) is per
    thread), so the caller's never does. Raises OSError (no such namespace...)."""
    result: dict[str, object] = {}

    def work() -> None:
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            try:
                target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
                try:
                    _setns(target)
                    try:
                        result["sock"] = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    finally:
                        _setns(own)
                finally:
                    os.close(target)
            finally:
                os.close(own)
        except OSError as e:
            result["error"] = e

    t = threading.Thread(target=work, name=f"setns-{netns}")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]


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
