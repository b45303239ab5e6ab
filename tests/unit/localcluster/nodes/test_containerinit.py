"""localcluster.nodes.containerinit in a real private mount namespace (root and unshare, no cluster).

The case of the first-run crash loop: a volume mounted over an ancestor of the state dir
(the chart's emptyDir on /tmp, a clone under /tmp) while later mount points do not exist on
the host yet. The container must start on its first try and record every path it created.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.nodes import containerinit

needs_mount_ns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare (util-linux): mount namespaces")


def _run(spec: dict, spec_file: Path) -> subprocess.CompletedProcess:
    spec_file.write_text(json.dumps(spec))
    return subprocess.run(
        ["unshare", "--mount", "--uts", "--propagation", "private", sys.executable, "-m",
         "localcluster.nodes.containerinit", str(spec_file)],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})


@needs_mount_ns
def test_volume_over_the_state_dirs_ancestor_does_not_hide_created_paths(tmp_path):
    outer = tmp_path / "outer"          # plays /tmp: the state dir lives below it
    state = outer / "state"
    state.mkdir(parents=True)
    volume = tmp_path / "emptydir"      # the emptyDir mounted on `outer`
    volume.mkdir()
    term = tmp_path / "term-src"        # a file mount (the termination log)
    term.write_text("")
    deep = tmp_path / "missing" / "deeper" / "termination-log"  # absent on the host
    workdir = tmp_path / "wd" / "sub"                          # absent on the host
    spec = {
        "mounts": [{"source": str(volume), "target": str(outer), "read_only": False},
                   {"source": str(term), "target": str(deep), "read_only": False}],
        "preserve": [],
        "workingDir": str(workdir),
        "command": ["/bin/sh", "-c", 'ls -A "$0"; pwd; test -f "$1" && echo mounted',
                    str(outer), str(deep)],
        "env": {"PATH": "/usr/bin:/bin"},
        "created_paths_file": str(state / "created-paths"),
    }
    p = _run(spec, tmp_path / "spec.json")
    assert p.returncode == 0, p.stderr
    # inside: the volume hides the state dir, the file mount and the working dir are there
    assert p.stdout.split() == [str(workdir), "mounted"]
    created = (state / "created-paths").read_text().splitlines()
    assert created == [str(tmp_path / "missing"), str(tmp_path / "missing" / "deeper"),
                       str(deep), str(tmp_path / "wd"), str(workdir)]


@needs_mount_ns
def test_second_start_creates_and_records_nothing(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "a" / "b"
    spec = {"mounts": [{"source": str(state), "target": str(target), "read_only": True}],
            "preserve": [], "command": ["/bin/true"], "env": {},
            "created_paths_file": str(state / "created-paths")}
    assert _run(spec, tmp_path / "spec.json").returncode == 0
    assert _run(spec, tmp_path / "spec.json").returncode == 0
    lines = (state / "created-paths").read_text().splitlines()
    assert lines == [str(tmp_path / "a"), str(target)]


def test_relative_created_paths_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="must be absolute"):
        containerinit.open_created_paths(".localcluster/created-paths")
    assert not (tmp_path / ".localcluster").exists()
    assert containerinit.open_created_paths(None) is None


def test_relative_created_paths_file_fails_setup_with_exit_128(tmp_path, capsys):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"command": ["/bin/true"], "mounts": [],
                                "created_paths_file": "state/created-paths"}))
    assert containerinit.main([str(spec)]) == 128
    assert "setup failed: created_paths_file must be absolute" in capsys.readouterr().err
