"""The progress recorder through its real startup path: ``disttrain_probe.install`` into a
directory, that directory on PYTHONPATH, DISTTRAIN_PROGRESS_DIR set, two gloo ranks on
127.0.0.1 in a loop of all_reduce; ``python -m disttrain_probe.progress.ready`` over the
records. Rank 1 sleeps in Python while a flag file exists; a SIGSTOPped rank goes stale."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from probe_helpers import free_port

from disttrain_probe import install
from disttrain_probe.contract import progress as p

pytest.importorskip("torch")

TRAIN = textwrap.dedent("""\
    import os, time
    import torch, torch.distributed as dist
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"],
                            rank=rank, world_size=2)
    t = torch.ones(4)
    flag, stop = os.environ["FLAG"], os.environ["STOP"]
    while not os.path.exists(stop):
        if rank == 1 and os.path.exists(flag):
            time.sleep(0.05)  # rank 1 sleeps here
            continue
        if os.environ.get("ASYNC"):  # as DDP and NCCL do: issue, then wait elsewhere
            work = dist.all_reduce(t, async_op=True)
            while not work.is_completed():
                time.sleep(0.05)  # rank 0 polls here
        else:
            dist.all_reduce(t)
        time.sleep(0.002)
    """)
SLEEP_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if "rank 1 sleeps here" in line)
ALL_REDUCE_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if line.strip() == "dist.all_reduce(t)")
POLL_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if "rank 0 polls here" in line)


def _read(d: Path, rank: int):
    try:
        return p.parse((d / p.file_name(rank)).read_text())
    except (OSError, ValueError):
        return None


def _wait(cond, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s: {what}")


def _ready(site: Path, d: Path, stall_after: float = 2.0):
    """``ready`` run as the sidecar would, the package importable (the install dir)."""
    env = {**os.environ, "PYTHONPATH": str(site.parent), p.PROGRESS_DIR_ENV: str(d)}
    r = subprocess.run([sys.executable, "-m", "disttrain_probe.progress.ready", "--stall-after", str(stall_after)],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.stderr == ""
    assert len(r.stdout.strip().splitlines()) == 1
    return r.returncode, r.stdout.strip()


@pytest.fixture
def ranks(tmp_path, request):
    extra = getattr(request, "param", {})
    site, d = tmp_path / "inst" / install.SITE, tmp_path / "progress"
    install.install(str(site.parent))
    (tmp_path / "train.py").write_text(TRAIN)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "PORT": port,
               "FLAG": str(tmp_path / "flag"), "STOP": str(tmp_path / "stop"),
               "PYTHONPATH": str(site), p.PROGRESS_DIR_ENV: str(d)}
        env.pop("TORCH_FR_BUFFER_SIZE", None)
        env.update(extra)
        procs.append(subprocess.Popen([sys.executable, str(tmp_path / "train.py")], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    yield site, d, tmp_path, procs
    (tmp_path / "stop").touch()
    for pr in procs:
        try:
            pr.send_signal(signal.SIGCONT)
            pr.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pr.kill()
            pr.wait()


def test_a_sleeping_rank_is_named_at_its_line_and_its_peer_waits_in_all_reduce(ranks):
    site, d, tmp, procs = ranks
    first = _wait(lambda: (lambda a, b: (a, b) if a and b and a.seq and b.seq else None)(_read(d, 0), _read(d, 1)),
                  20, "both records with a sequence number")
    _wait(lambda: (_read(d, 0).seq or 0) > first[0].seq, 5, "rank 0's seq advances")
    assert _ready(site, d)[0] == 0
    (tmp / "flag").touch()

    def stalled():
        r0, r1 = _read(d, 0), _read(d, 1)
        ok = (r0 and r1 and r1.where == p.IN_PYTHON and r0.where == p.IN_COLLECTIVE
              and r1.written_at - r1.seq_advanced_at > 2.5 and r0.written_at - r0.seq_advanced_at > 2.5)
        return (r0, r1) if ok else None
    r0, r1 = _wait(stalled, 15, "rank 1 in python, rank 0 in a collective, both still")
    assert (r1.stack[0].line, r1.stack[0].func) == (SLEEP_LINE, "<module>")
    assert r1.stack[0].file.endswith("train.py")
    assert r0.waiting is not None and r0.waiting.op == "all_reduce" and r0.waiting.seq == r0.seq
    assert r0.seq == r1.seq + 1  # rank 0 issued the all_reduce rank 1 has not
    rc, line = _ready(site, d)
    assert rc == 1
    s0, s1 = p.parse_summary(line)
    assert (s0.rank, s0.where, s0.op, s0.at) == (0, p.IN_COLLECTIVE, "all_reduce", f"{tmp.name}/train.py:{ALL_REDUCE_LINE}(<module>)")
    assert (s1.rank, s1.where, s1.at) == (1, p.IN_PYTHON, f"{tmp.name}/train.py:{SLEEP_LINE}(<module>)")
    assert s0.idle_s >= 2 and s1.idle_s >= 2 and not s0.stale and not s1.stale
    (tmp / "flag").unlink()
    _wait(lambda: _ready(site, d, stall_after=3.0)[0] == 0, 10, "ready again once rank 1 wakes")
    for pr in procs:
        assert pr.poll() is None, pr.stderr.read() if pr.stderr else ""


@pytest.mark.parametrize("ranks", [{"ASYNC": "1", "TORCH_FR_BUFFER_SIZE": "200"}], indirect=True)
def test_an_asynchronous_collective_waited_for_in_python_is_found_in_the_flight_recorder(ranks):
    """DDP's and NCCL's way: the collective is issued, the main thread waits elsewhere; once
    seq stood still, the Flight Recorder's pending entry makes it a collective wait."""
    site, d, tmp, procs = ranks
    _wait(lambda: (lambda a, b: a and b and a.seq and b.seq)(_read(d, 0), _read(d, 1)), 20, "both records")
    (tmp / "flag").touch()

    def waiting():
        r0 = _read(d, 0)
        return r0 if r0 and r0.where == p.IN_COLLECTIVE and r0.written_at - r0.seq_advanced_at >= 3 else None
    r0 = _wait(waiting, 15, "rank 0 waiting in the Flight Recorder's all_reduce")
    assert r0.waiting is not None and r0.waiting.op == "all_reduce" and r0.waiting.seq == r0.seq
    assert (r0.stack[0].line, r0.stack[0].func) == (POLL_LINE, "<module>")
    r1 = _read(d, 1)
    assert r1.where == p.IN_PYTHON and r1.seq == r0.seq - 1
    rc, line = _ready(site, d)
    assert rc == 1 and [(s.where, s.op) for s in p.parse_summary(line)] == [
        (p.IN_COLLECTIVE, "all_reduce"), (p.IN_PYTHON, "")]


