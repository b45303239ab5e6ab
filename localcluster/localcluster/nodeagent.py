"""The node agent: a small virtual kubelet for one simulated node.

Runs in the root network namespace and talks to the apiserver with the node's client
certificate (CN=system:node:<node>), so the Node authorizer and NodeRestriction apply.
It registers the Node, renews its Lease, and runs each pod bound to the node as
processes inside the node's network namespace (see containerinit.py). It also serves
the kubelet's ``/containerLogs`` endpoint over HTTPS on 127.0.0.1 for ``kubectl logs``.

Usage: python -m localcluster.nodeagent --node node-a --gpus 0 --state <state dir>
"""
from __future__ import annotations

import argparse
import base64
import datetime as _dt
import http.server
import json
import logging
import os
import queue
import shutil
import signal
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

from . import pki, podnet, podspec, scenario
from .config import (
    APISERVER_PORT,
    CLUSTER_DOMAIN,
    DNS_SERVICE_IP,
    KUBERNETES_SERVICE_IP,
    MAX_NODES,
    KUBERNETES_SERVICE_PORT,
    NodeSpec,
    node_spec_by_name,
    pod_cidr,
    venv_bin,
    venv_python,
    versions,
)
from .kubeapi import ApiError, KubeClient
from .kubeconfig import SERVER, write_kubeconfig
from .serviceproxy import ServiceProxy

log = logging.getLogger("nodeagent")

LEASE_SECONDS = 40
LEASE_RENEW = 10.0
NODE_STATUS_EVERY = 30.0
MAX_TERMINATION_MESSAGE = 4096
FALLBACK_LOG_LINES = 80
BACKOFF_BASE, BACKOFF_MAX = 1.0, 10.0
READ_ONLY_VOLUME_KINDS = ("configMap", "secret", "projected", "downwardAPI")


def now_rfc3339() -> str:
    """Current UTC time as metav1.Time (second precision)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """Current UTC time as metav1.MicroTime."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


