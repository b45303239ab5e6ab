"""The module tables (operator, probe, local cluster) against the modules: generated, complete, described."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "docs"))
import generate_modules  # noqa: E402

PACKAGES = pytest.mark.parametrize("package", generate_modules.PACKAGES, ids=lambda p: p.root.name)


@PACKAGES
def test_module_table_is_current(package):
    page = package.page.read_text()
    assert page.count(package.begin) == page.count(package.end) == 1, (
        f"{package.page.relative_to(ROOT)} needs the markers of {package.root.name}'s table once each")
    assert generate_modules.render(page, package) == page, (
        f"{package.page.relative_to(ROOT)}'s table of {package.root.name} is stale: "
        "run python docs/generate_modules.py --write")


@PACKAGES
def test_every_module_is_listed_and_described(package):
    table = generate_modules.table(package)
    for path in generate_modules.modules(package):
        rel = path.relative_to(package.root)
        assert generate_modules.summary(path), f"add a docstring to {path.relative_to(ROOT)}"
        if path.name != "__init__.py":
            assert f"| `{rel.as_posix()}` |" in table


def test_a_new_module_makes_the_table_stale(tmp_path):
    package = generate_modules.Package(tmp_path / "disttrain", tmp_path / "page.md")
    (package.root / "api").mkdir(parents=True)
    (package.root / "api" / "__init__.py").write_text('"""The API."""\n')
    (package.root / "api" / "types.py").write_text('"""Types."""\n')
    page = generate_modules.render(f"x\n{package.begin}\n{package.end}\ny\n", package)
    assert "| **`api/`** | The API. |" in page
    assert "| `api/types.py` | Types. |" in page
    (package.root / "api" / "names.py").write_text('"""Names."""\n')
    assert generate_modules.render(page, package) != page


def test_each_package_has_its_own_markers():
    """Two packages' tables may share a page: neither's markers may be found inside the other's."""
    markers = [m for p in generate_modules.PACKAGES for m in (p.begin, p.end)]
    assert not [(a, b) for a in markers for b in markers if a != b and a in b]
