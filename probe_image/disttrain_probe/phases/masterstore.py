"""Rank 0's side of the rendezvous: the master port it listens on as it starts, the beacon
that tells its peers it listens, and the TCPStore that adopts the early socket.

Rank 0 binds and listens on MASTER_PORT as soon as it starts (:func:`listen_early`, before
torch is imported) and hands the socket to the TCPStore later (:func:`serve_store`), so
peers' connections queue until it is ready. Right after, it listens on the beacon port
(:func:`start_beacon`), which answers each connection with this job's token: a peer refused
on MASTER_PORT that the beacon answers knows the refusal is a rule (:func:`beacon_answers`).
"""
from __future__ import annotations

import errno
import os
import socket
import threading
import time
from datetime import timedelta
from typing import Any, Optional, Tuple

LISTEN_BACKLOG = 4096  # connections queue here while rank 0 imports torch


def listen_early(port: int) -> Tuple[Optional[socket.socket], Optional[str]]:
    """Bind and listen on TCP ``port`` on every address (IPv6 dual-stack, else IPv4), as
    the TCPStore would, so peers can connect before torch is even imported.

    Returns (socket, None), or (None, the error) when the port cannot be bound (another
    process holds it: the caller reports that). Never raises."""
    err = None
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        s = None
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((host, port))
            s.listen(LISTEN_BACKLOG)
            return s, None
        except OSError as e:
            if s is not None:
                s.close()
            # no IPv6 here: try IPv4; anything else (the port is taken) is the answer
            if family == socket.AF_INET6 and e.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL,
                                                         errno.EPROTONOSUPPORT, errno.EINVAL):
                continue
            err = str(e)
            break
    return None, err or "cannot bind"


def stop_listening(sock: Optional[socket.socket]) -> None:
    """Stop listening on ``sock`` (:func:`listen_early`'s or the beacon's) and close it: a
    shutdown first, so an ``accept`` blocked in the beacon's thread returns and the port is
    free at once. Nothing for None or a socket already closed or handed to the TCPStore
    (detached). Never raises."""
    if sock is None or sock.fileno() < 0:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def port_free(port: int, wait: float = 0.0, poll: float = 0.05) -> bool:
    """True when TCP ``port`` can be bound on every address as a TCPStore binds it
    (SO_REUSEADDR), trying for up to ``wait`` seconds: nothing listens there any more. Binds
    without listening (a peer's dial meanwhile is refused and retried, never accepted and
    dropped). Never raises."""
    end = time.monotonic() + max(0.0, wait)
    while True:
        for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
            try:
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                    s.bind((host, port))
                return True
            except OSError as e:
                if family == socket.AF_INET6 and e.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL,
                                                             errno.EPROTONOSUPPORT, errno.EINVAL):
                    continue  # no IPv6 here: IPv4
                break
        if time.monotonic() >= end:
            return False
        time.sleep(poll)


_TCP_FILES = ("/proc/net/tcp", "/proc/net/tcp6")
_ESTABLISHED = "01"  # the ``st`` column of /proc/net/tcp (include/net/tcp_states.h)


def connected_to(port: int) -> Optional[int]:
    """How many of this process's TCP connections to remote ``port`` are ESTABLISHED (a
    rank's client of rank 0's TCPStore on MASTER_PORT: it leaves ESTABLISHED once rank 0
    closes the store), read from /proc without a byte sent; None when /proc cannot tell.
    Never raises."""
    try:
        mine = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                mine.add(target[8:-1])
        count, read = 0, False
        for path in _TCP_FILES:
            try:
                with open(path, encoding="ascii", errors="replace") as f:
                    lines = f.read().splitlines()[1:]
            except OSError:
                continue
            read = True
            for line in lines:
                cols = line.split()
                if len(cols) > 9 and cols[3] == _ESTABLISHED and cols[9] in mine \
                        and int(cols[2].rpartition(":")[2], 16) == port:
                    count += 1
        return count if read else None
    except (OSError, ValueError):
        return None


BEACON_SECONDS = 1.0  # a dial of rank 0's beacon port, connect and read


def beacon_token(cfg: Any) -> bytes:
    """What rank 0's beacon says, one line naming the job (UID) and the probe attempt, so
    a peer never takes another service (or another job's probe) on that port for its rank 0."""
    return f"disttrain-probe {getattr(cfg, 'job_uid', None) or '-'} " \
           f"{getattr(cfg, 'attempt', None) or '-'} rank0\n".encode()


