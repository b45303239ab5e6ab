"""In place, the trainer's ``python -c <install_bootstrap(DEST)> -- <command>``
(:mod:`disttrain_probe.contract.install`): it waits for the launcher the relay container
installs, then runs it in the same interpreter with the command after ``--``, as ``python
DEST/run_probe.py -- <command>`` would; and the installer writes the launcher last and whole."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from disttrain_probe import install
from disttrain_probe.contract.install import LAUNCHER, install_bootstrap

SHOW = "import json, os, sys\nprint(json.dumps([os.getpid(), sys.argv, sys.path[0]]))\n"


def test_the_bootstrap_runs_the_launcher_once_it_appears(tmp_path):
    dest = tmp_path / "probe"
    dest.mkdir()

    def later():
        time.sleep(0.3)
        (dest / ".tmp").write_text(SHOW)
        (dest / ".tmp").rename(dest / LAUNCHER)

    threading.Thread(target=later).start()
    p = subprocess.run([sys.executable, "-c", install_bootstrap(str(dest)), "--", "python", "train.py", "--lr", "1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    _, argv, path0 = json.loads(p.stdout)
    assert argv == [str(dest / LAUNCHER), "--", "python", "train.py", "--lr", "1"]
    assert path0 == str(dest)


def test_the_bootstrap_gives_up_naming_the_container_that_installs(tmp_path, monkeypatch):
    from disttrain_probe.contract import install as contract
    monkeypatch.setattr(contract, "BOOTSTRAP_WAIT_SECONDS", 0.2)
    p = subprocess.run([sys.executable, "-c", contract.install_bootstrap(str(tmp_path)), "--", "true"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "kubectl logs -c preflight" in p.stderr and str(tmp_path) in p.stderr


def test_install_writes_the_launcher_last_and_then_relays(tmp_path):
    report = tmp_path / "report.json"
    report.write_text('{"v": 1, "ok": true}')
    out = tmp_path / "msg"
    assert install.main([str(tmp_path / "d"), "--then-relay", str(report), "5", "--to", str(out)]) == 0
    assert (tmp_path / "d" / LAUNCHER).exists() and (tmp_path / "d" / "disttrain_probe" / "__main__.py").exists()
    assert out.read_text() == report.read_text()
    assert not [f for f in (tmp_path / "d").iterdir() if f.name.startswith(".")]  # no temp left


def test_an_installed_probe_is_left_as_it_is(tmp_path):
    """The stall watch's init container installed it before the trainer started, which may
    be importing it: the relay does not write it again."""
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / LAUNCHER).write_text("# installed\n")
    report = tmp_path / "report.json"
    report.write_text('{"v": 1}')
    assert install.main([str(dest), "--then-relay", str(report), "5"]) == 0
    assert (dest / LAUNCHER).read_text() == "# installed\n" and not (dest / "disttrain_probe").exists()
