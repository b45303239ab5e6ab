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
from probe_helpers import PY, ROOT, free_port, probe_env, run_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary
from disttrain_probe.ground import config as C
from disttrain_probe.phases import dialing, masterstore, reachmaster


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


def test_config_reads_the_beacon_port():
    base = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert C.load([], base).beacon_port is None
    assert C.load([], dict(base, DISTTRAIN_PROBE_BEACON_PORT="")).beacon_port is None
    assert C.load([], dict(base, DISTTRAIN_PROBE_BEACON_PORT="29501")).beacon_port == 29501
    for bad in ("29500", "0", "65536", "x"):  # the master port itself, not a port
        with pytest.raises(C.ConfigError, match="DISTTRAIN_PROBE_BEACON_PORT"):
            C.load([], dict(base, DISTTRAIN_PROBE_BEACON_PORT=bad))


def test_give_up_time():
    # no evidence: the phase deadline, whatever the grace
    assert dialing.dial_give_up_at(100.0, 0.0, 3.0, False, 5.0) == 100.0
    # evidence, dialling starts early: this probe's start + grace
    assert dialing.dial_give_up_at(100.0, 0.0, 1.0, True, 5.0) == 5.0
    # evidence, dialling starts late (slow torch import): still dial MIN_DIAL_SECONDS
    assert dialing.dial_give_up_at(100.0, 0.0, 9.0, True, 5.0) == 9.0 + dialing.MIN_DIAL_SECONDS
    # never past the phase deadline
    assert dialing.dial_give_up_at(4.0, 0.0, 3.0, True, 5.0) == 4.0


def test_listen_early_takes_the_port_and_a_second_one_is_told_why():
    port = free_port()
    sock, err = masterstore.listen_early(port)
    try:
        assert err is None and sock is not None
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # queued, accepted later
        again, err2 = masterstore.listen_early(port)
        assert again is None and "in use" in err2.lower()
    finally:
        sock.close()


def test_store_serves_connections_queued_before_it_existed():
    import torch.distributed as dist

    port = free_port()
    sock, err = masterstore.listen_early(port)
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
    store = masterstore.serve_store(dist, cfg, sock, timedelta(seconds=20), "127.0.0.1")
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
    assert run.rc == 1 and rep.failure.reason == vocabulary.MASTER_PORT_REFUSED
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
    # rank 0 listened before its (background) torch import, started after the inventory,
    # was even over
    t = reps[0].timings
    assert listening_after < t.get("inventory", 0.0) + t["torchImport"], (listening_after, t)


def test_host_check_tells_a_host_that_answers_elsewhere(tmp_path):
    """Port 1 of 127.0.0.1 is closed: a live host resets it (refused); the ARP table of
    a loopback address has no entry."""
    h = dialing.host_check("127.0.0.1", 29500, 1.0)
    assert h == {"port": 1, "r": "refused", "arp": None}
    assert "the master port alone is filtered" in dialing.host_words(h, "node-b")
    table = tmp_path / "arp"
    table.write_text("IP address HW type Flags HW address Mask Device\n"
                     "10.100.0.11 0x1 0x2 02:00:00:00:00:01 * eth1\n"
                     "10.100.0.12 0x1 0x0 00:00:00:00:00:00 * eth0\n")
    assert dialing.arp_state("10.100.0.11", str(table)) == "complete"
    assert dialing.arp_state("10.100.0.12", str(table)) == "incomplete"
    assert dialing.arp_state("10.100.0.13", str(table)) is None
    lost = dialing.host_words({"port": 1, "r": "timeout", "arp": "complete"}, "node-b")
    assert "its replies to node-b are lost" in lost


