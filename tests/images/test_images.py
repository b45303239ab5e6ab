"""Smoke tests of the images `make images` builds (localcluster/build/build-images.sh):
each starts and does its job's first step, run by buildah with no network but lo.

- operator: starts as uid 65532 and serves kopf's /healthz (as the chart's livenessProbe
  asks) with a kubeconfig whose apiserver is unreachable: login and the startup handler
  need no API call, the watchers retry in the background.
- probe: `--help`, then a real one-rank probe (gloo all-reduce on lo) with torch from the
  shared read-only tree on PYTHONPATH, as a pod on a node would run it.
- example: the training script from examples/ddp-digits.yaml's ConfigMap trains one rank
  for 2 epochs on the digits, torch from the tree.
- the cache: a second build changes nothing; a change to the operator's code rebuilds only
  the operator's image.
"""
from __future__ import annotations

import json
import shutil
import time

import pytest
import yaml

from .conftest import REPO, TORCH_MOUNT, build_images

pytestmark = [pytest.mark.images, pytest.mark.timeout(1800)]  # the first test builds every image cold

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""

# Runs inside the operator image: start the operator as the chart's Deployment does, wait for
# /healthz, print what it answered and the operator's log.
HEALTHZ = """
import json, os, subprocess, sys, time, urllib.request
p = subprocess.Popen([sys.executable, "-m", "disttrain", "--liveness=http://127.0.0.1:8080/healthz",
                      "--metrics-port=9090", "--log-format=plain"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
result = {"uid": os.getuid(), "gid": os.getgid(), "status": None}
deadline = time.time() + 60
while time.time() < deadline and p.poll() is None and result["status"] is None:
    try:
        with urllib.request.urlopen("http://127.0.0.1:8080/healthz", timeout=2) as r:
            result["status"], result["body"] = r.status, r.read().decode()
        with urllib.request.urlopen("http://127.0.0.1:9090/metrics", timeout=2) as r:
            result["metrics"] = r.status
    except OSError:
        time.sleep(0.5)
p.terminate()
try:
    out = p.communicate(timeout=30)[0]
except subprocess.TimeoutExpired:
    p.kill()
    out = p.communicate()[0]
result["log"] = out[-4000:]
print(json.dumps(result))
"""


def test_operator_image_serves_healthz(images, tmp_path):
    p = images.run("disttrain-operator", "python", "-m", "disttrain", "--help")
    assert p.returncode == 0 and "--liveness" in p.stdout, p.stderr
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG)
    kc.chmod(0o644)
    p = images.run("disttrain-operator", "python", "-c", HEALTHZ, volumes={str(kc): "/tmp/kubeconfig"},
                   env={"KUBECONFIG": "/tmp/kubeconfig"})
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert (r["uid"], r["gid"]) == (65532, 65532)  # the chart's runAsUser/runAsGroup
    assert r["status"] == 200, r["log"]
    assert r.get("metrics") == 200, r["log"]
    assert "Activity 'configure' succeeded" in r["log"], r["log"]


def test_probe_image_runs_a_probe_with_the_shared_torch_tree(images):
    p = images.run("disttrain-probe", "python", "-m", "disttrain_probe", "--help")
    assert p.returncode == 0 and "--report-path" in p.stdout, p.stderr
    # Built with INSTALL_TORCH=0: no torch of its own.
    p = images.run("disttrain-probe", "python", "-c", "import torch")
    assert p.returncode != 0 and "No module named 'torch'" in p.stderr
    p = images.run("disttrain-probe", "python", "-m", "disttrain_probe", "--rank", "0", "--world-size", "1",
                   "--master-addr", "127.0.0.1", "--master-port", "29500", "--node-name", "smoke",
                   "--socket-ifname", "lo", "--report-path", "/tmp/report.json", "--timeout-seconds", "120",
                   torch=True, env={"PYTHONPATH": TORCH_MOUNT})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["ok"] is True and report["backend"] == "gloo", report
    assert report["versions"]["torch"] == "2.8.0+cu128"
    assert report["versions"]["ncclLib"].startswith(f"{TORCH_MOUNT}/nvidia/")
    assert report["allreduce"], report


