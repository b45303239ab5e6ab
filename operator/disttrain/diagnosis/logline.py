"""The line of a failed container's log tail that says why it failed (pure).

A training container's termination message is, with ``FallbackToLogsOnError``, the tail
of its log (the kubelet keeps at most 2048 bytes or 80 lines): under torchrun that tail
ends in the launcher's own traceback and its ChildFailedError summary table, whose last
lines (``traceback : To enable traceback see: https://...``, ``====``) say nothing about
the trainer. :func:`meaningful_line` picks the line a person needs instead:

1. the last exception line (``ValueError: bad shape``, ``torch.OutOfMemoryError: CUDA out
   of memory...``), torchrun's own ``ChildFailedError`` excepted;
2. else the last signal line (``Killed``, ``Segmentation fault (core dumped)``, torchrun's
   ``Signal 9 (SIGKILL) received by PID 7384``);
3. else the last line that is not launcher noise (banners, rules, traceback frames, the
   summary table, torch's ``E1205 12:00:00.000000 42 torch/...]`` log lines).

A tail as long as the kubelet keeps starts wherever the cut fell: its first line is not
read. With several local ranks torchrun's summary alone can fill those 2048 bytes;
:func:`quote` then points at ``kubectl logs``.
"""
from __future__ import annotations

import re
from typing import Optional

from disttrain.diagnosis import messages

LINE_LIMIT = 200  # characters of the chosen line kept in a message
KUBELET_TAIL_BYTES = 2048  # FallbackToLogsOnError keeps at most this much of the log (or 80 lines)

_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)(?::\s.*|:)?$")
_LAUNCHER_EXCEPTION = re.compile(r"(?:^|\.)ChildFailedError:?")
_SIGNAL = re.compile(r"^(?:Killed|Terminated|Aborted|Segmentation fault|Bus error|Illegal instruction|"
                     r"Floating point exception)\b|\bSignal \d+ \(SIG\w+\) received\b|^Fatal Python error:")
# torchrun's summary table and Python's traceback scaffolding: never the answer
_NOISE = re.compile(
    r"^(?:[=\-*_~^#]{3,}|[\^~\s]+|Traceback \(most recent call last\):|File \".*\", line \d+.*|"
    r"\S+ FAILED|Failures:|<NO_OTHER_FAILURES>|Root Cause \(first observed failure\):|\[\d+\]:|"
    r"(?:time|host|rank|exitcode|error_file|traceback)\s*:.*|"
    r"During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:|"
    r".*To enable traceback see:.*|\*? ?Setting OMP_NUM_THREADS environment variable.*|"
    r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S*torch/\S+\] .*)$")


def _signal_in(line: str) -> Optional[str]:
    """torchrun's ``traceback : Signal 9 (SIGKILL) received by PID 7384`` as its signal part."""
    m = re.search(r"Signal \d+ \(SIG\w+\) received by PID \d+", line)
    return m.group(0) if m else None


# terminal colours, titles (OSC) and other escape sequences, and C0 controls but the tab
_ESCAPES = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|"
                      r"[\x00-\x08\x0e-\x1f\x7f]")
# torch's per-rank prefix of a process's output: ``[rank1]:``, ``[default0]:``
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:")


def _plain(line: str) -> str:
    """``line`` without escape sequences, control characters and torch's per-rank prefix
    (its indentation after the prefix kept: tracebacks are read by it), right-stripped."""
    return _RANK_PREFIX.sub("", _ESCAPES.sub("", line)).rstrip()


def meaningful_line(text: object, limit: int = LINE_LIMIT) -> Optional[str]:
    """The line of the log tail ``text`` that says why the container failed (see the module
    docstring), stripped and at most ``limit`` characters (cut at a word boundary with
    ``…``); None when ``text`` holds only launcher noise or is not a string. Never raises."""
    if not isinstance(text, str):
        return None
    raw = [x for x in (_plain(x) for x in text.splitlines()) if x.strip()]
    if len(text.encode("utf-8", "replace")) >= KUBELET_TAIL_BYTES - 8 and len(raw) > 1:
        raw = raw[1:]  # the kubelet cut the log there: its first line is likely a fragment
    lines = [x.strip() for x in raw]
    return _pick(lines, _frame_lines(raw, lines), limit)


def _frame_lines(raw: list[str], lines: list[str]) -> set[int]:
    """Indices of a traceback's source lines: an indented line right after a ``File "..."``
    frame or right before one or before the exception (a tail may start mid-traceback)."""
    def frame(i: int) -> bool:
        return 0 <= i < len(lines) and lines[i].startswith('File "')

    def carets(i: int) -> bool:
        return 0 <= i < len(lines) and bool(re.fullmatch(r"[\^~]+", lines[i]))

    out = set()
    for i, x in enumerate(raw):
        if not x[:1].isspace() or _EXCEPTION.match(lines[i]):
            continue
        after = i + 1 + (1 if carets(i + 1) else 0)
        if frame(i - 1) or frame(after) or (after < len(lines) and _EXCEPTION.match(lines[after])
                                            and not _SIGNAL.search(lines[i])):
            out.add(i)
    return out


def _pick(lines: list[str], frames: set[int], limit: int) -> Optional[str]:
    exception = signal = other = None
    for i, line in enumerate(lines):
        sig = _signal_in(line)
        if sig:
            signal = sig
            continue
        if i in frames or _NOISE.match(line):
            continue
        if _EXCEPTION.match(line) and not _LAUNCHER_EXCEPTION.search(line):
            exception = line
        elif _SIGNAL.search(line):
            signal = line
        elif not _LAUNCHER_EXCEPTION.search(line):
            other = line
    chosen = exception or signal or other
    if chosen is None:
        return None
    return messages.cut(" ".join(chosen.split()), max(limit, 1)) or None


def quote(text: object, pod: str, container: Optional[str] = None) -> str:
    """What a message says of a failed container's log tail ``text``: its
    :func:`meaningful_line`; where the tail holds none but is not empty (the error scrolled
    out of the kubelet's last 2048 bytes, e.g. above torchrun's summary tables), where to
    read the whole log (``kubectl logs <pod> [-c <container>]``); "" for no tail at all."""
    line = meaningful_line(text)
    if line:
        return line
    if isinstance(text, str) and text.strip():
        where = f"{pod} -c {container}" if container else pod
        return f"no error line in its log's last {KUBELET_TAIL_BYTES} bytes (kubectl logs {where})"
    return ""


__all__ = ["KUBELET_TAIL_BYTES", "LINE_LIMIT", "meaningful_line", "quote"]
