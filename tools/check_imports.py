"""No import inside a function of the product without its reason (issue 32), checked by
`make lint`.

An import inside a function hides a dependency from the layer contracts' readers and from
whoever reads the module's head. The product (``operator/``, ``probe_image/``) keeps them
for a reason: torch is the probe's slow import (the inventory, the versions read from the
files and the rendezvous run before it loads), the Kubernetes client only where the CLI
reads a cluster, a handler module whose import registers kopf handlers. Each such import
carries that reason as a comment on its first line (``import torch  # the slow import:
...``); a bare ``# noqa`` is no reason. Reads the sources only (nothing is imported).
``python tools/check_imports.py`` prints each import without one and exits 1.
"""
from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path
from typing import Iterator

from check_sizes import sources  # tools/ is on sys.path: the script's own folder

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("operator", "probe_image")


def comments(text: str) -> dict[int, str]:
    """Line number -> the comment on it (without ``#``), for every comment of ``text``."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def has_reason(comment: str) -> bool:
    """A comment that says why: some words beyond a ``noqa: CODE`` and its parentheses."""
    rest = comment
    if rest.startswith("noqa"):
        rest = rest.split(None, 1)[1] if " " in rest else ""
    words = [w for w in rest.replace("(", " ").replace(")", " ").split() if w.isalpha() or len(w) > 2]
    return len(words) >= 2


def lazy_imports(text: str, rel: str) -> Iterator[tuple[int, str]]:
    """(line, statement) of every import inside a function of ``text`` without its reason."""
    tree = ast.parse(text, filename=rel)
    notes = comments(text)
    lines = text.splitlines()
    seen: set[int] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in seen:
                seen.add(node.lineno)
                if not has_reason(notes.get(node.lineno, "")):
                    yield node.lineno, lines[node.lineno - 1].strip()


def check(root: Path = ROOT, roots: tuple[str, ...] = ROOTS) -> list[str]:
    """``path:line: statement`` for each import inside a function without its reason."""
    return [f"{rel}:{line}: {stmt}" for path, rel in sources(root, roots)
            for line, stmt in lazy_imports(path.read_text(encoding="utf-8"), rel)]


def main() -> int:
    problems = check()
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} import(s) inside a function without a reason: move to the module's "
              f"head, or say why on the import's line (tools/check_imports.py)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
