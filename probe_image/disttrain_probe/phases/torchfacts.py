"""What the probe reads once torch is imported (the background import's work,
:class:`disttrain_probe.ground.torchload.TorchLoader` runs it): the versions
(:func:`inventory.versions`) and the interface the loaded libnccl would use alone
(:mod:`ncclcheck`).

torch is imported lazily: the probe must report before torch loads, so this module
imports it only inside :func:`load`, on the loader's thread.
"""
from __future__ import annotations

import os
import time

from disttrain_probe.contract import probe_env
from disttrain_probe.ground.shapes import TorchFacts
from disttrain_probe.phases import ncclcheck
from disttrain_probe.phases.inventory import versions


def load() -> TorchFacts:
    """Import torch and torch.distributed, read the versions (inventory.versions) and ask
    the loaded libnccl which interface it would use alone (ncclcheck.py): ``{"versions":
    {...}, "ncclDefault": {ifname, addr, error} | None}``; raises what the import raises.
    ``DISTTRAIN_PROBE_TEST_TORCH_DELAY`` (seconds, tests only) makes the import that much
    slower, as a cold image would."""
    delay = os.environ.get(probe_env.TEST_TORCH_DELAY)
    if delay:
        time.sleep(float(delay))
    import torch  # noqa: F401  (the slow import; lazily: see the module's docstring)
    import torch.distributed  # noqa: F401  (with torch)

    out: TorchFacts = {"versions": versions(5.0), "ncclDefault": None}
    lib = ncclcheck.loaded_library()
    if lib:
        out["ncclDefault"] = ncclcheck.bootstrap_interface(lib)
    return out


__all__ = ["load"]