class PodWorker(threading.Thread):
    """Runs one pod: volumes, init containers in order, then the containers; writes the
    pod status when it changes; handles restarts and deletion."""

    def __init__(self, agent: "Agent", pod: dict):
        md = pod["metadata"]
        super().__init__(name=f"pod-{md['namespace']}/{md['name']}", daemon=True)
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
                self._delete()
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

    def _setup_sandbox(self) -> bool:
        """Pod network (as a CNI plugin would): own namespace, eth0 on cni0, a pod IP from
        the node's pod CIDR, safe sysctls. Returns False (pod stays Pending, or Failed
        with SysctlForbidden as kubelet rejects it) when it could not."""
        agent = self.agent
        spec = self.pod["spec"]
        try:
            sysctls = podnet.check_sysctls((spec.get("securityContext") or {}).get("sysctls"),
                                           self.host_network)
        except podnet.SysctlForbidden as e:
            self.pod_reason, self.pod_message = "SysctlForbidden", f"Pod {e}"
            self.event("SysctlForbidden", str(e), etype="Warning")
            self.terminal = True
            return False
        ip_file = self.dir / "pod-ip"
        with agent.net_lock:
            if ip_file.exists():  # a previous agent's sandbox for this pod: start afresh,
                old = ip_file.read_text().strip()  # unless the address went to a live pod
                with agent.lock:
                    live = {w.pod_ip for w in agent.workers.values() if w is not self}
                if old not in live:
                    podnet.teardown_pod(agent.node.netns, old)
                ip_file.unlink()
            try:
                ip = podnet.allocate(agent.node.netns, agent.pod_cidr)
                self.netns = podnet.setup_pod(agent.node.netns, agent.pod_cidr, ip, sysctls)
            except Exception as e:
                ip, msg = None, f"Failed to create pod sandbox: {e}"
            else:
                ip_file.write_text(ip)
                self.pod_ip = ip
                self.netns_ino = podnet.netns_inode(agent.node.netns, ip)
        if ip is None:
            log.warning("pod %s/%s: %s", self.ns, self.pod_name, msg)
            self.event("FailedCreatePodSandBox", msg, etype="Warning")
            for c in self.inits + self.mains:
                c.state = {"waiting": {"reason": "ContainerCreating", "message": msg[:500]}}
            self.wake.wait(2.0)
            return False
        return True

    def _hostname(self) -> str:
        """The container's hostname: the node's with hostNetwork, else spec.hostname or
        the pod's name (as kubelet sets it)."""
        if self.host_network:
            return self.agent.node.name
        return self.pod["spec"].get("hostname") or self.pod_name

    def _hosts_file(self) -> str:
        """/etc/hosts: the node's with hostNetwork; else kubelet's managed file (localhost,
        the pod's own address and FQDN, hostAliases)."""
        spec = self.pod["spec"]
        lines = []
        if self.host_network:
            base = self.agent.hosts_file.read_text()
        else:
            name = self._hostname()
            names = [name]
            if spec.get("subdomain"):
                names.insert(0, f"{name}.{spec['subdomain']}.{self.ns}.svc.{CLUSTER_DOMAIN}")
            base = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
                    "::1\tlocalhost ip6-localhost ip6-loopback\n"
                    f"{self.pod_ip}\t{chr(9).join(names)}\n")
        for alias in spec.get("hostAliases") or []:
            lines.append(f"{alias.get('ip')}\t{chr(9).join(alias.get('hostnames') or [])}")
        if lines:
            base += "\n# Entries added by HostAliases.\n" + "".join(f"{ln}\n" for ln in lines)
        path = self.dir / "etc-hosts"
        path.write_text(base)
        return str(path)

    def _resolv_conf(self) -> str | None:
        """/etc/resolv.conf by dnsPolicy: ClusterFirst (pod network) and
        ClusterFirstWithHostNet point at cluster DNS with kubelet's search path; None and
        dnsConfig as the pod says; otherwise (Default, or ClusterFirst with hostNetwork)
        None: the node's own file."""
        spec = self.pod["spec"]
        policy = spec.get("dnsPolicy") or "ClusterFirst"
        cluster = policy == "ClusterFirstWithHostNet" or (
            policy == "ClusterFirst" and not self.host_network)
        cfg = spec.get("dnsConfig") or {}
        if not cluster and policy != "None" and not cfg:
            return None
        servers, search, options = [], [], ["ndots:5"] if cluster else []
        if cluster:
            servers = [DNS_SERVICE_IP]
            search = [f"{self.ns}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]
        servers += cfg.get("nameservers") or []
        search += cfg.get("searches") or []
        for o in cfg.get("options") or []:
            options = [x for x in options if x.split(":")[0] != o.get("name")]
            options.append(o["name"] + (f":{o['value']}" if o.get("value") else ""))
        text = "".join(f"nameserver {x}\n" for x in servers)
        if search:
            text += "search " + " ".join(search) + "\n"
        if options:
            text += "options " + " ".join(options) + "\n"
        path = self.dir / "resolv.conf"
        path.write_text(text)
        return str(path)

    def _reap(self, c: Container) -> None:
        if c.proc is None:
            return
        rc = c.proc.poll()
        if rc is None:
            return
        try:  # the container is its process group: take any leftovers with it
            os.killpg(c.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._on_exit(c, rc)

    def _on_exit(self, c: Container, rc: int) -> None:
        code = rc if rc >= 0 else 128 - rc
        started = c.state.get("running", {}).get("startedAt", now_rfc3339())
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": now_rfc3339(),
                "containerID": f"localcluster://{c.name}-{c.restart_count}"}
        if rc < 0:
            term["signal"] = -rc
        msg = self._termination_message(c, code)
        if msg:
            term["message"] = msg
        c.proc = None
        c.exit_code = code
        c.state = {"terminated": term}
        policy = self.restart_policy
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        if c.init:
            restart = code != 0 and policy != "Never"
        if restart and self.delete_grace is None and not self.pod_reason:
            delay = min(BACKOFF_MAX, BACKOFF_BASE * (2 ** c.restart_count))
            c.next_start = time.monotonic() + delay
            c.last_state = {"terminated": term}
            self.event("BackOff", f"Back-off {delay:.0f}s restarting failed container", c.name,
                       "Warning")
            c.state = {"waiting": {"reason": "CrashLoopBackOff",
                                   "message": f"back-off {delay:.0f}s restarting failed container={c.name} pod={self.pod_name}_{self.ns}({self.uid})"}}
            threading.Timer(delay, self.wake.set).start()
        else:
            c.finished = True
        log.info("pod %s/%s container %s exited %d (restart=%s)", self.ns, self.pod_name, c.name,
                 code, restart)

    def _termination_message(self, c: Container, code: int) -> str:
        data = b""
        try:
            with open(self.dir / f"{c.name}.termination-log", "rb") as f:
                data = f.read(MAX_TERMINATION_MESSAGE)
        except OSError:
            pass
        if not data.strip() and code != 0 and \
                c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            try:
                raw = (self.dir / f"{c.name}.log").read_bytes()[-64 * 1024:]
            except OSError:
                raw = b""
            lines = raw.splitlines(keepends=True)[-FALLBACK_LOG_LINES:]
            data = b"".join(lines)[-MAX_TERMINATION_MESSAGE:]
        return data.decode(errors="replace")

    def event(self, reason: str, message: str, container: str | None = None,
              etype: str = "Normal") -> None:
        """Queue a core/v1 Event about this pod (sent in the background, best effort)."""
        obj = {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "namespace": self.ns,
               "uid": self.uid}
        if container:
            kind = "initContainers" if any(c.name == container for c in self.inits) else "containers"
            obj["fieldPath"] = f"spec.{kind}{{{container}}}"
        self.agent.post_event(self.ns, obj, reason, message, etype)

    # -- starting a container ---------------------------------------------------------
    def _start(self, c: Container) -> None:
        agent = self.agent
        spec = c.spec
        logf = self.dir / f"{c.name}.log"
        term = self.dir / f"{c.name}.termination-log"
        try:
            env = podspec.build_env(self.pod, spec, agent.internal_ip, agent.allocatable,
                                    self._get_object, pod_ip=self.pod_ip)
            image = podspec.image_entry(spec.get("image", ""), agent.image_map)
            if image.get("pullError"):
                if c.state.get("waiting", {}).get("reason") != "ErrImagePull":
                    self.event("Failed", f"Failed to pull image \"{spec.get('image')}\": "
                               f"{image['pullError']}", c.name, "Warning")
                c.state = {"waiting": {"reason": "ErrImagePull", "message": str(image["pullError"])}}
                c.next_start = time.monotonic() + 5.0
                threading.Timer(5.0, self.wake.set).start()
                return
            command = list(spec.get("command") or image.get("command") or [])
            args = list(spec.get("args") or ([] if spec.get("command") else image.get("args") or []))
            argv = [podspec.expand(a, env) for a in command + args]
            if not argv:
                raise ValueError("no command: the image map has no entrypoint for "
                                 f"{spec.get('image')!r}; set container.command")
            proc_env = podspec.container_process_env(env, agent.node_image(image), venv_bin(),
                                                     self._hostname())
            mounts = self._mounts(spec)
        except Exception as e:  # as kubelet: stay waiting, retry
            if c.state.get("waiting", {}).get("reason") != "CreateContainerConfigError":
                self.event("Failed", f"Error: {e}", c.name, "Warning")
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)[:1000]}}
            c.next_start = time.monotonic() + 2.0
            threading.Timer(2.0, self.wake.set).start()
            return
        if c.started_once:
            c.restart_count += 1
            if logf.exists():
                logf.replace(self.dir / f"{c.name}.previous.log")
        term.write_bytes(b"")
        mounts.append({"source": str(term), "target": spec.get("terminationMessagePath")
                       or "/dev/termination-log", "read_only": False})
        resolv = self._resolv_conf()
        if resolv:
            mounts.insert(0, {"source": resolv, "target": "/etc/resolv.conf", "read_only": True})
        spec_file = self.dir / f"{c.name}.spec.json"
        spec_file.write_text(json.dumps({
            "hostname": self._hostname(),
            "hosts_file": self._hosts_file(),
            "mounts": mounts,
            "workingDir": spec.get("workingDir") or "",
            "command": argv,
            "env": proc_env,
            "created_paths_file": str(agent.state / "created-paths"),
        }))
        cmd = ["ip", "netns", "exec", self.netns or agent.node.netns, "unshare", "--mount", "--uts",
               "--propagation", "private", venv_python(), "-m", "localcluster.containerinit",
               str(spec_file)]
        with open(logf, "ab") as out:
            c.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      close_fds=True,
                                      env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                           "PYTHONDONTWRITEBYTECODE": "1"})
        (self.dir / f"{c.name}.pid").write_text(str(c.proc.pid))
        if not c.started_once:
            self.event("Pulled", f"Container image \"{spec.get('image', '')}\" already present on "
                       "machine (runs from the project venv)", c.name)
        self.event("Started", f"Started container {c.name}", c.name)
        c.started_once = True
        c.state = {"running": {"startedAt": now_rfc3339()}}
        log.info("pod %s/%s container %s started pid %d: %s", self.ns, self.pod_name, c.name,
                 c.proc.pid, argv)

    def _get_object(self, kind: str, name: str) -> dict | None:
        try:
            return self.agent.client.get(f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    # -- volumes ------------------------------------------------------------------------
    def _prepare_volumes(self) -> None:
        vroot = self.dir / "volumes"
        for v in self.pod["spec"].get("volumes") or []:
            name = v["name"]
            if name in self.volumes:
                continue
            path = vroot / name
            kind = next((k for k in v if k != "name"), "")
            if kind == "hostPath":
                hp = v["hostPath"]
                p = Path(hp["path"])
                if not p.exists() and hp.get("type") in ("DirectoryOrCreate", "", None):
                    p.mkdir(parents=True, exist_ok=True)
                self.volumes[name] = {"path": str(p), "kind": kind}
                continue
            tmp = vroot / (name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            if kind == "emptyDir":
                pass
            elif kind == "configMap":
                self._project_data(tmp, "configmaps", v["configMap"])
            elif kind == "secret":
                src = dict(v["secret"])
                src["name"] = src.get("secretName")
                self._project_data(tmp, "secrets", src)
            elif kind == "downwardAPI":
                self._project_downward(tmp, v["downwardAPI"])
            elif kind == "projected":
                for s in v["projected"].get("sources") or []:
                    if "serviceAccountToken" in s:
                        self._project_token(tmp, s["serviceAccountToken"])
                    elif "configMap" in s:
                        self._project_data(tmp, "configmaps", s["configMap"])
                    elif "secret" in s:
                        self._project_data(tmp, "secrets", s["secret"])
                    elif "downwardAPI" in s:
                        self._project_downward(tmp, s["downwardAPI"])
                    else:
                        log.info("pod %s/%s volume %s: projected source %s not supported, skipped",
                                 self.ns, self.pod_name, name, list(s))
            else:
                log.info("pod %s/%s volume %s: type %r not supported, mounted as an empty dir",
                         self.ns, self.pod_name, name, kind)
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
            self.volumes[name] = {"path": str(path), "kind": kind}

    def _project_data(self, dest: Path, kind: str, src: dict) -> None:
        obj = self._get_object(kind, src["name"])
        if obj is None:
            if src.get("optional"):
                return
            raise LookupError(f"{kind[:-1]} {self.ns}/{src['name']} not found")
        files: dict[str, bytes] = {}
        for k, v in (obj.get("data") or {}).items():
            files[k] = base64.b64decode(v) if kind == "secrets" else v.encode()
        for k, v in (obj.get("binaryData") or {}).items():
            files[k] = base64.b64decode(v)
        items = src.get("items")
        mode = src.get("defaultMode", 0o644)
        if items:
            sel = []
            for it in items:
                if it["key"] not in files:
                    if src.get("optional"):
                        continue
                    raise LookupError(f"{kind[:-1]} {src['name']}: key {it['key']} not found")
                sel.append((it["path"], files[it["key"]], it.get("mode", mode)))
        else:
            sel = [(k, v, mode) for k, v in files.items()]
        for rel, data, m in sel:
            p = dest / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            p.chmod(m & 0o777)

    def _project_downward(self, dest: Path, src: dict) -> None:
        for it in src.get("items") or []:
            if "fieldRef" in it:
                val = podspec.field_ref(self.pod, it["fieldRef"]["fieldPath"], self.agent.internal_ip)
            else:
                cname = it["resourceFieldRef"].get("containerName")
                c = next((x.spec for x in self.mains + self.inits if x.name == cname),
                         self.mains[0].spec if self.mains else {})
                val = podspec.resource_field_ref(c, it["resourceFieldRef"], self.agent.allocatable)
            p = dest / it["path"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(val)

    def _project_token(self, dest: Path, src: dict) -> None:
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [src["audience"]] if src.get("audience") else [],
                         "expirationSeconds": int(src.get("expirationSeconds") or 3607),
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                            "name": self.pod_name, "uid": self.uid}}}
        # The Node authorizer learns that this pod is bound here from its own informers: a
        # request made right after the binding can be refused (403 "no relationship found")
        # for a moment. Retry, as kubelet's token manager does, before giving up.
        deadline = time.monotonic() + 20
        while True:
            try:
                tr = self.agent.client.post(
                    f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token", body)
                (dest / src.get("path", "token")).write_text(tr["status"]["token"])
                return
            except Exception as e:  # best effort after the deadline
                if time.monotonic() < deadline and not self.agent.stop.is_set():
                    time.sleep(0.5)
                    continue
                log.info("pod %s/%s: service account token not issued (%s); skipped",
                         self.ns, self.pod_name, e)
                return

    def _mounts(self, spec: dict) -> list[dict]:
        out = []
        for vm in spec.get("volumeMounts") or []:
            vol = self.volumes.get(vm["name"])
            if vol is None:
                raise LookupError(f"volumeMount {vm['name']!r}: no such volume")
            src = Path(vol["path"])
            if vm.get("subPath"):
                src = src / podspec.expand(vm["subPath"], {})
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            ro = bool(vm.get("readOnly")) or vol["kind"] in READ_ONLY_VOLUME_KINDS
            out.append({"source": str(src), "target": vm["mountPath"], "read_only": ro})
        return out

    # -- status ---------------------------------------------------------------------------
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

    # -- deletion -------------------------------------------------------------------------
    def _running(self) -> list[Container]:
        return [c for c in self.inits + self.mains if c.proc is not None and c.proc.poll() is None]

    def _kill_all(self, grace: float) -> None:
        running = self._running()
        sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
        for c in running:
            try:
                os.killpg(c.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while grace > 0 and time.monotonic() < deadline and self._running():
            time.sleep(0.05)
        for c in self.inits + self.mains:
            if c.proc is not None:
                try:
                    os.killpg(c.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def _reap_all(self) -> None:
        for c in self.inits + self.mains:
            if c.proc is not None:
                try:
                    c.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                self._reap(c)

    def _delete(self) -> None:
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


class Agent:
    """One node's agent: Node registration, Lease, pod workers, log server."""

    def __init__(self, node: NodeSpec, gpus: int, state: Path):
        self.node = node
        self.gpus = gpus
        self.state = state
        p = state / "pki"
        certs = pki.ensure_node_pki(p, node.name, self._internal_ip(node, state))
        self.certs = certs
        self.client = KubeClient(SERVER, str(p / "ca.crt"), str(certs["client_crt"]),
                                 str(certs["client_key"]))
        write_kubeconfig(state / "nodes" / f"{node.name}.kubeconfig", f"system:node:{node.name}",
                         p / "ca.crt", certs["client_crt"], certs["client_key"])
        self.capacity = {"cpu": "8", "memory": "16Gi", "pods": "110",
                         "ephemeral-storage": "100Gi", "nvidia.com/gpu": str(gpus)}
        self.allocatable = dict(self.capacity)
        self.image_map = podspec.load_image_map()
        self.hosts_file = state / "nodes" / f"{node.name}.hosts"
        # Every node resolves every node's names, as cluster DNS / a cloud's resolver would.
        # c10d's TCPStore accepts on a dual-stack socket and reverse-resolves the peer's
        # v4-mapped address (::ffff:a.b.c.d); glibc does not map those to the IPv4 lines,
        # so they are listed too (else: "hostname of the client socket cannot be retrieved").
        # A scenario (`up` writes <state>/nodes/<node>.topology.json) may put its own lines
        # first (e.g. "127.0.1.1 node-a") and give per-node env and library paths.
        topo_file = state / "nodes" / f"{node.name}.topology.json"
        if topo_file.exists():
            doc = json.loads(topo_file.read_text())
            self.topology = scenario.NodeTopology.from_json(doc["topology"])
            peers = doc.get("peerHosts") or []
        else:
            self.topology = scenario.default_topology(node.index + 1)[node.index]
            peers = scenario.peer_hosts(scenario.default_topology(MAX_NODES))
        self.internal_ip = self.topology.internal_ip
        lines = ["127.0.0.1 localhost", *self.topology.hosts, *peers]
        self.hosts_file.write_text("".join(f"{ln}\n" for ln in lines))
        self.workers: dict[str, PodWorker] = {}
        self.events: "queue.Queue[dict]" = queue.Queue(maxsize=1000)
        self.finished_uids: set[str] = set()
        self.lock = threading.Lock()
        self.net_lock = threading.Lock()  # pod address allocation and sandbox set-up
        self.pod_cidr = pod_cidr(node.index)
        self.stop = threading.Event()
        self.boot_time = now_rfc3339()

    def node_image(self, image: dict) -> dict:
        """The image map entry with the node's scenario env and paths added."""
        t = self.topology
        if not (t.env or t.library_paths or t.pythonpath):
            return image
        out = dict(image)
        out["env"] = {**t.env, **(image.get("env") or {})}
        if t.library_paths:
            prev = out["env"].get("LD_LIBRARY_PATH", "")
            out["env"]["LD_LIBRARY_PATH"] = ":".join([p for p in prev.split(":") if p] + t.library_paths)
        out["pythonpath"] = list(image.get("pythonpath") or []) + t.pythonpath
        return out

    @staticmethod
    def _internal_ip(node: NodeSpec, state: Path) -> str:
        try:
            doc = json.loads((state / "nodes" / f"{node.name}.topology.json").read_text())
            return doc["topology"]["internal_ip"]
        except (OSError, ValueError, KeyError):
            return node.mgmt_ip

    # -- node and lease -----------------------------------------------------------------
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

    # -- events -------------------------------------------------------------------------------
    def post_event(self, ns: str, involved: dict, reason: str, message: str, etype: str) -> None:
        """Queue an Event (dropped if the queue is full)."""
        now = now_rfc3339()
        ev = {"apiVersion": "v1", "kind": "Event",
              "metadata": {"generateName": f"{involved['name']}.", "namespace": ns},
              "involvedObject": involved, "reason": reason, "message": message[:1024],
              "type": etype, "source": {"component": "kubelet", "host": self.node.name},
              "firstTimestamp": now, "lastTimestamp": now, "count": 1,
              "reportingComponent": "kubelet", "reportingInstance": self.node.name}
        try:
            self.events.put_nowait(ev)
        except queue.Full:
            pass

    def _event_loop(self) -> None:
        while not self.stop.is_set():
            ev = self.events.get()
            try:
                self.client.post(f"/api/v1/namespaces/{ev['metadata']['namespace']}/events", ev)
            except Exception as e:
                log.debug("event not posted: %s", e)

    # -- pods -------------------------------------------------------------------------------
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

    # -- logs (kubelet API subset) ------------------------------------------------------
    def find_log(self, ns: str, pod: str, container: str, previous: bool):
        """(log path, is_running()) for a container of a pod on this node, or None."""
        with self.lock:
            w = next((w for w in self.workers.values()
                      if w.ns == ns and w.pod_name == pod), None)
        if w is not None:
            d = w.dir
            c = next((c for c in w.inits + w.mains if c.name == container), None)
            running = (lambda: c is not None and c.proc is not None and c.proc.poll() is None)
        else:
            dirs = sorted((self.state / "pods").glob(f"{ns}_{pod}_*"), key=lambda p: p.stat().st_mtime)
            if not dirs:
                return None
            d = dirs[-1]
            running = (lambda: False)
        p = d / (f"{container}.previous.log" if previous else f"{container}.log")
        if not p.exists():
            return None
        return p, running

    def serve_logs(self) -> http.server.HTTPServer:
        """Start the HTTPS server on 127.0.0.1:<kubelet port> (client certs from our CA)."""
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                log.debug("kubelet-api: " + fmt, *args)

            def _text(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                u = urllib.parse.urlparse(self.path)
                q = urllib.parse.parse_qs(u.query)
                parts = u.path.strip("/").split("/")
                if u.path in ("/healthz", "/healthz/"):
                    return self._text(200, "ok")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    return self._text(404, "not found")
                found = agent.find_log(parts[1], parts[2], parts[3],
                                       q.get("previous", ["false"])[0] == "true")
                if found is None:
                    return self._text(404, f"no logs for {parts[1]}/{parts[2]}/{parts[3]}")
                path, running = found
                follow = q.get("follow", ["false"])[0] == "true"
                data = path.read_bytes()
                if "tailLines" in q:
                    n = int(q["tailLines"][0])
                    data = b"".join(data.splitlines(keepends=True)[-n:]) if n > 0 else b""
                if "limitBytes" in q:
                    data = data[: int(q["limitBytes"][0])]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def chunk(b: bytes) -> None:
                    if b:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                        self.wfile.flush()
                try:
                    chunk(data)
                    if follow:
                        pos = path.stat().st_size
                        while True:
                            alive = running()
                            with open(path, "rb") as f:
                                f.seek(pos)
                                more = f.read()
                            pos += len(more)
                            chunk(more)
                            if not alive and not more:
                                break
                            time.sleep(0.2)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        srv = Server(("127.0.0.1", self.node.kubelet_port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.certs["serving_crt"]), str(self.certs["serving_key"]))
        ctx.load_verify_locations(str(self.state / "pki" / "ca.crt"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, name="kubelet-api", daemon=True).start()
        return srv

    def _pod_routes(self) -> list[tuple[str, str]]:
        """[(pod CIDR, InternalIP)] of every node `up` wrote a topology for."""
        out = []
        for f in sorted((self.state / "nodes").glob("*.topology.json")):
            try:
                t = json.loads(f.read_text())["topology"]
                out.append((pod_cidr(int(t["index"])), t["internal_ip"]))
            except (OSError, ValueError, KeyError):
                continue
        return out

    # -- run ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Register, then serve until SIGTERM. Raises on a registration failure after retries."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.register()
                self.renew_lease()
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise
                log.warning("registration failed (%s); retrying", e)
                time.sleep(1)
        log.info("node %s registered (InternalIP %s, kubelet port %d, gpus %d)", self.node.name,
                 self.internal_ip, self.node.kubelet_port, self.gpus)
        self.serve_logs()
        podnet.ensure_node(self.node.netns, self.pod_cidr, self._pod_routes())
        ServiceProxy(self.node.netns, KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT,
                     ("127.0.0.1", APISERVER_PORT)).start()
        threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
        threading.Thread(target=self._event_loop, name="events", daemon=True).start()
        threading.Thread(target=self._watch_loop, name="pod-watch", daemon=True).start()
        self.stop.wait()


def main(argv: list[str] | None = None) -> int:
    """Agent entry point: run until SIGTERM/SIGINT; returns the exit code."""
    ap = argparse.ArgumentParser(prog="localcluster.nodeagent")
    ap.add_argument("--node", required=True)
    ap.add_argument("--gpus", type=int, default=0)
    ap.add_argument("--state", required=True)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(message)s",
                        stream=sys.stdout)
    agent = Agent(node_spec_by_name(a.node), a.gpus, Path(a.state).resolve())

    def on_term(*_):
        agent.stop.set()
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    agent.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
