"""In place: the hand-over (the training command after the probe's ``--``, its form, each
form run as python runs it), the report file replaced whole, and the relay."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from probe_helpers import PY

from disttrain_probe.run import handover as H
from disttrain_probe.run import report as REP

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