def test_a_frozen_rank_goes_stale_and_ready_says_so(ranks):
    site, d, tmp, procs = ranks
    _wait(lambda: (lambda a, b: a and b and a.seq and b.seq)(_read(d, 0), _read(d, 1)), 20, "both records")
    procs[1].send_signal(signal.SIGSTOP)
    try:
        def stale():
            rc, line = _ready(site, d, stall_after=600)
            s = {x.rank: x for x in p.parse_summary(line)}
            return (rc, s) if s.get(1) and s[1].stale else None
        rc, s = _wait(stale, 15, "rank 1's record stale")
        assert rc == 1 and not s[0].stale and s[0].where == p.IN_COLLECTIVE
    finally:
        procs[1].send_signal(signal.SIGCONT)


def test_ready_without_records_or_with_a_corrupt_one_says_so_in_one_line(tmp_path):
    site = tmp_path / "inst" / install.SITE
    install.install(str(site.parent))
    d = tmp_path / "progress"
    rc, line = _ready(site, d)
    [s] = p.parse_summary(line)
    assert rc == 1 and s.where == p.UNREADABLE and s.error == "No such file or directory"
    d.mkdir()
    rc, line = _ready(site, d)  # a tcp segment may come first: the host's own lossy connections
    assert rc == 1 and p.parse_summary(line) == [] and (line == "progress: no records" or p.parse_tcp(line))
    (d / "rank-3.json").write_text("{not json")
    (d / "rank-4.json").write_text(json.dumps({"v": 9}))
    rc, line = _ready(site, d)
    assert rc == 1
    assert [(s.file, s.error.split(":")[0]) for s in p.parse_summary(line)] == [
        ("rank-3.json", "not JSON"), ("rank-4.json", "version 9 is not 1")]


