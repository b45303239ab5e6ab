"""The training pods go to the Pod API with server-side dry run before the first probe
(:func:`disttrain.reconcile.policies.probelaunch.check_training_pods`), through the shell
(:meth:`disttrain.shell.kube.Kube.apply`) and the simulated apiserver: a template the CRD
admitted but the Pod API refuses ends the job as InvalidPodTemplate before any pod exists,
naming the field; one it admits costs nothing."""
from __future__ import annotations

import copy

from disttrain.api import constants
from disttrain.reconcile import conditions as cond
from disttrain.shell.runner import Reconciler
from disttrain_probe.contract import vocabulary
from tests.fuzz.simapi import NS, SimApi, _error, kube_for
from tests.support.fixtures import TEMPLATE

REFUSAL = ('Pod "j-worker-0" is invalid: spec.containers[0].resources.requests: Invalid value: "4": '
           'must be less than or equal to cpu limit of 2')


def refusing_training_pods(sim: SimApi) -> list[str]:
    """Make ``sim`` refuse training pods (role worker) as the Pod API refuses requests above
    limits; returns the list the names of every pod it was sent are appended to."""
    sent: list[str] = []
    create = sim.create_namespaced_pod

    def refuse(namespace, body, dry_run=None):
        sent.append(body["metadata"]["name"])
        if body["metadata"]["labels"].get(constants.LABEL_ROLE) == constants.ROLE_WORKER:
            raise _error(422, REFUSAL)
        return create(namespace, body, dry_run=dry_run)

    sim.create_namespaced_pod = refuse  # type: ignore[method-assign]
    return sent


def test_a_training_pod_the_pod_api_refuses_ends_the_job_before_any_probe():
    sim = SimApi()
    sim.add_job({"numNodes": 2, "template": copy.deepcopy(TEMPLATE)})
    sent = refusing_training_pods(sim)
    op = Reconciler(kube_for(sim), probe_image="probe:1")
    op.step(NS, "j", now=sim.now)
    assert sent == ["j-worker-0", "j-worker-1"] and not sim.pods  # checked, nothing created
    op.step(NS, "j", now=sim.now)
    conds = sim.job()["status"]["conditions"]
    v = cond.get(conds, constants.VALIDATED)
    assert (v["status"], v["reason"]) == ("False", vocabulary.INVALID_POD_TEMPLATE), v
    assert "spec.template.spec.containers[0].resources.requests" in v["message"], v["message"]
    assert cond.get(conds, constants.FAILED)["status"] == "True"
    assert not sim.pods  # no probe pod was ever created


def test_an_admitted_template_is_checked_once_and_probes_start():
    sim = SimApi()
    sim.add_job({"numNodes": 3, "template": copy.deepcopy(TEMPLATE)})
    op = Reconciler(kube_for(sim), probe_image="probe:1")
    op.step(NS, "j", now=sim.now)
    assert sim.dry_runs == ["j-worker-0", "j-worker-1"] and list(sim.pods) == ["j-probe-0"]
    op.step(NS, "j", now=sim.now)
    assert sim.dry_runs == ["j-worker-0", "j-worker-1"]  # not sent again once probes exist
    assert not sim.violations