def test_a_silent_port_on_a_host_that_answers_elsewhere_is_decided_without_evidence():
    """Gang-scheduled probes carry no evidence of rank 0's start: a dial that times out
    while the host resets another port is a filter on the master port, decided at once."""
    import socket
    import time

    from disttrain_probe.ground.deadline import Deadline

    # both the dial (a SYN with no answer) and the host check are stubbed: no packet is sent
    calls = []

    def answers_elsewhere(addr, port, timeout):
        calls.append((addr, port))
        return {"port": 1, "r": "refused", "arp": "complete"}

    t0 = time.monotonic()
    real_dial = dialing._dial
    try:
        dialing._dial = lambda addrs, port, deadline: (None, "timeout", 0.0)
        addr, last, took, h = dialing.dial_until_decided(["10.9.9.9"], 29500, Deadline(time.monotonic() + 30),
                                                         check=answers_elsewhere)
    finally:
        dialing._dial = real_dial
    assert addr is None and last == "timeout" and h["r"] == "refused" and calls == [("10.9.9.9", 29500)]
    assert time.monotonic() - t0 < 5

    # a refusal (nothing listening yet) is never decided early: dial until the deadline
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()  # the port is closed: refused
    addr, last, took, h = dialing.dial_until_decided(["127.0.0.1"], port, Deadline(time.monotonic() + 1.5),
                                                     check=answers_elsewhere)
    assert addr is None and last == "refused" and h is None and took >= 1.0


def test_silence_on_the_master_port_and_on_another_port_decides_after_the_window():
    """A host that is up resets a closed port whether or not rank 0 listens yet, so silence
    on both ports for the window is decided without evidence of rank 0's start (the
    partition-one-pair scenario waited for the rendezvous deadline before)."""
    from disttrain_probe.ground.deadline import Deadline

    def silent_dial(addrs, port, deadline):
        time.sleep(min(0.2, max(0.0, deadline.remaining())))
        return None, "timeout", 0.2

    def silent_host(addr, port, timeout):
        return {"port": 1, "r": "timeout", "arp": "complete"}

    real_dial = dialing._dial
    try:
        dialing._dial = silent_dial
        t0 = time.monotonic()
        addr, last, took, h = dialing.dial_until_decided(["10.9.9.9"], 29500, Deadline(t0 + 30),
                                                         check=silent_host,
                                                         patience=dialing.Patience(0.2, 1.0))
        waited = time.monotonic() - t0
        # ... but a host that resets other ports while the master port is silent decides at once,
        # and one that is unreachable (no ARP answer) is not silence: dial to the deadline
        addr2, last2, took2, h2 = dialing.dial_until_decided(
            ["10.9.9.9"], 29500, Deadline(time.monotonic() + 1.5),
            check=lambda a, p, t: {"port": 1, "r": "unreachable", "arp": "incomplete"},
            patience=dialing.Patience(0.2, 0.5))
    finally:
        dialing._dial = real_dial
    assert addr is None and last == "timeout" and h["r"] == "timeout" and h["silentSeconds"] >= 1.0
    assert 0.9 <= waited < 5
    assert addr2 is None and h2 is None and took2 >= 1.4


def test_a_refused_master_port_with_rank_0s_beacon_answering_is_decided_at_once():
    """Rank 0 binds the master port, then its beacon port. A rank refused on the master
    port (here: nothing listens on it, as a REJECT rule would look) that rank 0's beacon
    answers with this job's token stops dialling at once; another job's token, or no
    beacon, leaves the refusal undecided until the deadline."""
    import time
    from types import SimpleNamespace

    from disttrain_probe.ground.deadline import Deadline

    master, bport = free_port(), free_port()
    while bport == master:
        bport = free_port()
    token = masterstore.beacon_token(SimpleNamespace(job_uid="uid-1", attempt=2))
    assert token == b"disttrain-probe uid-1 2 rank0\n"
    sock, err = masterstore.start_beacon(bport, token)
    assert sock is not None and err is None
    try:
        assert masterstore.beacon_answers("127.0.0.1", bport, token)
        other = masterstore.beacon_token(SimpleNamespace(job_uid="uid-2", attempt=2))
        assert not masterstore.beacon_answers("127.0.0.1", bport, other)  # another job's rank 0
        assert not masterstore.beacon_answers("127.0.0.1", master, token)  # nothing there
        t0 = time.monotonic()
        addr, last, took, h = dialing.dial_until_decided(["127.0.0.1"], master, Deadline(t0 + 20),
                                                         beacon=(bport, token))
        assert addr is None and last == "refused" and h["listening"] is True and h["port"] == bport
        assert time.monotonic() - t0 < 5
        addr, last, took, h = dialing.dial_until_decided(["127.0.0.1"], master,
                                                         Deadline(time.monotonic() + 2.5),
                                                         beacon=(bport, other))
        assert addr is None and last == "refused" and h is None and took >= 2.0
    finally:
        sock.close()


