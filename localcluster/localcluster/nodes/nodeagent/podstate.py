"""A pod worker's state: the pod object, its containers' runtime state, sandbox and
volume fields, the watch's updates, pod events and reads of the pod's namespace."""
from __future__ import annotations

import subprocess
import threading
import time
from typing import TYPE_CHECKING

from localcluster.common.kubeapi import ApiError
from localcluster.nodes.nodeagent.shared import now_rfc3339

if TYPE_CHECKING:
    from localcluster.nodes.nodeagent.agent import Agent


class Container:
    """Runtime state of one container of a pod (init or regular)."""

    def __init__(self, spec: dict, init: bool):
        self.spec = spec
        self.name = spec["name"]
        self.init = init
        self.proc: subprocess.Popen | None = None
        self.state: dict = {"waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}}
        self.last_state: dict = {}
        self.restart_count = 0
        self.next_start = 0.0  # monotonic time before which it may not (re)start
        self.started_once = False
        self.finished = False  # terminated for good (no restart will follow)
        self.exit_code: int | None = None

    def status(self, pod_terminal: bool) -> dict:
        """This container's entry for status.containerStatuses / initContainerStatuses."""
        running = "running" in self.state
        st = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "localcluster://" + self.spec.get("image", ""),
            "ready": running and not self.init,
            "started": running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.init:
            st["ready"] = "terminated" in self.state and self.state["terminated"]["exitCode"] == 0
        if self.started_once:
            st["containerID"] = f"localcluster://{self.name}-{self.restart_count}"
        return st


class PodState:
    """The fields a pod worker keeps (set by :meth:`init_state`) and the small operations
    its parts share: watch updates, events, object reads."""

    def init_state(self, agent: "Agent", pod: dict) -> None:
        """Set the fields for ``pod`` (a core/v1 Pod as a dict) run by ``agent``."""
        md = pod["metadata"]
        self.agent = agent
        self.pod = pod
        self.uid = md["uid"]
        self.ns = md["namespace"]
        self.pod_name = md["name"]
        self.dir = agent.state / "pods" / f"{self.ns}_{self.pod_name}_{self.uid}"
        spec = pod["spec"]
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.inits = [Container(c, True) for c in spec.get("initContainers") or []]
        self.mains = [Container(c, False) for c in spec.get("containers") or []]
        self.wake = threading.Event()
        self.delete_grace: float | None = None
        self.removed = False
        self.volumes: dict[str, dict] = {}
        self.volumes_ready = False
        self.volume_error = ""
        self.start_time = (pod.get("status") or {}).get("startTime") or now_rfc3339()
        self.start_mono = time.monotonic()
        self.last_status: dict | None = None
        self.pod_reason = ""
        self.pod_message = ""
        self.terminal = False
        self.transitions: dict[str, tuple[str, str]] = {}
        self.host_network = bool(spec.get("hostNetwork"))
        self.pod_ip: str | None = None  # pod network: its address on the node's cni0
        self.netns: str | None = None  # pod network: the pod's own network namespace
        self.netns_ino: int | None = None  # ... and its inode (its identity, for teardown)

    # -- events from the watch ------------------------------------------------------
    def update(self, pod: dict) -> None:
        """New version of the pod object from the watch."""
        self.pod = pod
        md = pod["metadata"]
        if md.get("deletionTimestamp") and self.delete_grace is None:
            self.delete_grace = float(md.get("deletionGracePeriodSeconds") or 0)
        self.wake.set()

    def remove(self) -> None:
        """The pod object is gone from the API: kill everything now."""
        self.removed = True
        if self.delete_grace is None:
            self.delete_grace = 0.0
        self.wake.set()

    def event(self, reason: str, message: str, container: str | None = None,
              etype: str = "Normal") -> None:
        """Queue a core/v1 Event about this pod (sent in the background, best effort)."""
        obj = {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "namespace": self.ns,
               "uid": self.uid}
        if container:
            kind = "initContainers" if any(c.name == container for c in self.inits) else "containers"
            obj["fieldPath"] = f"spec.{kind}{{{container}}}"
        self.agent.post_event(self.ns, obj, reason, message, etype)

    def _get_object(self, kind: str, name: str) -> dict | None:
        try:
            return self.agent.client.get(f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise
