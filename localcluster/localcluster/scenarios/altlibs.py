"""Alternate library builds a scenario loads on some nodes (``{nccl:VERSION}`` tokens).

``version-skew`` makes one node load another NCCL than the one torch's wheel brings. The
release is the ``nvidia-nccl-cu12`` wheel from PyPI, installed with pip (which reuses its
own cache) into ``<cache>/nccl-<version>`` (see ``scenario.nccl_dir``) the first time a
scenario needs it; later runs find it there. Installs go to a temporary directory that is
renamed into place, so an interrupted or concurrent install never leaves half a library.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from localcluster.scenarios import scenario as scn

PACKAGE = "nvidia-nccl-cu12"


class AltLibError(RuntimeError):
    """An alternate library could not be installed; the message says what to do."""


def ensure_nccl(version: str, timeout: float = 900.0) -> Path:
    """The directory holding ``libnccl.so.2`` of NCCL ``version`` ("2.28.9"), installed
    with ``pip install --no-deps --target`` when missing (pip's cache makes a reinstall
    fast). ``timeout`` in seconds. Raises AltLibError naming the pip command and its error
    when the install fails (no network and not in pip's cache, no such release)."""
    lib_dir = scn.nccl_dir(version)
    if (lib_dir / "libnccl.so.2").is_file():
        return lib_dir
    root = lib_dir.parents[2]  # <cache>/nccl-<version>
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-deps", "--target", str(tmp), f"{PACKAGE}=={version}"]
    try:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AltLibError(f"installing NCCL {version} took over {timeout:.0f}s: "
                              f"{' '.join(cmd)}") from None
        got = tmp / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
        if p.returncode != 0 or not got.is_file():
            tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-6:])
            raise AltLibError(
                f"cannot install NCCL {version} for the scenario ({PACKAGE}=={version} from PyPI "
                f"or pip's cache): `{' '.join(cmd)}` exited {p.returncode}"
                + ("" if got.is_file() or p.returncode else " without libnccl.so.2")
                + f"\n{tail}\nFix: give pip access to PyPI (or a mirror via PIP_INDEX_URL), "
                f"or install it by hand: pip install --no-deps --target {root} {PACKAGE}=={version}")
        try:
            tmp.rename(root)
        except OSError:
            if not (lib_dir / "libnccl.so.2").is_file():  # not a concurrent install that won
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return lib_dir


def ensure_for(sc: "scn.Scenario", say=print) -> list[Path]:
    """Install every NCCL release the scenario's tokens name (see :func:`ensure_nccl`);
    returns their library directories. Raises AltLibError."""
    out = []
    for v in scn.required_nccl(sc):
        if not (scn.nccl_dir(v) / "libnccl.so.2").is_file():
            say(f"installing NCCL {v} ({PACKAGE}) under {scn.nccl_dir(v).parents[2]}")
        out.append(ensure_nccl(v))
    return out
