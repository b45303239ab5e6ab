"""In place: the probe as the training container's first step (``run_probe.py [probe args] --
<command>``), handing over to the command in the same interpreter; the go rule; the relay.

The runs are real probes on loopback (torch.distributed with gloo, as test_probe_run.py), the
training a script written here that records what it found at its first line."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from probe_helpers import PY, ROOT, RankRun, Started, free_port, probe_env, wait_ranks

from disttrain.diagnosis.report import parse_report
from disttrain_probe.contract import vocabulary
from disttrain_probe.run import handover as H
from disttrain_probe.run import report as REP

# What the training records at its first line, before anything else: whether torch is
# already loaded (it must be: the probe's), its pid, argv, path, environment, the probe's
# threads still alive and the TCP ports this process still listens on (none: the probe
# released them). Then the training's own rendezvous on the probe's MASTER_ADDR/PORT.
TRAIN = r'''
import sys
TORCH_LOADED = "torch" in sys.modules
import atexit, json, os, threading, time

def listening():
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    ports = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(path).read().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in mine:
                ports.append(int(cols[1].rpartition(":")[2], 16))
    return ports

rank = int(os.environ["RANK"])
out = os.environ["TRAIN_OUT"]
rec = {"torchLoaded": TORCH_LOADED, "pid": os.getpid(), "argv": sys.argv, "path0": sys.path[0],
       "name": __name__, "firstAt": time.time(),
       "env": {k: os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "RANK",
                                              "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")},
       "threads": sorted(t.name for t in threading.enumerate()), "listening": listening()}
open(out + ".started", "w").write("started")
sleep_to = float(os.environ.get("TRAIN_SLEEP_TO_AGE") or 0)  # past the probe's deadline
if sleep_to:
    ticks = os.sysconf("SC_CLK_TCK")
    started = int(open("/proc/self/stat").read().rpartition(")")[2].split()[19]) / ticks
    time.sleep(max(0.0, sleep_to - (time.clock_gettime(time.CLOCK_BOOTTIME) - started)))
    rec["slept"] = True
import torch
import torch.distributed as dist
rec["sameTorch"] = torch is sys.modules["torch"]
if os.environ.get("TRAIN_ALLREDUCE"):
    dist.init_process_group("gloo")  # env://: the probe's MASTER_ADDR and MASTER_PORT
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    rec["sum"] = t.tolist()
    dist.destroy_process_group()
json.dump(rec, open(out, "w"))
atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
print(f"training rank {rank} done", flush=True)
time.sleep(float(os.environ.get("TRAIN_LINGER") or 0))
sys.exit(int(sys.argv[-1]))
'''


def install(tmp: Path) -> Path:
    """The probe installed as the init container installs it; the launcher's path."""
    dest = tmp / "opt"
    subprocess.run([PY, "-m", "disttrain_probe.install", str(dest)], check=True, capture_output=True)
    return dest / "run_probe.py"


