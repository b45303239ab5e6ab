"""The sidecar's link evidence (:mod:`disttrain_probe.progress.tcpstate`) against the real
kernel: two network namespaces joined by a veth pair, a TCP connection between them. A
peer that only does not read (a rank stuck in Python, a frozen process) leaves nothing
unacknowledged; once the peer's node drops the sender's packets (an nft rule), the sender's
connection holds unacknowledged bytes after repeated retransmission timeouts and the peer
is named. Plus the parser on the kernel's format, generated."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain_probe.progress import tcpstate

PROBE_DIR = Path(__file__).resolve().parents[2] / "probe_image"

CLIENT = r'''
import json, socket, sys, time
from disttrain_probe.progress import tcpstate
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.setblocking(True)
for line in sys.stdin:
    if line.strip() == "send":
        s.sendall(b"x" * 1000)
    elif line.strip() == "read":
        print(json.dumps([t.__dict__ for t in tcpstate.read(min_retrans=int(sys.argv[3]))]), flush=True)
'''


def sh(*args: str) -> None:
    subprocess.run(list(args), check=True, capture_output=True, text=True)


@pytest.fixture
def pair(request):
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("needs root, iproute2 and nft (network namespaces)")
    tag = f"dtjt-{uuid.uuid4().hex[:6]}"
    a, b = f"{tag}-a", f"{tag}-b"
    request.addfinalizer(lambda: [subprocess.run(["ip", "netns", "del", ns], capture_output=True) for ns in (a, b)])
    sh("ip", "netns", "add", a)
    sh("ip", "netns", "add", b)
    sh("ip", "-n", a, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", b)
    for ns, ip in ((a, "10.251.0.1/24"), (b, "10.251.0.2/24")):
        sh("ip", "-n", ns, "addr", "add", ip, "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    return a, b


def _in(ns: str, code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(PROBE_DIR)}
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code, *args], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _ask(client: subprocess.Popen, what: str) -> list:
    assert client.stdin is not None and client.stdout is not None
    client.stdin.write(what + "\n")
    client.stdin.flush()
    return json.loads(client.stdout.readline()) if what == "read" else []


def test_a_peer_that_does_not_read_is_not_named_and_one_behind_a_drop_rule_is(pair):
    a, b = pair
    server = _in(a, "import socket, time\ns = socket.create_server(('10.251.0.1', 7000))\n"
                    "c, _ = s.accept()\nprint('accepted', flush=True)\ntime.sleep(60)")
    time.sleep(0.5)
    client = _in(b, CLIENT, "10.251.0.1", "7000", str(tcpstate.MIN_RETRANS))
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "accepted"
        _ask(client, "send")
        time.sleep(2.0)
        assert _ask(client, "read") == []  # acknowledged by the kernel though never read
        subprocess.run(
            ["ip", "netns", "exec", a, "nft", "-f", "-"], check=True, text=True,
            input="table inet t {\n chain input {\n  type filter hook input priority 0; policy accept;\n"
                  "  ip saddr 10.251.0.2 drop\n }\n}\n")
        _ask(client, "send")
        deadline, found = time.monotonic() + 10, []
        while time.monotonic() < deadline and not found:
            time.sleep(0.5)
            found = _ask(client, "read")
        assert len(found) == 1, found
        assert found[0]["peer"] == "10.251.0.1" and found[0]["sockets"] == 1
        assert found[0]["unacked"] == 1000 and found[0]["retrans"] >= tcpstate.MIN_RETRANS
    finally:
        for p in (client, server):
            p.kill()
            p.wait()


def _line(sl: int, rem: str, st_: str, tx: int, retrans: int) -> str:
    return (f"{sl:4d}: 0100640A:1F40 {rem}:0BB8 {st_} {tx:08X}:00000000 01:00000014 {retrans:08X}"
            f"     0        0 12345 2 0000000000000000 20 4 0 10 -1")


conns = st.lists(st.tuples(st.sampled_from(["0B00640A", "0C00640A", "0100007F", "00000000"]),
                           st.sampled_from(["01", "06", "0A", "02"]), st.integers(0, 2**20), st.integers(0, 20)),
                 max_size=12)


@given(conns)
def test_the_parser_keeps_established_connections_with_unacked_bytes_after_repeated_timeouts(rows):
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    lines = [header] + [_line(i, *row) for i, row in enumerate(rows)] + ["garbage", "  9: x y 01 zz:00 00 zz"]
    names = {"0B00640A": "10.100.0.11", "0C00640A": "10.100.0.12"}
    want: dict[str, list[int]] = {}
    for rem, st_, tx, retrans in rows:
        if rem in names and st_ == "01" and tx > 0 and retrans >= 3:
            w = want.setdefault(names[rem], [0, 0, 0])
            w[0], w[1], w[2] = w[0] + 1, w[1] + tx, max(w[2], retrans)
    got = tcpstate.peers(tcpstate.losing(lines))
    assert {t.peer: [t.sockets, t.unacked, t.retrans] for t in got} == want
    assert [t.retrans for t in got] == sorted((t.retrans for t in got), reverse=True)


def test_ipv6_and_ipv4_mapped_addresses_read_as_text():
    v6 = "000080FE00000000FF02000A3412ABFE"  # fe80::a00:2ff:feab:1234 printed word by word in host order
    mapped = "0000000000000000FFFF00000B00640A"
    lines = [_line(0, v6, "01", 10, 5), _line(1, mapped, "01", 10, 5)]
    assert [t.peer for t in tcpstate.peers(tcpstate.losing(lines))] == ["10.100.0.11", "fe80::a00:2ff:feab:1234"]
