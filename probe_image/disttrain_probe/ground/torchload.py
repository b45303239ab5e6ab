"""``import torch`` in the background, started as soon as the probe's inventory is taken.

Importing torch (and its CUDA and NCCL libraries) is the slowest thing a probe does: a
few seconds on a warm node, far more on a cold image, a lazily pulled layer, or many
ranks importing at once on few cores. The standard-library phases (the master address
and port, the connectivity listeners) do not need it, so they run meanwhile; the inventory
(interfaces, hostname, NVML) runs just before it, because it loads shared libraries and
every ``dlopen`` waits while torch's libraries load (at most :data:`INVENTORY_HEAD_START`
seconds, then the import starts anyway); the phases that do need
it (the rendezvous store, versions, the collective) wait for it (:meth:`TorchLoader.wait`)
within the probe's whole budget. A slow import is a warning that names the node and the
seconds (``SlowTorchImport``); one that does not finish within the budget is
``TorchImportTimeout``.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, Optional

from disttrain_probe.contract import probe_env, vocabulary
from disttrain_probe.ground.shapes import NcclAnswer, TorchFacts, Versions

# An import that took longer than this many seconds is reported (SlowTorchImport): a third
# of the default 60 s budget (warm nodes import torch in 2-5 s; $DISTTRAIN_PROBE_SLOW_IMPORT_SECONDS).
SLOW_IMPORT_SECONDS = 20.0
# Seconds the inventory may run before the import starts regardless (a resolver that hangs
# on the node's own hostname must not delay the import by its timeouts).
INVENTORY_HEAD_START = 0.5


def slow_import_seconds() -> float:
    """$DISTTRAIN_PROBE_SLOW_IMPORT_SECONDS, else :data:`SLOW_IMPORT_SECONDS`."""
    try:
        return float(os.environ.get(probe_env.SLOW_IMPORT_SECONDS) or SLOW_IMPORT_SECONDS)
    except ValueError:
        return SLOW_IMPORT_SECONDS


class TorchLoader:
    """Imports torch and reads the versions in a daemon thread.

    ``load`` is the work (the probe's: :func:`disttrain_probe.phases.torchfacts.load`, a
    room above this floor, so it is passed in); it returns ``{"versions": {...},
    "ncclDefault": {...} | None}`` and may raise. After :meth:`wait` returned True,
    ``versions``, ``nccl_default``, ``error`` (str or None) and ``seconds`` (float, how long
    the import and version read took) are set.
    """

    def __init__(self, load: Callable[[], TorchFacts],
                 clock: Callable[[], float] = time.monotonic):
        self._load = load
        self._clock = clock
        self._done = threading.Event()
        self.started: Optional[float] = None
        self.seconds: Optional[float] = None
        self.result: TorchFacts = {}
        self.error: Optional[str] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def start(self) -> "TorchLoader":
        """Start the import in a daemon thread; a second call does nothing (the probe
        starts it after its inventory, or from :meth:`start_after` when that is slow)."""
        with self._lock:
            if self._thread is not None:
                return self
            self.started = self._clock()
            self._thread = threading.Thread(target=self._run, name="probe-torch-import",
                                            daemon=True)
            self._thread.start()
        return self

    def start_after(self, seconds: float) -> threading.Timer:
        """Start the import in ``seconds`` unless :meth:`start` came first: the inventory
        runs before the import, but a node whose resolver hangs on its own hostname must
        not hold the import back for the resolver's timeouts. Returns the (daemon) timer."""
        t = threading.Timer(max(0.0, seconds), self.start)
        t.daemon = True
        t.start()
        return t

    def _run(self) -> None:
        try:
            self.result = TorchFacts(**self._load())
        except BaseException as e:  # a broken install is reported, never a crash
            self.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        finally:
            self.seconds = round(self._clock() - (self.started or self._clock()), 3)
            self._done.set()

    @property
    def versions(self) -> Versions:
        return Versions(**(self.result.get("versions") or {}))

    @property
    def nccl_default(self) -> Optional[NcclAnswer]:
        """NCCL's own interface choice without NCCL_SOCKET_IFNAME ({ifname, addr, error}),
        None when no libnccl is loaded (then the re-implemented rule predicts it)."""
        return self.result.get("ncclDefault")

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def elapsed(self) -> float:
        """Seconds since the import started (so far, or in all when done)."""
        if self.seconds is not None:
            return self.seconds
        return self._clock() - (self.started or self._clock())

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds; True when the import is over (or failed)."""
        return self._done.wait(max(0.0, timeout))

    def slow_warning(self, node: str) -> Optional[Dict[str, str]]:
        """The SlowTorchImport warning when the import took more than
        :func:`slow_import_seconds`, else None."""
        limit = slow_import_seconds()
        if self.seconds is None or self.seconds <= limit:
            return None
        return {"reason": vocabulary.SLOW_TORCH_IMPORT, "message": (
            f"{node}: importing torch took {self.seconds:.1f}s (more than "
            f"{limit:g}s): a cold image, lazily pulled layers or too little CPU; "
            f"training starts as slowly: warm the image on the node, or give the pod more CPU")}


__all__ = ["INVENTORY_HEAD_START", "SLOW_IMPORT_SECONDS", "TorchLoader"]
