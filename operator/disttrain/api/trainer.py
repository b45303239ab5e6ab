"""Which container of the pod template is the trainer, and which are sidecars. Pure.

The trainer is the container the operator starts training in: it alone gets the
rendezvous environment, the torchrun wrapping and the rendezvous hostPort, and its GPUs,
process count, exit code and termination message are the ones the operator reads. It is
decided as users of Kubeflow expect (:func:`trainer_name`):

1. the only container, when the template has one;
2. else the container named by ``spec.trainerContainer``;
3. else the one container named ``trainer``, ``pytorch`` (Kubeflow PyTorchJob) or ``node``
   (Kubeflow Trainer v2).

Anything else (none or several of those names, or ``spec.trainerContainer`` naming no
container) is refused at admission (:func:`trainer_problem`, and the CEL rules
:data:`TRAINER_RULES` in the CRD), naming the field to set.

Every other container is a sidecar: a plain one (another entry of ``containers``) or a
native one (an ``initContainers`` entry with ``restartPolicy: Always``, Kubernetes 1.29+).
Sidecars pass through to the training pod untouched; their end never ends a rank, and a
plain sidecar still running after the trainer exited 0 does not keep the job running.
"""

from __future__ import annotations

from typing import Any, Optional

# The names a trainer container goes by in Kubeflow's APIs: PyTorchJob's ``pytorch``,
# Trainer v2's ``node``, and this project's examples' ``trainer``.
TRAINER_NAMES = ("trainer", "pytorch", "node")
FIELD = "spec.trainerContainer"
CONTAINERS = "spec.template.spec.containers"

_NAMES_TEXT = ", ".join(TRAINER_NAMES[:-1]) + " or " + TRAINER_NAMES[-1]
AMBIGUOUS_MESSAGE = (
    f"{CONTAINERS}: with more than one container, the trainer is the one named "
    f"{_NAMES_TEXT}, and there must be exactly one such; set {FIELD} to the trainer's name")


def container_names(containers: Any) -> list[str]:
    """The ``name`` of each container of a list as written (a malformed entry: "")."""
    items = containers if isinstance(containers, list) else []
    return [str(c.get("name")) if isinstance(c, dict) and isinstance(c.get("name"), str) else ""
            for c in items]


def trainer_name(containers: Any, chosen: Optional[str] = None) -> Optional[str]:
    """The trainer's name among ``containers`` (a pod spec's list as written) by the rule of
    this module, ``chosen`` being ``spec.trainerContainer``; None when the rule decides
    none (the spec is refused then). Never raises."""
    names = container_names(containers)
    if chosen:
        return chosen if chosen in names else None
    if len(names) == 1:
        return names[0] or None
    named = [n for n in names if n in TRAINER_NAMES]
    return named[0] if len(named) == 1 else None


def trainer_index(containers: Any, chosen: Optional[str] = None) -> Optional[int]:
    """The trainer's position in ``containers`` (see :func:`trainer_name`), or None."""
    name = trainer_name(containers, chosen)
    return None if name is None else container_names(containers).index(name)


def trainer_problem(containers: Any, chosen: Optional[str] = None) -> Optional[str]:
    """Why no trainer can be told from ``containers`` and ``chosen`` (one line naming the
    field to set), or None when one can."""
    if trainer_name(containers, chosen) is not None:
        return None
    if chosen:
        return f"{FIELD}: no container is named {chosen[:63]}; name the trainer container"
    return AMBIGUOUS_MESSAGE


def is_native_sidecar(init_container: Any) -> bool:
    """Whether an ``initContainers`` entry is a native sidecar (``restartPolicy: Always``:
    it starts before the containers and runs beside them)."""
    return isinstance(init_container, dict) and init_container.get("restartPolicy") == "Always"


def non_sidecar_inits(pod_spec: Any) -> list[dict[str, Any]]:
    """The plain init containers of a pod spec (run to completion before the containers)."""
    inits = pod_spec.get("initContainers") if isinstance(pod_spec, dict) else None
    return [c for c in (inits if isinstance(inits, list) else [])
            if isinstance(c, dict) and not is_native_sidecar(c)]


_CEL_CONTAINERS = "self.template.spec.containers"
# The same rule as trainer_problem, for the CRD (at the spec, where trainerContainer and
# the template are both visible); at most 16 containers of names of at most 63 characters.
TRAINER_RULES: list[dict[str, str]] = [
    {
        "rule": f"!has(self.trainerContainer) || {_CEL_CONTAINERS}.exists(c, c.name == self.trainerContainer)",
        "messageExpression": f"'{FIELD}: no container is named ' + self.trainerContainer + '; name the "
        "trainer container'",
    },
    {
        "rule": f"has(self.trainerContainer) || size({_CEL_CONTAINERS}) == 1 || {_CEL_CONTAINERS}"
        f".exists_one(c, c.name in [{', '.join(repr(n) for n in TRAINER_NAMES)}])",
        "message": AMBIGUOUS_MESSAGE,
    },
]
