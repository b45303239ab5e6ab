"""The node agent runs pods scheduled by the real scheduler, as a kubelet would.

The agent is the lighter mode that stays for what real nodes cannot do here (fake GPUs,
32 and 64 nodes): this module switches the shared cluster's nodes to it and back to the
default (real kubelets) at its end."""
from __future__ import annotations

import ipaddress
import json
import subprocess
import time
import uuid

import pytest

from localcluster.common.config import NODE_NS_PREFIX, node_spec_by_name, pod_cidr

pytestmark = pytest.mark.e2e

NS = f"e2e-agent-{uuid.uuid4().hex[:6]}"


def _get(cluster, kind: str, name: str, ns: str = NS) -> dict | None:
    p = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    if p.returncode != 0:
        if "NotFound" in p.stderr:
            return None
        raise AssertionError(p.stderr)
    return json.loads(p.stdout)


def _wait(cluster, name: str, pred, timeout: float = 60, kind: str = "pod") -> dict | None:
    deadline = time.monotonic() + timeout
    obj = None
    while time.monotonic() < deadline:
        obj = _get(cluster, kind, name)
        if pred(obj):
            return obj
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {kind} {name}; last seen:\n"
                         f"{json.dumps((obj or {}).get('status'), indent=1)}")


def _phase_in(*phases):
    return lambda p: p is not None and p.get("status", {}).get("phase") in phases


def _apply(cluster, obj: dict) -> None:
    obj.setdefault("metadata", {}).setdefault("namespace", NS)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def _pod(name: str, containers: list[dict], **spec) -> dict:
    for c in containers:
        c.setdefault("image", "busybox:1.36")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"restartPolicy": "Never", "containers": containers,
                     "terminationGracePeriodSeconds": 5, **spec}}


def _py(code: str) -> list[str]:
    return ["python", "-c", code]


def _cstatus(pod: dict, name: str, init: bool = False) -> dict:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next(s for s in pod["status"][key] if s["name"] == name)


@pytest.fixture(scope="module")
def agent_nodes(cluster):
    from localcluster import bringup
    bringup.up(nodes=len(cluster.node_names), runtime="agent")
    yield cluster
    bringup.up(nodes=len(cluster.node_names))


