"""Tracked processes (localcluster/localcluster/common/procs.py): a process just started is never
taken for gone while it execs (CI once failed ``up --kubeflow`` with "training operator
exited" and an empty log: /proc/<pid>/cmdline reads empty in the middle of execve), and an
ended child says how it ended."""
from __future__ import annotations

import os
import shutil
import sys
import time

import pytest

from localcluster.common import procs


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_a_process_that_execs_twice_stays_tracked_from_its_first_moment(tmp_path):
    """The training operator's own shape: unshare execs sh, sh execs the program. Polled
    as fast as ``ensure`` can, ``tracked_pid`` finds it every time (without the settle in
    ``cmdline`` about 3% of reads in the first 100 ms were empty)."""
    for d in ("d", "m"):
        (tmp_path / "tmp" / d).mkdir(parents=True)
    misses = reads = 0
    for _ in range(20):
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0/d" "$0/m" && exec "$@"',
                str(tmp_path / "tmp"), sys.executable, "-c", "import time; time.sleep(0.3)",
                f"--kubeconfig={tmp_path}/kc"]
        pid = procs.start_detached(tmp_path, "racer", argv)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.1:
            reads += 1
            misses += procs.tracked_pid(tmp_path, "racer") != pid
        os.waitpid(pid, 0)
    assert reads > 100 and misses == 0, f"{misses} of {reads} reads lost the process"


def test_an_ended_child_says_how_it_ended_and_a_running_one_says_nothing(tmp_path):
    def start(name: str, code: str) -> int:  # the last argument names the state dir
        return procs.start_detached(tmp_path, name, [sys.executable, "-c", code, str(tmp_path / name)])

    code = start("code", "raise SystemExit(3)")
    killed = start("killed", "import os; os.kill(os.getpid(), 9)")
    runs = start("runs", "import time; time.sleep(30)")
    deadline = time.monotonic() + 20
    while (procs.alive(code) or procs.alive(killed)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert procs.tracked_pid(tmp_path, "code") is None
    assert procs.exit_status(code) == "exit status 3"
    assert procs.exit_status(killed) == "killed by SIGKILL"
    assert procs.exit_status(runs) is None and procs.tracked_pid(tmp_path, "runs") == runs
    assert procs.exit_status(os.getppid()) is None  # not our child
    procs.stop_pid(runs, grace=1)
