"""One pod's worker thread: sandbox, volumes, init containers in order, then the
containers; status writes; deletion with the grace period."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from localcluster.common.kubeapi import ApiError
from localcluster.network import podnet
from localcluster.nodes.nodeagent.container import ContainerProcesses
from localcluster.nodes.nodeagent.podstatus import PodStatus
from localcluster.nodes.nodeagent.sandbox import PodSandbox
from localcluster.nodes.nodeagent.shared import log
from localcluster.nodes.nodeagent.volumes import PodVolumes

if TYPE_CHECKING:
    from localcluster.nodes.nodeagent.agent import Agent


class PodWorker(PodStatus, ContainerProcesses, PodVolumes, PodSandbox, threading.Thread):
    """Runs one pod: volumes, init containers in order, then the containers; writes the
    pod status when it changes; handles restarts and deletion."""

    def __init__(self, agent: "Agent", pod: dict):
        md = pod["metadata"]
        threading.Thread.__init__(self, name=f"pod-{md['namespace']}/{md['name']}", daemon=True)
        self.init_state(agent, pod)

    # -- main loop ------------------------------------------------------------------
    def run(self) -> None:
        """Thread body: run the pod until it is deleted; never raises."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._loop()
        except Exception:  # never take the agent down
            log.exception("pod %s/%s worker crashed", self.ns, self.pod_name)
            self._kill_all(0)
        finally:
            self.agent.worker_done(self)

    def _loop(self) -> None:
        while True:
            if self.delete_grace is not None:
                self._delete_pod()
                return
            if not self.terminal:
                self._step()
            self._write_status()
            self.wake.wait(None if self.terminal else 0.2)
            self.wake.clear()

    def _step(self) -> None:
        now = time.monotonic()
        if self.terminal:
            return
        if not self.host_network and self.netns is None and not self._setup_sandbox():
            return
        if not self.volumes_ready:
            try:
                self._prepare_volumes()
                self.volumes_ready = True
            except Exception as e:  # missing ConfigMap etc.: retry, stay Pending
                self.volume_error = str(e)
                for c in self.inits + self.mains:
                    c.state = {"waiting": {"reason": "ContainerCreating", "message": str(e)[:500]}}
                log.info("pod %s/%s: volumes not ready: %s", self.ns, self.pod_name, e)
                self.wake.wait(2.0)
                return
        ads = self.pod["spec"].get("activeDeadlineSeconds")
        if ads is not None and now - self.start_mono > float(ads):
            self.pod_reason = "DeadlineExceeded"
            self.pod_message = "Pod was active on the node longer than the specified deadline"
            self._kill_all(0)
            self._reap_all()
            self.terminal = True
            return
        for c in self.inits + self.mains:
            self._reap(c)
        # init containers, in order
        for c in self.inits:
            if c.finished and c.exit_code == 0:
                continue
            if c.finished:  # failed for good
                self.terminal = True
                return
            if c.proc is None and now >= c.next_start:
                self._start(c)
            return
        for c in self.mains:
            if c.proc is None and not c.finished and now >= c.next_start:
                self._start(c)
        if self.mains and all(c.finished for c in self.mains):
            self.terminal = True

    # -- deletion -------------------------------------------------------------------------
    def _delete_pod(self) -> None:
        grace = self.delete_grace or 0.0
        log.info("pod %s/%s: deleting (grace %.0fs)", self.ns, self.pod_name, grace)
        if not self.removed:
            for c in self._running():
                self.event("Killing", f"Stopping container {c.name}", c.name)
        self._kill_all(grace)
        self._reap_all()
        if self.pod_ip:  # as kubelet's sandbox teardown: the address goes back to the pool
            with self.agent.net_lock:  # only this pod's own namespace (not a successor's)
                if not podnet.teardown_pod(self.agent.node.netns, self.pod_ip, self.netns_ino):
                    log.info("pod %s/%s: sandbox %s already gone or reused; left alone",
                             self.ns, self.pod_name, self.pod_ip)
                self.pod_ip = self.netns_ino = None
                (self.dir / "pod-ip").unlink(missing_ok=True)
        if self.removed:
            return
        try:
            self.agent.client.delete(
                f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                 "preconditions": {"uid": self.uid}})
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("pod %s/%s: delete failed: %s", self.ns, self.pod_name, e)
