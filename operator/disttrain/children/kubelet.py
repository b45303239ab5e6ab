"""What the kubelet says ended or holds a pod (pure): one reader of every container state.

The kubelet reports why a container ended or cannot start in the pod's status: each
(init) container's ``state`` (``terminated.reason`` OOMKilled, Error, ContainerCannotRun,
StartError with ``exitCode``; ``waiting.reason`` CreateContainerConfigError,
CreateContainerError, InvalidImageName, ErrImagePull, ImagePullBackOff, CrashLoopBackOff
with ``lastState``), and the pod's own ``status.reason`` (Evicted, Preempting,
DeadlineExceeded, NodeLost, an admission failure such as OutOfmemory) and conditions
(``DisruptionTarget``; ``Ready`` False for NodeLost/NodeNotReady). :func:`container_failure`
reads them all, for probe pods and training pods alike, into one
:class:`ContainerFailure`: what happened (``kind``), to which container, its exit code and
signal, the kubelet's message, the container's memory limit and what it used when the
kubelet said so, and the fix (:meth:`ContainerFailure.fix`). A pod's status is untrusted
input: any field may be missing, null or of the wrong type, and nothing here raises.
"""

from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass
from typing import Any, Optional

from disttrain.api import constants
from disttrain_probe.contract import vocabulary

# kinds of failure, most telling first (the order :func:`container_failure` prefers)
POD = "pod"            # the pod was ended as a whole: evicted, preempted, its deadline, admission
NODE = "node"          # its node stopped reporting (NodeLost, Ready False for NodeNotReady)
OOM = "oom"            # a container ran out of memory (OOMKilled)
CONFIG = "config"      # CreateContainerConfigError: a ConfigMap, Secret or key is missing
CREATE = "create"      # the runtime could not create or start it (CreateContainerError, ...)
IMAGE = "image"        # its image cannot be pulled (ErrImagePull, ImagePullBackOff, InvalidImageName)
SIGNAL = "signal"      # killed by a signal (exit code 128 + N)
EXIT = "exit"          # exited with a non-zero code of its own
KINDS = (POD, NODE, OOM, CONFIG, CREATE, IMAGE, SIGNAL, EXIT)

# the kubelet spells its pod reason for activeDeadlineSeconds as the job's own reason
POD_DEADLINE = vocabulary.DEADLINE_EXCEEDED
# pod-level reasons that end a pod: eviction, preemption, node loss, admission refusals
_POD_REASONS = ("Evicted", "Preempting", "NodeLost", "Terminated", "UnexpectedAdmissionError",
                "NodeAffinity", "NodeShutdown", POD_DEADLINE)
_NODE_REASONS = ("NodeLost", "NodeNotReady")
_CREATE_REASONS = ("CreateContainerError", "ContainerCannotRun", "StartError", "RunContainerError",
                   "PreStartHookError", "PostStartHookError")
_IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                  "RegistryUnavailable")
MESSAGE_KEEP = 200  # characters of the kubelet's message kept
# "Container probe was using 1200Mi, request is 0, has larger consumption of memory" (eviction)
_USING = re.compile(r"[Cc]ontainer (\S+) was using (\S+?),")
_RESOURCE = re.compile(r"low on resource: (\w[\w.\-/]*\w)")
_MISSING = re.compile(r'(configmap|secret) "([^"]+)" not found|couldn\'t find key (\S+) in '
                      r'(ConfigMap|Secret) (\S+)', re.I)


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class ContainerFailure:
    """Why the kubelet ended a pod or one of its containers, or cannot start it.

    ``kind``: one of :data:`KINDS`; ``reason``: the kubelet's own word (``OOMKilled``,
    ``Error``, ``CreateContainerConfigError``, ``Evicted``, ...); ``container``: the
    container's name ("" for the pod); ``init``: an init container; ``exit_code`` and
    ``signal`` (exit code 128+N: signal N); ``message``: the kubelet's message, at most
    :data:`MESSAGE_KEEP` characters; ``memory_limit``: the container's
    ``resources.limits.memory`` as written (``64Mi``); ``memory_used``: what it used when
    the kubelet said (an eviction's message); ``resource``: the resource an eviction
    reclaimed; ``ended``: the container or pod ended (False: it waits, the kubelet
    retries); ``finished_at``: when it ended (RFC 3339) when known; ``reference``: the
    ConfigMap, Secret or key a config error names missing (:func:`missing_reference` of the
    whole message: the clip may cut it)."""

    kind: str
    reason: str
    container: str = ""
    init: bool = False
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    message: str = ""
    memory_limit: Optional[str] = None
    memory_used: Optional[str] = None
    resource: Optional[str] = None
    ended: bool = True
    finished_at: Optional[str] = None
    reference: str = ""  # what a config error's whole message names missing (before the clip)

    @property
    def who(self) -> str:
        """``init container install-probe``, ``container probe`` or ``the pod``."""
        if not self.container:
            return "the pod"
        return f"{'init container' if self.init else 'container'} {self.container}"

    def describe(self) -> str:
        """What happened, in one phrase without the pod's name: ``container probe was
        OOMKilled (exit 137, memory limit 64Mi)``."""
        code = f"exit {self.exit_code}" if self.exit_code is not None else ""
        if self.kind == OOM:
            facts = ", ".join(x for x in (code, f"memory limit {self.memory_limit or 'none set'}",
                                          f"used {self.memory_used}" if self.memory_used else "") if x)
            return f"{self.who} was OOMKilled ({facts})"
        if self.kind == POD:
            what = {"Evicted": "evicted by the kubelet", "Preempting": "preempted",
                    POD_DEADLINE: "ended at its activeDeadlineSeconds"}.get(self.reason, f"ended ({self.reason})")
            facts = ", ".join(x for x in (f"the node was low on {self.resource}" if self.resource else "",
                                          f"container {self.container} was using {self.memory_used}"
                                          if self.memory_used else "") if x)
            said = facts or self.message
            return f"the pod was {what}" + (f" ({self.reason}: {said})" if said else f" ({self.reason})")
        if self.kind == NODE:
            what = f"its node lost {self.who}" if self.container else "its node stopped reporting"
            return f"{what} ({self.reason})" + (f": {self.message}" if self.message else "")
        if self.kind == SIGNAL:
            return (f"{self.who} was killed by {signal_name(self.signal)} (signal {self.signal}, {code}, "
                    f"reason {self.reason or 'none'})")
        if self.kind == EXIT:
            return f"{self.who} ended {self.reason or 'with an error'} ({code})"
        return f"{self.who} cannot start: {self.reason}" + (f": {self.message}" if self.message else "")

    def fix(self, where: str = "", pod: str = "") -> str:
        """The fix, naming ``where`` the setting lives (``spec.template.spec.containers[0]``;
        default: the container's name); ``pod``: the pod's name, for the ``kubectl logs``
        command a fix gives."""
        field = f"{where}.resources.limits.memory" if where else \
            f"resources.limits.memory of container {self.container or '?'}"
        where = where or f"container {self.container or '?'}"
        if self.kind == OOM:
            return f"raise {field} above {self.memory_limit or 'what it uses'}"
        if self.kind == CONFIG:
            missing = self.reference or missing_reference(self.message)
            return (f"create {missing} in the job's namespace, or fix the reference in {where}"
                    if missing else f"fix the ConfigMap/Secret references of {where}")
        if self.kind == IMAGE:
            return "fix the image name or the pull secret"
        if self.kind == CREATE:
            return f"fix {where}'s command, mounts or securityContext (kubectl describe pod)"
        if self.kind == NODE:
            return "check the node (kubectl describe node), cordon or repair it, then run the job again"
        if self.kind == POD:
            if self.reason == "Evicted":
                return (f"raise the requests of {where} to what it uses, or free {self.resource or 'resources'} "
                        "on the node, then run the job again")
            if self.reason == POD_DEADLINE:
                return "raise spec.template.spec.activeDeadlineSeconds or remove it"
            if self.reason == "Preempting":
                return "run the job again (a higher priorityClassName keeps it from being preempted)"
            return "run the job again once the node is back (kubectl describe node)"
        ctr = (f" {pod}" if pod else "") + (f" -c {self.container}" if self.container else "")
        if self.kind == SIGNAL and self.signal == signals.SIGKILL and self.memory_limit:
            return (f"a SIGKILL is most often the kernel's out-of-memory kill: if the node's kernel log "
                    f"says so, raise {field} above {self.memory_limit}")
        if self.kind == SIGNAL and self.signal == signals.SIGKILL:
            return (f"find what sent {signal_name(self.signal)} (the node's kernel log: an out-of-memory kill "
                    f"above the container's own limit) and read its log (kubectl logs{ctr})")
        return f"read its log (kubectl logs{ctr}) and fix what failed"


