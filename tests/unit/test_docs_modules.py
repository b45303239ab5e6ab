"""docs/architecture.md's module table against the modules: generated, complete, described."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))
import generate_modules  # noqa: E402


def test_module_table_is_current():
    page = generate_modules.PAGE.read_text()
    assert generate_modules.render(page) == page, (
        "docs/architecture.md's module table is stale: run python docs/generate_modules.py --write")


def test_every_module_is_listed_and_described():
    table = generate_modules.table()
    for path in generate_modules.modules():
        rel = path.relative_to(generate_modules.PACKAGE)
        assert generate_modules.summary(path), f"add a docstring to operator/disttrain/{rel}"
        if path.name != "__init__.py":
            assert f"| `{rel.as_posix()}` |" in table


def test_a_new_module_makes_the_table_stale(tmp_path, monkeypatch):
    pkg = tmp_path / "disttrain"
    (pkg / "api").mkdir(parents=True)
    (pkg / "api" / "__init__.py").write_text('"""The API."""\n')
    (pkg / "api" / "types.py").write_text('"""Types."""\n')
    monkeypatch.setattr(generate_modules, "PACKAGE", pkg)
    page = generate_modules.render(f"x\n{generate_modules.BEGIN}\n{generate_modules.END}\ny\n")
    assert "| `api/types.py` | Types. |" in page
    (pkg / "api" / "names.py").write_text('"""Names."""\n')
    assert generate_modules.render(page) != page
