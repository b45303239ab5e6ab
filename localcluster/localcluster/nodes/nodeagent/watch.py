"""The pod watch (``fieldSelector=spec.nodeName=<node>``): list, then watch, and hand
each pod to its worker; leftovers of a previous agent and force deletion."""
from __future__ import annotations

import os
import signal

from localcluster.common.kubeapi import ApiError
from localcluster.network import podnet
from localcluster.nodes.nodeagent.lifecycle import PodWorker
from localcluster.nodes.nodeagent.shared import log


class PodWatch:
    """Pod dispatch of an :class:`~.agent.Agent`: one :class:`PodWorker` per pod UID."""

    def worker_done(self, w: PodWorker) -> None:
        """Called by a worker whose pod is gone: forget it (its UID is never run again)."""
        with self.lock:
            if self.workers.get(w.uid) is w:
                del self.workers[w.uid]
                self.finished_uids.add(w.uid)

    def handle(self, etype: str, pod: dict) -> None:
        """Dispatch one watch event for a pod bound to this node."""
        uid = pod["metadata"]["uid"]
        with self.lock:
            w = self.workers.get(uid)
            if etype == "DELETED":
                if w:
                    w.remove()
                return
            if w:
                w.update(pod)
                return
            if uid in self.finished_uids:
                return
            phase = (pod.get("status") or {}).get("phase")
            if pod["metadata"].get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
                if pod["metadata"].get("deletionTimestamp"):
                    self._force_delete(pod)
                return
            self._kill_leftovers(pod)
            w = PodWorker(self, pod)
            self.workers[uid] = w
            w.start()

    def _kill_leftovers(self, pod: dict) -> None:
        """Kill processes recorded for this pod by a previous agent (after a restart)."""
        md = pod["metadata"]
        d = self.state / "pods" / f"{md['namespace']}_{md['name']}_{md['uid']}"
        inos = set()
        try:
            inos.add(os.stat(f"/run/netns/{self.node.netns}").st_ino)
            ip = (d / "pod-ip").read_text().strip()
            inos.add(os.stat(f"/run/netns/{podnet.pod_netns(self.node.netns, ip)}").st_ino)
        except OSError:
            pass
        if not inos:
            return
        for pf in d.glob("*.pid"):
            try:
                pid = int(pf.read_text())
                if os.stat(f"/proc/{pid}/ns/net").st_ino in inos:  # still ours
                    os.killpg(pid, signal.SIGKILL)
            except (ValueError, OSError):
                pass

    def _force_delete(self, pod: dict) -> None:
        md = pod["metadata"]
        self._kill_leftovers(pod)
        try:
            self.client.delete(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}",
                               {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                "preconditions": {"uid": md["uid"]}})
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("delete %s/%s failed: %s", md["namespace"], md["name"], e)

    def _watch_loop(self) -> None:
        params = {"fieldSelector": f"spec.nodeName={self.node.name}"}
        while not self.stop.is_set():
            try:
                lst = self.client.get("/api/v1/pods", **params)
                rv = lst["metadata"]["resourceVersion"]
                seen = set()
                for pod in lst.get("items") or []:
                    seen.add(pod["metadata"]["uid"])
                    self.handle("MODIFIED", pod)
                with self.lock:
                    gone = [w for uid, w in self.workers.items() if uid not in seen]
                for w in gone:
                    w.remove()
                while not self.stop.is_set():
                    expired = False
                    for ev in self.client.watch("/api/v1/pods",
                                                dict(params, resourceVersion=rv)):
                        t = ev.get("type")
                        obj = ev.get("object") or {}
                        if t == "ERROR":
                            expired = True
                            break
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if t == "BOOKMARK":
                            continue
                        self.handle(t, obj)
                    if expired:
                        break
            except Exception as e:
                log.warning("pod watch: %s; re-listing", e)
                self.stop.wait(1.0)
