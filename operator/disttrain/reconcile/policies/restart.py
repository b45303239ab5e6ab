"""Gang restart and re-probe after a rank fails (pure; Kubeflow's RunPolicy semantics).

Every rank of the failed attempt is deleted before any pod of the next attempt is created
(:mod:`.training` waits for them), so a restarted job never mixes ranks of two attempts.
With ``runPolicy.reprobeOnFailure`` the next attempt is preceded by a new probe run, so an
infrastructure fault that appeared during training (a firewall, a dead NIC) is diagnosed
instead of restarted into; no training pod starts before the new probes validated.
"""

from __future__ import annotations

from dataclasses import dataclass

from disttrain_probe.contract import vocabulary


@dataclass(frozen=True)
class Decision:
    """``restart``: start attempt ``restarts + 1``; ``reprobe``: probe again first;
    otherwise the job fails with ``reason``."""

    restart: bool
    reprobe: bool
    reason: str


def on_rank_failure(restarts: int, backoff_limit: int, reprobe_on_failure: bool,
                    probe_enabled: bool) -> Decision:
    """What to do when a rank of attempt ``restarts`` (0-based) failed."""
    if restarts < backoff_limit:
        return Decision(True, reprobe_on_failure and probe_enabled, vocabulary.RESTARTING)
    reason = vocabulary.BACKOFF_LIMIT_EXCEEDED if backoff_limit else vocabulary.RANK_FAILED
    return Decision(False, False, reason)
