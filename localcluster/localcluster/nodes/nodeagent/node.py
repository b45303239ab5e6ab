"""The Node object: registration, status (capacity, conditions, addresses), the Lease in
kube-node-lease, and the heartbeat loop that renews both."""
from __future__ import annotations

import os
import time

from localcluster.common.config import versions
from localcluster.common.kubeapi import ApiError
from localcluster.nodes.nodeagent.shared import log, now_micro, now_rfc3339

LEASE_SECONDS = 40
LEASE_RENEW = 10.0
NODE_STATUS_EVERY = 30.0


class NodeRegistration:
    """Node registration and heartbeat of an :class:`~.agent.Agent`."""

    def node_status(self) -> dict:
        """The Node's status: capacity, conditions (Ready), addresses, daemon endpoint."""
        now = now_rfc3339()
        conds = []
        for t, s, reason, msg in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "localcluster node agent is posting ready status"),
        ):
            conds.append({"type": t, "status": s, "reason": reason, "message": msg,
                          "lastHeartbeatTime": now, "lastTransitionTime": self.boot_time})
        k8s = versions().get("K8S_VERSION", "v0.0.0")
        return {
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "conditions": conds,
            "addresses": [{"type": "InternalIP", "address": self.internal_ip},
                          {"type": "Hostname", "address": self.node.name},
                          # how the apiserver reaches our /containerLogs (see README)
                          {"type": "InternalDNS", "address": "localhost"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.node.kubelet_port}},
            "nodeInfo": {"machineID": self.node.name, "systemUUID": self.node.name,
                         "bootID": self.boot_time, "kernelVersion": os.uname().release,
                         "osImage": "disttrain localcluster (simulated node)",
                         "containerRuntimeVersion": "localcluster://0.1.0",
                         "kubeletVersion": k8s, "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
        }

    def register(self) -> None:
        """Create the Node (or adopt an existing one) and write its status.
        Raises ApiError if the apiserver refuses."""
        labels = {"kubernetes.io/hostname": self.node.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                  "beta.kubernetes.io/arch": "amd64", "disttrain.dev/simulated": "true"}
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node.name, "labels": labels},
                "spec": {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]},
                "status": self.node_status()}
        try:
            self.client.post("/api/v1/nodes", body)
        except ApiError as e:
            if e.status != 409:
                raise
            self.client.merge_patch(f"/api/v1/nodes/{self.node.name}", {"metadata": {"labels": labels}})
        self.update_node_status()

    def update_node_status(self) -> None:
        """Write the node's status (heartbeat). Raises ApiError/OSError."""
        self.client.merge_patch(f"/api/v1/nodes/{self.node.name}/status",
                                {"status": self.node_status()})

    def renew_lease(self) -> None:
        """Create or renew the node's Lease in kube-node-lease. Raises ApiError/OSError."""
        base = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        try:
            self.client.merge_patch(f"{base}/{self.node.name}", {"spec": {
                "holderIdentity": self.node.name, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now_micro()}})
        except ApiError as e:
            if e.status != 404:
                raise
            nodeobj = self.client.get(f"/api/v1/nodes/{self.node.name}")
            self.client.post(base, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.node.name, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                  "name": self.node.name,
                                                  "uid": nodeobj["metadata"]["uid"]}]},
                "spec": {"holderIdentity": self.node.name, "leaseDurationSeconds": LEASE_SECONDS,
                         "renewTime": now_micro()}})

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self.stop.wait(LEASE_RENEW):
            try:
                self.renew_lease()
                if time.monotonic() - last_status >= NODE_STATUS_EVERY:
                    self.update_node_status()
                    last_status = time.monotonic()
            except ApiError as e:
                if e.status == 404:  # Node deleted behind our back: register again
                    try:
                        self.register()
                    except Exception as e2:
                        log.warning("re-register failed: %s", e2)
                else:
                    log.warning("heartbeat failed: %s", e)
            except Exception as e:
                log.warning("heartbeat failed: %s", e)