@pytest.fixture(scope="module", autouse=True)
def namespace(agent_nodes):
    cluster = agent_nodes
    cluster.kubectl("create", "namespace", NS)
    deadline = time.monotonic() + 30
    while cluster.kubectl("get", "serviceaccount", "default", "-n", NS, check=False).returncode:
        assert time.monotonic() < deadline, "default ServiceAccount never appeared"
        time.sleep(0.3)
    yield NS
    cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_plain_pod_scheduled_and_succeeds(cluster):
    _apply(cluster, _pod("plain", [{"name": "main", "command": _py("print('hello from pod')")}]))
    pod = _wait(cluster, "plain", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert pod["spec"]["nodeName"] in cluster.node_names
    conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conds["PodScheduled"] == "True" and conds["Initialized"] == "True"
    st = _cstatus(pod, "main")
    assert st["state"]["terminated"]["exitCode"] == 0
    assert st["state"]["terminated"]["reason"] == "Completed"
    spec = node_spec_by_name(pod["spec"]["nodeName"])
    assert pod["status"]["hostIP"] == spec.mgmt_ip
    # pod network: its own address from the node's pod CIDR (test_pod_network.py)
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(pod_cidr(spec.index))
    logs = cluster.kubectl("logs", "plain", "-n", NS).stdout
    assert "hello from pod" in logs


def test_init_container_writes_emptydir_main_reads(cluster):
    pod = _pod("initdir", [{
        "name": "main", "command": _py("print('read:', open('/work/shared/msg').read())"),
        "volumeMounts": [{"name": "scratch", "mountPath": "/work/shared"}]}],
        initContainers=[
            {"name": "first", "image": "busybox", "command": _py(
                "open('/scratch/msg','w').write('from-init-1')"),
             "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
            {"name": "second", "image": "busybox", "command": _py(
                "open('/scratch/msg','a').write('+init-2')"),
             "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
        ],
        volumes=[{"name": "scratch", "emptyDir": {}}])
    _apply(cluster, pod)
    pod = _wait(cluster, "initdir", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    for name in ("first", "second"):
        assert _cstatus(pod, name, init=True)["state"]["terminated"]["exitCode"] == 0
    assert "read: from-init-1+init-2" in cluster.kubectl("logs", "initdir", "-n", NS).stdout


def test_field_ref_env_and_expansion(cluster):
    env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}} for n, f in [
        ("POD_NAME", "metadata.name"), ("POD_NS", "metadata.namespace"),
        ("POD_UID", "metadata.uid"), ("NODE", "spec.nodeName"),
        ("SA", "spec.serviceAccountName"), ("POD_IP", "status.podIP"),
        ("HOST_IP", "status.hostIP")]]
    env += [{"name": "GREETING", "value": "hi-$(POD_NAME)"},
            {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]
    code = ("import json,os,sys,socket; json.dump({'env': {k: v for k, v in os.environ.items()},"
            " 'argv': sys.argv[1:], 'host': socket.gethostname(), 'cwd': os.getcwd()},"
            " open('/dev/termination-log','w'))")
    _apply(cluster, _pod("envs", [{"name": "main", "command": ["python", "-c", code],
                                   "args": ["$(NODE)", "$$(NODE)", "$(UNDEFINED)"],
                                   "workingDir": "/tmp",
                                   "resources": {"limits": {"cpu": "1500m"}}, "env": env}]))
    pod = _wait(cluster, "envs", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    out = json.loads(_cstatus(pod, "main")["state"]["terminated"]["message"])
    e, node = out["env"], pod["spec"]["nodeName"]
    assert e["POD_NAME"] == "envs" and e["POD_NS"] == NS
    assert e["POD_UID"] == pod["metadata"]["uid"]
    assert e["NODE"] == node and e["SA"] == "default"
    assert e["POD_IP"] == pod["status"]["podIP"] != e["HOST_IP"] == pod["status"]["hostIP"]
    assert e["GREETING"] == "hi-envs"
    assert e["CPU_LIMIT"] == "2"
    assert e["HOSTNAME"] == "envs" and out["host"] == "envs"  # pod network: the pod's name
    assert e["PATH"].split(":")[0].endswith("/bin")
    assert out["argv"] == [node, "$(NODE)", "$(UNDEFINED)"]
    assert out["cwd"] == "/tmp"


def test_configmap_volume(cluster):
    _apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "agent-cm", "namespace": NS},
                     "data": {"a.txt": "alpha", "b.conf": "beta"}})
    _apply(cluster, _pod("cmvol", [{
        "name": "main",
        "command": _py("import os; print(sorted(os.listdir('/etc/cfg')));"
                       "print(open('/etc/cfg/a.txt').read(), open('/etc/one/b').read())"),
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"},
                         {"name": "one", "mountPath": "/etc/one"}]}],
        volumes=[{"name": "cfg", "configMap": {"name": "agent-cm"}},
                 {"name": "one", "configMap": {"name": "agent-cm",
                                               "items": [{"key": "b.conf", "path": "b"}]}}]))
    pod = _wait(cluster, "cmvol", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    logs = cluster.kubectl("logs", "cmvol", "-n", NS).stdout
    assert "['a.txt', 'b.conf']" in logs and "alpha beta" in logs


def test_termination_message_and_exit_code(cluster):
    _apply(cluster, _pod("failing", [{
        "name": "main", "command": _py(
            "import sys; open('/dev/termination-log','w').write('disk on fire'); sys.exit(3)")}]))
    pod = _wait(cluster, "failing", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Failed"
    term = _cstatus(pod, "main")["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["message"] == "disk on fire"
    assert term["startedAt"] and term["finishedAt"]


def test_custom_termination_message_path_is_capped(cluster):
    _apply(cluster, _pod("bigmsg", [{
        "name": "main", "terminationMessagePath": "/var/run/custom/msg",
        "command": _py("open('/var/run/custom/msg','w').write('x' * 10000)")}]))
    pod = _wait(cluster, "bigmsg", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded"
    assert len(_cstatus(pod, "main")["state"]["terminated"]["message"]) == 4096


def test_fallback_to_logs_on_error(cluster):
    _apply(cluster, _pod("fallback", [{
        "name": "main", "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": _py("import sys; print('line one'); print('boom: the last words', flush=True);"
                       " sys.exit(2)")}]))
    pod = _wait(cluster, "fallback", _phase_in("Succeeded", "Failed"))
    term = _cstatus(pod, "main")["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed" and term["exitCode"] == 2
    assert "boom: the last words" in term["message"]


def test_restart_policy_on_failure_restarts(cluster):
    code = ("import os, sys\n"
            "p = '/state/attempts'\n"
            "n = int(open(p).read()) if os.path.exists(p) else 0\n"
            "open(p, 'w').write(str(n + 1))\n"
            "print('attempt', n + 1, flush=True)\n"
            "sys.exit(0 if n + 1 >= 3 else 1)\n")
    _apply(cluster, _pod("onfailure", [{
        "name": "main", "command": ["python", "-c", code],
        "volumeMounts": [{"name": "state", "mountPath": "/state"}]}],
        restartPolicy="OnFailure", volumes=[{"name": "state", "emptyDir": {}}]))
    pod = _wait(cluster, "onfailure", _phase_in("Succeeded", "Failed"), timeout=90)
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    st = _cstatus(pod, "main")
    assert st["restartCount"] == 2
    assert st["lastState"]["terminated"]["exitCode"] == 1
    assert "attempt 3" in cluster.kubectl("logs", "onfailure", "-n", NS).stdout
    assert "attempt 2" in cluster.kubectl("logs", "onfailure", "-n", NS, "--previous").stdout


def test_restart_policy_always_restarts_successful_container(cluster):
    _apply(cluster, _pod("always", [{"name": "main", "command": _py("print('done')")}],
                         restartPolicy="Always"))
    pod = _wait(cluster, "always", lambda p: p is not None and any(
        s["restartCount"] >= 2 for s in p.get("status", {}).get("containerStatuses") or []))
    assert pod["status"]["phase"] == "Running"
    assert _cstatus(pod, "main")["lastState"]["terminated"]["reason"] == "Completed"
    cluster.kubectl("delete", "pod", "always", "-n", NS, "--wait=true")


def _pids_with_marker(marker: str) -> list[int]:
    out = []
    ns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in ns_list.splitlines():
        ns = line.split()[0]
        if not ns.startswith(f"{NODE_NS_PREFIX}node-"):
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(pid))
            except OSError:
                pass
    return out


def test_delete_running_pod_kills_processes(cluster):
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    _apply(cluster, _pod("sleeper", [{
        "name": "main", "command": _py(f"import time  # {marker}\n"
                                       "import signal, sys\n"
                                       "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
                                       "print('sleeping', flush=True)\n"
                                       "time.sleep(600)")}]))
    _wait(cluster, "sleeper", _phase_in("Running"))
    deadline = time.monotonic() + 20
    while "sleeping" not in cluster.kubectl("logs", "sleeper", "-n", NS, check=False).stdout:
        assert time.monotonic() < deadline, "container never started"
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while not _pids_with_marker(marker):
        assert time.monotonic() < deadline, "pod process not found in any node namespace"
        time.sleep(0.2)
    t = time.monotonic()
    cluster.kubectl("delete", "pod", "sleeper", "-n", NS, "--wait=true", timeout=60)
    assert time.monotonic() - t < 5, "SIGTERM should end it well before the grace period"
    assert _get(cluster, "pod", "sleeper") is None
    assert _pids_with_marker(marker) == []


def test_delete_pod_ignoring_sigterm_is_killed_after_grace(cluster):
    marker = f"marker-{uuid.uuid4().hex[:8]}"
    _apply(cluster, _pod("stubborn", [{
        "name": "main", "command": _py(f"import signal, time  # {marker}\n"
                                       "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                       "print('armed', flush=True)\n"
                                       "time.sleep(600)")}], terminationGracePeriodSeconds=2))
    _wait(cluster, "stubborn", _phase_in("Running"))
    deadline = time.monotonic() + 20
    while "armed" not in cluster.kubectl("logs", "stubborn", "-n", NS, check=False).stdout:
        assert time.monotonic() < deadline, "container never installed its SIGTERM handler"
        time.sleep(0.2)
    t = time.monotonic()
    cluster.kubectl("delete", "pod", "stubborn", "-n", NS, "--wait=true", timeout=60)
    elapsed = time.monotonic() - t
    assert 1.5 < elapsed < 10, elapsed
    assert _pids_with_marker(marker) == []


def test_owner_deletion_garbage_collects_pod(cluster):
    _apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "owner", "namespace": NS}, "data": {}})
    owner = _get(cluster, "configmap", "owner")
    pod = _pod("owned", [{"name": "main", "command": _py("import time; time.sleep(600)")}])
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                           "name": "owner", "uid": owner["metadata"]["uid"]}]
    _apply(cluster, pod)
    _wait(cluster, "owned", _phase_in("Running"))
    cluster.kubectl("delete", "configmap", "owner", "-n", NS)
    _wait(cluster, "owned", lambda p: p is None, timeout=60)


