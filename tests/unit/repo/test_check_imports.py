"""tools/check_imports.py (issue 32): no import inside a function of the product without
its reason, and the check fails on one."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))
import check_imports  # noqa: E402


def _tree(tmp_path: Path, source: str) -> Path:
    pkg = tmp_path / "operator" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text(source)
    return tmp_path


def test_the_product_gives_a_reason_for_every_import_inside_a_function():
    assert check_imports.check() == []


@pytest.mark.parametrize("line,ok", [
    ("    import torch\n", False),
    ("    import torch  # noqa: F401\n", False),
    ("    import torch  # x\n", False),
    ("    import torch  # the slow import, only here\n", True),
    ("    import torch  # noqa: F401  (the slow import)\n", True),
    ("    from os import (  # registers the handlers on import\n        path,\n    )\n", True),
    ("    from os import (\n        path,  # registers the handlers on import\n    )\n", False),
])
def test_an_import_inside_a_function_needs_its_reason_on_its_first_line(tmp_path, line, ok):
    root = _tree(tmp_path, f"import json\n\n\ndef f():\n{line}    return 1\n")
    problems = check_imports.check(root, ("operator",))
    assert (problems == []) == ok, problems
    if not ok:
        assert problems[0].startswith("operator/pkg/mod.py:5: ")


def test_imports_at_the_module_head_and_in_classes_are_free(tmp_path):
    root = _tree(tmp_path, "import json\n\n\nclass C:\n    import os\n")
    assert check_imports.check(root, ("operator",)) == []


def test_main_exits_1_and_names_the_import(tmp_path, monkeypatch, capsys):
    root = _tree(tmp_path, "def f():\n    import os\n")
    real = check_imports.check
    monkeypatch.setattr(check_imports, "check", lambda: real(root, ("operator",)))
    assert check_imports.main() == 1
    out = capsys.readouterr()
    assert "operator/pkg/mod.py:2: import os" in out.out and "without a reason" in out.err
