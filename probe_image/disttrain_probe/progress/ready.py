"""``python -m disttrain_probe.progress.ready [--stall-after S] [--dir DIR]``: a native
sidecar's readiness probe (exec) over the progress records of its pod.

Reads every ``rank-*.json`` in ``DIR`` (default ``$DISTTRAIN_PROGRESS_DIR``), prints one line
(``contract.progress.summarize``, at most 900 bytes: the kubelet carries it to the operator
in the Event "Readiness probe failed: <line>") and exits 0 while every rank's ``seq``
advanced within S seconds (default ``contract.progress.DEFAULT_STALL_AFTER_S``) and its
record is fresh, 1 otherwise (no record, an unreadable one, a stale one, a stalled rank),
2 on bad arguments. Never a traceback: unreadable files are named in the line.

A pod whose ranks all advance but whose recorder found a rank to be the job's straggler
(``contract.stragglers.straggler_view``) fails one check every
``contract.stragglers.STRAGGLER_REPORT_S`` with a line that leads with the ``straggler``
segment; the sidecar's ``failureThreshold`` is 2, so the pod stays Ready and the line
reaches the operator as the Event. When the sidecar's temporary directory cannot be written
the straggler is never said (a readiness that fails without bound is worse than a warning
unsaid).

When it exits 1 for a stall, the line also names the peers to which the pod's TCP connections hold
unacknowledged data after repeated retransmissions (:mod:`disttrain_probe.progress.tcpstate`):
the operator's evidence for a silent link while every rank waits in a collective.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import List, Optional, Sequence, Union

from disttrain_probe.contract import progress as contract
from disttrain_probe.contract import stragglers
from disttrain_probe.progress import tcpstate

Item = Union[contract.RankProgress, contract.Unreadable]


def read_records(directory: str) -> List[Item]:
    """Every ``rank-*.json`` of ``directory``, parsed or :class:`contract.Unreadable`;
    a missing or unreadable directory is one Unreadable entry."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("rank-") and n.endswith(".json"))
    except OSError as e:
        return [contract.Unreadable(file=directory, error=e.strerror or type(e).__name__)]
    out: List[Item] = []
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
                out.append(contract.parse(f.read(contract.MAX_RECORD_BYTES + 1)))
        except OSError as e:
            out.append(contract.Unreadable(file=name, error=e.strerror or type(e).__name__))
        except ValueError as e:
            out.append(contract.Unreadable(file=name, error=str(e)))
    return out


def healthy(items: Sequence[Item], now: float, stall_after: float) -> bool:
    """Every record fresh and advanced within ``stall_after`` seconds (none: False)."""
    if not items:
        return False
    for r in items:
        if isinstance(r, contract.Unreadable):
            return False
        if now - r.written_at > contract.STALE_AFTER_S or now - r.seq_advanced_at > stall_after:
            return False
    return True


SAID_FILE = "disttrain-straggler-said"  # in the sidecar's temporary directory: when it last said so


def straggler_due(now: float, directory: Optional[str] = None) -> bool:
    """True (and ``now`` recorded) when the straggler was not said within
    ``contract.stragglers.STRAGGLER_REPORT_S``; False when it was, or when the record of it
    cannot be read or written."""
    path = os.path.join(directory or tempfile.gettempdir(), SAID_FILE)
    try:
        with open(path) as f:
            last = float(f.read(64) or 0)
    except FileNotFoundError:
        last = 0.0
    except (OSError, ValueError):
        return False
    if 0 <= now - last < stragglers.STRAGGLER_REPORT_S:
        return False
    try:
        with open(path, "w") as f:
            f.write(f"{now:.3f}")
    except OSError:
        return False
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m disttrain_probe.progress.ready")
    parser.add_argument("--stall-after", type=float, default=contract.DEFAULT_STALL_AFTER_S,
                        help="seconds without a new collective before a rank counts as stalled")
    parser.add_argument("--dir", default=os.environ.get(contract.PROGRESS_DIR_ENV, ""),
                        help=f"the records' directory (default ${contract.PROGRESS_DIR_ENV})")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        now = time.time()
        items = read_records(args.dir) if args.dir else [
            contract.Unreadable(file="-", error=f"{contract.PROGRESS_DIR_ENV} is not set")]
        ok = healthy(items, now, args.stall_after)
        slow = contract.straggler_words(items, now) if ok else []
        if slow and straggler_due(now):
            print(contract.summarize(items, now, lead=slow), flush=True)
            return 1
        print(contract.summarize(items, now, () if ok else tcpstate.read()), flush=True)
        return 0 if ok else 1
    except Exception as e:  # a readiness probe prints a line, never a traceback
        failed = contract.Unreadable(file=args.dir or "-", error=f"{type(e).__name__}: {e}")
        print(contract.summarize([failed], time.time()), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