def _late_record_case(monkeypatch, master_after: float, sibling_ok: bool, resolve_seconds: float,
                      deadline_s: float):
    """reach_master for rank 0 of a gang whose own record (MASTER_ADDR j-0.j) appears
    ``master_after`` seconds in, with rank 1's name resolving or not; no packet is sent."""
    from types import SimpleNamespace

    from disttrain_probe.ground.deadline import Deadline

    t0 = time.monotonic()

    def fake_resolve(name):
        if name == "j-0.j" and time.monotonic() - t0 >= master_after:
            return ["10.255.0.1"]
        if name == "j-1.j" and sibling_ok:
            return ["10.255.0.2"]
        raise OSError(-2, "Name or service not known")

    class Tracker:
        def step(self, *a):
            pass

    monkeypatch.setattr(reachmaster, "resolve", fake_resolve)
    monkeypatch.setattr(reachmaster, "route_get", lambda *a, **k: None)
    cfg = SimpleNamespace(node_name="node-a", rank=0, world_size=2, master_addr="j-0.j",
                          master_port=29500, resolve_seconds=resolve_seconds,
                          peer_dns_name="j-1.j", loopback_requested=False, agent_store=False)
    state = {"warnings": []}
    try:
        out = reachmaster.reach_master(cfg, {"interfaces": []}, Deadline(t0 + deadline_s), Tracker(), state)
        return out, None, state, time.monotonic() - t0
    except Exception as e:  # ProbeFailure
        return None, e, state, time.monotonic() - t0


def test_a_late_master_record_is_waited_for_when_another_name_of_the_job_resolves(monkeypatch):
    """Seen at 32 nodes (gang probes on 2 cores): rank 0's record came 12+ s after some
    ranks started and they failed a healthy job with MasterAddrUnresolvable. When another
    name of the job resolves, the Service and DNS work: wait for the record to the
    deadline; when none does, the name fails after resolve_seconds, as before."""
    out, err, state, took = _late_record_case(monkeypatch, 1.5, True, 0.5, 10)
    assert err is None and state["master"]["resolved"] == ["10.255.0.1"]
    assert state["master"]["peerName"] == "j-1.j" and 1.4 < took < 5
    out, err, state, took = _late_record_case(monkeypatch, 99, True, 0.5, 4)
    assert err is not None and err.reason == vocabulary.MASTER_ADDR_UNRESOLVABLE
    assert "while j-1.j (this job's) resolves" in err.message and 2.0 < took < 4.5
    out, err, state, took = _late_record_case(monkeypatch, 1.5, False, 0.5, 10)
    assert err is not None and err.reason == vocabulary.MASTER_ADDR_UNRESOLVABLE and took < 1.4
    assert "headless Service name that exists" in err.message and "peerName" not in state["master"]


