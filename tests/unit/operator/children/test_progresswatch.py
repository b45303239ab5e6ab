"""The stall watch's pod changes (pure): what the trainer runs, what the sidecar checks."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import constants
from disttrain.children import progresswatch as pw

WATCH = pw.ProgressWatch(image="probe:1", stall_after_s=30)


def pod_and_trainer(command=("python", "train.py"), args=("--lr", "0.1")):
    trainer = {"name": "trainer", "image": "train:1", "command": list(command), "args": list(args),
               "env": [{"name": "PYTHONPATH", "value": "/code"}]}
    pod_spec = {"containers": [trainer], "initContainers": [{"name": "warmup", "image": "x"}],
                "volumes": [{"name": "data", "emptyDir": {}}]}
    return pod_spec, trainer


def test_the_watch_wraps_the_command_and_adds_the_sidecar_before_the_template_s_inits():
    pod_spec, trainer = pod_and_trainer()
    assert pw.add_watch(pod_spec, trainer, WATCH)
    assert trainer["command"][:2] == ["/bin/sh", "-c"] and trainer["command"][-4:] == \
        ["python", "train.py", "--lr", "0.1"] and trainer["args"] == []
    assert [c["name"] for c in pod_spec["initContainers"]] == [pw.INSTALL_NAME, pw.SIDECAR_NAME, "warmup"]
    side = pod_spec["initContainers"][1]
    assert side["restartPolicy"] == "Always"
    assert side["readinessProbe"]["exec"]["command"][-2:] == ["--stall-after", "30"]
    assert {v["name"] for v in pod_spec["volumes"]} == {"data", constants.PROBE_VOLUME, pw.PROGRESS_VOLUME}
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["DISTTRAIN_PROGRESS_DIR"] == pw.PROGRESS_MOUNT and env["PYTHONPATH"] == "/code"
    assert env["TORCH_FR_BUFFER_SIZE"] == "200"


def test_the_template_s_own_flight_recorder_size_is_kept():
    pod_spec, trainer = pod_and_trainer()
    trainer["env"].append({"name": "TORCH_FR_BUFFER_SIZE", "value": "2000"})
    pw.add_watch(pod_spec, trainer, WATCH)
    assert [e.get("value") for e in trainer["env"] if e["name"] == "TORCH_FR_BUFFER_SIZE"] == ["2000"]


def test_a_trainer_without_a_command_is_left_alone_and_told_why():
    pod_spec, trainer = pod_and_trainer(command=(), args=("--lr", "0.1"))
    before = repr((pod_spec, trainer))
    assert pw.watch_problem(trainer) and "command" in pw.watch_problem(trainer)
    assert not pw.add_watch(pod_spec, trainer, WATCH)
    assert repr((pod_spec, trainer)) == before


def test_adding_twice_gives_the_same_pod():
    pod_spec, trainer = pod_and_trainer()
    pw.add_watch(pod_spec, trainer, WATCH)
    once = repr(pod_spec["initContainers"]) + repr(pod_spec["volumes"])
    trainer2 = dict(trainer, command=["python", "train.py"], args=[])
    pw.add_watch(pod_spec, trainer2, WATCH)
    assert repr(pod_spec["initContainers"]) + repr(pod_spec["volumes"]) == once


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
@given(argv=st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                             max_size=12), min_size=1, max_size=4),
       pythonpath=st.sampled_from([None, "", "/a", "/a:/b"]))
def test_the_wrapper_runs_the_same_argv_with_the_site_dir_first(argv, pythonpath):
    """Run by a real /bin/sh: every argument arrives unchanged (quotes, spaces, $, ;),
    and PYTHONPATH is SITE_DIR followed by what was there."""
    env = {"PATH": "/usr/bin:/bin"} | ({} if pythonpath is None else {"PYTHONPATH": pythonpath})
    cmd = pw.wrapped_command(["/bin/sh", "-c", 'printf "%s\\0" "$PYTHONPATH" "$@"', "x"], argv)
    out = subprocess.run(cmd, env=env, capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape")
    got = out.split("\0")[:-1]
    assert got[0] == pw.SITE_DIR + (f":{pythonpath}" if pythonpath else "")
    assert got[1:] == argv


def worker(name, ready, started=True):
    return {"metadata": {"name": name}, "status": {"initContainerStatuses": [
        {"name": pw.INSTALL_NAME, "ready": False, "started": False},
        {"name": pw.SIDECAR_NAME, "ready": ready, "started": started}]}}


def event(pod, msg, at, path=pw.FIELD_PATH):
    return {"involvedObject": {"kind": "Pod", "name": pod, "fieldPath": path}, "reason": "Unhealthy",
            "message": msg, "lastTimestamp": at}


def test_only_pods_whose_sidecar_started_are_read_ready_or_not():
    pods = [worker("w-0", True), worker("w-1", False), worker("w-2", False, started=False),
            {"metadata": {"name": "w-3"}, "status": {}}]
    assert pw.sidecar_started(pods) == ["w-0", "w-1"]


def test_the_latest_readiness_word_of_each_stalled_sidecar_is_kept():
    events = [event("w-1", "Readiness probe failed: r1 python 40s", "2026-12-06T05:00:10Z"),
              event("w-1", "Readiness probe failed: r1 python 45s", "2026-12-06T05:00:15Z"),
              event("w-1", "Liveness probe failed: other", "2026-12-06T05:00:20Z"),
              event("w-1", "Readiness probe failed: the trainer's", "2026-12-06T05:00:30Z", "spec.containers{trainer}"),
              event("w-2", "Readiness probe failed: r2 collective", "2026-12-06T05:00:15Z")]
    words = pw.latest_words(events, ["w-1"])
    assert words == (pw.ProgressEvent("w-1", "r1 python 45s", "2026-12-06T05:00:15Z"),)


def test_a_word_of_an_earlier_pod_of_the_same_name_is_not_this_pod_s():
    """A restarted attempt's rank keeps its pod name: the old pod's last word (a stall) must
    not be read as the new pod's, or the new attempt would be judged stalled at once."""
    old = event("w-1", "Readiness probe failed: r1 python seq=5 idle=70s", "2026-12-06T05:00:15Z")
    old["involvedObject"]["uid"] = "uid-old"
    new = event("w-1", "Readiness probe failed: progress: no records", "2026-12-06T05:00:10Z")
    new["involvedObject"]["uid"] = "uid-new"
    assert pw.latest_words([old, new], ["w-1"], {"w-1": "uid-new"}) == (
        pw.ProgressEvent("w-1", "progress: no records", "2026-12-06T05:00:10Z"),)
    assert pw.latest_words([old], ["w-1"], {"w-1": "uid-new"}) == ()


@given(st.lists(st.dictionaries(st.sampled_from(["involvedObject", "message", "lastTimestamp", "x"]),
                                st.none() | st.integers() | st.text(max_size=30) |
                                st.dictionaries(st.sampled_from(["name", "fieldPath"]), st.text(max_size=30) | st.none()),
                                max_size=4) | st.integers() | st.none(), max_size=6))
def test_any_events_are_read_without_raising(events):
    for w in pw.latest_words(events, ["w-1", ""]):
        assert isinstance(w.summary, str) and w.summary and len(w.summary) <= 1024
