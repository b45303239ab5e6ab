"""The admission check controller's I/O against a fake API: the order of its writes, the
server-side apply of the answer, node labels put on and taken off, and a step that never
raises."""
from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, Optional

from kubernetes.client.rest import ApiException

from disttrain.admissioncheck import answer as A
from disttrain.admissioncheck import decide as D
from disttrain.admissioncheck.workload import CONTROLLER_NAME
from disttrain.shell import admission, metrics
from tests.unit.operator.admissioncheck.checked import CHECK, NOW, checked, probe_pods


class FakeApi:
    """The calls AdmissionController makes, recorded in ``calls`` in order."""

    def __init__(self, wl: Optional[dict]) -> None:
        self.wl, self.jobs, self.pods = wl, {}, []
        self.other_workloads: list[dict] = []
        self.node_labels: dict[str, dict[str, str]] = {"node-a": {}, "node-b": {}, "node-c": {}, "node-x": {}}
        self.calls: list[tuple] = []
        self.fail: Optional[str] = None
        self.check_status: dict = {}
        self.custom, self.core = self, self

    def _maybe_fail(self, what: str) -> None:
        self.calls.append((what,))
        if self.fail == what:
            raise ApiException(status=500, reason="boom")

    # Kube's own methods
    def get_object(self, api_version: str, kind: str, namespace: Optional[str], name: str) -> Any:
        self._maybe_fail(f"get {kind}")
        if kind == "Workload":
            return copy.deepcopy(self.wl)
        return {"spec": {"nodeLabels": {"pool": "gpu"}}} if kind == "ResourceFlavor" else None

    def get_job(self, namespace: str, name: str) -> Any:
        return copy.deepcopy(self.jobs.get(name))

    def list_pods(self, namespace: str, job: str) -> list:
        return copy.deepcopy(self.pods)

    # CustomObjectsApi
    def list_cluster_custom_object(self, group: str, version: str, plural: str, limit: int = 0,
                                   _continue: Optional[str] = None) -> dict:
        if plural == "workloads":  # pages of one Workload each: the sweep must follow "continue"
            self._maybe_fail("list workloads")
            wls = [w for w in [self.wl, *self.other_workloads] if w is not None]
            i = int(_continue or 0)
            more = {"continue": str(i + 1)} if i + 1 < len(wls) else {}
            return {"items": copy.deepcopy(wls[i:i + 1]), "metadata": more}
        self._maybe_fail("list admissionchecks")
        return {"items": [{"metadata": {"name": CHECK, "generation": 1}, "spec": {"controllerName": CONTROLLER_NAME},
                           "status": self.check_status},
                          {"metadata": {"name": "other-check"}, "spec": {"controllerName": "kueue.x-k8s.io/prov"}}]}

    def create_namespaced_custom_object(self, group, version, namespace, plural, body) -> None:
        self._maybe_fail("create job")
        if body["metadata"]["name"] in self.jobs:
            raise ApiException(status=409)
        self.jobs[body["metadata"]["name"]] = copy.deepcopy(body)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body=None) -> None:
        self._maybe_fail("delete job")
        if self.jobs.pop(name, None) is None:
            raise ApiException(status=404)

    def patch_namespaced_custom_object_status(self, group, version, namespace, plural, name, body, **kw) -> None:
        self._maybe_fail("apply status")
        self.calls[-1] = ("apply status", body["status"]["admissionChecks"][0]["state"], kw)

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body, **kw) -> None:
        self._maybe_fail("patch workload")
        self.calls[-1] = ("patch workload", body, kw.get("_content_type"))

    def patch_cluster_custom_object_status(self, group, version, plural, name, body, **kw) -> None:
        self._maybe_fail("activate check")
        self.check_status = copy.deepcopy(body["status"])

    # CoreV1Api
    def list_node(self, label_selector: Optional[str] = None, limit: int = 0, _continue: Optional[str] = None) -> Any:
        items = [SimpleNamespace(metadata=SimpleNamespace(name=n, labels=dict(labels)))
                 for n, labels in self.node_labels.items() if label_selector is None or label_selector in labels]
        return SimpleNamespace(items=items, metadata=SimpleNamespace(_continue=None))

    def patch_node(self, name: str, body: dict) -> None:
        self._maybe_fail("patch node")
        for k, v in body["metadata"]["labels"].items():
            if v is None:
                self.node_labels[name].pop(k, None)
            else:
                self.node_labels[name][k] = v

    def create_namespaced_event(self, namespace: str, body: Any) -> None:
        self.calls.append(("event", body.reason, body.involved_object.kind))


