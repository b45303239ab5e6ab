"""Several processes per node (numProcPerNode > 1): local rank 0 starts the others, the
pod's one report carries every local rank's outcome and names the node and local rank."""
from __future__ import annotations

import json

import pytest
from probe_helpers import free_port, probe_env, run_ranks

from disttrain.diagnosis.report import parse_report
from disttrain.diagnosis.trust import Expected, check
from disttrain_probe.contract import vocabulary
from disttrain_probe.ground import config as C
from disttrain_probe.ground import roles as LR
from disttrain_probe.run import report as REP


def test_layout_numbers_ranks_as_torchrun_does():
    lay = LR.Layout(node_rank=1, nodes=2, local_rank=1, nproc=2)
    assert (lay.global_rank, lay.world, lay.node_group()) == (3, 4, [2, 3])
    assert lay.who("node-b") == "node-b local rank 1"
    one = LR.Layout(node_rank=1, nodes=2)
    assert (one.global_rank, one.world, one.who("node-b")) == (1, 2, "node-b")


def test_a_local_rank_that_died_without_a_word_is_named_with_its_phase():
    last = LR.entry(1, False, "collective")
    out = LR.exited(1, LR.Ending(-9, ["Segmentation fault"]), last, "node-b", 2)
    assert out["ok"] is False and out["failure"]["reason"] == vocabulary.PROCESS_GROUP_INIT_FAILED
    assert out["failure"]["message"].startswith(
        "node-b local rank 1: the probe process ended (signal 9) during collective")
    assert "Segmentation fault" in out["failure"]["message"]
    # killed before the collective: not a collective failure
    assert LR.exited(1, LR.Ending(1), LR.entry(1, False, "waiting"), "node-b", 2)["failure"]["reason"] == \
        vocabulary.PROBE_INTERNAL_ERROR


def test_its_own_word_wins_and_a_running_one_hung_only_when_final():
    own = LR.entry(1, False, "collective", {"reason": vocabulary.ALL_REDUCE_WRONG_RESULT, "phase": "collective",
                                            "message": "node-b local rank 1: wrong"})
    assert LR.exited(1, LR.Ending(1), own, "node-b", 2)["failure"]["message"] == "node-b local rank 1: wrong"
    running = LR.entry(1, False, "collective")
    assert "failure" not in LR.exited(1, LR.Ending(None, final=False), running, "node-b", 2)
    assert "hung" in LR.exited(1, LR.Ending(None, final=True), running, "node-b", 2)["failure"]["message"]
    passed = LR.entry(1, True, "report", allreduces=LR.AllReduces({"busbwGBps": 2.0}, {"busbwGBps": 1.0}))
    assert LR.exited(1, LR.Ending(0), passed, "node-b", 2) == {"localRank": 1, "ok": True, "phase": "report",
                                                    "intraBusbwGBps": 2.0, "busbwGBps": 1.0}


def test_first_failure_skips_stopped_ranks_and_local_rank_0():
    stopped = dict(LR.entry(1, False, "waiting", {"reason": "X", "message": "m"}), stopped=True)
    bad = LR.entry(2, False, "collective", {"reason": vocabulary.ALL_REDUCE_TIMEOUT, "message": "node-b local rank 2: t"})
    mine = LR.entry(0, False, "collective", {"reason": vocabulary.PROCESS_GROUP_INIT_FAILED})
    assert LR.first_failure([mine, stopped, bad])["message"] == "node-b local rank 2: t"
    assert LR.first_failure([mine, stopped]) is None
    assert LR.ready([LR.entry(0, True, "report"), LR.entry(1, True, "report")], 2)
    assert not LR.ready([LR.entry(0, True, "report")], 2)


def test_config_processes_per_node():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}
    assert C.load([], env).nproc_per_node == 1 and not C.load([], env).spawns_local_ranks
    cfg = C.load(["--nproc-per-node", "4"], env)
    assert cfg.spawns_local_ranks and (cfg.rank, cfg.world_size) == (0, 2)
    with pytest.raises(C.ConfigError, match="DISTTRAIN_PROBE_NPROC_PER_NODE=0 must be >= 1"):
        C.load([], dict(env, DISTTRAIN_PROBE_NPROC_PER_NODE="0"))
    with pytest.raises(C.ConfigError, match="at most"):
        C.load([], dict(env, DISTTRAIN_PROBE_NPROC_PER_NODE=str(LR.MAX_NPROC + 1)))
    with pytest.raises(C.ConfigError, match="LOCAL_RANK=2 must be <"):
        C.load([], dict(env, DISTTRAIN_PROBE_NPROC_PER_NODE="2", LOCAL_RANK="2"))
    torchrun = dict(env, TORCHELASTIC_RUN_ID="r", LOCAL_WORLD_SIZE="2", DISTTRAIN_PROBE_NPROC_PER_NODE="2")
    with pytest.raises(C.ConfigError, match="under torchrun: the launcher already starts"):
        C.load([], torchrun)