def test_the_resolve_window_grows_with_the_probe_budget():
    """At 32 simulated nodes on 2 cores (probe budget 300 s) rank 0's record came more than
    11 s after the others started resolving it: the window is a sixth of a larger budget."""
    base = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "j-0.j", "MASTER_PORT": "29500"}
    assert C.load([], base).resolve_seconds == 10.0
    assert C.load([], dict(base, DISTTRAIN_PROBE_TIMEOUT_SECONDS="300")).resolve_seconds == 50.0
    assert C.load([], dict(base, DISTTRAIN_PROBE_TIMEOUT_SECONDS="300",
                           DISTTRAIN_PROBE_RESOLVE_SECONDS="4")).resolve_seconds == 4.0


def test_a_lookup_the_resolver_never_answers_is_abandoned_at_the_window(monkeypatch):
    """getaddrinfo has no timeout: with a DNS server that never answers (two NICs on one
    subnet, queries leaving by the wrong one) each lookup cost the resolver's timeouts for
    every search domain, and rank 0 reported long after its 10 s window."""
    from disttrain_probe.ground.deadline import Deadline

    monkeypatch.setattr(reachmaster, "resolve", lambda name: (time.sleep(5), ["10.0.0.1"])[1])
    t0 = time.monotonic()
    with pytest.raises(OSError, match="no answer from the resolver"):
        reachmaster._resolve_within("j-0.j", 0.3)
    got, err = reachmaster._resolve_retry("j-0.j", Deadline(time.monotonic() + 30), 1.0)
    assert got == [] and "no answer from the resolver" in err
    assert time.monotonic() - t0 < 3


def test_rank_0_serves_the_store_without_dialing_its_own_answer_for_the_name():
    """Rank 0's node may resolve the MASTER_ADDR name to an address it does not hold (a stale
    /etc/hosts entry): the probe must still serve the store, at once, and leave the verdict to
    the resolution it recorded. Before, torch's client inside rank 0's store dialed the name
    and the probe hung there until its phase deadline."""
    import torch.distributed as dist  # noqa: F401 - the store is torch's

    from disttrain_probe.ground.deadline import Deadline
    from disttrain_probe.phases import rendezvous

    port = free_port()
    sock, err = masterstore.listen_early(port)
    assert err is None
    cfg = C.Config(rank=0, world_size=1, master_addr="rank0.stale.invalid", master_port=port, node_name="n")
    state = {"master_listener": (sock, None), "self_summary": lambda: {"node": "n"},
             "master": {"resolved": ["10.100.0.99"], "connected": None}}

    class Steps:
        def step(self, *_):
            pass

    t0 = time.monotonic()
    store, bus = rendezvous.join_store(cfg, {"interfaces": [{"addrs": ["10.100.0.1/24"]}]},
                                      Deadline(time.monotonic() + 20), Steps(), state, None)
    assert time.monotonic() - t0 < 10  # the old code dialed the name for the whole deadline
    assert store.host == "127.0.0.1" and bus.nodes[0] == "n"


def test_a_store_that_closed_the_early_socket_on_failure_is_served_anew():
    """Seen under load on the direct path: rank 0 failed "could not listen on MASTER_PORT:
    [Errno 9] Bad file descriptor": TCPStore(master_listen_fd=...) failed and closed the
    descriptor it was handed, and closing the early socket again raised EBADF instead of
    binding the port anew."""
    import os

    calls = []

    class FakeDist:
        @staticmethod
        def TCPStore(**kw):  # noqa: N802 - torch's name
            calls.append(sorted(kw))
            if "master_listen_fd" in kw:
                os.close(kw["master_listen_fd"])
                raise RuntimeError("the store failed and closed its descriptor")
            return "store"

    port = free_port()
    sock, err = masterstore.listen_early(port)
    assert err is None
    cfg = C.Config(rank=0, world_size=2, master_addr="127.0.0.1", master_port=port, node_name="n")
    assert masterstore.serve_store(FakeDist, cfg, sock, timedelta(seconds=5), "127.0.0.1") == "store"
    assert len(calls) == 2 and "master_listen_fd" not in calls[1]
