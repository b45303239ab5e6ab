"""The probe run (:mod:`disttrain.reconcile.policies.probing`): one attempt from its pods to
the verdict's inputs, and when to stop waiting."""

import json

from disttrain.api import constants as C
from disttrain.children import observe
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import probing
from disttrain.reconcile.step import Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import pod, report
from tests.support.reconcile import finished_probes

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
BUSY = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available"
EXCLUDED = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
DENY = {"kind": "NetworkPolicy", "metadata": {"name": "default-deny"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
ADMIT_JOB = {"kind": "NetworkPolicy", "metadata": {"name": "job-peers"},
             "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {C.LABEL_JOB: "j"}}}]}]}}
TOO_FEW = "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."

# containerd 1.6's message for an image no registry serves, as the kubelet of a real node
# put it in the probe's init container status (make demo with spec.probe.image changed)
REAL_PULL_ERROR = (
    'failed to pull and unpack image "disttrain.dev/test/missing:0": failed to resolve reference '
    '"disttrain.dev/test/missing:0": failed to do request: Head '
    '"https://disttrain.dev/v2/test/missing/manifests/0": dial tcp: lookup disttrain.dev on '
    '10.96.0.10:53: no such host')


def pulling(name, node):
    """A probe pod whose kubelet cannot pull the probe image."""
    p = pod(name, C.ROLE_PROBE, int(name[-1]), node=node)
    p["status"] = {"initContainerStatuses": [{
        "name": "install-probe", "image": "disttrain.dev/test/missing:0",
        "state": {"waiting": {"reason": "ErrImagePull", "message": REAL_PULL_ERROR}}}]}
    return p


def probe(rank, node=None, phase="Pending", **kw):
    """Rank ``rank``'s probe pod of attempt 1."""
    return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase=phase, node=node, **kw)


def rank0(started_at="2026-11-30T11:59:58Z", host_ip="10.100.0.10"):
    """Rank 0's probe running on node-a."""
    return probe(0, "node-a", "Running", host_ip=host_ip, started_at=started_at)


def test_image_pull_failure_names_rank_node_and_the_cause_at_the_end():
    pods = [pulling("j-probe-0", "node-a"), pulling("j-probe-1", "node-b")]
    pull = [(r, p, observe.image_pull_error(p)) for r, p in enumerate(pods)]
    msg = probing._pull_summary(pull)
    assert msg.startswith("rank 0 on node-a, rank 1 on node-b: disttrain.dev/test/missing:0: ErrImagePull: ")
    assert msg.endswith("lookup disttrain.dev on 10.96.0.10:53: no such host")
    assert "failed to pull and unpack" not in msg and msg.count("disttrain.dev/test/missing:0") == 1
    assert len(msg) < 300
    assert observe.pull_cause("x" * 500).startswith("...") and len(observe.pull_cause("x" * 500)) == 160


@table(
    ("validated: no probe run",
     given().validated(),
     Want(Outcome.CONTINUE, {C.VALIDATED: (TRUE, "Passed")}, creates=[], more=lambda s: s.probe_run is None)),
    ("probes disabled: no probe run",
     given().without_probes(),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.NOT_CHECKED)}, creates=[])),
    ("first visit: rank 0 first",
     given(),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.PROBING)}, creates=["j-probe-0"], status={"probe": {"attempt": 1}})),
    ("rank 0 started with its address: the others, and where rank 0 is",
     given(3).with_pods(rank0()),
     Want(Outcome.CONTINUE, creates=["j-probe-1", "j-probe-2"],
          status={"rendezvous": {"masterAddr": "10.100.0.10", "masterPort": 29500}})),
    ("rank 0 on its node, its probe not started: the others wait",
     given().with_pods(rank0(started_at=None)),
     Want(Outcome.CONTINUE, creates=[], status={"rendezvous": {}})),
    ("every probe placed: ProbesScheduled True",
     given().probing().probes("Running", "Running"),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (TRUE, V.PROBES_SCHEDULED_OK), C.VALIDATED: (UNK, V.PROBING)},
          says={C.PROBES_SCHEDULED: "rank:node 0:node-a, 1:node-b"},
          more=lambda s: s.probe_run is None and s.plan.requeue_after is not None)),
    ("one probe placed: pending",
     given().probing().with_pods(rank0(), probe(1)),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.PROBES_PENDING)}, says={C.PROBES_SCHEDULED: "1/2"})),
    ("busy nodes: wait for capacity",
     given().probing().with_pods(rank0(), probe(1, unschedulable=BUSY)),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES), C.FAILED: (UNK, V.TRAINING_PENDING)},
          says={C.PROBES_SCHEDULED: "Insufficient cpu"})),
    ("the template excludes the nodes: the preflight failed",
     given().probing().with_pods(rank0(), probe(1, unschedulable=EXCLUDED)),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.PROBE_UNSCHEDULABLE),
                             C.VALIDATED: (FALSE, V.PROBE_UNSCHEDULABLE), C.FAILED: (TRUE, V.PREFLIGHT_FAILED)},
          says={C.PROBES_SCHEDULED: "select nodes by spec.template.spec.nodeSelector pool=gpu: label the nodes"})),
    ("the template's nodeSelector excludes the nodes: the message names it and the fix",
     given().probing().spec(template={"spec": {"containers": [{"name": "trainer", "image": "example/train:1"}],
                                               "nodeSelector": {"node-type": "training"}}})
     .with_pods(rank0(), probe(1, unschedulable=EXCLUDED)),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.PROBE_UNSCHEDULABLE),
                             C.VALIDATED: (FALSE, V.PROBE_UNSCHEDULABLE)},
          says={C.VALIDATED: "spec.template.spec.nodeSelector node-type=training: label the nodes"})),
    ("fewer nodes than numNodes: NotEnoughNodes",
     given(3).probing().with_pods(rank0(), probe(1, "node-b", "Running"), probe(2, unschedulable=TOO_FEW)),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.NOT_ENOUGH_NODES)},
          says={C.PROBES_SCHEDULED: "numNodes=3 needs 3 nodes, one probe per node, but only 2 could take one "
                                    "(node-a, node-b)"})),
    ("the probe image cannot be pulled: the preflight failed",
     given().probing().with_pods(pulling("j-probe-0", "node-a")),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.PROBE_IMAGE_PULL_FAILED),
                             C.VALIDATED: (FALSE, V.PROBE_IMAGE_PULL_FAILED)},
          says={C.PROBES_SCHEDULED: "rank 0 on node-a: disttrain.dev/test/missing:0: ErrImagePull"})),
    ("two ranks on one node: the anti-affinity was ignored",
     given().probing().with_pods(rank0(), probe(1, "node-a", "Running")),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.PROBE_UNSCHEDULABLE)},
          says={C.PROBES_SCHEDULED: "rank:node 0:node-a, 1:node-a"})),
    ("every probe finished: the verdict's inputs",
     given().probing().with_pods(*finished_probes()),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.PROBING)},
          more=lambda s: sorted(s.probe_run.by_rank) == [0, 1] and s.probe_run.master == "10.100.0.10")),
    ("past the probe budget: ProbeTimeout naming the pods still running",
     given().spec(probe={"timeoutSeconds": 10}).probing(started="2026-11-30T11:50:00Z").probes("Running", "Running"),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.PROBE_TIMEOUT), C.FAILED: (TRUE, V.PREFLIGHT_FAILED)},
          says={C.VALIDATED: "j-probe-0 (Running on node-a), j-probe-1 (Running on node-b)"})),
    ("past the probe budget under a NetworkPolicy that drops the job's traffic: the policy, not ProbeTimeout",
     given().spec(probe={"timeoutSeconds": 10}, network={"hostNetwork": False}).observing(network_policies=(DENY,))
     .probing(started="2026-11-30T11:50:00Z").probes("Running", "Running"),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.NETWORK_POLICY_BLOCKS),
                             C.MASTER_REACHABLE: (FALSE, V.NETWORK_POLICY_BLOCKS), C.FAILED: (TRUE, V.PREFLIGHT_FAILED)},
          says={C.VALIDATED: "NetworkPolicy default-deny in namespace ns drops TCP 29500 (rendezvous)"})),
    ("past the probe budget, a policy that admits the job's pods: ProbeTimeout",
     given().spec(probe={"timeoutSeconds": 10}, network={"hostNetwork": False})
     .observing(network_policies=(DENY, ADMIT_JOB)).probing(started="2026-11-30T11:50:00Z").probes("Running", "Running"),
     Want(Outcome.FINISHED, {C.VALIDATED: (FALSE, V.PROBE_TIMEOUT)})),
    ("the probes ended without rank 0's address: the verdict waits for it",
     given().probing().with_pods(probe(0, "node-a", "Succeeded", message=json.dumps(report(0, "node-a")), exit_code=0),
                                 finished_probes()[1]),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.MASTER_ADDR_UNKNOWN)}, says={C.VALIDATED: "status.hostIP"},
          more=lambda s: s.probe_run is None and s.plan.requeue_after == 2.0)),
    ("rank 0's address lost, the recorded one: the verdict",
     given().probing().status(rendezvous={"masterAddr": "10.100.0.10"}).with_pods(
         probe(0, "node-a", "Succeeded", message=json.dumps(report(0, "node-a")), exit_code=0), finished_probes()[1]),
     Want(Outcome.CONTINUE, more=lambda s: s.probe_run.master == "10.100.0.10")),
    ("a foreign pod holds a probe's name: wait, say so",
     given().probing().with_pods(rank0(), probe(1, owner_uid=None)),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.NAME_CONFLICT)}, creates=[],
          says={C.PROBES_SCHEDULED: "j-probe-1 exist(s) and is not this job's"})),
    ("only the last rank's name held (a deleted job's pod terminating): no rank created alone meanwhile",
     given().spec(numNodes=3).probing().with_pods(probe(2, owner_uid=None)),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.NAME_CONFLICT)}, creates=[],
          says={C.PROBES_SCHEDULED: "j-probe-2"})),
    ("a name conflict over: the probe budget starts again",
     given().probing().status(nameConflictSince="2026-11-30T11:55:00Z").probes("Running", "Running"),
     Want(Outcome.CONTINUE, status={"nameConflictSince": None,
                                    "probe": {"attempt": 1, "startTime": "2026-11-30T12:00:00Z"}})),
    ("waiting for capacity past the budget: no timeout meanwhile",
     given().spec(probe={"timeoutSeconds": 10}).probing(started="2026-11-30T11:50:00Z")
     .with_pods(rank0(), probe(1, unschedulable=BUSY)),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.PROBING), C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES)})),
    ("an older attempt's probes: deleted, their names awaited",
     given().probing(attempt=2).probes("Running", "Failed"),
     Want(Outcome.CONTINUE, creates=[], deletes=["j-probe-0", "j-probe-1"])),
)
def test_apply(name, given, want):
    check(probing.apply, given, want)


def test_a_probe_kept_off_an_excluded_node_says_so_first():
    """After a restart without node-c (a stall verdict named it), a probe the scheduler
    cannot place is said with the exclusion first: the scheduler's words only say the node
    "didn't match Pod's node affinity"."""
    excluded = [{"node": "node-c", "reason": V.RANK_UNRESPONSIVE, "restart": 1}]
    s = given(3).probing().status(excludedNodes=excluded).with_pods(
        rank0(), probe(1, "node-b", "Running"), probe(2, unschedulable=TOO_FEW)).build()
    probing.apply(s)
    c = cond.get(s.conds, C.PROBES_SCHEDULED)
    assert (c["status"], c["reason"]) == (FALSE, V.NOT_ENOUGH_NODES)
    assert c["message"].startswith("the job avoids node-c since a stall verdict named it (status.excludedNodes")
    assert "numNodes=3 needs 3 nodes" in c["message"] and len(c["message"]) <= 400