def _multi_report(nproc: int, failing: int = 0, message: int = 300) -> dict:
    """A big passing (or failing) report of a pod that ran ``nproc`` processes."""
    ifaces = [{"name": f"veth{i}", "addrs": [f"10.{i}.0.2/24", f"fd00::{i}/64"], "up": True,
               "speedMbps": 10000, "mtu": 1500} for i in range(40)]
    ranks = [LR.entry(k, k >= failing, "report" if k >= failing else "collective",
                      None if k >= failing else {"reason": vocabulary.ALL_REDUCE_TIMEOUT, "phase": "collective",
                                                 "message": f"node-b local rank {k}: " + "x" * message},
                      f"cuda:{k}", LR.AllReduces({"busbwGBps": 120.5}, {"busbwGBps": 40.25}))
             for k in range(nproc)]
    return {"v": 1, "rank": 1, "worldSize": 2, "jobUid": "u", "attempt": 1, "node": "node-b",
            "pod": "j-probe-1", "ok": failing == 0, "phase": "report",
            "failure": None if failing == 0 else ranks[0]["failure"], "warnings": [],
            "master": {"addr": "10.0.0.1", "port": 29500, "resolved": ["10.0.0.1"], "route": None},
            "interfaces": ifaces, "chosen": {"ifname": "veth1", "addr": "10.1.0.2", "subnet": "10.1.0.0/24"},
            "rejected": [{"ifname": f"veth{i}", "reason": "NotPreferred", "message": "y" * 200}
                         for i in range(2, 40)],
            "backend": "nccl", "mesh": [{"peer": 0, "addr": "10.1.0.1", "r": "ok"}] * 50,
            "allreduce": {"bytes": 4, "iterations": 1, "seconds": 0.1, "algbwGBps": 40.0,
                          "busbwGBps": 40.25, "correct": True} if failing == 0 else None,
            "localWorldSize": nproc,
            "intraNode": {"bytes": 4, "iterations": 1, "seconds": 0.1, "algbwGBps": 100.0,
                          "busbwGBps": 120.5, "correct": True} if failing == 0 else None,
            "localRanks": ranks, "truncated": False}


@pytest.mark.parametrize("nproc,failing", [(8, 0), (8, 3), (72, 0), (72, 5), (256, 256)])
def test_many_local_ranks_fit_the_cap_and_keep_the_failing_ones(nproc, failing):
    rep = _multi_report(nproc, failing)
    text, truncated = REP.cap(rep)
    assert truncated and len(text.encode()) <= REP.MAX_REPORT_BYTES
    got = parse_report(text)
    assert got.local_world_size == nproc
    listed = {e.local_rank for e in got.local_ranks}
    assert set(range(min(failing, 4))) <= listed  # the failing ones stay (at least the first few)
    assert all(not e.ok for e in got.local_ranks if e.local_rank < failing)
    if failing == 0:
        exp = Expected(rank=1, world_size=2, job_uid="u", attempt=1, pod="j-probe-1", node="node-b",
                       master_addr=None, master_port=29500, local_world_size=nproc)
        assert check(got, exp).error is None


def test_eight_passing_local_ranks_are_all_listed_when_they_fit():
    rep = _multi_report(8)
    for k in ("mesh", "rejected"):
        rep[k] = []
    rep["interfaces"] = rep["interfaces"][:2]
    text, truncated = REP.cap(rep)
    assert not truncated and [e["localRank"] for e in json.loads(text)["localRanks"]] == list(range(8))


def _nodes_with_two_processes(tmp_path, timeout="40", **extra):
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", NODE_NAME="host-a",
                      POD_NAME=f"probe-{r}", DISTTRAIN_PROBE_NPROC_PER_NODE="2",
                      DISTTRAIN_PROBE_TIMEOUT_SECONDS=timeout, OMP_NUM_THREADS="1", **extra)
            for r in range(2)]
    return run_ranks(envs, tmp_path, timeout=float(timeout) + 30)


