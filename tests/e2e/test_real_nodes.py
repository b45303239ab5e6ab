"""Real nodes (localcluster/nodes/realnode/): a real kubelet with its own containerd, runc and
the CNI plugins per node, running the images built from the repository's Dockerfiles.

`make demo`'s path, end to end, in a cluster instance of its own (DISTTRAIN_CLUSTER_INSTANCE
7, so the shared e2e cluster keeps its nodes): `localcluster up --runtime containerd`, Helm
installs the operator from its image, the example validates and trains in containers; then
faults the agent could only imitate: an image no registry serves, and a node whose kubelet
and containerd die while the probe runs. `down` must leave no node process, cgroup or
machine-wide sysctl changed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
INSTANCE = "7"
STATE = ROOT / f".localcluster-{INSTANCE}"
NS_PREFIX = f"dtj{INSTANCE}-"
EXAMPLE = ROOT / "examples" / "ddp-digits.yaml"
SYSCTLS = ["/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/panic", "/proc/sys/kernel/panic_on_oops"]


def _env() -> dict:
    return {**os.environ, "DISTTRAIN_CLUSTER_INSTANCE": INSTANCE,
            "KUBECONFIG": str(STATE / "admin.kubeconfig"),
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("localcluster", "operator", "probe_image"))}


def _py(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=_env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    from localcluster.common.config import k8s_bin_dir
    r = subprocess.run([str(k8s_bin_dir() / "kubectl"), *args], env=_env(), input=input,
                       capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr}")
    return r


def _json(*args: str) -> dict:
    return json.loads(kubectl(*args, "-o", "json").stdout)


def _cgroups() -> list[str]:
    return sorted(p.name for p in Path("/sys/fs/cgroup/pids").glob(f"{NS_PREFIX}*"))


def _node_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if str(STATE) + "/realnodes" in ln]


@pytest.fixture(scope="module")
def demo():
    unmet = pytest.fail if os.environ.get("DISTTRAIN_REQUIRE_E2E") == "1" else pytest.skip
    if os.geteuid() != 0:
        unmet("real nodes need root")
    missing = [b for b in ("containerd", "ctr", "runc", "nsenter", "buildah") if not shutil.which(b)]
    if missing:
        unmet(f"missing {missing}: bash localcluster/build/system-deps.sh nodes; make images")
    built = subprocess.run(["bash", str(ROOT / "localcluster" / "build" / "build-images.sh"), "all"],
                           env={**os.environ, "TORCH_TREE_PYTHON": sys.executable},
                           capture_output=True, text=True, timeout=1800)  # cached: seconds
    assert built.returncode == 0, built.stderr[-3000:]
    before = {f: Path(f).read_text() for f in SYSCTLS}
    r = _py("-m", "localcluster.demo", "--timeout", "300")
    yield r, before
    _py("-m", "localcluster", "down", timeout=300)


def test_demo_validates_and_trains_in_containers_on_real_kubelets(demo):
    r, _ = demo
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    assert "job ddp-digits: Succeeded" in r.stdout and "test accuracy" in r.stdout
    nodes = _json("get", "nodes")["items"]
    assert len(nodes) == 2
    for n in nodes:
        info = n["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"].startswith("containerd://1.")
        assert info["kubeletVersion"] == "v1.37.2" and "simulated node" not in info["osImage"]
    job = _json("get", "dtj", "ddp-digits")
    conds = {c["type"]: c for c in job["status"]["conditions"]}
    assert conds["Validated"]["status"] == "True" and conds["Succeeded"]["status"] == "True"
    for p in _json("get", "pods", "-l", "disttrain.dev/job-name=ddp-digits")["items"]:
        cs = p["status"]["containerStatuses"][0]
        assert cs["containerID"].startswith("containerd://"), cs
        assert cs["image"].endswith("examples-digits:0.1.0") and cs["state"]["terminated"]["exitCode"] == 0
    op = _json("get", "pods", "-n", "disttrain-system")["items"][0]
    assert op["spec"]["containers"][0]["image"] == "ghcr.io/disttrain/disttrain-operator:0.1.0"
    # kubectl exec: the apiserver reaches the kubelet through the egress proxy
    uid = kubectl("exec", "-n", "disttrain-system", op["metadata"]["name"], "--", "id", "-u").stdout
    assert uid.strip() == "65532"


def test_the_kubelets_did_not_change_machine_wide_sysctls(demo):
    _, before = demo
    assert {f: Path(f).read_text() for f in SYSCTLS} == before


def test_an_image_no_registry_serves_fails_naming_rank_node_and_cause(demo):
    doc = {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
           "metadata": {"name": "pull-fails"},
           "spec": {"numNodes": 2, "network": {"hostNetwork": True},
                    "probe": {"image": "disttrain.dev/test/missing:0", "timeoutSeconds": 60},
                    "template": {"spec": {"containers": [{
                        "name": "trainer", "image": "ghcr.io/disttrain/examples-digits:0.1.0",
                        "command": ["python", "-c", "print(1)"]}]}}}}
    kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    t0 = time.monotonic()
    job = None
    while time.monotonic() - t0 < 90:
        job = _json("get", "dtj", "pull-fails")
        if (job.get("status") or {}).get("phase") == "Failed":
            break
        time.sleep(1)
    conds = {c["type"]: c for c in (job or {}).get("status", {}).get("conditions", [])}
    v = conds["Validated"]
    assert v["reason"] == "ProbeImagePullFailed", conds
    assert "on node-" in v["message"] and "disttrain.dev/test/missing:0: ErrImagePull" in v["message"], v
    assert "no such host" in v["message"] or "not found" in v["message"], v
    assert len(v["message"]) <= 400
    assert time.monotonic() - t0 < 60
    leftover = [p["metadata"]["name"] for p in _json("get", "pods", "-l", "disttrain.dev/job-name=pull-fails")["items"]]
    assert leftover == [] or all("probe" in n for n in leftover)
    kubectl("delete", "dtj", "pull-fails", "--wait=true")


def _daemon_pid(node: str, daemon: str) -> int | None:
    """The pid of ``daemon`` (containerd or kubelet) of real node ``node``, from its cgroup."""
    from localcluster.nodes.realnode.cgroups import cgroup_pids
    for pid in cgroup_pids(f"{NS_PREFIX}{node}"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and Path(argv[0].decode()).name == daemon:
            return pid
    return None


def _apply_example_as(name: str) -> None:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    next(d for d in docs if d["kind"] == "DistTrainingJob")["metadata"]["name"] = name
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))


def _probing_node(job: str) -> str | None:
    """A node whose probe of ``job`` runs, not the operator pod's node (within 60 s)."""
    operator_node = _json("get", "pods", "-n", "disttrain-system")["items"][0]["spec"]["nodeName"]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        probes = _json("get", "pods", "-l", f"disttrain.dev/job-name={job},disttrain.dev/role=probe")["items"]
        if len(probes) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in probes):
            return next(p["spec"]["nodeName"] for p in probes if p["spec"]["nodeName"] != operator_node)
        time.sleep(0.2)
    return None


