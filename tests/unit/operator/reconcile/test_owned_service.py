"""Which headless Service a job's step observes (:func:`disttrain.reconcile.loop.owned_service_name`,
:meth:`disttrain.shell.runner.Reconciler.services`): the one the step would create, decided on
the spec it acts on. A hostNetwork job under a gang gets DNS hostnames although its spec
leaves them unset; reading the Service by the raw spec never saw it, and the step created
it again on every run (409, fed back as a failed write, the job's verdict held back: found
on the real proving ground, scenario gpu-not-offered)."""

import pytest

from disttrain.reconcile.loop import owned_service_name
from disttrain.reconcile.policies.gang import CAP_WORKLOAD_API
from disttrain.shell.runner import Reconciler
from tests.support.fixtures import job

GANG = frozenset({CAP_WORKLOAD_API})
NONE: frozenset[str] = frozenset()


@pytest.mark.parametrize("spec, caps, want", [
    ({"network": {"hostNetwork": True}}, NONE, None),
    ({"network": {"hostNetwork": True}}, GANG, "j"),  # the gang turns DNS hostnames on
    ({"network": {"hostNetwork": True, "enableDNSHostnames": False}}, GANG, None),  # auto: no gang then
    ({"network": {"hostNetwork": False}}, NONE, "j"),
    ({"network": {"hostNetwork": False, "subdomain": "mine"}}, GANG, None),  # the user's own Service
    ({"network": {"hostNetwork": True}, "runPolicy": {"schedulingPolicy": {"gang": "none"}}}, GANG, None),
    ({"numNodes": "many"}, GANG, None),  # invalid: the step says InvalidSpec, owns nothing
])
def test_owned_service_follows_the_spec_the_step_acts_on(spec, caps, want):
    body = job(**{k: v for k, v in spec.items() if k != "numNodes"})
    if "numNodes" in spec:
        body["spec"]["numNodes"] = spec["numNodes"]
    body["metadata"]["name"] = "j"
    assert owned_service_name(body, caps) == want


class FakeKube:
    def __init__(self, served):
        self.served_resources = served
        self.reads: list[tuple[str, str]] = []

    def served(self, group_version):
        return self.served_resources

    def get_services(self, namespace, name):
        self.reads.append((namespace, name))
        return [{"metadata": {"name": name}}]


@pytest.mark.parametrize("served, reads", [({"podgroups"}, [("ns", "j")]), (set(), [])])
def test_the_shell_reads_the_service_a_gang_job_owns(served, reads):
    kube = FakeKube(served)
    body = job(network={"hostNetwork": True})
    body["metadata"]["name"] = "j"
    got = Reconciler(kube).services("ns", body)
    assert kube.reads == reads and len(got) == len(reads)