def test_the_sitecustomize_chains_to_the_next_one_and_a_plain_program_is_untouched(tmp_path):
    site, other, d = tmp_path / "inst" / install.SITE, tmp_path / "other", tmp_path / "progress"
    install.install(str(site.parent))
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITE = 'ran'\n")
    code = "import builtins, sys, threading; print(getattr(builtins, 'IMAGE_SITE', None), " \
           "[t.name for t in threading.enumerate() if t.name == 'disttrain-progress'], " \
           f"{str(site.parent)!r} in sys.path)"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{other}", "RANK": "0"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert (off.stdout.strip(), off.stderr) == ("ran [] False", "")
    on = subprocess.run([sys.executable, "-c", code + "; import time; time.sleep(1.5)"],
                        env={**env, p.PROGRESS_DIR_ENV: str(d)}, capture_output=True, text=True, timeout=30)
    # the recorder runs, and the install dir it was imported from is off the path again
    assert (on.stdout.strip(), on.stderr) == ("ran ['disttrain-progress'] False", "")
    r = p.parse((d / "rank-0.json").read_text())  # RANK set, torch never imported: not started
    assert r.where == p.NOT_STARTED and r.seq is None and "torch" not in (d / "rank-0.json").read_text()


# --- the recorder's judgements, without processes -------------------------------------------

from disttrain_probe.progress import recorder  # noqa: E402


def _entry(seq, state, retired=False, group=("0", "default_pg"), created=1_000_000_000_000, started=None):
    return {"collective_seq_id": seq, "state": state, "retired": retired, "process_group": list(group),
            "profiling_name": "nccl:all_reduce", "time_created_ns": created, "time_discovered_started_ns": started}


@pytest.mark.parametrize("entries, want", [
    ([], None),
    # gloo: entries stay "scheduled" and are marked retired once done
    ([_entry(4, "scheduled", retired=True), _entry(5, "scheduled")], p.Collective("all_reduce", 5, "scheduled", 1000.0)),
    # NCCL: completed ones are skipped; a started one is dated from its start
    ([_entry(7, "completed"), _entry(8, "started", started=1_002_000_000_000), _entry(9, "scheduled")],
     p.Collective("all_reduce", 8, "started", 1002.0)),
    ([_entry(3, "scheduled", group=("5", "tp"))], p.Collective("all_reduce on group tp", 3, "scheduled", 1000.0)),
    ([_entry(1, "completed"), _entry(2, "completed", retired=True)], None),
])
def test_the_oldest_collective_not_completed_is_the_one_waited_in(entries, want):
    assert recorder._pending(entries) == want


def test_only_the_collective_api_counts_as_waiting_not_fsdp_or_ddp_python():
    c10d = p.Frame("/x/site-packages/torch/distributed/distributed_c10d.py", 2931, "all_reduce")
    fsdp = p.Frame("/x/site-packages/torch/distributed/fsdp/_runtime_utils.py", 10, "_pre_forward")
    user = p.Frame("/w/train.py", 3, "main")
    assert recorder._torch_collective((c10d, user)) == "all_reduce"
    assert recorder._torch_collective((fsdp, user)) is None
    assert recorder._torch_collective((user,)) is None


def test_before_init_a_process_never_overwrites_a_live_trainers_record(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    rec = recorder.Recorder(str(tmp_path))
    first = rec.tick(now=100.0)
    assert first is not None and first.where == p.NOT_STARTED and first.rank == 3
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "rank-3.json").write_text(p.RankProgress(
            rank=3, local_rank=0, world_size=4, pid=live.pid, written_at=100.0, where=p.IN_PYTHON, seq=9).dump())
        assert rec.tick(now=101.0) is None  # the trainer (alive) owns it
        assert p.parse((tmp_path / "rank-3.json").read_text()).pid == live.pid
    finally:
        live.kill()
        live.wait()
    assert rec.tick(now=102.0) is not None  # its writer is gone: the file is free again
    monkeypatch.delenv("RANK")
    assert recorder.Recorder(str(tmp_path)).tick(now=103.0) is None  # torchrun's agent: no RANK, no record


