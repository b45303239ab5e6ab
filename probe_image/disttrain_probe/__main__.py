"""``python -m disttrain_probe``: run every phase (:class:`disttrain_probe.run.probe.Probe`),
write the report, exit 0 only on a pass.

``python -m disttrain_probe [probe args] -- <command...>`` runs the probe in place, as the
training container's first step: on a pass, and only once every rank passed, the probe
releases what it holds and hands over to the command in this process
(:mod:`disttrain_probe.run.inplace`, :mod:`disttrain_probe.run.handover`); on a failure
the command does not run and the exit code is 1.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Dict, List, Optional

from disttrain_probe.contract import probe_env, vocabulary
from disttrain_probe.ground import config as C
from disttrain_probe.run import handover, inplace
from disttrain_probe.run import report as REP
from disttrain_probe.run.probe import Probe


def main(argv: Optional[List[str]] = None) -> int:
    """The probe's exit code; in place, after a pass, it does not return (the command's
    exit code is raised as SystemExit, or the command replaced the process)."""
    argv, command = handover.split_argv(sys.argv[1:] if argv is None else argv)
    given = dict(os.environ)  # in place, the command gets this environment back
    try:
        cfg = C.load(argv)
        if command is not None:
            if not command:
                raise C.ConfigError("nothing after --: the training command follows it")
            cfg = dataclasses.replace(cfg, in_place=True)
    except (C.ConfigError, SystemExit) as e:
        if isinstance(e, SystemExit) and e.code in (0, None):
            return 0  # --help
        msg = str(e) if isinstance(e, C.ConfigError) else "invalid command line (see --help)"
        rank = os.environ.get("RANK")
        attempt = os.environ.get(probe_env.ATTEMPT)
        r: Dict[str, Any]
        r = {"v": REP.REPORT_VERSION, "rank": int(rank) if rank and rank.isdigit() else None,
             "jobUid": os.environ.get(probe_env.JOB_UID) or None,
             "attempt": int(attempt) if attempt and attempt.isdigit() else None,
             "pod": os.environ.get("POD_NAME") or None,
             "worldSize": None, "node": os.environ.get("NODE_NAME") or None, "ok": False,
             "phase": "config", "failure": {"reason": vocabulary.PROBE_INTERNAL_ERROR, "phase": "config",
                                            "message": f"bad probe input: {msg}"},
             "warnings": [], "truncated": False}
        REP.emit(r, C.report_path_hint(argv), atomic=command is not None, limit=C.report_bytes_hint())
        return 1
    probe = Probe(cfg, argv)
    code = probe.run()
    if code != 0 or command is None:
        return code
    inplace.hand_over(probe, command, given)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # never wait on torch's destructors or stray threads (in place, after a pass, not reached)