def start(envs: Sequence[Dict[str, str]], tmp: Path, argvs: Sequence[List[str]],
          cwd: Optional[Path] = None) -> List[Started]:
    """One in-place probe per env, with its argv (after the interpreter)."""
    procs = []
    for i, (extra, argv) in enumerate(zip(envs, argvs)):
        path = tmp / f"report-{i}.json"
        env = dict(os.environ)
        for k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            env.pop(k, None)
        env.update({"DISTTRAIN_PROBE_REPORT_PATH": str(path), "PYTHONUNBUFFERED": "1",
                    "TRAIN_OUT": str(tmp / f"train-{i}.json")})
        env.update(extra)
        t0 = time.monotonic()
        p = subprocess.Popen([PY, *argv], env=env, cwd=str(cwd or ROOT), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        procs.append(Started(i, p, t0, path))
    return procs


def record(tmp: Path, i: int) -> dict:
    return json.loads((tmp / f"train-{i}.json").read_text())


def explain(run: RankRun) -> str:
    return f"rank {run.rank} rc {run.rc}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


# ---- the command's form (pure) ------------------------------------------------------------

@pytest.mark.parametrize("cmd,form,argv,target", [
    (["python", "train.py", "--lr", "1"], H.SCRIPT, ("train.py", "--lr", "1"), "train.py"),
    (["/usr/bin/python3", "/w/t.py"], H.SCRIPT, ("/w/t.py",), "/w/t.py"),
    (["python3.11", "t.py", "--", "x"], H.SCRIPT, ("t.py", "--", "x"), "t.py"),
    (["python3", "-m", "pkg.train", "-x"], H.MODULE, ("pkg.train", "-x"), "pkg.train"),
    (["python", "-m", "train"], H.MODULE, ("train",), "train"),
    (["python", "-u", "t.py"], H.EXEC, ("python", "-u", "t.py"), "python"),
    (["python", "-c", "print(1)"], H.EXEC, ("python", "-c", "print(1)"), "python"),
    (["python", "-O", "-m", "m"], H.EXEC, ("python", "-O", "-m", "m"), "python"),
    (["python", "-X", "importtime", "t.py"], H.EXEC, ("python", "-X", "importtime", "t.py"), "python"),
    (["python", "-m"], H.EXEC, ("python", "-m"), "python"),
    (["python", "-m", "1bad"], H.EXEC, ("python", "-m", "1bad"), "python"),
    (["python", "-mtrain"], H.EXEC, ("python", "-mtrain"), "python"),
    (["python", "-", "a"], H.EXEC, ("python", "-", "a"), "python"),
    (["python", ""], H.EXEC, ("python", ""), "python"),
    (["python"], H.EXEC, ("python",), "python"),
    (["python2", "t.py"], H.EXEC, ("python2", "t.py"), "python2"),
    (["python3.x", "t.py"], H.EXEC, ("python3.x", "t.py"), "python3.x"),
    (["pythonw", "t.py"], H.EXEC, ("pythonw", "t.py"), "pythonw"),
    (["mypython", "t.py"], H.EXEC, ("mypython", "t.py"), "mypython"),
    (["torchrun", "--nproc-per-node", "2", "t.py"], H.EXEC,
     ("torchrun", "--nproc-per-node", "2", "t.py"), "torchrun"),
    (["sh", "-c", "exit 3"], H.EXEC, ("sh", "-c", "exit 3"), "sh"),
    ([], H.EXEC, (), ""),
])
def test_parse_command(cmd, form, argv, target):
    assert H.parse_command(cmd) == H.Command(form, argv, target)


def test_split_argv_at_the_first_separator():
    assert H.split_argv(["--timeout-seconds", "9"]) == (["--timeout-seconds", "9"], None)
    assert H.split_argv(["--rank", "1", "--", "python", "t.py", "--", "x"]) == \
        (["--rank", "1"], ["python", "t.py", "--", "x"])
    assert H.split_argv(["--"]) == ([], [])


_word = st.one_of(st.sampled_from(["python", "python3", "python3.12", "/opt/py/bin/python", "-m",
                                   "-u", "-", "--", "", "train.py", "pkg.mod", "1x", "sh", "-c"]),
                  st.text(max_size=12))


@given(st.lists(_word, max_size=6))
def test_parse_command_is_total(cmd):
    """Any argv: one of the three forms, never an exception, and the form's argv is the
    command's own tail."""
    c = H.parse_command(cmd)
    assert c.form in H.FORMS
    if c.form == H.EXEC:
        assert c.argv == tuple(cmd) and c.target == (cmd[0] if cmd else "")
    elif c.form == H.SCRIPT:
        assert H._PYTHON.fullmatch(os.path.basename(cmd[0]))
        assert c.argv == tuple(cmd[1:]) and c.target == cmd[1] and not cmd[1].startswith("-")
    else:
        assert cmd[1] == "-m" and c.argv == tuple(cmd[2:]) and c.target == cmd[2]
        assert all(p.isidentifier() for p in c.target.split("."))


@given(st.lists(_word, max_size=8))
def test_split_argv_keeps_every_word(argv):
    probe, cmd = H.split_argv(argv)
    assert (probe + ["--"] + cmd if cmd is not None else probe) == argv
    assert "--" not in probe


def test_bind_environment_restores_what_was_given_and_adds_the_interface():
    given = {"RANK": "1", "MASTER_PORT": "29500", "NCCL_DEBUG": "WARN"}
    env = dict(given, NCCL_SOCKET_IFNAME="=eth1", GLOO_SOCKET_IFNAME="eth1", NCCL_DEBUG="INFO",
               NCCL_DEBUG_FILE="/tmp/probe.log", RANK="7")  # what the probe's own run set
    H.bind_environment(env, given, "eth1")
    assert env == {"RANK": "1", "MASTER_PORT": "29500", "NCCL_DEBUG": "WARN",
                   "NCCL_SOCKET_IFNAME": "=eth1", "GLOO_SOCKET_IFNAME": "eth1"}
    # the environment's own values win; no interface chosen, none set
    env = {}
    H.bind_environment(env, {"NCCL_SOCKET_IFNAME": "^docker", "GLOO_SOCKET_IFNAME": "eth0"}, "eth1")
    assert env == {"NCCL_SOCKET_IFNAME": "^docker", "GLOO_SOCKET_IFNAME": "eth0"}
    env = {"GLOO_SOCKET_IFNAME": "lo"}
    H.bind_environment(env, {}, None)
    assert env == {}


# ---- the hand-over alone (no probe: each form as python runs it) --------------------------

def handover(tmp: Path, cmd: Sequence[str], cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    code = ("import sys; from disttrain_probe.run import handover as H; "
            "H.run(H.parse_command(sys.argv[1:]))")
    return subprocess.run([PY, "-c", code, *cmd], capture_output=True, text=True,
                          cwd=str(cwd or tmp), timeout=60)


def test_script_exit_code_atexit_and_argv(tmp_path):
    (tmp_path / "lib_here.py").write_text("VALUE = 41\n")
    (tmp_path / "s.py").write_text(
        "import atexit, sys, lib_here\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "print('argv', sys.argv, __name__, lib_here.VALUE + 1)\n"
        "sys.exit(int(sys.argv[2]))\n")
    r = handover(tmp_path, ["python", str(tmp_path / "s.py"), "--", "5"], cwd=Path("/"))
    assert r.returncode == 5, r.stderr
    assert f"argv ['{tmp_path / 's.py'}', '--', '5'] __main__ 42" in r.stdout  # its folder is on sys.path
    assert r.stdout.rstrip().endswith("atexit ran")


def test_script_that_returns_exits_0_and_flushes(tmp_path):
    (tmp_path / "s.py").write_text("import sys\nsys.stdout.write('no newline at the end')\n")
    r = handover(tmp_path, ["python3", "s.py"])
    assert r.returncode == 0 and r.stdout == "no newline at the end", r


def test_uncaught_exception_prints_the_users_traceback_and_exits_1(tmp_path):
    (tmp_path / "s.py").write_text("def f():\n    raise ValueError('boom')\nf()\n")
    r = handover(tmp_path, ["python", "s.py"])
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and "ValueError: boom" in r.stderr
    assert 's.py", line 3' in r.stderr and 's.py", line 2, in f' in r.stderr
    assert "runpy" not in r.stderr and "handover.py" not in r.stderr, r.stderr


def test_system_exit_with_a_message_is_pythons(tmp_path):
    (tmp_path / "s.py").write_text("raise SystemExit('bad config')\n")
    r = handover(tmp_path, ["python", "s.py"])
    assert r.returncode == 1 and r.stderr.strip() == "bad config"


def test_missing_script_is_said_as_python_says_it(tmp_path):
    r = handover(tmp_path, ["python", "nope.py"])
    assert r.returncode == 2 and "can't open file" in r.stderr and "nope.py" in r.stderr


def test_module_form_argv_and_working_folder(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import sys\nprint(__name__, sys.argv)\nsys.exit(4)\n")
    r = handover(tmp_path, ["python", "-m", "pkg.train", "-x", "1"])
    assert r.returncode == 4, r.stderr
    assert r.stdout.strip() == f"__main__ {[str(pkg / 'train.py'), '-x', '1']}"
    r = handover(tmp_path, ["python", "-m", "no_such_module_here"])
    assert r.returncode == 1 and "No module named no_such_module_here" in r.stderr


def test_exec_form_replaces_the_process(tmp_path):
    code = ("import os, sys; from disttrain_probe.run import handover as H; "
            "print(os.getpid(), flush=True); H.run(H.parse_command(sys.argv[1:]))")
    r = subprocess.run([PY, "-c", code, "sh", "-c", 'echo "$$"; exit 3'], capture_output=True,
                       text=True, timeout=60)
    first, second = r.stdout.split()
    assert r.returncode == 3 and first == second  # the same process, another program


def test_a_command_that_cannot_run_exits_127_with_one_line(tmp_path):
    for cmd in (["no-such-program-xyz", "a"], [str(tmp_path)]):
        r = handover(tmp_path, cmd)
        assert r.returncode == H.EXEC_FAILED
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and cmd[0] in lines[0], r.stderr


# ---- the report file ---------------------------------------------------------------------

def test_in_place_the_report_is_replaced_whole(tmp_path):
    """In place the report file is a new file renamed over the old one (a reader holding the
    old one reads it whole, never a mix); a probe pod's is rewritten as before (its
    /dev/termination-log is a mounted file: no rename over it)."""
    path = tmp_path / "sub" / "report.json"
    assert REP.write(str(path), '{"n":1}', atomic=True) is None
    with open(path) as old:
        assert REP.write(str(path), '{"n":2}', atomic=True) is None
        assert old.read() == '{"n":1}' and path.read_text() == '{"n":2}'
    assert path.stat().st_mode & 0o777 == 0o644 and os.listdir(path.parent) == ["report.json"]
    with open(path) as old:
        assert REP.write(str(path), '{"n":3}') is None
        assert old.read() == '{"n":3}'  # the same file, rewritten
    assert REP.write(str(tmp_path), "{}", atomic=True) is not None  # a folder: said, not raised
    assert sorted(os.listdir(tmp_path)) == ["sub"]


def test_in_place_a_report_path_that_cannot_be_replaced_is_written_in_place(tmp_path):
    """A report path that is a mounted file (as /dev/termination-log is: a rename over it
    fails with EBUSY) still gets the report, written through the mount (root, a private
    mount namespace)."""
    import shutil
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare (util-linux)")
    kubelet_file, path = tmp_path / "kubelet-file", tmp_path / "termination-log"
    kubelet_file.write_text("")
    path.write_text("")
    code = ("import sys; from disttrain_probe.run import report as REP; "
            "sys.exit(REP.write(sys.argv[1], '{\"ok\":true}', atomic=True) is not None)")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount --bind "$0" "$1" && exec "$2" -c "$3" "$1"', str(kubelet_file),
                        str(path), PY, code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert kubelet_file.read_text() == '{"ok":true}'  # through the mount: what the kubelet reads
    assert sorted(os.listdir(tmp_path)) == ["kubelet-file", "termination-log"]


# ---- the relay ---------------------------------------------------------------------------

def relay(*args: str) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "disttrain_probe.run.relay", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_relay_exits_0_once_the_final_report_appears(tmp_path):
    path, dest = tmp_path / "report.json", tmp_path / "termination-log"
    p = relay(str(path), "60", "--to", str(dest))
    time.sleep(0.5)
    assert p.poll() is None  # no file yet
    path.write_text("")
    time.sleep(0.3)
    assert p.poll() is None  # empty: not a report
    path.write_text('{"v":1,"ok":false,"phase":"inventory","final":false}')
    time.sleep(0.5)
    assert p.poll() is None  # the pessimistic report: the probe is still running
    final = '{"v":1,"ok":true,"phase":"report"}'
    path.write_text(final)
    t = time.monotonic()
    assert p.wait(timeout=10) == 0
    assert time.monotonic() - t < 2.0
    assert dest.read_text() == final


def test_relay_exits_1_after_its_timeout(tmp_path):
    path, dest = tmp_path / "report.json", tmp_path / "termination-log"
    path.write_text('{"v":1,"final":false,"phase":"rendezvous"}')
    t = time.monotonic()
    p = relay(str(path), "0.5", "--to", str(dest))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and 0.5 <= time.monotonic() - t < 10
    assert len(err.strip().splitlines()) == 1 and str(path) in err
    assert '"final":false' in dest.read_text()  # what there was: the phase it ended in


def test_relay_usage_and_no_torch(tmp_path):
    for args in ([], ["a", "b"], ["a", "-1"], ["a", "1", "2"], ["a", "--to"]):
        p = relay(*args)
        p.communicate(timeout=30)
        assert p.returncode == 2, args
    code = ("import sys; from disttrain_probe.run import relay; "
            "sys.exit(relay.main([sys.argv[1], '1']) or ('torch' in sys.modules))")
    path = tmp_path / "r.json"
    path.write_text("not json at all")  # the operator judges it
    assert subprocess.run([PY, "-c", code, str(path)], timeout=30).returncode == 0


# ---- in place, end to end ----------------------------------------------------------------

@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """Two ranks through the installed launcher, each handing over to ``python train.py``
    (rank 0 exits 3, rank 1 exits 0), a relay per rank waiting for its report."""
    tmp = tmp_path_factory.mktemp("inplace")
    launcher = install(tmp)
    train = tmp / "work" / "train.py"
    train.parent.mkdir()
    train.write_text(TRAIN)
    port, beacon = free_port(), free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", NODE_NAME="host-a",
                      POD_NAME=f"train-{r}", DISTTRAIN_PROBE_BEACON_PORT=beacon,
                      TRAIN_ALLREDUCE="1", TRAIN_LINGER="1") for r in range(2)]
    relays = [relay(str(tmp / f"report-{r}.json"), "120", "--to", str(tmp / f"relayed-{r}"))
              for r in range(2)]
    procs = start(envs, tmp, [[str(launcher), "--iterations", "3", "--", "python", str(train),
                               "--lr", "0.1", "--", str(3 if r == 0 else 0)] for r in range(2)])
    relayed_at = []
    for p in relays:
        p.wait(timeout=120)
        relayed_at.append(time.monotonic())
    runs = wait_ranks(envs, procs, timeout=120)
    ended_at = [st.t0 + run.seconds for st, run in zip(procs, runs)]
    return {"tmp": tmp, "train": train, "runs": runs, "procs": procs, "port": port,
            "relays": relays, "relayed_at": relayed_at, "ended_at": ended_at}


def test_in_place_training_runs_in_the_probes_process(script_run):
    tmp, train = script_run["tmp"], script_run["train"]
    for i, run in enumerate(script_run["runs"]):
        assert run.rc == (3 if i == 0 else 0), explain(run)  # the training's exit code
        rec = record(tmp, i)
        assert rec["torchLoaded"] is True and rec["sameTorch"] is True  # imported once
        assert rec["pid"] == script_run["procs"][i].proc.pid  # the launcher's own process
        assert rec["name"] == "__main__"
        assert rec["argv"] == [str(train), "--lr", "0.1", "--", str(3 if i == 0 else 0)]
        assert rec["path0"] == str(train.parent)  # not the launcher's folder
        assert rec["env"] == {"NCCL_SOCKET_IFNAME": "=lo", "GLOO_SOCKET_IFNAME": "lo",
                              "RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                              "MASTER_PORT": str(script_run["port"])}
        assert (tmp / f"train-{i}.json.atexit").read_text() == "ran"  # a normal exit
        assert f"training rank {i} done" in run.stdout


def test_in_place_releases_the_probe_before_the_training(script_run):
    """Nothing of the probe listens or watches when the training starts: the training's own
    store binds MASTER_PORT (rank 0) and its all-reduce is right."""
    for i, run in enumerate(script_run["runs"]):
        rec = record(script_run["tmp"], i)
        assert rec["listening"] == [], rec  # no TCPStore, early listener, beacon, mesh listener
        assert not {"probe-watchdog", "probe-beacon", "probe-listeners"} & set(rec["threads"]), rec
        assert rec["sum"] == [3.0] * 4, explain(run)


def test_in_place_report_written_atomically_and_relayed_while_training_runs(script_run):
    tmp = script_run["tmp"]
    for i, run in enumerate(script_run["runs"]):
        rep = parse_report(run.report_text)
        assert rep.ok and rep.phase == "report" and rep.failure is None and rep.final is None
        assert rep.rank == i and rep.pod == f"train-{i}" and rep.chosen.ifname == "lo"
        assert rep.allreduce.correct and rep.allreduce.iterations == 3
        assert (tmp / f"report-{i}.json").stat().st_mode & 0o777 == 0o644
        assert script_run["relays"][i].returncode == 0
        assert (tmp / f"relayed-{i}").read_text() == run.report_text
        # the relay ended while the training still ran (it lingers 1 s after its all-reduce)
        assert script_run["relayed_at"][i] < script_run["ended_at"][i] - 0.5
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith((".report", "report"))) == \
        ["report-0.json", "report-1.json"]  # no temporary file left


def test_in_place_the_deadline_never_ends_the_training(tmp_path):
    """The training outlives the probe's whole budget (and the C-level backstop 5 s after
    it) and still ends as it chooses."""
    timeout = 10
    env = probe_env(0, 1, free_port(), DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                    DISTTRAIN_PROBE_TIMEOUT_SECONDS=str(timeout),
                    TRAIN_SLEEP_TO_AGE=str(timeout + 6.5))
    (tmp_path / "train.py").write_text(TRAIN)
    [run] = wait_ranks([env], start([env], tmp_path, [["-m", "disttrain_probe", "--", "python",
                                                       str(tmp_path / "train.py"), "0"]]), timeout=90)
    assert run.rc == 0, explain(run)
    rec = record(tmp_path, 0)
    assert rec["slept"] and "probe-watchdog" not in rec["threads"]
    assert run.seconds > timeout + 6


def test_in_place_module_form(tmp_path):
    (tmp_path / "trainmod.py").write_text(TRAIN)
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo") for r in range(2)]
    runs = wait_ranks(envs, start(envs, tmp_path, [["-m", "disttrain_probe", "--", "python3", "-m",
                                                    "trainmod", "-v", str(5 + r)] for r in range(2)],
                                  cwd=tmp_path), timeout=90)
    for i, run in enumerate(runs):
        assert run.rc == 5 + i, explain(run)
        rec = record(tmp_path, i)
        assert rec["torchLoaded"] and rec["name"] == "__main__"
        assert rec["argv"] == [str(tmp_path / "trainmod.py"), "-v", str(5 + i)]
        assert rec["path0"] == str(tmp_path)
        assert rec["env"]["NCCL_SOCKET_IFNAME"] == "=lo"


def test_in_place_exec_form(tmp_path):
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo") for r in range(2)]
    procs = start(envs, tmp_path, [["-m", "disttrain_probe", "--", "sh", "-c",
                                    'echo "exec pid=$$ nccl=$NCCL_SOCKET_IFNAME gloo=$GLOO_SOCKET_IFNAME"; '
                                    'exit 3']] * 2)
    for st_, run in zip(procs, wait_ranks(envs, procs, timeout=90)):
        assert run.rc == 3, explain(run)
        assert f"exec pid={st_.proc.pid} nccl==lo gloo=lo" in run.stdout.splitlines()
        assert parse_report(run.report_text).ok


@pytest.mark.parametrize("failing", [0, 1])
def test_no_rank_trains_unless_every_rank_passed(tmp_path, failing):
    """One rank fails after its collective (its bandwidth threshold; the other rank has none
    and passes every check of its own): neither runs the command. Without ``--`` the other
    rank would pass."""
    (tmp_path / "train.py").write_text(TRAIN)
    port = free_port()
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo", NODE_NAME="host-a",
                      DISTTRAIN_PROBE_MESSAGE_SIZE_BYTES="65536") for r in range(2)]
    envs[failing]["DISTTRAIN_PROBE_MIN_BUSBW_GBPS"] = "100000"
    runs = wait_ranks(envs, start(envs, tmp_path, [["-m", "disttrain_probe", "--", "python",
                                                    str(tmp_path / "train.py"), "0"]] * 2), timeout=90)
    for i, run in enumerate(runs):
        assert run.rc == 1, explain(run)
        assert not (tmp_path / f"train-{i}.json.started").exists()  # the command never ran
        assert "handing over" not in run.stderr
        rep = parse_report(run.report_text)
        assert not rep.ok and rep.final is None
        assert rep.failure.reason == vocabulary.BANDWIDTH_BELOW_THRESHOLD
        if i != failing:  # it passed on its own: the peer's failure, passed on
            assert rep.failure.message.startswith(f"peer host-a (rank {failing}) failed in collective"), \
                rep.failure.message
            assert rep.phase == "report" and rep.allreduce.correct


