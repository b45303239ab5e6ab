"""The real probe, as subprocesses on loopback: the contract with the operator and failures."""
from __future__ import annotations

import re
import time

import pytest
from probe_helpers import free_port, probe_env, run_ranks, start_ranks, wait_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary


@pytest.fixture(scope="module")
def loopback_run(tmp_path_factory):
    port = free_port()
    tmp = tmp_path_factory.mktemp("lo")
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", NODE_NAME="host-a",
                      POD_NAME=f"probe-{r}") for r in range(2)]
    return run_ranks(envs, tmp, timeout=60)


def test_contract_every_rank_report_parses(loopback_run):
    for run in loopback_run:
        assert run.rc == 0, run.stdout + run.stderr
        assert 0 < len(run.report_text.encode()) <= 4096
        rep = parse_report(run.report_text)
        assert rep.v == 1 and rep.ok and rep.rank == run.rank and rep.world_size == 2
        assert rep.failure is None and rep.phase == "report"
        assert rep.node == "host-a" and rep.pod == f"probe-{run.rank}"
        assert rep.versions and rep.versions.torch and rep.versions.python
        assert rep.master and rep.master.port and rep.master.resolved == ["127.0.0.1"]
        assert rep.master.joined is True  # rank 0 served the store, rank 1 joined it
        assert rep.port_range and rep.port_range[0] <= rep.port_range[1]
        assert any(i.name == "lo" for i in rep.interfaces)
        assert set(rep.timings) >= {"inventory", "rendezvous", "connectivity", "choice",
                                    "versions", "collective", "total"}
        # The full report (last stdout line) is a superset and parses as well once capped.
        full = run.full
        assert full["rank"] == run.rank and "mesh" in full


def test_loopback_allreduce(loopback_run):
    for run in loopback_run:
        rep = parse_report(run.report_text)
        assert rep.backend == "gloo"
        assert rep.chosen and rep.chosen.ifname == "lo" and rep.chosen.addr == "127.0.0.1"
        a = rep.allreduce
        assert a.correct is True and a.bytes == 4 * 2**20 and a.iterations == 5
        assert a.seconds > 0 and a.algbw_gbps > 0 and a.busbw_gbps > 0
        assert a.busbw_gbps == pytest.approx(a.algbw_gbps * 1.0, rel=0.01)  # n=2: factor 1
        assert vocabulary.LOOPBACK_ONLY in [w.reason for w in rep.warnings]
        assert "PASS" in run.stdout


def test_wrong_master_port_is_refused_within_deadline(tmp_path):
    port = free_port()  # nobody listens here
    [run] = run_ranks([probe_env(1, 2, port, DISTTRAIN_PROBE_TIMEOUT_SECONDS="8",
                                 DISTTRAIN_PROBE_SOCKET_IFNAME="lo")], tmp_path, timeout=30)
    assert run.rc == 1
    assert run.seconds < 8 + 3
    rep = parse_report(run.report_text)
    assert not rep.ok and rep.failure.reason == vocabulary.MASTER_PORT_REFUSED
    assert rep.failure.phase == "rendezvous" and str(port) in rep.failure.message
    assert rep.master.joined is False  # no peer learns of it: the operator goes without them


def test_master_addr_loopback_on_nonzero_rank(tmp_path):
    [run] = run_ranks([probe_env(1, 2, free_port(), MASTER_ADDR="localhost",
                                 DISTTRAIN_PROBE_TIMEOUT_SECONDS="8")], tmp_path, timeout=30)
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.failure.reason == vocabulary.MASTER_ADDR_LOOPBACK
    assert "localhost" in rep.failure.message


def test_peers_never_come(tmp_path):
    # a budget that leaves room for torch's import on a loaded machine (else the honest
    # verdict is TorchImportTimeout, not the missing peers)
    [run] = run_ranks([probe_env(0, 3, free_port(), DISTTRAIN_PROBE_TIMEOUT_SECONDS="15")], tmp_path,
                      timeout=40)
    assert run.rc == 1 and run.seconds < 15 + 3
    rep = parse_report(run.report_text)
    assert rep.failure.reason == vocabulary.RENDEZVOUS_TIMEOUT and rep.phase == "rendezvous"
    assert "rank(s) 1, 2 never arrived" in rep.failure.message


def test_hung_peer_in_collective_does_not_hang_the_probe(tmp_path):
    """Rank 1 stalls before init_process_group; rank 0 blocks in gloo's C++ and the watchdog
    (or gloo's own timeout) still ends it, with a report, inside the total budget."""
    port = free_port()
    envs = [probe_env(0, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", DISTTRAIN_PROBE_TIMEOUT_SECONDS="20"),
            probe_env(1, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", DISTTRAIN_PROBE_TIMEOUT_SECONDS="20",
                      DISTTRAIN_PROBE_TEST_STALL_PHASE="collective")]
    runs = run_ranks(envs, tmp_path, timeout=50)
    for run in runs:
        assert run.rc == 1 and run.seconds < 20 + 3, (run.rank, run.seconds)
        rep = parse_report(run.report_text)
        assert rep.phase == "collective" and not rep.ok
    assert parse_report(runs[0].report_text).failure.reason in (vocabulary.PROCESS_GROUP_INIT_FAILED,
                                                                 vocabulary.ALL_REDUCE_TIMEOUT)
    # The stalled rank is killed by its own watchdog with the step's reason.
    assert parse_report(runs[1].report_text).failure.reason == vocabulary.PROCESS_GROUP_INIT_FAILED


def test_bad_input_still_writes_a_report(tmp_path):
    [run] = run_ranks([{"RANK": "0", "WORLD_SIZE": "x"}], tmp_path, timeout=20)
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.failure.reason == vocabulary.PROBE_INTERNAL_ERROR and rep.phase == "config"


def test_bandwidth_threshold(tmp_path):
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                      DISTTRAIN_PROBE_MIN_BUSBW_GBPS="100000",
                      DISTTRAIN_PROBE_MESSAGE_SIZE_BYTES="65536") for r in range(2)]
    for run in run_ranks(envs, tmp_path, timeout=60):
        rep = parse_report(run.report_text)
        assert run.rc == 1 and rep.failure.reason == vocabulary.BANDWIDTH_BELOW_THRESHOLD
        assert rep.allreduce.correct is True and rep.allreduce.bytes == 65536


