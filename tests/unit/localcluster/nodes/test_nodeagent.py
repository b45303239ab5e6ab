"""The node agent package (localcluster/nodes/nodeagent/): every module imports, the entry point
parses its arguments as `up` passes them, and `up`'s code fingerprint covers every module.
Nothing here starts an agent (that needs a cluster: tests/e2e)."""
from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from localcluster.common.config import REPO_ROOT
from localcluster.nodes import nodeagent, processes

MODULES = sorted(m.name for m in pkgutil.iter_modules(nodeagent.__path__))


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports(name):
    assert importlib.import_module(f"localcluster.nodes.nodeagent.{name}").__doc__


def test_fingerprint_lists_every_module():
    package = Path(nodeagent.__file__).parent
    agent_files = {n for n in processes.AGENT_SOURCES if n.startswith("nodes/nodeagent/")}
    assert agent_files == {f"nodes/nodeagent/{p.name}" for p in package.glob("*.py")}
    assert len(processes.code_version("agent")) == 16


def test_fingerprint_lists_every_module_the_agent_loads():
    """`up` restarts an agent whose code changed: every localcluster module the agent
    imports, transitively, is part of that fingerprint (a fresh interpreter imports it)."""
    code = ("import importlib, sys, pathlib, localcluster\n"
            "importlib.import_module('localcluster.nodes.nodeagent.__main__')\n"
            "base = pathlib.Path(localcluster.__file__).parent\n"
            "print('\\n'.join(pathlib.Path(m.__file__).relative_to(base).as_posix()\n"
            "      for n, m in list(sys.modules.items()) if n.split('.')[0] == 'localcluster'\n"
            "      and getattr(m, '__file__', None)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "localcluster")})
    assert set(out.stdout.split()) == set(processes.AGENT_SOURCES)


def test_pod_worker_keeps_its_thread_and_parts():
    from localcluster.nodes.nodeagent.lifecycle import PodWorker
    for method in ("_start", "_prepare_volumes", "_setup_sandbox", "compute_status", "_delete_pod",
                   "update", "remove", "event"):
        assert callable(getattr(PodWorker, method))
    assert issubclass(PodWorker, threading.Thread)
    assert PodWorker.run is not threading.Thread.run


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def test_no_thread_overrides_a_name_of_thread():
    """Thread calls its own private methods (``_delete`` at exit, ``_stop``, ``_bootstrap``):
    a worker method of that name would run from Thread's machinery too."""
    for name in MODULES:
        importlib.import_module(f"localcluster.nodes.nodeagent.{name}")
    importlib.import_module("localcluster.network.serviceproxy")
    ours = [c for c in _subclasses(threading.Thread) if c.__module__.startswith("localcluster.")]
    assert {c.__name__ for c in ours} >= {"PodWorker", "ServiceProxy"}
    allowed = {"__init__", "run", "__module__", "__doc__", "__dict__", "__weakref__", "__qualname__",
               "__firstlineno__", "__static_attributes__", "__annotations__"}
    for cls in ours:
        for part in cls.__mro__:
            if part.__module__.startswith("localcluster."):
                clash = (set(vars(part)) & set(dir(threading.Thread))) - allowed
                assert not clash, f"{part.__qualname__} overrides threading.Thread's {sorted(clash)}"


def test_main_parses_arguments_and_runs_the_agent(monkeypatch):
    entry = importlib.import_module("localcluster.nodes.nodeagent.__main__")
    made = []

    class FakeAgent:
        def __init__(self, node, gpus, state):
            made.append((node.name, gpus, state))

        def run(self):
            pass

    handled = []
    monkeypatch.setattr(entry, "Agent", FakeAgent)
    monkeypatch.setattr(signal, "signal", lambda signum, handler: handled.append(signum))
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)
    assert entry.main(["--node", "node-b", "--gpus", "2", "--state", "rel/state", "-v"]) == 0
    assert made == [("node-b", 2, Path("rel/state").resolve())]
    assert set(handled) == {signal.SIGTERM, signal.SIGINT}


def test_main_refuses_missing_arguments(capsys):
    entry = importlib.import_module("localcluster.nodes.nodeagent.__main__")
    with pytest.raises(SystemExit) as exc:
        entry.main(["--gpus", "1"])
    assert exc.value.code == 2
    assert "--node" in capsys.readouterr().err


def test_python_dash_m_entry_point_answers_help():
    out = subprocess.run([sys.executable, "-m", "localcluster.nodes.nodeagent", "--help"],
                         capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT / "localcluster")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: localcluster.nodes.nodeagent")
    assert "--state" in out.stdout


def test_pod_worker_parts_work_together_on_a_fake_agent(tmp_path):
    """Volumes, mounts, sandbox files, events and status of one worker (no process runs)."""
    from localcluster.nodes.nodeagent.lifecycle import PodWorker
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    events: list[tuple] = []
    agent = types.SimpleNamespace(
        state=tmp_path, internal_ip="10.0.0.1", hosts_file=tmp_path / "hosts", allocatable={},
        topology=types.SimpleNamespace(dns_records={}),
        node=types.SimpleNamespace(name="node-a", netns="dtj-node-a"),
        post_event=lambda *args: events.append(args))
    spec = {"containers": [{"name": "main", "image": "x",
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
            "initContainers": [{"name": "setup", "image": "x"}], "hostNetwork": True,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "dnsPolicy": "ClusterFirstWithHostNet"}
    worker = PodWorker(agent, {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                               "spec": spec})
    worker.dir.mkdir(parents=True)
    worker._prepare_volumes()
    assert worker._mounts(spec["containers"][0]) == [
        {"source": str(worker.dir / "volumes" / "scratch"), "target": "/scratch",
         "read_only": False}]
    assert worker._hostname() == "node-a"
    assert Path(worker._hosts_file()).read_text() == "127.0.0.1 localhost\n"
    assert "nameserver 10.96.0.10\n" in Path(worker._resolv_conf()).read_text()
    agent.topology.dns_records = {"x.default.svc.cluster.local": "10.100.0.99"}  # node-local DNS
    assert Path(worker._resolv_conf()).read_text().startswith("nameserver 169.254.20.10\n")
    worker.event("Started", "Started container setup", "setup")
    assert events[0][1]["fieldPath"] == "spec.initContainers{setup}"
    status = worker.compute_status()
    assert status["phase"] == "Pending" and status["podIP"] == "10.0.0.1"
    assert [c["name"] for c in status["initContainerStatuses"]] == ["setup"]
