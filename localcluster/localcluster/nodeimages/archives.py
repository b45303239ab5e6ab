"""The images real nodes run: the docker-archives of ``make images`` (listed once by `up`
in ``<state>/realnodes/images.txt``) and their import into each node's containerd."""
from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

from localcluster.common.config import (
    REPO_ROOT,
)

log = logging.getLogger(__name__)


class ImageError(RuntimeError):
    """An image archive could not be imported into a node's containerd."""


IMAGES_LIST = "images.txt"  # <state>/realnodes/images.txt: "<ref> <docker-archive>" lines


def image_archives(state: Path) -> list[tuple[str, str]]:
    """``[(ref, docker-archive path)]`` from ``<state>/realnodes/images.txt`` (written by
    `up`). Raises OSError when `up` wrote none."""
    lines = (state / "realnodes" / IMAGES_LIST).read_text().splitlines()
    return [(ref, path) for ref, _, path in (ln.partition(" ") for ln in lines) if path]


def _ctr(ctr: str, d: Path, *args: str) -> subprocess.CompletedProcess:
    """``ctr`` against the node's containerd (socket under ``d``), namespace k8s.io."""
    return subprocess.run([ctr, "--address", str(d / "containerd.sock"), "-n", "k8s.io", *args],
                          capture_output=True, text=True)


def node_images(ctr: str, d: Path) -> dict[str, str]:
    """``{ref: manifest digest}`` of the images in the node's containerd (namespace
    k8s.io). Raises ImageError when ``ctr`` fails."""
    r = _ctr(ctr, d, "images", "ls")
    if r.returncode != 0:
        raise ImageError(f"ctr images ls: {r.stderr.strip()[-300:]}")
    return parse_images_ls(r.stdout)


def parse_images_ls(out: str) -> dict[str, str]:
    """``{ref: digest}`` from ``ctr images ls`` (columns REF TYPE DIGEST SIZE ...; the
    header line and malformed lines are skipped)."""
    refs = {}
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3 and cols[2].startswith("sha256:"):
            refs[cols[0]] = cols[2]
    return refs


def stale(archives: list[tuple[str, str]], marks: Path,
          present: dict[str, str]) -> list[tuple[str, str]]:
    """The ``(ref, archive)`` pairs to import: those whose marker (``marks/<archive file
    name>``, holding "<ref> <digest>") is missing or names another digest than the node's
    containerd holds for ``ref`` now. A marker alone is no proof: the kubelet deletes
    images under disk pressure, and a node switched back to an older archive keeps the
    newer one under the same ref."""
    todo = []
    for ref, archive in archives:
        mark = marks / Path(archive).name
        try:
            want = mark.read_text().split()
        except OSError:
            want = []
        if len(want) != 2 or want[0] != ref or present.get(ref) != want[1]:
            todo.append((ref, archive))
    return todo


def import_images(ctr: str, d: Path, root: Path, archives: list[tuple[str, str]]) -> None:
    """Import into the node's containerd (namespace k8s.io) each ``(ref, docker-archive)``
    that it does not hold as imported (:func:`stale`), and mark it with the digest it got.
    Raises ImageError."""
    marks = root / "imported"
    marks.mkdir(exist_ok=True)
    for ref, archive in stale(archives, marks, node_images(ctr, d)):
        t0 = time.monotonic()
        r = _ctr(ctr, d, "images", "import", "--snapshotter", "overlayfs", archive)
        if r.returncode != 0:
            raise ImageError(f"ctr images import {archive}: {r.stderr.strip()[-300:]}")
        digest = node_images(ctr, d).get(ref)
        if digest is None:
            raise ImageError(f"ctr images import {archive}: {ref} is not in the node's images"
                             " afterwards (the archive names another image)")
        (marks / Path(archive).name).write_text(f"{ref} {digest}\n")
        log.info("imported %s in %.1fs", ref, time.monotonic() - t0)


def write_list(state: Path) -> None:
    """``<state>/realnodes/images.txt``: the docker-archives of the images ``make images``
    built (``build-images.sh archives``), which each real node imports. Raises RuntimeError
    when they are not built."""
    r = subprocess.run(["bash", str(REPO_ROOT / "localcluster" / "build" / "build-images.sh"),
                        "archives"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("real nodes run the project's images: run `make images` first ("
                           + r.stderr.strip()[-300:] + ")")
    d = state / "realnodes"
    d.mkdir(parents=True, exist_ok=True)
    (d / IMAGES_LIST).write_text(r.stdout)
