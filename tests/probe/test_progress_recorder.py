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

from disttrain_probe import install
from disttrain_probe.contract import progress as p

from probe_helpers import free_port

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
        dist.all_reduce(t)
        time.sleep(0.002)
    """)
SLEEP_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if "rank 1 sleeps here" in line)
ALL_REDUCE_LINE = next(i for i, line in enumerate(TRAIN.splitlines(), 1) if "dist.all_reduce(t)" in line)


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
    env = {**os.environ, "PYTHONPATH": str(site), p.PROGRESS_DIR_ENV: str(d)}
    r = subprocess.run([sys.executable, "-m", "disttrain_probe.progress.ready", "--stall-after", str(stall_after)],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.stderr == ""
    assert len(r.stdout.strip().splitlines()) == 1
    return r.returncode, r.stdout.strip()


@pytest.fixture
def ranks(tmp_path):
    site, d = tmp_path / "site", tmp_path / "progress"
    install.install(str(site))
    (tmp_path / "train.py").write_text(TRAIN)
    port = str(free_port())
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "PORT": port,
               "FLAG": str(tmp_path / "flag"), "STOP": str(tmp_path / "stop"),
               "PYTHONPATH": str(site), p.PROGRESS_DIR_ENV: str(d)}
        env.pop("TORCH_FR_BUFFER_SIZE", None)
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
    site = tmp_path / "site"
    install.install(str(site))
    d = tmp_path / "progress"
    rc, line = _ready(site, d)
    [s] = p.parse_summary(line)
    assert rc == 1 and s.where == p.UNREADABLE and s.error == "No such file or directory"
    d.mkdir()
    assert _ready(site, d) == (1, "progress: no records")
    (d / "rank-3.json").write_text("{not json")
    (d / "rank-4.json").write_text(json.dumps({"v": 9}))
    rc, line = _ready(site, d)
    assert rc == 1
    assert [(s.file, s.error.split(":")[0]) for s in p.parse_summary(line)] == [
        ("rank-3.json", "not JSON"), ("rank-4.json", "version 9 is not 1")]


def test_the_sitecustomize_chains_to_the_next_one_and_a_plain_program_is_untouched(tmp_path):
    site, other, d = tmp_path / "site", tmp_path / "other", tmp_path / "progress"
    install.install(str(site))
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.IMAGE_SITE = 'ran'\n")
    code = "import builtins, threading; print(getattr(builtins, 'IMAGE_SITE', None), " \
           "[t.name for t in threading.enumerate() if t.name == 'disttrain-progress'])"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{other}", "RANK": "0"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert (off.stdout.strip(), off.stderr) == ("ran []", "")
    on = subprocess.run([sys.executable, "-c", code + "; import time; time.sleep(1.5)"],
                        env={**env, p.PROGRESS_DIR_ENV: str(d)}, capture_output=True, text=True, timeout=30)
    assert (on.stdout.strip(), on.stderr) == ("ran ['disttrain-progress']", "")
    r = p.parse((d / "rank-0.json").read_text())  # RANK set, torch never imported: not started
    assert r.where == p.NOT_STARTED and r.seq is None and "torch" not in (d / "rank-0.json").read_text()
