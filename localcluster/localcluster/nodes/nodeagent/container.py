"""Container processes: starting one (containerinit in the pod's namespaces), its exit
and restart back-off, termination messages, killing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

from localcluster.common.config import venv_bin, venv_python
from localcluster.nodes import podspec
from localcluster.nodes.nodeagent.podstate import Container, PodState
from localcluster.nodes.nodeagent.shared import log, now_rfc3339

MAX_TERMINATION_MESSAGE = 4096
FALLBACK_LOG_LINES = 80
BACKOFF_BASE, BACKOFF_MAX = 1.0, 10.0


class ContainerProcesses(PodState):
    """Starting, reaping and killing a pod worker's container processes. Starting uses
    the worker's mounts (:class:`~.volumes.PodVolumes`) and its hostname, hosts and
    resolv.conf files (:class:`~.sandbox.PodSandbox`)."""

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
               "--propagation", "private", venv_python(), "-m", "localcluster.nodes.containerinit",
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
