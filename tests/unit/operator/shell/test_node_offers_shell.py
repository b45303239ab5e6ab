"""The shell's read of the nodes' allocatable and the autoscaler's Events
(:meth:`disttrain.shell.runner.Reconciler.nodes`, :meth:`disttrain.shell.kube.Kube.list_node_allocatable`):
bounded by pages, cached, only while a pod waits for an ``Insufficient`` resource, and a
refused read (no RBAC for nodes) degrades to waiting as before, said once in the log."""

import json
import logging
from types import SimpleNamespace

from kubernetes.client.rest import ApiException

from disttrain.api import constants as C
from disttrain.shell.kube import Kube
from disttrain.shell.runner import NODES_TTL_SECONDS, Reconciler
from tests.support.fixtures import pod

NO_GPU = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def gpu_pod(name="j-probe-0", message=NO_GPU):
    p = pod(name, C.ROLE_PROBE, 0, container="trainer", unschedulable=message)
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return p


class FakeKube:
    """What the Reconciler asks of Kube for nodes and Events, counted."""

    def __init__(self, nodes=None, error=None, events=()):
        self.nodes = nodes if nodes is not None else [("node-a", {"cpu": "8"}), ("node-b", {"cpu": "8"})]
        self.error = error
        self.events = list(events)
        self.node_reads = 0
        self.event_reads = 0

    def list_node_allocatable(self):
        self.node_reads += 1
        if self.error:
            raise self.error
        return [(n, a, {}, []) if len(x) == 2 else x for x in self.nodes for n, a in [x[:2]]], True

    def list_pod_events(self, namespace, pod):
        self.event_reads += 1
        return self.events


def reconciler(kube):
    r = Reconciler(kube)
    r.clock = lambda: r.now
    r.now = 1000.0
    return r


def test_nodes_are_read_only_while_a_pod_waits_for_an_insufficient_resource():
    kube = FakeKube()
    r = reconciler(kube)
    assert r.nodes("ns", [pod("j-probe-0", C.ROLE_PROBE, 0)]) is None
    assert r.nodes("ns", [gpu_pod(message="0/2 nodes are available: 2 node(s) had untolerated taint.")]) is None
    assert kube.node_reads == 0
    got = r.nodes("ns", [gpu_pod()])
    assert got is not None and got.complete and [n for n, _ in got.allocatable] == ["node-a", "node-b"]
    assert kube.node_reads == 1 and kube.event_reads == 1  # the GPU is offered nowhere: its Events


def test_nodes_are_read_for_a_pod_its_gang_holds():
    """With the workload API's gang, every member may show only the gang's words; its own
    requests are then weighed against the nodes (found on the real proving ground)."""
    kube = FakeKube()
    r = reconciler(kube)
    got = r.nodes("ns", [gpu_pod(message="minCount (2) cannot be satisfied: 0 scheduled, 1 remaining")])
    assert got is not None and kube.node_reads == 1 and kube.event_reads == 1


def test_the_nodes_are_cached_for_all_jobs():
    kube = FakeKube()
    r = reconciler(kube)
    for _ in range(5):
        r.nodes("ns", [gpu_pod()])
        r.nodes("other", [gpu_pod()])
    assert kube.node_reads == 1
    r.now += NODES_TTL_SECONDS + 1
    r.nodes("ns", [gpu_pod()])
    assert kube.node_reads == 2


def test_events_only_for_pods_whose_resource_no_node_offers():
    kube = FakeKube(nodes=[("node-a", {"nvidia.com/gpu": "8"})],
                    events=[{"reason": "TriggeredScaleUp", "message": "up", "lastTimestamp": "2026-11-30T11:00:00Z"}])
    r = reconciler(kube)
    got = r.nodes("ns", [gpu_pod()])
    assert got is not None and got.autoscaler == {} and kube.event_reads == 0  # offered: only busy
    kube = FakeKube(events=[{"reason": "TriggeredScaleUp", "message": "up", "lastTimestamp": "2026-11-30T11:00:00Z"}])
    r = reconciler(kube)
    pods = [gpu_pod(f"j-probe-{i}") for i in range(6)]
    got = r.nodes("ns", pods)
    assert got.autoscaler["j-probe-0"] == ("TriggeredScaleUp", "up")
    assert kube.event_reads == 3  # at most EVENT_PODS pods per step
    r.nodes("ns", pods)
    assert kube.event_reads == 3  # cached


