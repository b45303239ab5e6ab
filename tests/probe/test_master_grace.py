"""Fast MasterPort* diagnosis, probe side: rank 0 listens on the master port before torch
is imported and hands the socket to its TCPStore; a dialling rank that knows rank 0's probe
already runs (DISTTRAIN_PROBE_MASTER_STARTED_AT) gives up after a short grace instead of the
whole rendezvous deadline, and without that evidence keeps the old patience."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from datetime import timedelta

import pytest

from disttrain.report import parse_report
from disttrain_probe import config as C
from disttrain_probe import reasons as R
from disttrain_probe import rendezvous as RV

from probe_helpers import PY, ROOT, free_port, probe_env, run_ranks


def test_config_reads_the_evidence_and_the_grace():
    base = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    cfg = C.load([], base)
    assert cfg.master_started_at is None and cfg.master_grace_seconds == C.DEFAULT_MASTER_GRACE
    cfg = C.load([], dict(base, DISTTRAIN_PROBE_MASTER_STARTED_AT="2026-11-30T13:00:00+01:00",
                          DISTTRAIN_PROBE_MASTER_GRACE_SECONDS="2.5"))
    assert cfg.master_started_at == "2026-11-30T12:00:00Z" and cfg.master_grace_seconds == 2.5
    cfg = C.load(["--master-started-at", "2026-11-30T12:00:00Z", "--master-grace-seconds", "0"], base)
    assert cfg.master_started_at == "2026-11-30T12:00:00Z" and cfg.master_grace_seconds == 0.0
    for bad in ("yesterday", "2026-11-30T12:00:00"):  # no zone: ambiguous across nodes
        with pytest.raises(C.ConfigError, match="DISTTRAIN_PROBE_MASTER_STARTED_AT"):
            C.load([], dict(base, DISTTRAIN_PROBE_MASTER_STARTED_AT=bad))
    with pytest.raises(C.ConfigError, match="DISTTRAIN_PROBE_MASTER_GRACE_SECONDS"):
        C.load([], dict(base, DISTTRAIN_PROBE_MASTER_GRACE_SECONDS="-1"))


def test_give_up_time():
    # no evidence: the phase deadline, whatever the grace
    assert RV.dial_give_up_at(100.0, 0.0, 3.0, False, 5.0) == 100.0
    # evidence, dialling starts early: this probe's start + grace
    assert RV.dial_give_up_at(100.0, 0.0, 1.0, True, 5.0) == 5.0
    # evidence, dialling starts late (slow torch import): still dial MIN_DIAL_SECONDS
    assert RV.dial_give_up_at(100.0, 0.0, 9.0, True, 5.0) == 9.0 + RV.MIN_DIAL_SECONDS
    # never past the phase deadline
    assert RV.dial_give_up_at(4.0, 0.0, 3.0, True, 5.0) == 4.0


def test_listen_early_takes_the_port_and_a_second_one_is_told_why():
    port = free_port()
    sock, err = RV.listen_early(port)
    try:
        assert err is None and sock is not None
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # queued, accepted later
        again, err2 = RV.listen_early(port)
        assert again is None and "in use" in err2.lower()
    finally:
        sock.close()


def test_store_serves_connections_queued_before_it_existed():
    import torch.distributed as dist

    port = free_port()
    sock, err = RV.listen_early(port)
    assert err is None
    got = {}

    def client():  # connects while "rank 0" has no store yet
        try:
            st = dist.TCPStore("127.0.0.1", port, 2, False, timeout=timedelta(seconds=20))
            got["v"] = st.get("k")
        except Exception as e:  # pragma: no cover - reported by the assert below
            got["err"] = repr(e)

    t = threading.Thread(target=client)
    t.start()
    time.sleep(1.0)
    cfg = C.Config(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port, node_name="n")
    store = RV._serve_store(dist, cfg, sock, timedelta(seconds=20))
    store.set("k", "v")
    t.join(25)
    assert got == {"v": b"v"}
    assert store.port == port


def test_refused_with_evidence_fails_after_the_grace_not_the_deadline(tmp_path):
    port = free_port()  # nobody listens: as if a firewall rejected rank 0's port
    [run] = run_ranks([probe_env(1, 2, port, DISTTRAIN_PROBE_TIMEOUT_SECONDS="40",
                                 DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                                 DISTTRAIN_PROBE_MASTER_STARTED_AT="2026-11-30T12:00:00Z",
                                 DISTTRAIN_PROBE_MASTER_GRACE_SECONDS="1")], tmp_path, timeout=60)
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.failure.reason == R.MASTER_PORT_REFUSED
    assert "rank 0's probe has been running since 2026-11-30T12:00:00Z" in rep.failure.message
    assert "rank 0 not started" not in rep.failure.message
    # the rendezvous budget is ~16 s here; with the evidence it took about MIN_DIAL_SECONDS
    assert rep.timings["rendezvous"] < 8.0, rep.timings


def test_slow_rank0_is_no_false_alarm_even_with_zero_grace(tmp_path):
    """Rank 0 binds before importing torch: a peer with evidence and no grace at all
    connects at once and waits for the store, however long rank 0's import takes."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ)
        env.pop("NCCL_SOCKET_IFNAME", None)
        env.pop("GLOO_SOCKET_IFNAME", None)
        env.update(probe_env(rank, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                             DISTTRAIN_PROBE_REPORT_PATH=str(tmp_path / f"r{rank}.json"),
                             PYTHONUNBUFFERED="1"))
        if rank == 1:
            env.update(DISTTRAIN_PROBE_MASTER_STARTED_AT="2026-11-30T12:00:00Z",
                       DISTTRAIN_PROBE_MASTER_GRACE_SECONDS="0")
        t0 = time.monotonic()
        procs.append(subprocess.Popen([PY, "-m", "disttrain_probe"], env=env, cwd=str(ROOT),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        if rank == 0:  # the operator starts ranks 1.. once rank 0's container runs
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() - t0 < 20, "rank 0 never listened"
                    time.sleep(0.02)
            listening_after = time.monotonic() - t0
    for p in procs:
        p.communicate(timeout=90)
    reps = [parse_report((tmp_path / f"r{r}.json").read_text()) for r in (0, 1)]
    assert [p.returncode for p in procs] == [0, 0], [r.failure for r in reps]
    assert all(r.ok for r in reps)
    # rank 0 listened before its (background) torch import was even over
    assert listening_after < reps[0].timings["torchImport"], (listening_after, reps[0].timings)


def test_host_check_tells_a_host_that_answers_elsewhere(tmp_path):
    """Port 1 of 127.0.0.1 is closed: a live host resets it (refused); the ARP table of
    a loopback address has no entry."""
    from disttrain_probe import rendezvous as RV
    h = RV.host_check("127.0.0.1", 29500, 1.0)
    assert h == {"port": 1, "r": "refused", "arp": None}
    assert "the master port alone is filtered" in RV._host_words(h, "node-b")
    table = tmp_path / "arp"
    table.write_text("IP address HW type Flags HW address Mask Device\n"
                     "10.100.0.11 0x1 0x2 02:00:00:00:00:01 * eth1\n"
                     "10.100.0.12 0x1 0x0 00:00:00:00:00:00 * eth0\n")
    assert RV.arp_state("10.100.0.11", str(table)) == "complete"
    assert RV.arp_state("10.100.0.12", str(table)) == "incomplete"
    assert RV.arp_state("10.100.0.13", str(table)) is None
    lost = RV._host_words({"port": 1, "r": "timeout", "arp": "complete"}, "node-b")
    assert "its replies to node-b are lost" in lost


def test_a_silent_port_on_a_host_that_answers_elsewhere_is_decided_without_evidence():
    """Gang-scheduled probes carry no evidence of rank 0's start: a dial that times out
    while the host resets another port is a filter on the master port, decided at once."""
    import socket
    import time

    from disttrain_probe import rendezvous as rv
    from disttrain_probe.deadline import Deadline

    # both the dial (a SYN with no answer) and the host check are stubbed: no packet is sent
    calls = []

    def answers_elsewhere(addr, port, timeout):
        calls.append((addr, port))
        return {"port": 1, "r": "refused", "arp": "complete"}

    t0 = time.monotonic()
    real_dial = rv._dial
    try:
        rv._dial = lambda addrs, port, deadline: (None, "timeout", 0.0)
        addr, last, took, h = rv.dial_until_decided(["10.9.9.9"], 29500, Deadline(time.monotonic() + 30),
                                                    check=answers_elsewhere)
    finally:
        rv._dial = real_dial
    assert addr is None and last == "timeout" and h["r"] == "refused" and calls == [("10.9.9.9", 29500)]
    assert time.monotonic() - t0 < 5

    # a refusal (nothing listening yet) is never decided early: dial until the deadline
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()  # the port is closed: refused
    addr, last, took, h = rv.dial_until_decided(["127.0.0.1"], port, Deadline(time.monotonic() + 1.5),
                                                check=answers_elsewhere)
    assert addr is None and last == "refused" and h is None and took >= 1.0
