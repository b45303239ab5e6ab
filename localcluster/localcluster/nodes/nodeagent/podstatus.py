"""The pod status as kubelet reports it: phase, conditions, addresses, container statuses;
written with a merge patch of ``pods/status`` only when it changed."""
from __future__ import annotations

from localcluster.common.kubeapi import ApiError
from localcluster.nodes.nodeagent.podstate import PodState
from localcluster.nodes.nodeagent.shared import log, now_rfc3339


class PodStatus(PodState):
    """Status computation and writes of a pod worker."""

    def _phase(self) -> str:
        if self.pod_reason in ("DeadlineExceeded", "SysctlForbidden"):
            return "Failed"
        if any(c.finished and c.exit_code != 0 for c in self.inits):
            return "Failed"
        if self.mains and all(c.finished for c in self.mains):
            return "Succeeded" if all(c.exit_code == 0 for c in self.mains) else "Failed"
        inits_done = all(c.finished and c.exit_code == 0 for c in self.inits)
        if inits_done and any(c.started_once for c in self.mains):
            return "Running"
        return "Pending"

    def _cond(self, ctype: str, ok: bool, reason: str = "") -> dict:
        status = "True" if ok else "False"
        prev = self.transitions.get(ctype)
        if prev is None or prev[0] != status:
            self.transitions[ctype] = (status, now_rfc3339())
        c = {"type": ctype, "status": status, "lastProbeTime": None,
             "lastTransitionTime": self.transitions[ctype][1]}
        if not ok and reason:
            c["reason"] = reason
        return c

    def compute_status(self) -> dict:
        """The pod status from the containers' states (pure apart from timestamps)."""
        phase = self._phase()
        terminal = phase in ("Succeeded", "Failed")
        inits_done = all(c.finished and c.exit_code == 0 for c in self.inits)
        ready = (not terminal) and bool(self.mains) and all("running" in c.state for c in self.mains)
        not_ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
        managed = {"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"}
        conds = [c for c in (self.pod.get("status") or {}).get("conditions") or []
                 if c.get("type") not in managed]
        conds += [
            self._cond("PodReadyToStartContainers", self.volumes_ready and not terminal),
            self._cond("Initialized", inits_done, "ContainersNotInitialized"),
            self._cond("Ready", ready, not_ready_reason),
            self._cond("ContainersReady", ready, not_ready_reason),
        ]
        ip = self.agent.internal_ip
        st = {
            "phase": phase,
            "conditions": conds,
            "hostIP": ip, "hostIPs": [{"ip": ip}],
            "startTime": self.start_time,
            "containerStatuses": [c.status(terminal) for c in self.mains],
        }
        pod_ip = ip if self.host_network else self.pod_ip
        if pod_ip:  # pod network: once the sandbox has its address
            st["podIP"], st["podIPs"] = pod_ip, [{"ip": pod_ip}]
        if self.inits:
            st["initContainerStatuses"] = [c.status(terminal) for c in self.inits]
        if self.pod_reason:
            st["reason"] = self.pod_reason
            st["message"] = self.pod_message
        return st

    def _write_status(self) -> None:
        st = self.compute_status()
        if st == self.last_status:
            return
        try:
            self.pod = self.agent.client.merge_patch(
                f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}/status", {"status": st})
            self.last_status = st
        except ApiError as e:
            if e.status == 404:
                self.remove()
            else:
                log.warning("pod %s/%s: status update failed: %s", self.ns, self.pod_name, e)
        except OSError as e:
            log.warning("pod %s/%s: status update failed: %s", self.ns, self.pod_name, e)
