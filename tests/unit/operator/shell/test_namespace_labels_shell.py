"""The shell's read of the job's namespace labels for the NetworkPolicies' namespaceSelectors
(:meth:`disttrain.shell.runner.Reconciler.namespace_labels`,
:meth:`disttrain.shell.kube.Kube.get_namespace_labels`, issue 31): read only when there are
policies to judge, handed to the pure verdict, and a refused read (no RBAC for namespaces)
degrades to naming the selector as undecided, said once in the log, never raised."""

import logging
from types import SimpleNamespace

import pytest
from kubernetes.client.rest import ApiException

from disttrain.shell import runner as runner_mod
from disttrain.shell.kube import Kube
from disttrain.shell.runner import Reconciler

DENY = {"metadata": {"name": "default-deny"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}


class FakeKube:
    def __init__(self, labels=None, error=None):
        self.labels = labels if labels is not None else {"team": "ml"}
        self.error = error
        self.reads: list[str] = []

    def get_namespace_labels(self, name):
        self.reads.append(name)
        if self.error:
            raise self.error
        return dict(self.labels)


def test_read_only_when_there_are_policies_to_judge():
    kube = FakeKube()
    r = Reconciler(kube)
    assert r.namespace_labels("ml", ()) is None and kube.reads == []
    assert r.namespace_labels("ml", (DENY,)) == {"team": "ml"} and kube.reads == ["ml"]


@pytest.mark.parametrize("error", [ApiException(status=403), ApiException(status=404),
                                   ApiException(status=500), RuntimeError("connection reset")])
def test_a_refused_or_failed_read_is_none_said_once(caplog, error):
    kube = FakeKube(error=error)
    r = Reconciler(kube)
    with caplog.at_level(logging.WARNING, logger="disttrain.runner"):
        assert r.namespace_labels("ml", (DENY,)) is None
        assert r.namespace_labels("ml", (DENY,)) is None
    said = [m for m in caplog.messages if "cannot read namespace ml" in m]
    assert len(said) == 1 and "grant get on namespaces" in said[0]


def test_kube_reads_the_labels_of_the_namespace_object():
    k = Kube.__new__(Kube)
    k.api = SimpleNamespace(sanitize_for_serialization=lambda o: o)
    asked = []
    k.core = SimpleNamespace(read_namespace=lambda name: asked.append(name) or {
        "metadata": {"name": name, "labels": {"team": "ml", "kubernetes.io/metadata.name": name, "n": 3}}})
    assert k.get_namespace_labels("ml") == {"team": "ml", "kubernetes.io/metadata.name": "ml"}
    assert asked == ["ml"]
    k.core = SimpleNamespace(read_namespace=lambda name: {"metadata": {"name": name}})
    assert k.get_namespace_labels("ml") == {}


class Seen(Exception):
    pass


def test_the_step_hands_the_labels_to_the_pure_reconcile(monkeypatch):
    kube = FakeKube(labels={"team": "cv"})
    kube.get_job = lambda ns, name: {"metadata": {"name": name, "namespace": ns, "uid": "u"}, "spec": {}}
    kube.list_pods = lambda ns, name: []
    r = Reconciler(kube)
    monkeypatch.setattr(r, "services", lambda ns, job: [])
    monkeypatch.setattr(r, "capabilities", lambda: frozenset())
    monkeypatch.setattr(r, "kueue", lambda ns, job: None)
    monkeypatch.setattr(r, "nodes", lambda ns, pods: None)
    monkeypatch.setattr(r, "network_policies", lambda ns, job, pods: (DENY,))

    def capture(observed, *a, **k):
        raise Seen(observed)

    monkeypatch.setattr(runner_mod, "reconcile", capture)
    with pytest.raises(Seen) as got:
        r.step("ml", "j")
    observed = got.value.args[0]
    assert observed.network_policies == (DENY,) and observed.namespace_labels == {"team": "cv"}
    monkeypatch.setattr(r, "network_policies", lambda ns, job, pods: ())
    with pytest.raises(Seen) as got:
        r.step("ml", "j")
    assert got.value.args[0].namespace_labels is None and kube.reads == ["ml"]