def test_two_nodes_of_two_processes_pass_with_one_report_each(tmp_path):
    """4 processes, 2 per 'node': each pod's one report says 2 local ranks passed, with the
    intra-node all-reduce (2 ranks) and the world's (4 ranks: busbw factor 1.5)."""
    runs = _nodes_with_two_processes(tmp_path)
    for run in runs:
        assert run.rc == 0, run.stdout[-3000:] + run.stderr[-3000:]
        rep = parse_report(run.report_text)
        assert rep.ok and rep.rank == run.rank and rep.world_size == 2 and rep.local_world_size == 2
        assert [(e.local_rank, e.ok) for e in rep.local_ranks] == [(0, True), (1, True)]
        assert all(e.busbw_gbps and e.intra_busbw_gbps for e in rep.local_ranks)
        intra, world = rep.intra_node, rep.allreduce
        assert intra.correct is True and intra.busbw_gbps == pytest.approx(intra.algbw_gbps, rel=0.01)
        assert world.correct is True and world.busbw_gbps == pytest.approx(world.algbw_gbps * 1.5, rel=0.01)
        assert "local ranks: 2/2 passed" in run.stdout
        exp = Expected(rank=run.rank, world_size=2, job_uid=None, attempt=None, pod=f"probe-{run.rank}",
                       node="host-a", master_addr=None, master_port=rep.master.port, local_world_size=2)
        assert check(rep, exp).error is None


def test_a_crashed_local_rank_is_named_by_its_node_and_passed_on_by_the_other(tmp_path):
    """Node rank 1's local rank 1 dies (exit 9) as it starts the collective: that pod's
    report names 'local rank 1', the exit and the phase; node rank 0, whose collective
    could only wait, passes that failure on instead of its own timeout."""
    runs = _nodes_with_two_processes(tmp_path, timeout="25", DISTTRAIN_PROBE_TEST_CRASH_LOCAL="1:1")
    by_rank = {r.rank: r for r in runs}
    mine = parse_report(by_rank[1].report_text)
    assert by_rank[1].rc == 1 and not mine.ok
    assert mine.failure.reason == vocabulary.PROCESS_GROUP_INIT_FAILED
    assert mine.failure.message.startswith(
        "host-a local rank 1: the probe process ended (code 9) during collective")
    assert [(e.local_rank, e.ok) for e in mine.local_ranks] == [(0, False), (1, False)]
    assert mine.local_ranks[0].failure is None  # local rank 0 only waited for it
    peer = parse_report(by_rank[0].report_text)
    assert by_rank[0].rc == 1 and peer.failure.reason == vocabulary.PROCESS_GROUP_INIT_FAILED
    assert peer.failure.message.startswith("peer host-a (rank 1) failed in collective: host-a local rank 1:")


def test_local_ranks_stop_when_local_rank_0_fails_before_the_collective(tmp_path):
    """Rank 1's master port refuses (nothing listens, rank 0 'started' long ago): local
    rank 0 reports MasterPortRefused in seconds and its local rank 1, which never got to
    the collective, is listed as stopped, not as a failure of its own."""
    port = free_port()
    env = probe_env(1, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", NODE_NAME="host-b",
                    DISTTRAIN_PROBE_NPROC_PER_NODE="2", DISTTRAIN_PROBE_TIMEOUT_SECONDS="30",
                    DISTTRAIN_PROBE_MASTER_STARTED_AT="2020-01-01T00:00:00Z")
    run = run_ranks([env], tmp_path, timeout=45)[0]
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.failure.reason == vocabulary.MASTER_PORT_REFUSED and run.seconds < 20
    assert rep.local_world_size == 2
    mine, other = rep.local_ranks
    assert (mine.local_rank, mine.ok, mine.failure.reason) == (0, False, vocabulary.MASTER_PORT_REFUSED)
    assert (other.local_rank, other.ok, other.stopped, other.failure) == (1, False, True, None)


def test_local_ranks_of_an_installed_probe_import_that_copy(tmp_path):
    """The init container installs the probe into an emptyDir; local rank 0 starts the
    others with ``python -m disttrain_probe.run.worker`` and the install root on
    PYTHONPATH. That root must be the directory holding the package (the e2e run on the
    proving ground failed with 'Error while finding module specification' when it was the
    package itself)."""
    import os
    import subprocess
    import sys

    dest = tmp_path / "opt"
    subprocess.run([sys.executable, "-m", "disttrain_probe.install", str(dest)], check=True,
                   capture_output=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    root = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(dest)!r}); "
                           "from disttrain_probe.localranks import spawn; print(spawn.package_root())"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert root == str(dest)
    where = subprocess.run([sys.executable, "-c", "import disttrain_probe.run.worker as w; print(w.__file__)"],
                           env=dict(env, PYTHONPATH=root), cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout.strip()
    assert where.startswith(str(dest / "disttrain_probe")), where
