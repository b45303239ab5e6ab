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


def import_images(ctr: str, d: Path, root: Path, archives: list[tuple[str, str]]) -> None:
    """Import each ``(ref, docker-archive)`` not imported before (one marker per archive
    file under containerd's root), into namespace k8s.io. Raises ImageError."""
    marks = root / "imported"
    marks.mkdir(exist_ok=True)
    for ref, archive in archives:
        mark = marks / Path(archive).name
        if mark.exists():
            continue
        t0 = time.monotonic()
        r = subprocess.run([ctr, "--address", str(d / "containerd.sock"), "-n", "k8s.io",
                            "images", "import", "--snapshotter", "overlayfs", archive],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"ctr images import {archive}: {r.stderr.strip()[-300:]}")
        mark.write_text(ref + "\n")
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
