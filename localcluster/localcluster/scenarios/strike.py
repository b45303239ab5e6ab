"""Faults that strike while the job trains (pure): a scenario's ``training`` (the script the
job runs and its environment) and ``strike`` (what happens to which rank once training
advances). :mod:`localcluster.strikes` carries them out. Example::

    training:
      script: allreduce-loop       # scenarios/scripts/allreduce-loop.py replaces train_digits.py
      env: {MATMULS: "30"}         # added to the trainer container's env
    job: {runPolicy: {stallTimeoutSeconds: 30, onStall: Fail}}
    strike:
      fault: throttle              # freeze | partition | loseNode | throttle
      rank: 1                      # the node rank struck (its pod, process, node)
      cpus: 0.1                    # throttle: the CFS quota of its training container
      delaySeconds: 3              # after Progressing=True
    expect:
      condition: Progressing
      status: "True"
      reason: Straggler
      messageContains: ["rank 1 ({node:1})"]
      withinSeconds: 240           # counted from the strike

A ``sleep`` in the user's code is no strike: the script does it (``STALL_RANK``/``STALL_AT``
in ``training.env``).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

SCRIPTS_DIR = Path(__file__).resolve().parents[3] / "scenarios" / "scripts"
SCRIPT_PATTERN = r"^[a-z0-9][a-z0-9-]{0,40}$"
ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]{0,60}$"
FAULTS = ("freeze", "partition", "loseNode", "throttle")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Training(_Strict):
    """What the job trains: ``script`` (a file of ``scenarios/scripts/``, without ``.py``)
    replaces the example's ``train_digits.py``; ``env`` is added to the trainer container."""

    script: Optional[str] = Field(None, pattern=SCRIPT_PATTERN)
    env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _exists(self):
        if self.script is not None and not (SCRIPTS_DIR / f"{self.script}.py").is_file():
            have = sorted(p.stem for p in SCRIPTS_DIR.glob("*.py")) if SCRIPTS_DIR.is_dir() else []
            raise ValueError(f"training.script: no scenarios/scripts/{self.script}.py (there are: {', '.join(have)})")
        bad = [k for k in self.env if not re.match(ENV_NAME_PATTERN, k)]
        if bad:
            raise ValueError(f"training.env: names must match {ENV_NAME_PATTERN}: {bad}")
        return self

    def script_text(self) -> Optional[str]:
        return None if self.script is None else (SCRIPTS_DIR / f"{self.script}.py").read_text()


class Strike(_Strict):
    """A fault that strikes ``delaySeconds`` after the job's ``Progressing`` turned True
    (for a job no operator watches, such as the PyTorchJob of ``make bench-diagnosis``:
    that long after the training process of every rank runs):

    - ``freeze``: SIGSTOP of rank ``rank``'s training process (SIGCONT when the run ends);
    - ``partition``: rank ``rank``'s node drops everything from ``peerRank``'s node, on both
      NICs (an nftables input rule; cleared when the run ends);
    - ``loseNode``: rank ``rank``'s node dies (links down, its kubelet, containerd and pods
      killed; the cluster is brought back up when the run ends);
    - ``throttle``: rank ``rank``'s training container gets ``cpus`` CPUs (its cgroup's CFS
      quota; lifted when the run ends)."""

    fault: Literal["freeze", "partition", "loseNode", "throttle"]
    rank: StrictInt = Field(ge=0, le=63)
    peerRank: Optional[StrictInt] = Field(None, ge=0, le=63)
    cpus: float = Field(0.1, gt=0, le=64)
    delaySeconds: float = Field(3.0, ge=0, le=600)

    @model_validator(mode="after")
    def _peer(self):
        if (self.fault == "partition") != (self.peerRank is not None):
            raise ValueError("strike.peerRank: a partition needs the other end's rank, and only a partition has one")
        if self.peerRank is not None and self.peerRank == self.rank:
            raise ValueError("strike.peerRank: the other end must be another rank")
        return self
