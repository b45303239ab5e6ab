"""``spec.suspend`` (pure), with the semantics batch/v1 Job, JobSet and Kubeflow Trainer give it.

- Created suspended: nothing runs; ``Suspended=True`` (reason JobSuspended).
- Suspended while probing or training: every pod of the job is deleted; the preflight is
  forgotten (``Validated`` back to Unknown, the next probe run is a new attempt, since the
  nodes may differ when the job resumes) and training stops (``TrainingStarted`` Unknown).
  A suspension is not a failure: ``status.restarts`` and backoffLimit are untouched.
- Resumed: ``Suspended=False`` (reason JobResumed); the probes run again, then training;
  ``status.startTime`` restarts, so activeDeadlineSeconds counts from the resume.

A finished job (Succeeded or Failed) is not affected.
"""

from __future__ import annotations

from disttrain.api import constants
from disttrain.reconcile.step import Outcome, Step
from disttrain_probe.contract import vocabulary

_STAGE = (constants.VALIDATED, constants.TRAINING_STARTED, constants.SUCCEEDED, constants.FAILED) + constants.CHECK_CONDITIONS


def apply(s: Step) -> Outcome:
    """Suspend or resume the job as the spec says; STOP while it is suspended (the other
    stages must not run)."""
    suspended = s.is_true(constants.SUSPENDED)
    if not s.spec.suspend:
        if suspended:
            s.set(constants.SUSPENDED, constants.FALSE, vocabulary.JOB_RESUMED,
                  "resumed: the probes run again, then training")
        return Outcome.CONTINUE
    if not suspended:
        was_running = s.is_true(constants.TRAINING_STARTED)
        s.set(constants.SUSPENDED, constants.TRUE, vocabulary.JOB_SUSPENDED,
              "spec.suspend is true: the job's pods are deleted and nothing runs until it is false"
              + ("; training was stopped" if was_running else ""))
    stop_run(s, vocabulary.JOB_SUSPENDED, "suspended", first=not suspended)
    return Outcome.STOP


def stop_run(s: Step, reason: str, why: str, first: bool) -> None:
    """Stop the job's run without failing it (suspended, or evicted by Kueue): delete its
    pods; when the stop is ``first`` seen, also forget the preflight (the nodes may differ
    when it runs again: a new probe attempt) and the training (Unknown, ``reason``), restart
    activeDeadlineSeconds and count the stop (the next training gang is a new instance)."""
    for p in s.ours:
        s.delete(p)
    if not first:
        return
    for ctype in _STAGE:
        if ctype in constants.CHECK_CONDITIONS or ctype == constants.VALIDATED:
            if s.spec.probe.enabled:
                s.set(ctype, constants.UNKNOWN, reason, f"{why}: checked again when the job runs again")
        else:
            s.set(ctype, constants.UNKNOWN, reason, f"{why}: training has not started")
    probe = s.st.probe
    if probe.start_time:  # a probe run began: the next one is a new attempt
        s.st.new_probe_attempt((probe.attempt or 1) + 1)
    s.st.start_time = None
    # a resumed training gang is a new instance (its PodGroup name counts suspensions)
    s.st.suspensions += 1