TORCHRUN_TRAIN = textwrap.dedent("""\
    import os, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(4)
    while not os.path.exists(os.environ["STOP"]):
        dist.all_reduce(t)
        time.sleep(0.01)
    dist.destroy_process_group()
    """)


def test_under_torchrun_each_worker_writes_its_own_record_and_the_agent_none(tmp_path):
    site, d, stop = tmp_path / "inst" / install.SITE, tmp_path / "progress", tmp_path / "stop"
    install.install(str(site.parent))
    (tmp_path / "train.py").write_text(TORCHRUN_TRAIN)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update({"PYTHONPATH": str(site), p.PROGRESS_DIR_ENV: str(d), "STOP": str(stop)})
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                              "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(tmp_path / "train.py")],
                             env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def both():
            r = [_read(d, 0), _read(d, 1)]
            return r if all(x and x.seq and x.seq > 5 for x in r) else None
        r0, r1 = _wait(both, 25, "both workers' records with seq advancing")
        assert {r0.rank, r1.rank} == {0, 1} and {r0.local_rank, r1.local_rank} == {0, 1}
        assert len({r0.pid, r1.pid, agent.pid}) == 3 and r0.world_size == r1.world_size == 2
        assert sorted(f.name for f in d.iterdir()) == ["rank-0.json", "rank-1.json"]
        assert _ready(site, d, stall_after=5)[0] == 0
    finally:
        stop.touch()
        try:
            out = agent.communicate(timeout=20)[0]
        except subprocess.TimeoutExpired:
            agent.kill()
            out = agent.communicate()[0]
    assert agent.returncode == 0, out[-2000:]
    assert "disttrain" not in out  # no warning from the recorder or the sitecustomize


class _FakeGroup:
    def __init__(self, seq):
        self.seq = seq

    def _get_sequence_number_for_group(self):
        if isinstance(self.seq, Exception):
            raise self.seq
        return self.seq


class _FakeC10d:
    """What the recorder reads of ``torch.distributed.distributed_c10d`` (a torch whose
    backend has no sequence number when ``seq`` is an exception)."""

    def __init__(self, seq, rank=5):
        self.initialized, self.group, self.rank = True, _FakeGroup(seq), rank

    def is_initialized(self):
        return self.initialized

    def _get_default_group(self):
        return self.group

    def get_rank(self):
        return self.rank

    def get_world_size(self):
        return 8


def test_seq_dates_its_advance_degrades_without_one_and_outlives_destroy(tmp_path, monkeypatch, capsys):
    fake = _FakeC10d(seq=10)
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", fake)
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "100")
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", None)  # no Flight Recorder dump
    rec = recorder.Recorder(str(tmp_path))
    a = rec.tick(now=100.0)
    assert (a.rank, a.where, a.seq, a.seq_advanced_at, a.world_size) == (5, p.IN_PYTHON, 10, 100.0, 8)
    assert rec.tick(now=101.0).seq_advanced_at == 100.0
    fake.group.seq = 11
    assert rec.tick(now=102.0).seq_advanced_at == 102.0
    assert rec.tick(now=110.0).waiting is None  # seq still: Flight Recorder asked, none there
    fake.initialized = False  # destroy_process_group
    after = rec.tick(now=111.0)
    assert (after.rank, after.where, after.seq, after.seq_advanced_at) == (5, p.IN_PYTHON, 11, 102.0)
    assert p.parse((tmp_path / "rank-5.json").read_text()) == after
    old = _FakeC10d(seq=RuntimeError("ProcessGroup does not yet support sequence numbers"), rank=2)
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", old)
    r = recorder.Recorder(str(tmp_path)).tick(now=100.0)
    assert (r.rank, r.seq, r.where) == (2, None, p.IN_PYTHON)
    assert capsys.readouterr().err == ""


def test_a_failing_wake_is_written_once_and_the_thread_goes_on(tmp_path, monkeypatch, capsys):
    fake = _FakeC10d(seq=1)
    fake.get_rank = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d", fake)
    rec = recorder.Recorder(str(tmp_path), interval=0.01)
    th = recorder.threading.Thread(target=rec.run, daemon=True)
    th.start()
    time.sleep(0.3)
    rec.stop.set()
    th.join(2)
    assert not th.is_alive()
    err = capsys.readouterr().err
    assert err.count("disttrain progress recorder: RuntimeError: boom") == 1