def signal_name(sig: Optional[int]) -> str:
    """``SIGKILL`` for 9; ``signal N`` for a number Python does not name."""
    try:
        return signals.Signals(sig).name if sig else ""
    except ValueError:
        return f"signal {sig}"


def signal_of(exit_code: Optional[int]) -> Optional[int]:
    """The signal an exit code says killed the process (128 + N, N in 1..64), else None."""
    return exit_code - 128 if exit_code is not None and 129 <= exit_code <= 192 else None


def missing_reference(message: str) -> str:
    """``ConfigMap "cfg"``, ``Secret "token"``, ``key k of ConfigMap ns/cfg`` from the
    kubelet's CreateContainerConfigError message; "" when it names none."""
    m = _MISSING.search(message or "")
    if not m:
        return ""
    if m.group(1):
        kind = "ConfigMap" if m.group(1).lower() == "configmap" else "Secret"
        return f'{kind} "{m.group(2)}"'
    return f"key {m.group(3)} of {m.group(4)} {m.group(5)}"


def memory_limit(pod: Any, container: str) -> Optional[str]:
    """``resources.limits.memory`` of ``container`` (init containers too) as written."""
    spec = _dict(_dict(pod).get("spec"))
    for c in _list(spec.get("initContainers")) + _list(spec.get("containers")):
        c = _dict(c)
        if c.get("name") == container:
            v = _dict(_dict(c.get("resources")).get("limits")).get("memory")
            return str(v) if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v) else None
    return None


def _clip(text: Any) -> str:
    t = " ".join(_str(text).split())
    return t if len(t) <= MESSAGE_KEEP else t[:MESSAGE_KEEP - 3].rstrip() + "..."


def _pod_level(pod: Any) -> Optional[ContainerFailure]:
    st = _dict(_dict(pod).get("status"))
    reason, msg = _str(st.get("reason")), _clip(st.get("message"))
    if reason in _NODE_REASONS:
        return ContainerFailure(NODE, reason, message=msg)
    if reason in _POD_REASONS or reason.startswith("OutOf"):
        used = _USING.search(msg)
        res = _RESOURCE.search(msg)
        return ContainerFailure(POD, reason, container=used.group(1) if used else "", message=msg,
                                memory_used=used.group(2) if used else None,
                                resource=res.group(1) if res else None)
    for pc in _list(st.get("conditions")):
        pc = _dict(pc)
        if pc.get("type") == "DisruptionTarget" and pc.get("status") == constants.TRUE:
            why = _str(pc.get("reason")) or "DisruptionTarget"
            if why == "DeletionByTaintManager":  # a NoExecute taint: node.kubernetes.io/unreachable, ...
                return ContainerFailure(NODE, why, message=_clip(pc.get("message")))
            return ContainerFailure(POD, "Preempting" if "Preemption" in why else why,
                                    message=_clip(pc.get("message")))
        if pc.get("type") == "Ready" and pc.get("status") != constants.TRUE and pc.get("reason") in _NODE_REASONS:
            return ContainerFailure(NODE, _str(pc.get("reason")), message=_clip(pc.get("message")))
    return None