def start_beacon(port: int, token: bytes) -> Tuple[Optional[socket.socket], Optional[str]]:
    """Rank 0, right after :func:`listen_early` bound MASTER_PORT: listen on ``port`` on
    every address and answer each connection with ``token`` (then close it), from a daemon
    thread, for the life of the probe. Returns (socket, None) or (None, the error); never
    raises (a port that cannot be bound only loses the evidence)."""
    sock, err = listen_early(port)
    if sock is None:
        return None, err

    def serve() -> None:
        while True:
            try:
                c, _ = sock.accept()
            except OSError:
                return
            try:
                c.settimeout(1.0)
                c.sendall(token)
            except OSError:
                pass
            finally:
                c.close()

    threading.Thread(target=serve, name="probe-beacon", daemon=True).start()
    return sock, None


def beacon_answers(addr: str, port: int, token: bytes, timeout: float = BEACON_SECONDS) -> bool:
    """True when ``addr``:``port`` answers with exactly ``token`` (this job's rank 0 probe,
    which listened on MASTER_PORT before it listened here) within ``timeout`` seconds."""
    return beacon_reply(addr, port, token, timeout) == "token"


def beacon_reply(addr: str, port: int, token: bytes, timeout: float = BEACON_SECONDS) -> str:
    """What ``addr``:``port`` did, in ``timeout`` seconds: "token" (rank 0's probe answered),
    "closed" (the connection was accepted, then closed or reset before a byte came: rank 0's
    probe always sends the token at once, so something between intercepts the connection,
    such as a service-mesh sidecar's proxy), "other" (other bytes, or silence), or "none"
    (no connection). Never raises."""
    try:
        with socket.create_connection((addr, port), timeout=max(0.05, timeout)) as c:
            c.settimeout(max(0.05, timeout))
            got = b""
            try:
                while len(got) < len(token):
                    more = c.recv(len(token) - len(got))
                    if not more:
                        break
                    got += more
            except ConnectionResetError:
                pass
            except OSError:
                return "other"
            if got == token:
                return "token"
            return "closed" if not got else "other"
    except ConnectionResetError:  # reset as connect() returned: accepted, then reset
        return "closed"
    except OSError:
        return "none"


def closed_on_connect(addr: str, port: int, wait: float = 1.0) -> bool:
    """True when a connection to ``addr``:``port`` is accepted and then closed or reset
    within ``wait`` seconds with not a byte sent. A TCPStore server never does that (it
    waits for the client to speak), so on MASTER_PORT it means a proxy took the connection
    (a service-mesh sidecar's). False for anything else, a refusal included. Never raises."""
    try:
        with socket.create_connection((addr, port), timeout=max(0.05, wait)) as c:
            c.settimeout(max(0.05, wait))
            try:
                return c.recv(1) == b""
            except ConnectionResetError:
                return True
            except OSError:
                return False  # silence: what a TCPStore server does
    except ConnectionResetError:  # reset as connect() returned: accepted, then reset
        return True
    except OSError:
        return False


def serve_store(dist: Any, cfg: Any, sock: Optional[socket.socket], timeout: timedelta,
                own_addr: str) -> Any:
    """Rank 0's TCPStore, adopting the early socket (torch >= 2.4: ``master_listen_fd``) so
    connections queued on it are served; older torch binds the port itself after the early
    socket is closed. Either way the server listens on every address; torch's own client
    in rank 0 dials ``own_addr`` (an address of this node, not the MASTER_ADDR name: a name
    this node resolves elsewhere would hang the probe here, and the verdict reports it
    instead). Raises what TCPStore raises."""
    kw = dict(host_name=own_addr, port=cfg.master_port, world_size=cfg.world_size,
              is_master=True, timeout=timeout, wait_for_workers=False)
    if sock is not None:
        try:
            store = dist.TCPStore(master_listen_fd=sock.fileno(), **kw)
            sock.detach()  # the store owns the descriptor now
            return store
        except Exception:  # no master_listen_fd (older torch), or it was refused
            try:
                sock.close()
            except OSError:  # torch closed the descriptor it was handed: bind anew below
                pass
    return dist.TCPStore(**kw)