def controller(api: FakeApi) -> admission.AdmissionController:
    return admission.AdmissionController(api)  # type: ignore[arg-type]


def test_off_unless_the_setting_says_1_or_true():
    assert not admission.enabled({})
    assert not admission.enabled({admission.ENV: "0"})
    assert admission.enabled({admission.ENV: "1"}) and admission.enabled({admission.ENV: "true"})


def test_a_waiting_workload_is_probed_then_ready_after_its_nodes_are_labelled():
    wl = checked()
    api = FakeApi(wl)
    c = controller(api)
    ready = metrics.REGISTRY.get_sample_value("disttrain_admission_check_answers_total", {"state": "Ready"}) or 0
    r = c.step("team", wl["metadata"]["name"], NOW)
    assert not r.backoff and r.delay
    (name, job), = api.jobs.items()
    applied = [x for x in api.calls if x[0] == "apply status"]
    assert applied[0][1] == A.PENDING and applied[0][2]["_content_type"] == admission.APPLY
    assert applied[0][2]["field_manager"] == "disttrain-preflight" and applied[0][2]["force"] is True
    c.step("team", wl["metadata"]["name"], NOW)
    assert list(api.jobs) == [name]  # not created twice
    job["metadata"]["uid"] = "shadow-uid"
    job["status"] = {"conditions": [{"type": "Validated", "status": "True", "reason": "AllChecksPassed",
                                     "message": "all checks passed"}]}
    api.jobs[name] = job
    api.pods = probe_pods(job)
    api.calls.clear()
    c.step("team", wl["metadata"]["name"], NOW)
    kinds = [x[0] for x in api.calls]
    assert kinds.index("patch node") < kinds.index("apply status")  # labelled before Ready is written
    assert ("apply status", A.READY) == api.calls[kinds.index("apply status")][:2]
    assert ("event", "PreflightReady", "PyTorchJob") in api.calls
    assert metrics.REGISTRY.get_sample_value("disttrain_admission_check_answers_total", {"state": "Ready"}) == ready + 1
    key = D.label_key(wl)
    assert {n for n, labels in api.node_labels.items() if key in labels} == {"node-a", "node-b", "node-c"}


def test_a_retry_records_the_nodes_to_avoid_before_it_is_written():
    wl = checked()
    api = FakeApi(wl)
    c = controller(api)
    c.step("team", wl["metadata"]["name"], NOW)
    (name, job), = api.jobs.items()
    job["status"] = {"conditions": [{"type": "Validated", "status": "False", "reason": "EphemeralPortsBlocked",
                                     "message": "node-b drops connections on 32768-60999; open them on node-b"}]}
    api.pods = probe_pods(job)
    api.calls.clear()
    c.step("team", wl["metadata"]["name"], NOW)
    kinds = [x[0] for x in api.calls]
    assert kinds.index("patch workload") < kinds.index("apply status")
    patch = api.calls[kinds.index("patch workload")]
    assert patch[1] == {"metadata": {"annotations": {
        "preflight.disttrain.dev/avoid": "node-b",
        "preflight.disttrain.dev/avoid-why": "EphemeralPortsBlocked: node-b drops connections on 32768-60999; "
                                             "open them on node-b"}}}
    assert patch[2] == "application/merge-patch+json"
    assert api.calls[kinds.index("apply status")][1] == A.RETRY


def test_a_finished_then_deleted_workload_takes_its_labels_and_shadow_away():
    wl = checked()
    api = FakeApi(wl)
    c = controller(api)
    c.step("team", wl["metadata"]["name"], NOW)
    key = D.label_key(wl)
    assert key is not None
    api.node_labels["node-a"][key] = "true"
    api.wl = None  # deleted before it finished: the key was remembered
    r = c.step("team", wl["metadata"]["name"], NOW)
    assert r.gone and api.node_labels["node-a"] == {}


def test_a_failed_call_backs_off_and_the_next_step_picks_up():
    wl = checked()
    api = FakeApi(wl)
    api.fail = "create job"
    c = controller(api)
    r = c.step("team", wl["metadata"]["name"], NOW)
    assert r.backoff and r.delay and not api.jobs
    assert not any(x[0] == "apply status" for x in api.calls)  # nothing written past a failure
    api.fail = None
    r = c.step("team", wl["metadata"]["name"], NOW)
    assert not r.backoff and len(api.jobs) == 1


def test_a_workload_without_our_check_is_read_once_and_left_alone():
    wl = checked()
    wl["status"]["admissionChecks"] = [{"name": "other-check", "state": "Pending"}]
    api = FakeApi(wl)
    r = controller(api).step("team", wl["metadata"]["name"], NOW)
    assert r.settled and not api.jobs
    assert [x[0] for x in api.calls] == ["get Workload", "list admissionchecks", "activate check"]


