"""Preflight-only jobs (pure): a DistTrainingJob labelled ``disttrain.dev/preflight-only:
"true"`` probes and reaches its verdict like any other, then stops: no training pods, ever.

The Kueue admission check (issue 35, docs/admission-check.md) creates one per Workload it
checks and reads its conditions as the check's answer; the job it checks is started by its
own operator once Kueue admits it. A label, not a spec field: the CRD users write is
unchanged, and the mode is the operator's own.

- ``Validated`` True (or ``probe.enabled`` false, which the check never sets): STOP before
  the training policy; the probe pods stay, completed (the check reads the nodes they ran
  on), until the job is deleted, by the check once it answered or with its Workload.
- ``Validated`` False: the verdict policy already ended the job (Failed); nothing to do.
- Undecided: CONTINUE (the training policy waits for Validated; the headless Service the
  probes may need is still made).
"""

from __future__ import annotations

from typing import Mapping

from disttrain.api import constants
from disttrain.reconcile.step import Outcome, Step


def preflight_only(labels: Mapping[str, str]) -> bool:
    """Whether a job with these metadata labels only probes."""
    return labels.get(constants.LABEL_PREFLIGHT_ONLY) == "true"


def apply(s: Step) -> Outcome:
    """STOP before training for a preflight-only job whose preflight passed; CONTINUE otherwise."""
    if preflight_only(s.labels) and not s.terminal and (
            s.is_true(constants.VALIDATED) or not s.spec.probe.enabled):
        return Outcome.STOP
    return Outcome.CONTINUE
