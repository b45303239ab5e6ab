"""Running a function inside a network namespace (:mod:`localcluster.network.setns`): the
one helper behind the service relay, the egress proxy and DNS queries from a node."""

import os
import socket
import subprocess
import uuid

import pytest

from localcluster.network.setns import run_in

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


@pytest.fixture
def netns():
    name = f"dtj-t-setns-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_socket_made_inside_stays_there_and_the_caller_never_moves(netns):
    own = os.readlink("/proc/thread-self/ns/net")
    listener = run_in(netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    assert os.readlink("/proc/thread-self/ns/net") == own
    with listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        inside = run_in(netns, lambda: socket.create_connection(("127.0.0.1", port), timeout=2))
        with inside:
            conn, _ = listener.accept()
            conn.close()
    assert run_in(netns, lambda: os.readlink("/proc/thread-self/ns/net")) != own


def test_what_the_function_raises_reaches_the_caller(netns):
    with pytest.raises(ZeroDivisionError):
        run_in(netns, lambda: 1 // 0)


def test_a_missing_namespace_is_an_oserror():
    with pytest.raises(OSError):
        run_in("dtj-t-no-such-namespace", lambda: 1)
