"""``python -m disttrain_probe.install DEST``: copy the probe (its .py files, subpackages
included) into DEST/disttrain_probe,
with the launcher DEST/run_probe.py beside it, and DEST/site/sitecustomize.py (the progress
recorder's start, ``progress/sitehook.py``).

An init container runs this from the probe image into an emptyDir; the training
container then runs ``python DEST/run_probe.py``, so the NCCL and torch that are checked
are the training image's own. The launcher needs no PYTHONPATH (Python puts a script's
directory first on ``sys.path``): the training container's PYTHONPATH stays exactly as its
image's ENV, the pod spec or the node set it (a site's shared torch tree is often there).

A training container that puts DEST/site first on its PYTHONPATH (its own entries after it)
and sets ``DISTTRAIN_PROGRESS_DIR`` runs the progress recorder in every Python process
(``disttrain_probe.progress``, imported from DEST without DEST staying on ``sys.path``);
that ``sitecustomize`` then runs the image's own.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional

LAUNCHER = "run_probe.py"
SITE = "site"  # DEST/site/sitecustomize.py: the recorder's start, from progress/sitehook.py
_LAUNCHER_SOURCE = (
    '"""The disttrain probe installed beside this file (disttrain_probe.install)."""\n'
    "import runpy\n"
    "runpy.run_module('disttrain_probe', run_name='__main__', alter_sys=True)\n"
)


def install(dest: str) -> str:
    src = os.path.dirname(os.path.abspath(__file__))
    target = os.path.join(dest, "disttrain_probe")
    for here, dirs, files in os.walk(src):  # the package and its subpackages (contract/)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out = os.path.join(target, os.path.relpath(here, src))
        os.makedirs(out, exist_ok=True)
        for name in sorted(files):
            if name.endswith(".py"):
                shutil.copyfile(os.path.join(here, name), os.path.join(out, name))
    with open(os.path.join(dest, LAUNCHER), "w") as f:
        f.write(_LAUNCHER_SOURCE)
    os.makedirs(os.path.join(dest, SITE), exist_ok=True)
    shutil.copyfile(os.path.join(src, "progress", "sitehook.py"), os.path.join(dest, SITE, "sitecustomize.py"))
    return target


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m disttrain_probe.install DEST", file=sys.stderr)
        return 2
    print(install(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