def test_forbidden_nodes_degrade_to_waiting_said_once(caplog):
    kube = FakeKube(error=ApiException(status=403, reason="Forbidden"))
    r = reconciler(kube)
    with caplog.at_level(logging.WARNING, logger="disttrain.runner"):
        for _ in range(3):
            assert r.nodes("ns", [gpu_pod()]) is None
            r.now += NODES_TTL_SECONDS + 1
    assert [m for m in caplog.messages if "cannot list nodes" in m] and \
        len([m for m in caplog.messages if "cannot list nodes" in m]) == 1
    assert kube.node_reads == 1  # not retried every step


def test_any_failure_of_the_reads_never_fails_a_step():
    kube = FakeKube(error=RuntimeError("connection reset"))
    assert reconciler(kube).nodes("ns", [gpu_pod()]) is None
    kube = FakeKube()
    kube.list_pod_events = lambda ns, p: (_ for _ in ()).throw(ApiException(status=403))
    got = reconciler(kube).nodes("ns", [gpu_pod()])
    assert got is not None and got.autoscaler == {}


class Pages:
    """``core.list_node`` of an apiserver with ``total`` nodes, ``limit`` per page."""

    def __init__(self, total):
        self.total = total
        self.calls = []

    def list_node(self, limit, _preload_content, _continue=None):
        assert _preload_content is False
        self.calls.append((limit, _continue))
        start = int(_continue or 0)
        items = [{"metadata": {"name": f"n{i}", **({"labels": {"gpu": "a100"}} if i == 1 else {})},
                  "status": {"allocatable": {"cpu": "4"}, "images": ["x"] * 3},
                  **({"spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}} if i == 2 else {})}
                 for i in range(start, min(start + limit, self.total))]
        more = str(start + limit) if start + limit < self.total else None
        return SimpleNamespace(data=json.dumps({"items": items, "metadata": {"continue": more}}).encode())


def test_the_node_list_is_bounded_by_pages():
    kube = Kube.__new__(Kube)
    kube.core = Pages(1200)
    nodes, complete = kube.list_node_allocatable(limit=500, max_pages=10)
    assert complete and len(nodes) == 1200 and nodes[0] == ("n0", {"cpu": "4"}, {}, [])
    assert nodes[1][2] == {"gpu": "a100"} and nodes[2][3] == [{"key": "gpu", "effect": "NoSchedule"}]
    assert kube.core.calls == [(500, None), (500, "500"), (500, "1000")]
    kube.core = Pages(5001)
    nodes, complete = kube.list_node_allocatable(limit=500, max_pages=10)
    assert not complete and len(nodes) == 5000 and len(kube.core.calls) == 10


def test_the_nodes_labels_and_taints_reach_the_offers():
    """A GPU offered only by a node whose taint the pod does not tolerate is offered to no
    pod of the job: the shell passes labels and taints on, and the pod's Events are read."""
    kube = FakeKube(nodes=[("node-a", {"cpu": "8"}, {}, []),
                           ("node-c", {"nvidia.com/gpu": "4"}, {"gpu": "a100"},
                            [{"key": "gpu", "value": "true", "effect": "NoSchedule"}])])
    r = reconciler(kube)
    got = r.nodes("ns", [gpu_pod()])
    assert got is not None and got.placement["node-c"][0] == {"gpu": "a100"}
    assert kube.event_reads == 1  # the GPU is offered to no pod of the job
