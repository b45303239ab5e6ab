"""API calls that fail (pure): terminal ones end the job, the others are retried and shown.

The shell (:mod:`disttrain.shell.kube`) never raises out of a step: every failed call becomes an
:class:`~disttrain.reconcile.step.ApiFailure` that is fed into the next step, which decides here:

- the apiserver refused a pod or Service as invalid (400, 422) or by PodSecurity admission
  (403 "violates PodSecurity"), or the kubernetes client refused its body before sending it
  (``ApiFailure.client``): retrying cannot help, the object is built from the spec, so
  the job fails at once with ``InvalidPodTemplate`` (``InvalidSpec`` for a Service), the
  message naming the field as ``spec.template...``;
- anything else (a quota exceeded, 409 on a name, 429, 5xx, no answer) is retried with
  exponential backoff (:func:`backoff_seconds`) and, from the :data:`SHOW_AFTER`-th
  consecutive failure on, shown as ``Unknown`` with reason ``APIError`` and the apiserver's
  message on the condition the job is waiting on (``Validated`` while probing,
  ``TrainingStarted`` before training runs, ``Succeeded``/``Failed`` after), plus a
  Warning Event (the status write itself may be what fails).
"""

from __future__ import annotations

import re
from typing import Optional

from disttrain.api import constants
from disttrain.api.types import trainer_index
from disttrain.children.names import probe_pod_name
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.step import ApiFailure, Outcome, Step
from disttrain_probe.contract import vocabulary

SHOW_AFTER = 3
MAX_BACKOFF_SECONDS = 60.0


def backoff_seconds(attempts: int) -> float:
    """Delay before retrying after ``attempts`` consecutive failed steps: 1, 2, 4 ... 60 s."""
    return min(MAX_BACKOFF_SECONDS, 2.0 ** max(0, attempts - 1))


def is_terminal(f: ApiFailure) -> bool:
    """Whether retrying ``f`` cannot succeed without a change to the spec."""
    if f.verb != "create" or f.kind not in ("Pod", "Service"):
        return False
    return f.client or f.code in (400, 422) or (f.code == 403 and "PodSecurity" in f.message)


_PATH = re.compile(r"(?<![\w.\[])(spec|metadata)\.")


def template_field_message(message: str, probe_of: Optional[int] = None) -> str:
    """The apiserver's message about a pod, with pod field paths turned into the job's:
    ``spec.containers[0].image`` -> ``spec.template.spec.containers[0].image``. For a probe
    pod (``probe_of``: the trainer's index in the template), its one container is the
    trainer's: ``spec.containers[0]`` -> ``spec.template.spec.containers[<probe_of>]``."""
    head, sep, tail = message.partition(" is invalid: ")
    if not sep:
        head, sep, tail = "", "", message
    if probe_of is not None:
        tail = tail.replace("spec.containers[0]", f"spec.containers[{probe_of}]")
    return head + sep + _PATH.sub(lambda m: f"spec.template.{m.group(1)}.", tail)


def terminal_message(f: ApiFailure, probe_of: Optional[int] = None) -> str:
    what = "pod" if f.kind == "Pod" else "Service"
    fix = ("fix spec.template (the pods are built from it)" if f.kind == "Pod"
           else "fix the job's name or spec.rendezvous.port")
    who = "the kubernetes client" if f.client else "the apiserver"
    return cond.clip(f"{who} refused {what} {f.name}: {template_field_message(f.message, probe_of)}; "
                     f"{fix}")


def _probe_of(s: Step, f: ApiFailure) -> Optional[int]:
    """The trainer's index in the template when ``f`` is about one of the job's probe pods."""
    probes = {probe_pod_name(s.job.name, r) for r in range(s.spec.num_nodes)}
    return trainer_index(s.spec) if f.kind == "Pod" and f.name in probes else None


def waiting_condition(s: Step) -> list[str]:
    """The condition(s) a job in its current stage is waiting on."""
    if s.spec.probe.enabled and not s.is_true(constants.VALIDATED):
        return [constants.VALIDATED]
    if not s.is_true(constants.TRAINING_STARTED):
        return [constants.TRAINING_STARTED]
    return [constants.SUCCEEDED, constants.FAILED]


def apply(s: Step) -> Outcome:
    """Act on the failures of the previous step: FINISHED when one cannot succeed on retry
    and the job was failed here, else CONTINUE (the others shown by :func:`show`)."""
    if s.terminal or not s.api_failures:
        return Outcome.CONTINUE
    if _fail_terminal(s) is not None:
        return Outcome.FINISHED
    show(s)
    return Outcome.CONTINUE


def _fail_terminal(s: Step) -> Optional[str]:
    """Fail the job on the first failure that retrying cannot fix; its reason, else None."""
    for f in s.api_failures:
        if is_terminal(f):
            reason = vocabulary.INVALID_POD_TEMPLATE if f.kind == "Pod" else vocabulary.INVALID_SPEC
            if s.is_true(constants.VALIDATED):  # a training pod was refused
                s.finish(False, reason, terminal_message(f, _probe_of(s, f)), "invalid spec")
            else:
                s.fail_preflight(reason, terminal_message(f, _probe_of(s, f)))
            return reason
    return None


def show(s: Step) -> None:
    """Show the failure retried longest, from the SHOW_AFTER-th time on, as ``APIError`` on
    the condition(s) the job waits on (run again at the end of the step, once the stage is
    known)."""
    if s.terminal or not s.api_failures:
        return
    worst = max(s.api_failures, key=lambda f: f.attempts)
    if worst.attempts >= SHOW_AFTER:
        code = (f"HTTP {worst.code}" if worst.code
                else "refused by the kubernetes client" if worst.client else "no answer")
        msg = cond.clip(f"{worst.verb} {worst.kind} {worst.name} failed {worst.attempts} times "
                        f"({code}): {worst.message}; retrying every "
                        f"{backoff_seconds(worst.attempts):g}s")
        for ctype in waiting_condition(s):
            s.set(ctype, constants.UNKNOWN, vocabulary.API_ERROR, msg)
