"""Size limits of the product's code (issue 17) and the proving ground's (issue 32), checked
by `make lint`.

No module of ``operator/``, ``probe_image/`` or ``localcluster/`` over 450 lines, no function (or method)
over 80 lines, from its ``def`` to its last line. The third limit, no function with more
than 6 parameters, is ruff's PLR0913 (``max-args = 6`` in pyproject.toml): an exception
there is a ``# noqa: PLR0913`` on the ``def`` with its reason beside it.

An exception here is an entry of :data:`ALLOWED` with its reason; an entry that no longer
exceeds its limit fails the check too, so the list only shrinks. Reads the sources only
(nothing is imported). ``python tools/check_sizes.py`` prints each problem and exits 1.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("operator", "probe_image", "localcluster")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80

# path (from the repository root) for a module, "path:qualified.name" for a function -> why
# it may exceed its limit. Keep each reason true; remove an entry when its code is split.
ALLOWED: dict[str, str] = {}


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method under ``tree`` with its qualified name (``Class.method``,
    ``outer.inner``), outer ones first."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, f"{name}.")
        else:
            yield from functions(node, prefix)


def oversized(path: Path, rel: str) -> Iterator[tuple[str, str]]:
    """(key, what is over its limit) for the module at ``path`` and its functions; ``key``
    as in :data:`ALLOWED`."""
    text = path.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        yield rel, f"{rel}: {lines} lines (at most {MAX_MODULE_LINES} a module)"
    for name, node in functions(ast.parse(text, filename=rel)):
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES:
            yield (f"{rel}:{name}",
                   f"{rel}:{node.lineno}: {name} is {length} lines (at most {MAX_FUNCTION_LINES} a function)")


def sources(root: Path, roots: tuple[str, ...]) -> Iterator[tuple[Path, str]]:
    """(path, path from ``root`` with /) of every Python source under ``root``'s ``roots``,
    sorted, caches and virtual environments left out (check_imports.py walks the same)."""
    for top in roots:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" not in path.parts and ".venv" not in path.parts:
                yield path, path.relative_to(root).as_posix()


def check(root: Path = ROOT, roots: tuple[str, ...] = ROOTS,
          allowed: dict[str, str] | None = None) -> list[str]:
    """The problems under ``root``'s ``roots``: each module or function over its limit
    and not in ``allowed`` (default :data:`ALLOWED`), and each entry of ``allowed`` that
    is no longer over it."""
    allowed = ALLOWED if allowed is None else allowed
    problems: list[str] = []
    seen: set[str] = set()
    for path, rel in sources(root, roots):
        for key, problem in oversized(path, rel):
            seen.add(key)
            if key not in allowed:
                problems.append(problem)
    problems += [f"{key}: no longer over its limit: remove it from ALLOWED in tools/check_sizes.py"
                 for key in allowed if key not in seen]
    return problems


def main() -> int:
    problems = check()
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} size problem(s): split by concern, or add an entry to ALLOWED in "
              f"tools/check_sizes.py with its reason", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
