"""The import borders `make lint` enforces (pyproject.toml's import-linter contracts) cover
what they claim: the list of probe modules the operator may not import is every module of
the probe but its contract, so a new probe module is forbidden to the operator from its
first commit; the probe's floors name every part of the probe and except no import; no
import hides inside a probe function without a reason."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


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


def _probe_parts() -> set:
    probe = REPO / "probe_image" / "disttrain_probe"
    return ({p.stem for p in probe.glob("*.py") if p.stem != "__init__"}
            | {d.name for d in probe.iterdir() if d.is_dir() and (d / "__init__.py").exists()})


def test_the_probe_floors_name_every_part_of_the_probe_and_except_nothing():
    """The probe's layers contract: every top-level module and subpackage of the probe is in
    exactly one layer, and no import is excepted (``ignore_imports`` absent or empty)."""
    c = _contract("probe floors:")
    assert c["type"] == "layers" and c["containers"] == ["disttrain_probe"]
    named = [part.strip() for layer in c["layers"] for part in layer.replace(":", "|").split("|")]
    assert sorted(named) == sorted(_probe_parts())
    assert not c.get("ignore_imports")
    assert c["layers"][-1] == "contract" and c["layers"][-2] == "ground"


@pytest.mark.parametrize("package", ["probe_image/disttrain_probe", "operator/disttrain"])
def test_no_import_inside_a_function_without_a_stated_reason(package):
    """An import inside a function hides a dependency from a reader: in the probe and the
    operator each one says why on its line (a comment), or imports torch in a module whose
    docstring says ``torch is imported lazily: ...`` (the probe must report before torch
    loads)."""
    import ast

    bare = []
    for f in sorted((REPO / package).rglob("*.py")):
        src = f.read_text()
        lines = src.splitlines()
        tree = ast.parse(src)
        lazy_torch = "torch is imported lazily:" in (ast.get_docstring(tree) or "")
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(fn):
                if not isinstance(n, (ast.Import, ast.ImportFrom)):
                    continue
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
                torch = all(x == "torch" or x.startswith("torch.") for x in names)
                said = any("#" in line for line in lines[n.lineno - 1:n.end_lineno or n.lineno])
                if not said and not (torch and lazy_torch):
                    bare.append(f"{f.relative_to(REPO)}:{n.lineno}")
    assert not bare, bare


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


def test_every_probe_variable_is_named_once_in_the_contract():
    """Outside docstrings, no module of the operator or the probe spells a
    ``DISTTRAIN_PROBE_*`` name: both sides use ``contract.probe_env``, so the operator
    cannot set a variable the probe no longer reads."""
    import ast
    import io
    import tokenize

    from disttrain_probe.contract import probe_env

    assert len(set(probe_env.NAMES)) == len(probe_env.NAMES)
    assert all(n.startswith("DISTTRAIN_PROBE_") for n in probe_env.NAMES)
    spelled = []
    for root in (REPO / "operator" / "disttrain", REPO / "probe_image" / "disttrain_probe"):
        for f in sorted(root.rglob("*.py")):
            if f.name == "probe_env.py":
                continue
            src = f.read_text()
            docs = {line for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Expr)
                    and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                    for line in range(n.lineno, n.end_lineno + 1)}
            for t in tokenize.generate_tokens(io.StringIO(src).readline):
                if t.type == tokenize.STRING and "DISTTRAIN_PROBE_" in t.string and t.start[0] not in docs:
                    spelled.append(f"{f.relative_to(REPO)}:{t.start[0]}")
    assert not spelled, spelled


def test_no_condition_status_is_a_bare_string_outside_the_constants():
    """``constants.TRUE``/``FALSE``/``UNKNOWN`` everywhere in the operator; the one
    exception is the CRD model's ``Literal[...]`` (a type needs the values themselves)."""
    import ast

    root = REPO / "operator" / "disttrain"
    spelled = []
    for f in sorted(root.rglob("*.py")):
        if f.relative_to(root).as_posix() == "api/constants.py":
            continue
        tree = ast.parse(f.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        literal = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                   and getattr(n.value, "id", "") == "Literal" for c in ast.walk(n.slice)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and n.value in ("True", "False", "Unknown") \
                    and id(n) not in docs | literal and not _is_reason_fallback(n, tree):
                spelled.append(f"{f.relative_to(REPO)}:{n.lineno}")
    assert not spelled, spelled


def _is_reason_fallback(node, tree) -> bool:
    """``"reason": ... or "Unknown"`` in status repair: a reason, not a status."""
    import ast

    for d in ast.walk(tree):
        if isinstance(d, ast.Dict):
            for k, v in zip(d.keys, d.values):
                if isinstance(k, ast.Constant) and k.value == "reason" and any(x is node for x in ast.walk(v)):
                    return True
    return False


def test_the_local_clusters_layers_name_every_room_and_entry_point():
    """Every folder of ``localcluster/localcluster/`` and every module at its top is in
    the rooms contract, so a new room or entry point is layered from its first commit."""
    c = _contract("localcluster rooms")
    assert c["type"] == "layers" and c["containers"] == ["localcluster"]
    named = {part.strip() for layer in c["layers"] for part in layer.replace("|", ":").split(":")}
    package = REPO / "localcluster" / "localcluster"
    present = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    present |= {d.name for d in package.iterdir() if (d / "__init__.py").exists()}
    assert named == present