@pytest.mark.parametrize("stalled", [0, 1])
def test_no_go_by_the_deadline_runs_no_command(tmp_path, stalled):
    """One rank hangs before its pass (in the report phase, until its watchdog ends it): the
    other waits for the go until its deadline, then fails naming the rank that never passed."""
    (tmp_path / "train.py").write_text(TRAIN)
    port, timeout = free_port(), 10
    envs = [probe_env(r, 2, port, DISTTRAIN_PROBE_SOCKET_IFNAME="lo",
                      DISTTRAIN_PROBE_TIMEOUT_SECONDS=str(timeout)) for r in range(2)]
    envs[stalled]["DISTTRAIN_PROBE_TEST_STALL_PHASE"] = "report"
    runs = wait_ranks(envs, start(envs, tmp_path, [["-m", "disttrain_probe", "--", "python",
                                                    str(tmp_path / "train.py"), "0"]] * 2), timeout=60)
    for i, run in enumerate(runs):
        assert run.rc == 1 and run.seconds < timeout + 3, explain(run)
        assert not (tmp_path / f"train-{i}.json.started").exists()
    rep = parse_report(runs[1 - stalled].report_text)
    assert rep.failure.reason == vocabulary.RENDEZVOUS_TIMEOUT and rep.phase == "report", rep.failure
    assert f"rank(s) {stalled} never passed the probe" in rep.failure.message, rep.failure.message


def test_in_place_without_a_command_is_bad_input(tmp_path):
    env = probe_env(0, 1, free_port())
    [run] = wait_ranks([env], start([env], tmp_path, [["-m", "disttrain_probe", "--"]]), timeout=60)
    rep = parse_report(run.report_text)
    assert run.rc == 1 and rep.phase == "config" and "nothing after --" in rep.failure.message
