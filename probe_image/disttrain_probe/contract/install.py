"""Where the probe program is installed in a training container, and how the training
container starts it in place (pure; shared by the probe's installer and the operator's pod
builder).

``DEST/run_probe.py`` (:data:`LAUNCHER`) is written last and whole by
``python -m disttrain_probe.install DEST``; in place the trainer's command is ``python -c
<install_bootstrap(DEST)> -- <command>``: it waits for the launcher (the pod's relay
container installs it as both start) and runs it in the same interpreter.
"""
from __future__ import annotations

import os

LAUNCHER = "run_probe.py"


# ``python -c BOOTSTRAP -- <command>`` in place (no init container): wait for the launcher
# the relay container installs (at most BOOTSTRAP_WAIT_SECONDS), then run it in this
# interpreter as ``python DEST/run_probe.py -- <command>`` would (its folder first on sys.path).
BOOTSTRAP_WAIT_SECONDS = 60
BOOTSTRAP = (
    "import os, runpy, sys, time\n"
    "p = {launcher!r}\n"
    "end = time.monotonic() + {wait}\n"
    "while not os.path.exists(p):\n"
    "    if time.monotonic() > end:\n"
    "        sys.exit('disttrain: the probe was not installed at ' + p + ' within {wait} s "
    "(the preflight container of this pod copies it): see kubectl logs -c preflight')\n"
    "    time.sleep(0.02)\n"
    "sys.argv[0] = p\n"
    "sys.path[0] = os.path.dirname(p)\n"
    "runpy.run_path(p, run_name='__main__')\n"
)


def install_bootstrap(dest: str) -> str:
    """The ``python -c`` source that waits for DEST's launcher and runs it (:data:`BOOTSTRAP`)."""
    return BOOTSTRAP.format(launcher=os.path.join(dest, LAUNCHER), wait=BOOTSTRAP_WAIT_SECONDS)