def _wait_phase(job: str, phases: tuple[str, ...], timeout: float) -> dict:
    t0, obj = time.monotonic(), {}
    while time.monotonic() - t0 < timeout:
        obj = _json("get", "dtj", job)
        if (obj.get("status") or {}).get("phase") in phases:
            break
        time.sleep(1)
    return obj


def test_a_containerd_restart_during_the_probe_is_survived(demo):
    """containerd killed while the probe runs (as an OOM kill or a crash would) is started
    again by the node's supervisor (systemd's Restart=always); the containers run on under
    their shims, the kubelet reconnects, and the job validates and trains."""
    _apply_example_as("cdrestart")
    node = _probing_node("cdrestart")
    assert node, "the probes never ran"
    old = _daemon_pid(node, "containerd")
    assert old is not None
    os.kill(old, 9)
    job = _wait_phase("cdrestart", ("Succeeded", "Failed"), 240)
    assert job["status"]["phase"] == "Succeeded", job.get("status")
    new = _daemon_pid(node, "containerd")
    assert new is not None and new != old


def test_a_hung_kubelet_during_the_probe_is_named(demo):
    """A kubelet that stops (SIGSTOP: hung, as on a node out of memory) while the probe
    runs: its pod's probe goes on, but nothing reports its end, so the job fails within the
    probe budget naming that node, and no training pod is created."""
    _apply_example_as("hung")
    node = _probing_node("hung")
    assert node, "the probes never ran"
    pid = _daemon_pid(node, "kubelet")
    assert pid is not None
    os.kill(pid, 19)  # SIGSTOP
    stopped = time.monotonic()
    try:
        job = _wait_phase("hung", ("Failed", "Succeeded"), 120)
        took = time.monotonic() - stopped
    finally:
        os.kill(pid, 18)  # SIGCONT: the node recovers for the tests after this one
    assert job["status"]["phase"] == "Failed", job.get("status")
    v = {c["type"]: c for c in job["status"]["conditions"]}["Validated"]
    assert v["status"] == "False" and node in v["message"], v
    assert took < 90  # the probe budget (60 s) and its slack
    workers = _json("get", "pods", "-l", "disttrain.dev/job-name=hung,disttrain.dev/role=worker")["items"]
    assert workers == []


def test_a_node_killed_during_the_probe_is_named(demo):
    """A node dies whole (kubelet, containerd, shims, containers: kill_node) while
    the probe runs: the job fails within the probe budget naming that node, and no training
    pod is created. The node killed is the one without the operator pod: a Deployment's pod
    on a lost node is only replaced after the NoExecute taint's tolerationSeconds (300 s by
    default), as on any cluster."""
    from localcluster.nodes.realnode.cgroups import kill_node
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    job = next(d for d in docs if d["kind"] == "DistTrainingJob")
    job["metadata"]["name"] = "lost"
    kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    t0 = time.monotonic()
    operator_node = _json("get", "pods", "-n", "disttrain-system")["items"][0]["spec"]["nodeName"]
    node = None
    while time.monotonic() - t0 < 60 and node is None:
        probes = _json("get", "pods", "-l", "disttrain.dev/job-name=lost,disttrain.dev/role=probe")["items"]
        if len(probes) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in probes):
            node = next(p["spec"]["nodeName"] for p in probes if p["spec"]["nodeName"] != operator_node)
        time.sleep(0.2)
    assert node, "the probes never ran"
    assert kill_node(f"{NS_PREFIX}{node}") > 0
    killed = time.monotonic()
    job = {}
    while time.monotonic() - killed < 120:
        job = _json("get", "dtj", "lost")
        if (job.get("status") or {}).get("phase") == "Failed":
            break
        time.sleep(1)
    assert job["status"]["phase"] == "Failed", job.get("status")
    v = {c["type"]: c for c in job["status"]["conditions"]}["Validated"]
    assert v["status"] == "False" and node in v["message"], v
    assert time.monotonic() - killed < 90  # the probe budget (60 s) and its slack
    workers = _json("get", "pods", "-l", "disttrain.dev/job-name=lost,disttrain.dev/role=worker")["items"]
    assert workers == []


def test_down_leaves_no_node_process_or_cgroup(demo):
    assert _cgroups() and _node_processes()  # the nodes ran as expected before
    r = _py("-m", "localcluster", "down", timeout=300)
    assert r.returncode == 0, r.stderr
    assert _cgroups() == [] and _node_processes() == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(STATE) not in mounts
