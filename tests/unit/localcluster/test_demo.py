"""localcluster.demo.restarted_containers: what `make demo` reports about an operator pod
that restarted (the demo fails on any line)."""
from __future__ import annotations

from localcluster.demo import restarted_containers


def _pod(name: str, *statuses: dict, init: tuple = ()) -> dict:
    return {"metadata": {"name": name},
            "status": {"containerStatuses": list(statuses), "initContainerStatuses": list(init)}}


CRASHED = {
    "name": "operator", "restartCount": 4,
    "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}},
    "lastState": {"terminated": {
        "reason": "Error", "exitCode": 128, "finishedAt": "2026-01-01T00:00:50Z",
        "message": "localcluster containerinit: setup failed: [Errno 2] No such file\nmore"}},
}


def test_no_restart_no_line():
    ok = {"name": "operator", "restartCount": 0, "state": {"running": {}}}
    assert restarted_containers([_pod("op-1", ok)]) == []
    assert restarted_containers([]) == []
    assert restarted_containers([{"metadata": {"name": "pending"}, "status": {}}]) == []


def test_restart_names_pod_container_count_and_last_state():
    [line] = restarted_containers([_pod("op-1", CRASHED)])
    assert line.startswith("op-1/operator: 4 restarts (now running); last state: Error exit 128 "
                           "at 2026-01-01T00:00:50Z: localcluster containerinit: setup failed")
    assert "more" not in line  # the first line of the message only


def test_init_containers_and_missing_last_state_are_reported():
    init = {"name": "setup", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ok = {"name": "operator", "restartCount": 0, "state": {"waiting": {}}}
    assert restarted_containers([_pod("op-2", ok, init=(init,))]) == [
        "op-2/setup: 1 restart (now waiting); last state: not recorded"]
