"""Fixtures for the image tests: the images built by localcluster/build/build-images.sh (the
script `make images` runs) into buildah's storage under $DISTTRAIN_CACHE, and a way to run a
command in one of them with `buildah run`.

Locally a missing prerequisite (root, buildah, mmdebstrap, torch in this environment)
skips; with DISTTRAIN_REQUIRE_E2E=1 (CI: .ci/run installs them) it fails.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "localcluster" / "build" / "build-images.sh"
VERSION = "0.1.0"
# Where a container gets the shared torch tree (read-only) on PYTHONPATH.
TORCH_MOUNT = "/opt/torch"


def build_images(*args: str, repo_script: Path = SCRIPT, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run build-images.sh (torch tree from this test run's Python environment)."""
    env = {**os.environ, "TORCH_TREE_PYTHON": sys.executable}
    return subprocess.run(["nice", "bash", str(repo_script), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@dataclass
class Images:
    torch_tree: Path

    @staticmethod
    def name(image: str) -> str:
        return f"localhost/disttrain/{image}:{VERSION}"

    def run(self, image: str, *cmd: str, volumes: dict[str, str] | None = None,
            env: dict[str, str] | None = None, torch: bool = False,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``cmd`` in a fresh container of ``image`` (as the image's USER, network
        namespace with lo only); ``torch`` mounts the shared torch tree read-only."""
        volumes = dict(volumes or {})
        if torch:
            volumes[str(self.torch_tree)] = TORCH_MOUNT
        c = build_images("buildah", "from", "--pull=never", "--quiet", self.name(image), timeout=120)
        assert c.returncode == 0, c.stderr
        ctr = c.stdout.strip()
        try:
            argv = ["run", "--network", "none"]
            for src, dst in volumes.items():
                argv += ["-v", f"{src}:{dst}:ro"]
            for k, v in (env or {}).items():
                argv += ["--env", f"{k}={v}"]
            return build_images("buildah", *argv, ctr, "--", *cmd, timeout=timeout)
        finally:
            build_images("buildah", "rm", ctr, timeout=120)


@pytest.fixture(scope="session")
def images() -> Images:
    unmet = pytest.fail if os.environ.get("DISTTRAIN_REQUIRE_E2E") == "1" else pytest.skip
    if os.geteuid() != 0:
        unmet("building images needs root (buildah's overlay storage, mmdebstrap --mode=root)")
    for tool in ("buildah", "mmdebstrap", "runc"):
        if not shutil.which(tool):
            unmet(f"{tool} is missing: `make images` installs it (localcluster/build/system-deps.sh images)")
    try:
        import torch  # noqa: F401  (the tree is made from this environment)
    except ImportError:
        unmet("torch is not installed in this environment (make venv): the shared torch tree is made from it")
    p = build_images("all")
    if p.returncode != 0:
        pytest.fail(f"build-images.sh all failed:\n{p.stderr[-6000:]}\n{p.stdout[-2000:]}")
    return Images(torch_tree=Path(p.stdout.strip().splitlines()[-1]))