def test_example_image_trains_with_the_shared_torch_tree(images, tmp_path):
    docs = [d for d in yaml.safe_load_all((REPO / "examples" / "ddp-digits.yaml").read_text()) if d]
    script = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["train_digits.py"]
    (tmp_path / "train_digits.py").write_text(script)
    (tmp_path / "train_digits.py").chmod(0o644)
    p = images.run("examples-digits", "python", "/opt/script/train_digits.py",
                   volumes={str(tmp_path / "train_digits.py"): "/opt/script/train_digits.py"}, torch=True,
                   env={"PYTHONPATH": TORCH_MOUNT, "EPOCHS": "2", "RANK": "0", "WORLD_SIZE": "1",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29501", "GLOO_SOCKET_IFNAME": "lo"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "rank 0/1" in p.stdout and "test accuracy" in p.stdout, p.stdout


def test_alpine_stand_in_resolves_as_kubeflows_init_container_needs(images, tmp_path):
    """Kubeflow's PyTorch init container loops `nslookup <master>` in sh with seq and sleep
    (through the C library's resolver: /etc/hosts here, the cluster DNS with the pod's
    search list on a node, tests/e2e/test_kubeflow.py)."""
    (tmp_path / "hosts").write_text("10.244.0.7 ddp-digits-master-0\n")
    (tmp_path / "hosts").chmod(0o644)
    p = images.run("alpine", "sh", "-c", "for i in $(seq 2); do nslookup ddp-digits-master-0 && exit 0; "
                   "sleep 0; done; exit 1", volumes={str(tmp_path / "hosts"): "/etc/hosts"})
    assert p.returncode == 0 and "Address: 10.244.0.7" in p.stdout, p.stdout + p.stderr
    p = images.run("alpine", "nslookup", "no-such-name.invalid")
    assert p.returncode == 1 and "** server can't find no-such-name.invalid: NXDOMAIN" in p.stdout, p.stdout


def test_garbage_probe_image_writes_a_broken_report(images):
    p = images.run("garbage-probe", "sh", "-c", "DISTTRAIN_PROBE_REPORT_PATH=/tmp/r python -m disttrain_probe; "
                   "echo rc=$?; cat /tmp/r")
    assert "rc=1" in p.stdout and p.stdout.rstrip().endswith("{not json at all"), p.stdout + p.stderr


# What `build-images.sh all` makes, in its order: each reports "<name>: cached" or "<name>: built".
ALL_IMAGES = ("base", "torch tree", "disttrain-operator", "disttrain-probe", "examples-digits", "pause",
              "garbage-probe", "alpine", "netpol", "mesh-sidecar")


def test_images_are_cached_by_content(images, tmp_path):
    t0 = time.monotonic()
    p = build_images("all")
    assert p.returncode == 0, p.stderr
    assert "built" not in p.stderr and p.stderr.count(": cached") == len(ALL_IMAGES), p.stderr
    for name in ALL_IMAGES:
        assert f"[images] {name}: cached" in p.stderr, p.stderr
    assert time.monotonic() - t0 < 60
    # A copy of the build inputs with one operator module changed: only the operator rebuilds.
    copy = tmp_path / "repo"
    for part in ("operator", "probe_image", "examples", "localcluster/build", "localcluster/images/pause",
                 "localcluster/images/alpine", "localcluster/images/mesh", "tests/e2e/images/garbage-probe"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", ".dockerignore"):
        shutil.copy(REPO / f, copy / f)
    with open(copy / "operator" / "disttrain" / "api" / "constants.py", "a") as f:
        f.write("\n# changed by tests/images/test_images.py\n")
    try:
        p = build_images("all", repo_script=copy / "localcluster" / "build" / "build-images.sh")
        assert p.returncode == 0, p.stderr
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith("[images]")]
        assert [ln.split(":")[0] for ln in lines if ": built " in ln] == ["[images] disttrain-operator"], p.stderr
        for name in (n for n in ALL_IMAGES if n != "disttrain-operator"):
            assert any(ln.startswith(f"[images] {name}: cached") for ln in lines), p.stderr
    finally:
        # The repository's own images get their version tags back; the changed one is removed.
        changed = [ln.split("built ")[1].split()[0] for ln in p.stderr.splitlines() if ": built " in ln]
        assert build_images("all").returncode == 0
        for tag in changed:
            build_images("buildah", "rmi", tag)
