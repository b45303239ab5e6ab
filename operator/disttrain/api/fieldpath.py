"""Pydantic validation errors as Kubernetes field paths (``spec.template.spec.containers[0]
.command: ...``), the messages of InvalidSpec conditions."""

from __future__ import annotations

import re
from typing import Any


def field_path(loc: tuple[Any, ...], root: str = "spec") -> str:
    """A pydantic error location as Kubernetes writes field paths:
    ``("template", "spec", "containers", 0, "command")`` ->
    ``spec.template.spec.containers[0].command``; a map key that is not a plain name is
    bracketed (``labels[example.com/tier]``)."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{part}]"
    return out


def spec_error_message(exc: Exception) -> str:
    """One line per pydantic error, each naming the field path under ``spec``
    (``spec.template.spec.containers[0].command: Input should be a valid list``)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    lines = []
    for err in errors():
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        loc = tuple(err.get("loc", ()))
        lines.append(f"{field_path(loc)}: {msg}" if loc and not msg.startswith("spec.") else msg)
    return "; ".join(dict.fromkeys(lines))