def test_our_admission_check_is_marked_active_once():
    api = FakeApi(None)
    c = controller(api)
    assert c.ours() == frozenset({CHECK})
    (cond,) = api.check_status["conditions"]
    assert (cond["type"], cond["status"], cond["observedGeneration"]) == ("Active", "True", 1)
    c._checks = None  # the cache expired
    c.ours()
    assert [x[0] for x in api.calls].count("activate check") == 1


def test_a_check_of_ours_is_marked_active_from_its_watch_event_before_any_workload():
    """Found on the cluster: the check went Active only when a Workload was first stepped,
    so a new ClusterQueue listing it showed inactive until then."""
    api = FakeApi(None)
    c = controller(api)
    (ours, other) = api.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "admissionchecks")["items"]
    api.calls.clear()
    c.activate(other)
    c.activate("not a dict")
    assert api.calls == []
    c.activate(ours)
    assert [x[0] for x in api.calls] == ["activate check"]
    assert api.check_status["conditions"][0]["status"] == "True"
    ours["status"] = api.check_status
    c.activate(ours)  # already Active at its generation: nothing written
    assert [x[0] for x in api.calls] == ["activate check"]


def _handlers_register_workloads(env_value: Optional[str]) -> bool:
    """Import the kopf handlers in a fresh interpreter with DISTTRAIN_ADMISSION_CHECK set to
    ``env_value`` (None: unset); whether a Workload handler was registered."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[4]
    env = {k: v for k, v in os.environ.items() if k != admission.ENV}
    env["PYTHONPATH"] = os.pathsep.join(str(root / p) for p in ("operator", "probe_image"))
    if env_value is not None:
        env[admission.ENV] = env_value
    code = ("import kopf; from disttrain.shell import handlers; "
            "print(any(h.fn.__name__ == 'workload_event' for h in "
            "kopf.get_default_registry()._watching.get_all_handlers()))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip() == "True"


def test_the_operator_watches_no_workload_unless_the_check_is_enabled():
    assert not _handlers_register_workloads(None)
    assert not _handlers_register_workloads("0")
    assert _handlers_register_workloads("1")


def test_the_sweep_takes_off_only_labels_no_workload_selects():
    wl = checked()
    api = FakeApi(wl)
    live = D.label_key(wl)
    other = checked(owner="other")
    api.other_workloads = [other]  # on the second page of the Workload list
    gone = f"{A.LABEL_PREFIX}/ddp-pf-deadbeef"
    api.node_labels["node-a"] = {live: "true", gone: "true", "pool": "gpu"}
    api.node_labels["node-b"] = {D.label_key(other): "true", gone: "true"}
    api.node_labels["node-c"] = {"preflight.disttrain.dev.example/x": "1"}  # not our prefix
    assert controller(api).sweep_labels() == 2
    assert api.node_labels["node-a"] == {live: "true", "pool": "gpu"}
    assert api.node_labels["node-b"] == {D.label_key(other): "true"}
    assert api.node_labels["node-c"] == {"preflight.disttrain.dev.example/x": "1"}
    assert controller(api).sweep_labels() == 0


def test_a_failed_list_takes_nothing_off():
    api = FakeApi(checked())
    api.node_labels["node-a"] = {f"{A.LABEL_PREFIX}/ddp-pf-deadbeef": "true"}
    api.fail = "list workloads"
    try:
        controller(api).sweep_labels()
        raise AssertionError("the failed list was not raised")
    except ApiException:
        pass
    assert api.node_labels["node-a"]  # nothing decided without the Workloads


def test_the_label_sweep_retries_a_failure_and_stops_once_refused():
    """Run in a fresh interpreter (importing the handlers registers them with kopf): the
    sweep loop retries a 500, and a 403 (``watchNamespaces``: no cluster-wide Workload list)
    ends it instead of a warning every 5 minutes forever."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[4]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(root / p) for p in ("operator", "probe_image")))
    code = (
        "import asyncio\n"
        "from kubernetes.client.rest import ApiException\n"
        "from disttrain.shell import handlers\n"
        "calls = []\n"
        "class C:\n"
        "    def sweep_labels(self):\n"
        "        calls.append(1)\n"
        "        raise ApiException(status=500 if len(calls) == 1 else 403)\n"
        "handlers.LABEL_SWEEP_SECONDS = 0.0\n"
        "asyncio.run(asyncio.wait_for(handlers._sweep_labels(C()), 10))\n"
        "print(len(calls))\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"
