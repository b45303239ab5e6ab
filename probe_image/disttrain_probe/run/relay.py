"""``python -m disttrain_probe.run.relay PATH [TIMEOUT_SECONDS] [--to DEST]``: wait until the
in-place probe's final report is at PATH, then exit 0 (standard library only, no torch:
it starts in a few tens of milliseconds).

In place (run/inplace.py) the probe runs in the training container and the training goes on
after it, so that container's termination message comes too late for the operator. The
relay runs as a second container of the training pod, PATH on an emptyDir shared with the
trainer (``DISTTRAIN_PROBE_REPORT_PATH`` there): it polls every 50 ms and exits 0 as soon
as PATH holds a final report, so the kubelet hands the report to the operator while the
training runs on. A final report is any content but none at all and the pessimistic report
the probe writes before each phase (``"final": false``: the probe is still running; a
report that is not JSON ends the wait too, for the operator to judge). The probe replaces
PATH atomically in place, so the relay never reads one half written. With ``--to DEST``
(``/dev/termination-log``, the relay's own termination message file) the report is copied
there first: the kubelet reads a container's termination message from the file it mounts
at its terminationMessagePath, which therefore should not be PATH itself. After
TIMEOUT_SECONDS (default 600) with no final report it prints one line on stderr and exits 1
(``--to`` then gets the pessimistic report, if there is one: the phase the probe was in).
"""
from __future__ import annotations

import json
import sys
import time
from typing import List, Optional, Tuple

POLL_SECONDS = 0.05
DEFAULT_TIMEOUT_SECONDS = 600.0
USAGE = "usage: python -m disttrain_probe.run.relay PATH [TIMEOUT_SECONDS] [--to DEST]"


def read(path: str) -> Tuple[Optional[str], bool]:
    """(PATH's text, whether it is a final report): (None, False) when it is absent,
    unreadable or empty. Never raises."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None, False
    if not text.strip():
        return None, False
    try:
        report = json.loads(text)
    except ValueError:
        return text, True  # not the probe's pessimistic report: the operator judges it
    return text, not (isinstance(report, dict) and report.get("final") is False)


def copy(text: str, dest: str) -> Optional[str]:
    """Write ``text`` to ``dest`` (in place: a termination message file is a mounted file);
    the error, if any."""
    try:
        with open(dest, "w", encoding="utf-8") as f:
            f.write(text)
        return None
    except OSError as e:
        return str(e)


def parse_args(argv: List[str]) -> Tuple[str, float, Optional[str]]:
    """(PATH, TIMEOUT_SECONDS, DEST or None). Raises ValueError with the reason."""
    args, dest = list(argv), None
    if "--to" in args:
        i = args.index("--to")
        if i + 1 >= len(args):
            raise ValueError("--to needs a file")
        dest = args[i + 1]
        del args[i:i + 2]
    if not 1 <= len(args) <= 2 or not args[0] or args[0].startswith("-"):
        raise ValueError("expected PATH and at most TIMEOUT_SECONDS")
    timeout = float(args[1]) if len(args) == 2 else DEFAULT_TIMEOUT_SECONDS
    if not timeout >= 0 or timeout == float("inf"):
        raise ValueError(f"TIMEOUT_SECONDS {args[1]!r} must be a finite number >= 0")
    return args[0], timeout, dest


def main(argv: Optional[List[str]] = None) -> int:
    try:
        path, timeout, dest = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        print(f"{USAGE}: {e}", file=sys.stderr)
        return 2
    end = time.monotonic() + timeout
    while True:
        text, final = read(path)
        if final and text is not None:
            err = copy(text, dest) if dest else None
            if err:
                print(f"disttrain-probe relay: could not copy the report to {dest}: {err}",
                      file=sys.stderr)
            return 0
        if time.monotonic() >= end:
            if dest and text is not None:
                copy(text, dest)
            print(f"disttrain-probe relay: no final probe report at {path} after {timeout:g}s",
                  file=sys.stderr)
            return 1
        time.sleep(POLL_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
