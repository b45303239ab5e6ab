"""Fixtures for the end-to-end tests: a real local cluster (see localcluster/README.md).

Set DISTTRAIN_KEEP_CLUSTER=1 to leave the cluster running after the session.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    """A running local cluster, as the tests see it."""

    kubeconfig: Path
    kubectl_path: Path
    env: dict
    state_dir: Path
    node_names: list[str] = field(default_factory=list)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess:
        """Run kubectl against the cluster (text mode). Raises CalledProcessError when
        ``check`` and kubectl fails, TimeoutExpired past ``timeout`` seconds."""
        p = subprocess.run([str(self.kubectl_path), *args], env=self.env, input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise subprocess.CalledProcessError(p.returncode, p.args, p.stdout, p.stderr)
        return p


def _localcluster(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localcluster", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _other_live_sessions(sessions: Path) -> list[int]:
    """PIDs of other pytest sessions that registered themselves as using the cluster."""
    out = []
    for f in sessions.glob("*"):
        try:
            pid = int(f.name)
        except ValueError:
            continue
        if pid != os.getpid() and Path(f"/proc/{pid}").exists():
            out.append(pid)
        elif pid != os.getpid():
            f.unlink(missing_ok=True)
    return out


# The cluster the session brought up, and when its nodes were last checked for pressure.
_ACTIVE: dict = {"cluster": None, "checked": 0.0}
PRESSURE_CHECK_EVERY_S = 60


def pytest_runtest_setup(item):
    """Stop the whole session, naming the node and the condition, once a node is under
    pressure: a node under disk pressure evicts pods and deletes the images no pod runs
    (imported here, never pulled back), so every later test would wait out its timeout
    (one CI run spent its 90 minutes so). Checked at most every PRESSURE_CHECK_EVERY_S."""
    from localcluster.nodes.processes import node_pressures
    from localcluster.nodes.realnode.base import disk_hint

    c = _ACTIVE["cluster"]
    if c is None or time.monotonic() - _ACTIVE["checked"] < PRESSURE_CHECK_EVERY_S:
        return
    _ACTIVE["checked"] = time.monotonic()
    try:
        p = c.kubectl("get", "nodes", "-o", "json", check=False, timeout=20)
        hit = node_pressures(json.loads(p.stdout)["items"]) if p.returncode == 0 else []
    except (subprocess.TimeoutExpired, ValueError, KeyError):
        return  # the apiserver's own trouble: the tests say it
    if hit:
        pytest.exit("node(s) under pressure, every later test would fail: " + "; ".join(hit)
                    + disk_hint(), returncode=3)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """Bring the local cluster up (2 nodes, reused if already healthy) for the session.

    At the end it runs `down`, unless DISTTRAIN_KEEP_CLUSTER=1 or another pytest session
    on this machine is still using the cluster (sessions register in <state>/sessions/).
    """
    from localcluster.common.config import k8s_bin_dir, node_specs, state_dir

    # Locally a missing prerequisite skips; in CI (DISTTRAIN_REQUIRE_E2E=1) it fails.
    unmet = pytest.fail if os.environ.get("DISTTRAIN_REQUIRE_E2E") == "1" else pytest.skip
    if os.geteuid() != 0:
        unmet("the local cluster needs root (network namespaces)")
    if not (k8s_bin_dir() / "kubectl").exists():
        unmet("control-plane binaries not built (make build-cluster)")
    nodes = int(os.environ.get("DISTTRAIN_E2E_NODES", "2"))
    # A cluster that was already up (say, from `make demo`) is left running at the end.
    was_up = _localcluster("status", timeout=60).returncode == 0
    p = _localcluster("up", "--nodes", str(nodes))
    if p.returncode != 0:
        pytest.fail(f"localcluster up failed:\n{p.stderr}\n{p.stdout}")
    kubeconfig = Path(p.stdout.strip().splitlines()[-1])
    env = dict(os.environ)
    env["KUBECONFIG"] = str(kubeconfig)
    env["PATH"] = f"{k8s_bin_dir()}:{env.get('PATH', '')}"
    c = Cluster(kubeconfig=kubeconfig, kubectl_path=k8s_bin_dir() / "kubectl", env=env,
                state_dir=state_dir(), node_names=[n.name for n in node_specs(nodes)])
    sessions = c.state_dir / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    mine = sessions / str(os.getpid())
    mine.touch()
    _ACTIVE["cluster"] = c
    try:
        yield c
    finally:
        _ACTIVE["cluster"] = None
        mine.unlink(missing_ok=True)
        keep = was_up or os.environ.get("DISTTRAIN_KEEP_CLUSTER") == "1"
        if not keep and not _other_live_sessions(sessions):
            _localcluster("down", timeout=120)


@pytest.fixture(scope="session")
def kubeflow_operator(cluster: Cluster) -> Cluster:
    """Kubeflow's training operator (PyTorchJob) running on the session's cluster
    (`localcluster up --kubeflow`); `down` at the end of the session stops it."""
    from localcluster.cluster import kubeflow

    unmet = pytest.fail if os.environ.get("DISTTRAIN_REQUIRE_E2E") == "1" else pytest.skip
    try:
        kubeflow.check_built()
    except kubeflow.KubeflowError as e:
        unmet(str(e))
    p = _localcluster("up", "--nodes", str(len(cluster.node_names)), "--kubeflow")
    if p.returncode != 0:
        pytest.fail(f"localcluster up --kubeflow failed:\n{p.stderr}\n{p.stdout}")
    return cluster


@pytest.fixture
def ns(cluster: Cluster, request) -> str:
    """A fresh namespace for one test, named after its module; deleted afterwards
    (without waiting: the garbage collector finishes the job)."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_").replace("_", "-")
    name = f"{module}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def operator(cluster):
    """The operator as a host process under the chart's ServiceAccount and RBAC
    (:mod:`localcluster.cluster.operator_install`), started for a test module, stopped at its end."""
    from localcluster.cluster import operator_install

    operator_install.stop()
    operator_install.start()
    yield operator_install
    operator_install.stop()
