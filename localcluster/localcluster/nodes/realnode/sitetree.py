"""The site's software on a real node: the shared torch tree (torch and its CUDA wheels,
from the venv) read-only in every container through containerd's ``base_runtime_spec``, as
HPC clusters share one software tree, with a scenario's env, library paths and host mounts."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from localcluster.common.config import (
    cache_dir,
)
from localcluster.nodes.realnode.base import RealNodeError, binaries

# -- the shared torch tree --------------------------------------------------------------------
TORCH_MOUNT = "/opt/site/torch"


def torch_tree() -> Path:
    """The newest complete torch tree ``make images`` made
    (``$DISTTRAIN_CACHE/torch-tree/torch-<version>-<key>/``). Raises RealNodeError."""
    trees = sorted((p for p in (cache_dir() / "torch-tree").glob("torch-*")
                    if (p / ".complete").exists()), key=lambda p: p.stat().st_mtime)
    if not trees:
        raise RealNodeError("no torch tree: run `make images` (it makes "
                            f"{cache_dir() / 'torch-tree'}/torch-<version>-<key>/)")
    return trees[-1]


def default_oci_spec() -> dict:
    """containerd's own default OCI spec (``ctr oci spec``), the base a site edits.
    Raises RealNodeError when ctr fails."""
    p = subprocess.run([binaries()["ctr"], "oci", "spec"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RealNodeError(f"ctr oci spec exited {p.returncode}: {p.stderr.strip()[:300]}")
    return json.loads(p.stdout)


def _host_paths(values: list[str]) -> list[str]:
    """The existing host directories that ``values`` (env values, ``:``-separated path
    lists) name: a directory itself, a file's parent. Pure apart from stat."""
    out: list[str] = []
    for v in values:
        for part in v.split(":"):
            p = Path(part)
            if not p.is_absolute() or not p.exists():
                continue
            out.append(str(p if p.is_dir() else p.parent))
    return out


HOST_MOUNT_ROOT = "/opt/site/host"  # host directory D is at HOST_MOUNT_ROOT + D in containers
# Console scripts of the torch tree (it has none: pip would write them into an image's bin),
# each mounted read-only at /usr/local/bin/<name>, which every image's PATH holds.
SITE_BIN = ["torchrun"]


def site_env_and_mounts(topo, tree: Path) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """What this node gives every container, as a site's node configuration does: the
    shared torch tree read-only at TORCH_MOUNT and on PYTHONPATH, the scenario's ``env``,
    ``libraryPaths`` (appended to LD_LIBRARY_PATH) and ``pythonpath`` (relative to the
    repository, appended to PYTHONPATH), torch's console scripts (SITE_BIN), and each host
    directory those name, read-only at
    HOST_MOUNT_ROOT + its path, the values rewritten to match (a host path under /root
    would not do: a non-root container cannot pass the image's mode-700 /root). Returns
    (env, [(host path, container path)]). A container's own env (its image's ENV, then the
    pod spec's) overrides these by name, as it does on any node."""
    from localcluster.common.config import REPO_ROOT
    env = dict(getattr(topo, "env", None) or {})
    pythonpath = [str(REPO_ROOT / p) for p in getattr(topo, "pythonpath", None) or []]
    libs = list(getattr(topo, "library_paths", None) or [])
    hosts: list[str] = []
    for h in sorted(set(_host_paths(list(env.values()) + pythonpath + libs))):
        if not any(h == m or h.startswith(m.rstrip("/") + "/") for m in hosts):
            hosts.append(h)

    def inside(value: str) -> str:
        parts = []
        for part in value.split(":"):
            for h in hosts:
                if part == h or part.startswith(h.rstrip("/") + "/"):
                    part = HOST_MOUNT_ROOT + part
                    break
            parts.append(part)
        return ":".join(parts)

    env = {k: inside(v) for k, v in env.items()}
    env["PYTHONPATH"] = ":".join([x for x in [env.get("PYTHONPATH", ""), TORCH_MOUNT] if x]
                                 + [inside(p) for p in pythonpath])
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join([x for x in [env.get("LD_LIBRARY_PATH", "")] if x]
                                          + [inside(p) for p in libs])
    site_bin = REPO_ROOT / "localcluster" / "images" / "site-bin"
    return env, ([(str(tree), TORCH_MOUNT)] + [(str(site_bin / b), f"/usr/local/bin/{b}") for b in SITE_BIN]
                 + [(h, HOST_MOUNT_ROOT + h) for h in hosts])


def site_spec(default: dict, env: dict[str, str], mounts: list[tuple[str, str]]) -> dict:
    """``default`` (an OCI runtime spec) with ``env`` set in process.env (replacing by name)
    and each (source, destination) of ``mounts`` added as a read-only bind. Pure."""
    import copy
    spec = copy.deepcopy(default)
    proc = spec.setdefault("process", {})
    names = set(env)
    proc["env"] = [e for e in proc.get("env") or [] if e.split("=", 1)[0] not in names] + [
        f"{k}={v}" for k, v in env.items()]
    spec["mounts"] = list(spec.get("mounts") or []) + [
        {"destination": dst, "type": "bind", "source": src, "options": ["rbind", "ro"]}
        for src, dst in mounts]
    return spec