def test_install_copies_the_package(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "disttrain_probe.install", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    dest = tmp_path / "disttrain_probe"
    assert out.stdout.strip() == str(dest)
    for name in ("__init__.py", "__main__.py", "phases/interfaces.py", "run/report.py",
                 "contract/__init__.py", "contract/vocabulary.py"):  # subpackages too
        assert (dest / name).is_file(), name
    assert not list(dest.rglob("__pycache__"))
    # The launcher beside it runs that copy, with no PYTHONPATH of its own: the container's
    # stays as the image or the node set it (a site's torch tree there stays importable),
    # and a disttrain_probe on that path does not shadow the installed one.
    site = tmp_path / "site" / "disttrain_probe"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "__main__.py").write_text("print('the wrong probe')\n")
    r = subprocess.run([sys.executable, str(tmp_path / "run_probe.py"), "--help"],
                       capture_output=True, text=True, cwd="/",
                       env={"PYTHONPATH": str(site.parent), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "wrong probe" not in r.stdout and "usage" in r.stdout.lower(), r.stdout


def test_unresolvable_master_addr_fails_rank0_after_the_resolve_window(tmp_path):
    # "a..b" fails in the resolver itself (empty label): no DNS packet leaves the machine.
    [run] = run_ranks([probe_env(0, 2, free_port(), MASTER_ADDR="a..b",
                                 DISTTRAIN_PROBE_TIMEOUT_SECONDS="60",
                                 DISTTRAIN_PROBE_RESOLVE_SECONDS="4")], tmp_path, timeout=90)
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.failure.reason == vocabulary.MASTER_ADDR_UNRESOLVABLE
    assert rep.phase == "rendezvous" and "a..b" in rep.failure.message
    # rank 0 retries for the whole window, as its peers do (DNS may publish its record late)
    assert re.search(r"after [45]s of retries", rep.failure.message), rep.failure.message
    assert 4 <= run.seconds < 30, "the resolve window, not the 60 s probe deadline, must end it"


def test_rank0_name_mapped_to_loopback_in_its_hosts_file_is_blocked(tmp_path):
    """A stale /etc/hosts line on rank 0's node mapping MASTER_ADDR's name to 127.0.0.1:
    rank 0 alone would serve, but any rank placed on that node would dial itself. The probe
    runs with that hosts file bind-mounted in a private mount namespace (root)."""
    import shutil
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.0.1 job-0.job\n")
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts)]
    [run] = run_ranks([probe_env(0, 2, free_port(), MASTER_ADDR="job-0.job", NODE_NAME="node-b",
                                 DISTTRAIN_PROBE_TIMEOUT_SECONDS="20")], tmp_path, timeout=40,
                      prefix=[wrap])
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.failure.reason == vocabulary.MASTER_ADDR_LOOPBACK, run.stderr[-2000:]
    assert "node-b (rank 0)" in rep.failure.message and "/etc/hosts" in rep.failure.message
    assert run.seconds < 15, "decided at once, not at the rendezvous deadline"


def test_a_killed_rank_leaves_its_pessimistic_report_and_tells_its_peer_nothing(tmp_path):
    """The kernel kills rank 1 (SIGKILL, as the OOM killer does) in the connectivity phase:
    its report file holds the one written before that phase (``final: false``, joined), and
    rank 0, told nothing, waits for it at the gather: it outlives rank 1 by far more than
    the second a published failure takes to reach it (what the operator's node-loss rule
    must not take for a lost node)."""
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", DISTTRAIN_PROBE_TIMEOUT_SECONDS="60")
            for r in range(2)]
    envs[1]["DISTTRAIN_PROBE_TEST_STALL_PHASE"] = "connectivity"
    procs = start_ranks(envs, tmp_path)
    rank1 = procs[1]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = rank1.path.read_text() if rank1.path.exists() else ""
        if '"phase":"connectivity"' in text:
            break
        time.sleep(0.1)
    rank1.proc.kill()
    killed_at = time.monotonic()
    runs = wait_ranks(envs, procs, timeout=90)
    rep1 = parse_report(runs[1].report_text)
    assert runs[1].rc == -9 and rep1.final is False and rep1.phase == "connectivity", rep1
    assert rep1.master.joined is True and "without a final report" in rep1.failure.message
    rep0 = parse_report(runs[0].report_text)
    assert runs[0].rc == 1 and rep0.final is None, rep0  # its own, final report
    assert rep0.failure.reason == vocabulary.RENDEZVOUS_TIMEOUT and "rank(s) 1 never" in rep0.failure.message
    outlived = procs[0].t0 + runs[0].seconds - killed_at
    assert outlived > 5, outlived
