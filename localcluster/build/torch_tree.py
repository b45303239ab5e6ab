"""Make the shared, read-only torch tree the images are run with (build-images.sh torch-tree).

    <python of an environment that has torch> torch_tree.py OUT_DIR [REQUIREMENT ...]

Takes the installed distributions of the running environment (default: torch and everything
it requires on this platform, by its metadata) and puts their files into
OUT_DIR/torch-<version>-<key>/ exactly as they lie in site-packages (dist-info included, so
importlib.metadata sees them; console scripts left out), as hard links where the
filesystem allows (no second copy on disk), else copies. Each real node mounts the tree
read-only into every container and puts it on PYTHONPATH (realnode.site_spec); cp311
manylinux wheels load in Debian's python3.11.

<key> is a hash of the Python tag, the machine and every distribution's name and version:
a changed environment gives a new tree, an unchanged one is reused. The tree is made under
a temporary name and renamed when complete; prints its path on stdout.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # pip vendors it
    from pip._vendor.packaging.requirements import Requirement


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``roots`` need here (markers evaluated, no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonical(req.name)
        if name in found:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"torch_tree: {req.name} is not installed in {sys.prefix} "
                             f"(needed for {', '.join(roots)}); run make venv")
        found[name] = dist
        todo.extend(dist.requires or [])
    return found


def place(src: Path, dst: Path) -> bool:
    """Hard-link src to dst, or copy it; True when linked."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
        return True
    except OSError:
        shutil.copy2(src, dst)
        return False


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    roots = argv[1:] or ["torch"]
    dists = closure(roots)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}-{platform.machine()}"
    pins = sorted(f"{canonical(d.metadata['Name'])}=={d.version}" for d in dists.values())
    key = hashlib.sha256("\n".join([tag, *pins]).encode()).hexdigest()[:16]
    torch = dists.get("torch")
    tree = out / f"torch-{torch.version if torch else 'none'}-{key}"
    if (tree / ".complete").exists():
        print(f"[images] torch tree: cached ({tree})", file=sys.stderr)
        print(tree)
        return 0
    t0 = time.monotonic()
    tmp = out / f".{tree.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    linked = copied = size = 0
    for dist in dists.values():
        base = Path(dist.locate_file(""))
        for f in dist.files or []:
            if f.parts and f.parts[0] == "..":  # console scripts in bin/
                continue
            src, dst = base / f, tmp / f
            if not src.is_file() or dst.exists():  # nvidia/__init__.py is in several wheels
                continue
            size += src.stat().st_size
            if place(src, dst):
                linked += 1
            else:
                copied += 1
    (tmp / ".complete").write_text("\n".join([tag, *pins]) + "\n")
    shutil.rmtree(tree, ignore_errors=True)
    tmp.rename(tree)
    print(f"[images] torch tree: {len(dists)} distributions, {size / 2**30:.1f} GiB in "
          f"{linked + copied} files ({linked} hard links, {copied} copies) in "
          f"{time.monotonic() - t0:.0f} s: {tree}", file=sys.stderr)
    print(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
