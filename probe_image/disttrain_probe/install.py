"""``python -m disttrain_probe.install DEST``: copy the probe into DEST/disttrain_probe.

An init container runs this from the probe image into an emptyDir; the training
container then runs ``python -m disttrain_probe`` with PYTHONPATH=DEST, so the NCCL and
torch that are checked are the training image's own.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional


def install(dest: str) -> str:
    src = os.path.dirname(os.path.abspath(__file__))
    target = os.path.join(dest, "disttrain_probe")
    os.makedirs(target, exist_ok=True)
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            shutil.copyfile(os.path.join(src, name), os.path.join(target, name))
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