def test_simulated_image_from_image_map(cluster):
    _apply(cluster, _pod("garbage", [{"name": "probe",
                                      "image": "disttrain.dev/test/garbage-probe:v1"}]))
    pod = _wait(cluster, "garbage", _phase_in("Succeeded", "Failed"))
    term = _cstatus(pod, "probe")["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed" and term["exitCode"] == 1
    assert term["message"] == "{not json at all"


def test_unpullable_image_stays_waiting(cluster):
    _apply(cluster, _pod("unpullable", [{"name": "main", "command": _py("print(1)"),
                                         "image": "disttrain.dev/test/unpullable:v1"}]))
    pod = _wait(cluster, "unpullable", lambda p: p is not None and any(
        s.get("state", {}).get("waiting", {}).get("reason") == "ErrImagePull"
        for s in p.get("status", {}).get("containerStatuses") or []))
    assert pod["status"]["phase"] == "Pending"
    cluster.kubectl("delete", "pod", "unpullable", "-n", NS, "--wait=true")


def test_active_deadline_fails_pod(cluster):
    _apply(cluster, _pod("deadline", [{"name": "main", "command": _py("import time; time.sleep(600)")}],
                         activeDeadlineSeconds=2, restartPolicy="Always"))
    pod = _wait(cluster, "deadline", _phase_in("Succeeded", "Failed"), timeout=30)
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert "terminated" in _cstatus(pod, "main")["state"]


def test_volume_over_an_ancestor_of_the_project_does_not_hide_it(cluster):
    """An emptyDir on the directory holding the repo (e.g. /tmp when CI clones under /tmp,
    as the chart's operator pod mounts /tmp) must not hide the venv the container runs from,
    nor the state dir the other volumes come from."""
    from localcluster.common.config import REPO_ROOT

    parent = str(REPO_ROOT.parent)
    cluster.kubectl("create", "configmap", "ancestor-cm", "-n", NS, "--from-literal=k=v", check=False)
    _apply(cluster, _pod("ancestor", [{
        "name": "main",
        "command": _py("import os,sys; print('cm:', open('/etc/cfg/k').read()); "
                       "print('scratch empty:', sorted(os.listdir(sys.argv[1]) if len(sys.argv) > 1 else []))"),
        "volumeMounts": [{"name": "scratch", "mountPath": parent},
                         {"name": "cfg", "mountPath": "/etc/cfg"}]}],
        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "ancestor-cm"}}]))
    pod = _wait(cluster, "ancestor", _phase_in("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert "cm: v" in cluster.kubectl("logs", "ancestor", "-n", NS).stdout


def test_mount_points_made_under_a_volume_that_hides_the_state_dir_start_first_time(cluster):
    """The first run's crash loop: with the state dir hidden by a volume over an ancestor
    (the chart's emptyDir on /tmp, a clone under /tmp), every mount point the container had
    to create on the host failed it once (created-paths could not be written). It must
    start on its first try and record each path it created, for `down` to remove."""
    from localcluster.common.config import REPO_ROOT

    parent = str(REPO_ROOT.parent)
    base = f"/var/run/dtj-e2e-{uuid.uuid4().hex[:8]}"
    # at least as deep as `parent`: mounts go shallowest first, so the hiding one is first
    target = "/".join([base, *["d"] * max(2, parent.count("/"))])
    _apply(cluster, _pod("hidden-state", [{
        "name": "main", "command": _py("import sys; print('started')"),
        "volumeMounts": [{"name": "scratch", "mountPath": parent},
                         {"name": "deep", "mountPath": target}]}],
        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "deep", "emptyDir": {}}]))
    pod = _wait(cluster, "hidden-state", _phase_in("Succeeded", "Failed"))
    st = _cstatus(pod, "main")
    assert pod["status"]["phase"] == "Succeeded", st
    assert st.get("restartCount", 0) == 0
    created = (cluster.state_dir / "created-paths").read_text().splitlines()
    assert base in created and target in created
