"""The proving ground's package (``localcluster/localcluster/``) sits inside a folder of the
same name (``localcluster/``: the build scripts, the image contexts). Run from the repository
root (``python -m localcluster``, as the Makefile does), that outer folder is a namespace
package found before the editable install, and a subpackage whose name is also a folder
there resolves to that folder: ``localcluster.images`` once became the image contexts'
``localcluster/images/`` and ``make down`` failed with "cannot import name 'archives' from
'localcluster.images' (unknown location)"."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "localcluster" / "localcluster"


def subpackages() -> list[str]:
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def test_no_subpackage_shares_a_name_with_a_folder_beside_the_package():
    assert subpackages(), "no subpackage found: the layout moved"
    clash = [name for name in subpackages() if (ROOT / "localcluster" / name).exists()]
    assert not clash, f"localcluster/{clash} would shadow localcluster.{clash} from the repository root"


def test_every_subpackage_imports_from_the_repository_root():
    code = "import importlib\n" + "".join(
        f"m = importlib.import_module('localcluster.{n}'); assert m.__file__, '{n} is a namespace'\n"
        for n in subpackages())
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_node_code_fingerprints_name_files_that_exist():
    """A node restarts when the code it runs changed: the lists of that code name files by
    path, and a file moved without its entry made ``up`` fail with "No such file"."""
    from localcluster.nodes import processes

    for listed in (processes.AGENT_SOURCES, processes.REALNODE_SOURCES):
        missing = [p for p in listed if not (PACKAGE / p).is_file()]
        assert not missing, f"listed but absent: {missing}"
