"""The import borders `make lint` enforces (pyproject.toml's import-linter contracts) cover
what they claim: the list of probe modules the operator may not import is every module of
the probe but its contract, so a new probe module is forbidden to the operator from its
first commit."""
from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _contract(name_start: str) -> dict:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [c] = [c for c in contracts if c["name"].startswith(name_start)]
    return c


def test_the_operator_is_forbidden_every_probe_module_but_the_contract():
    c = _contract("the operator imports only the probe's contract")
    probe = REPO / "probe_image" / "disttrain_probe"
    modules = {f"disttrain_probe.{p.stem}" for p in probe.glob("*.py") if p.stem != "__init__"}
    modules |= {f"disttrain_probe.{d.name}" for d in probe.iterdir()
                if d.is_dir() and (d / "__init__.py").exists() and d.name != "contract"}
    assert set(c["forbidden_modules"]) == modules
    assert c["source_modules"] == ["disttrain"]


def test_the_contract_is_standard_library_only_and_imports_no_other_probe_module():
    import ast
    import sys

    for f in sorted((REPO / "probe_image" / "disttrain_probe" / "contract").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:  # relative: only within the contract
                    assert node.level == 1, f"{f.name}: imports outside the contract"
                else:
                    assert node.module.split(".")[0] in sys.stdlib_module_names | {"__future__"}, f.name
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert a.name.split(".")[0] in sys.stdlib_module_names, f"{f.name}: {a.name}"
