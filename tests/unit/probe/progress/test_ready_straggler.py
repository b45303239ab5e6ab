"""The sidecar's readiness check says a straggler in one failed check every
STRAGGLER_REPORT_S and passes in between, so the pod stays Ready (failureThreshold 2); a stall
still fails every check; an unwritable memory of when it last said so never fails one."""
from __future__ import annotations

import time

import pytest

from disttrain.children import progresswatch
from disttrain_probe.contract import progress as p
from disttrain_probe.contract import stragglers
from disttrain_probe.progress import ready

VIEW = stragglers.StragglerView(share=0.025, median=0.875, counted=3, below=1)


def _write(d, rank, view=None, idle=0.0):
    now = time.time()
    r = p.RankProgress(rank=rank, local_rank=0, world_size=3, pid=1, written_at=now, where=p.IN_PYTHON,
                       seq=5, seq_advanced_at=now - idle, straggler=view)
    (d / p.file_name(rank)).write_text(r.dump())


def _check(d, capsys, monkeypatch, tmp):
    monkeypatch.setattr(ready.tempfile, "gettempdir", lambda: str(tmp))
    code = ready.main(["--dir", str(d), "--stall-after", "30"])
    return code, capsys.readouterr().out.strip()


def test_a_straggler_fails_one_check_then_passes_until_it_is_due_again(tmp_path, capsys, monkeypatch):
    d, tmp = tmp_path / "records", tmp_path / "tmp"
    d.mkdir(), tmp.mkdir()
    _write(d, 2, VIEW)
    code, line = _check(d, capsys, monkeypatch, tmp)
    assert code == 1 and p.parse_straggler(line) == [p.StragglerWord(2, VIEW)]
    assert _check(d, capsys, monkeypatch, tmp)[0] == 0  # said: the next check passes
    (tmp / ready.SAID_FILE).write_text(str(time.time() - stragglers.STRAGGLER_REPORT_S - 1))
    assert _check(d, capsys, monkeypatch, tmp)[0] == 1  # due again


def test_the_threshold_keeps_a_straggler_s_pod_ready_and_a_stall_still_turns_it():
    probe = progresswatch.sidecar_container(progresswatch.ProgressWatch("img", 30))["readinessProbe"]
    assert probe["failureThreshold"] == 2 and probe["successThreshold"] == 1


def test_a_stalled_rank_fails_every_check_straggler_or_not(tmp_path, capsys, monkeypatch):
    d, tmp = tmp_path / "records", tmp_path / "tmp"
    d.mkdir(), tmp.mkdir()
    _write(d, 0, VIEW, idle=100)
    for _ in range(3):
        code, line = _check(d, capsys, monkeypatch, tmp)
        assert code == 1 and p.parse_straggler(line) == []


def test_no_straggler_no_failure(tmp_path, capsys, monkeypatch):
    d, tmp = tmp_path / "records", tmp_path / "tmp"
    d.mkdir(), tmp.mkdir()
    _write(d, 0)
    assert _check(d, capsys, monkeypatch, tmp)[0] == 0


@pytest.mark.parametrize("state", ["dir", "garbage"])
def test_an_unusable_memory_never_fails_a_check(tmp_path, capsys, monkeypatch, state):
    d, tmp = tmp_path / "records", tmp_path / "tmp"
    d.mkdir(), tmp.mkdir()
    _write(d, 1, VIEW)
    if state == "dir":
        (tmp / ready.SAID_FILE).mkdir()
    else:
        (tmp / ready.SAID_FILE).write_text("not a time")
    assert all(_check(d, capsys, monkeypatch, tmp)[0] == 0 for _ in range(3))
