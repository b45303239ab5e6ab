"""``python -m disttrain_probe.install DEST``: copy the probe (its .py files, subpackages
included) into DEST/disttrain_probe,
with the launcher DEST/run_probe.py beside it, and DEST/site/sitecustomize.py (the progress
recorder's start, ``progress/sitehook.py``).

An init container runs this from the probe image into an emptyDir (in place, the training
pod's ``preflight`` container, then relays the report: ``--then-relay``); the training
container then runs ``python DEST/run_probe.py`` (in place :func:`disttrain_probe.contract.install.install_bootstrap` waits for it), so the NCCL and torch that are checked
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

from disttrain_probe.contract.install import LAUNCHER
from disttrain_probe.run import relay

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
    os.makedirs(os.path.join(dest, SITE), exist_ok=True)
    shutil.copyfile(os.path.join(src, "progress", "sitehook.py"), os.path.join(dest, SITE, "sitecustomize.py"))
    # the launcher last and whole (written aside, then renamed): in place the trainer starts
    # it as soon as it exists (:mod:`disttrain_probe.contract.install`), while this may still be copying
    tmp = os.path.join(dest, f".{LAUNCHER}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(_LAUNCHER_SOURCE)
    os.replace(tmp, os.path.join(dest, LAUNCHER))
    return target


def main(argv: Optional[List[str]] = None) -> int:
    """``DEST``: install. ``DEST --then-relay PATH [TIMEOUT_SECONDS] [--to FILE]`` (in place,
    the training pod's ``preflight`` container): install unless DEST's launcher is there
    already (an init container of the stall watch put it there), then relay the report
    (:mod:`disttrain_probe.run.relay`)."""
    argv = sys.argv[1:] if argv is None else argv
    rest: Optional[List[str]] = None
    if "--then-relay" in argv:
        i = argv.index("--then-relay")
        argv, rest = argv[:i], argv[i + 1:]
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print("usage: python -m disttrain_probe.install DEST [--then-relay PATH [TIMEOUT_SECONDS] [--to FILE]]",
              file=sys.stderr)
        return 2
    if rest is None:
        print(install(argv[0]))
        return 0
    if not os.path.exists(os.path.join(argv[0], LAUNCHER)):
        install(argv[0])
    return relay.main(rest)


if __name__ == "__main__":
    sys.exit(main())