def _terminated(pod: Any, name: str, init: bool, term: dict) -> Optional[ContainerFailure]:
    code = _int(term.get("exitCode"))
    reason = _str(term.get("reason"))
    msg, when = _clip(term.get("message")), _str(term.get("finishedAt")) or None
    limit = memory_limit(pod, name)
    if reason == vocabulary.OOM_KILLED:  # the kubelet's word, as the vocabulary spells it
        return ContainerFailure(OOM, reason, name, init, code, signal_of(code), "", limit, finished_at=when)
    if reason in _CREATE_REASONS:
        return ContainerFailure(CREATE, reason, name, init, code, None, msg, limit, finished_at=when)
    if reason == "ContainerStatusUnknown":  # the node lost its containers (a restart, a reset runtime)
        return ContainerFailure(NODE, reason, name, init, code, None, msg, limit, finished_at=when)
    if code is None or code == 0:
        return None
    sig = signal_of(code)
    # its termination message is the container's own words (a report, a log's end), not the kubelet's
    return ContainerFailure(SIGNAL if sig else EXIT, reason or "Error", name, init, code, sig,
                            "", limit, finished_at=when)


def _waiting(pod: Any, name: str, init: bool, cs: dict) -> Optional[ContainerFailure]:
    waiting = _dict(_dict(cs.get("state")).get("waiting"))
    reason, msg = _str(waiting.get("reason")), _clip(waiting.get("message"))
    if reason == "CreateContainerConfigError":
        return ContainerFailure(CONFIG, reason, name, init, message=msg, ended=False,
                                reference=missing_reference(_str(waiting.get("message"))))
    if reason in _CREATE_REASONS:
        return ContainerFailure(CREATE, reason, name, init, message=msg, ended=False)
    if reason in _IMAGE_REASONS:
        return ContainerFailure(IMAGE, reason, name, init, message=msg, ended=False)
    if reason == "CrashLoopBackOff":  # restarted: why it ended last time
        last = _dict(_dict(cs.get("lastState")).get("terminated"))
        return _terminated(pod, name, init, last) if last else None
    return None


def failures(pod: Any) -> list[ContainerFailure]:
    """Every failure the pod's status shows: the pod's own, then each init container's and
    container's, in the status' order. Never raises."""
    st = _dict(_dict(pod).get("status"))
    out = [f] if (f := _pod_level(pod)) is not None else []
    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for cs in _list(st.get(key))[:32]:
            cs = _dict(cs)
            name = _str(cs.get("name"))
            term = _dict(_dict(cs.get("state")).get("terminated"))
            found = _terminated(pod, name, init, term) if term else _waiting(pod, name, init, cs)
            if found is not None:
                out.append(found)
    return out


def _sidecars(pod: Any) -> set[str]:
    """Names of the pod's native sidecars (init containers with ``restartPolicy: Always``)."""
    spec = _dict(_dict(pod).get("spec"))
    return {_str(c.get("name")) for c in map(_dict, _list(spec.get("initContainers")))
            if c.get("restartPolicy") == "Always"}


def _order(f: ContainerFailure, sidecars: set[str]) -> int:
    """Sort key: :data:`KINDS` order, except that an exit or a signal that follows from the
    pod's end (SIGTERM, the kubelet's stop; a native sidecar's) comes after every other."""
    if f.kind in (SIGNAL, EXIT) and (f.signal == signals.SIGTERM or (f.init and f.container in sidecars)):
        return len(KINDS)
    return KINDS.index(f.kind)


def container_failure(pod: Any) -> Optional[ContainerFailure]:
    """The failure that explains the pod best (None: the kubelet reports none): the pod's own
    (evicted, preempted, its node lost), else the first of the (init) containers' by kind,
    in :data:`KINDS` order (an OOMKilled container before a sidecar that then exited with an
    error; a SIGTERM or a native sidecar's end last). Reads every container, whichever is
    first. Never raises."""
    found = failures(pod)
    sidecars = _sidecars(pod)
    return min(found, key=lambda f: _order(f, sidecars)) if found else None
