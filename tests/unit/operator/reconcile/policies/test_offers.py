"""Resources no node offers (:mod:`disttrain.reconcile.policies.offers`): a pod the scheduler
finds ``Insufficient X`` for, where no node's allocatable has X (or none enough), is said
within seconds, fails after the schedule timeout, and waits while a node autoscaler adds
a node; a resource some node offers, busy or not, waits as before."""

from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given as given_
from hypothesis import strategies as st

from disttrain.api import constants as C
from disttrain.api.quantity import parse_quantity
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import offers, probing, training
from disttrain.reconcile.step import NodeOffers, Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, spec_of, table
from tests.support.fixtures import pod
from tests.support.reconcile import NOW

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
GPU = "nvidia.com/gpu"
NO_GPU = ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
          "3 No preemption victims found for incoming pod.")
SINCE = "2026-11-30T11:59:50Z"  # the pods became unschedulable 10 s before NOW
CPU_NODES = NodeOffers(tuple((f"node-{x}", {"cpu": "8", "memory": "32Gi", "pods": "110"}) for x in "abc"))


def nodes(*allocatable: dict, complete: bool = True, autoscaler: dict = None) -> NodeOffers:
    """Nodes node-a, node-b, ... with these allocatable maps."""
    return NodeOffers(tuple((f"node-{chr(97 + i)}", a) for i, a in enumerate(allocatable)), complete,
                      autoscaler or {})


def asking(name, role, rank, message=NO_GPU, since=SINCE, limits=None, requests=None, attempt=1):
    """A pod of the job whose container asks for ``limits``/``requests`` (default: one GPU),
    unschedulable since ``since`` with the scheduler's ``message``."""
    p = pod(name, role, rank, container="trainer", attempt=attempt)
    p["spec"]["containers"][0]["resources"] = {"limits": {GPU: "1"} if limits is None else limits,
                                               **({"requests": requests} if requests else {})}
    if message:
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": message, "lastTransitionTime": since}]
    return p


def probes(**kw):
    return [asking(f"j-probe-{r}", C.ROLE_PROBE, r, **kw) for r in range(2)]


def workers(**kw):
    return [asking(f"j-worker-{r}", C.ROLE_WORKER, r, attempt=0, **kw) for r in range(2)]


GANG_HELD = "minCount (2) cannot be satisfied: 0 scheduled, 1 remaining"


@table(
    ("a gang (the workload API's PodGroup) holds every member: the gang's words hide the GPU no "
     "node offers, which is found from the pod's own requests (dry run of the real proving ground)",
     given().probing().with_pods(*probes(message=GANG_HELD)).observing(nodes=CPU_NODES),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.RESOURCE_NOT_OFFERED)},
          says={C.PROBES_SCHEDULED: "no node offers nvidia.com/gpu (0/3 nodes have it; the pod requests 1)"})),
    ("a gang holds its members, and what they ask every node offers: no verdict of offers",
     given().probing().with_pods(*probes(message=GANG_HELD, limits={"cpu": "2"})).observing(nodes=CPU_NODES),
     Want(Outcome.CONTINUE, {C.VALIDATED: (UNK, V.PROBING)},
          more=lambda s: (cond.get(s.status["conditions"], C.PROBES_SCHEDULED) or {}).get("reason")
          != V.RESOURCE_NOT_OFFERED)),
    ("GPU asked, no node offers it: said at once, the timeout runs",
     given().probing().with_pods(*probes()).observing(nodes=CPU_NODES),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.RESOURCE_NOT_OFFERED), C.VALIDATED: (UNK, V.PROBING)},
          says={C.PROBES_SCHEDULED: "no node offers nvidia.com/gpu (0/3 nodes have it; the pod requests 1): "
                                    "ranks 0, 1 cannot be placed; add nodes whose device plugin advertises "
                                    "nvidia.com/gpu, or remove the request in spec.template; the job fails at "
                                    "2026-11-30T12:04:50Z (runPolicy.schedulingPolicy.scheduleTimeoutSeconds=300) "
                                    "unless a node autoscaler adds such a node"},
          requeue=290.0)),
    ("GPU asked, no node offers it, past the default timeout: the preflight failed",
     given().probing().with_pods(*probes()).observing(nodes=CPU_NODES).after(291),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.RESOURCE_NOT_OFFERED),
                             C.VALIDATED: (FALSE, V.RESOURCE_NOT_OFFERED), C.FAILED: (TRUE, V.PREFLIGHT_FAILED)},
          says={C.FAILED: "no node offers nvidia.com/gpu (0/3 nodes have it",
                C.VALIDATED: "no such node came within runPolicy.schedulingPolicy.scheduleTimeoutSeconds=300"})),
    ("scheduleTimeoutSeconds sets the timeout",
     given().probing().run_policy(schedulingPolicy={"scheduleTimeoutSeconds": 5}).with_pods(*probes())
     .observing(nodes=CPU_NODES),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.RESOURCE_NOT_OFFERED)},
          says={C.PROBES_SCHEDULED: "scheduleTimeoutSeconds=5"})),
    ("a node reports 0 GPUs: not an offer",
     given().probing().with_pods(*probes()).observing(nodes=nodes({GPU: "0", "cpu": "8"}, {"cpu": "8"})),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.RESOURCE_NOT_OFFERED)},
          says={C.PROBES_SCHEDULED: "(0/2 nodes have it; the pod requests 1)"})),
    ("one node offers fewer than asked: named with its offer",
     given().probing().with_pods(*probes(limits={GPU: "4"},
                                          message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."))
     .observing(nodes=nodes({GPU: "2"}, {"cpu": "8"}, {"cpu": "8"})),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.RESOURCE_NOT_OFFERED)},
          says={C.PROBES_SCHEDULED: "no node offers 4 nvidia.com/gpu (1/3 nodes have it, at most 2: node-a: 2; "
                                    "the pod requests 4): ranks 0, 1 cannot be placed; add nodes whose device "
                                    "plugin advertises nvidia.com/gpu, or lower the request"})),
    ("hugepages no node reserved",
     given().probing().with_pods(*probes(limits={"hugepages-2Mi": "1Gi", "memory": "2Gi"},
                                          message="0/3 nodes are available: 3 Insufficient hugepages-2Mi."))
     .observing(nodes=CPU_NODES),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.RESOURCE_NOT_OFFERED)},
          says={C.PROBES_SCHEDULED: "no node offers hugepages-2Mi (0/3 nodes have it; the pod requests "
                                    "1Gi): ranks 0, 1 cannot be placed; reserve hugepages-2Mi on the "
                                    "nodes (vm.nr_hugepages"})),
    ("an extended resource some nodes offer, busy: still WaitingForResources",
     given().probing().with_pods(*probes(limits={"rdma/hca": "1"},
                                          message="0/3 nodes are available: 2 Insufficient rdma/hca, 1 node(s) "
                                                  "didn't match pod anti-affinity rules."))
     .observing(nodes=nodes({"rdma/hca": "1k"}, {"rdma/hca": "1k"}, {"cpu": "8"})),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES)},
          says={C.PROBES_SCHEDULED: "waiting for capacity"})),
    ("busy, days later: still waiting, never failed",
     given().probing().with_pods(*probes(limits={"rdma/hca": "1"}, message="0/3 nodes are available: 3 "
                                                 "Insufficient rdma/hca."))
     .observing(nodes=nodes({"rdma/hca": "1"}, {"rdma/hca": "1"}, {"rdma/hca": "1"})).after(3 * 86400),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES), C.FAILED: (UNK, V.TRAINING_PENDING)})),
    ("TriggeredScaleUp: keeps waiting past the timeout",
     given().probing().with_pods(*probes()).after(3600).observing(nodes=nodes(
         {"cpu": "8"}, {"cpu": "8"}, autoscaler={"j-probe-1": ("TriggeredScaleUp",
                                                             "pod triggered scale-up: [{gpu-pool 0->2 (max: 4)}]")})),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES), C.FAILED: (UNK, V.TRAINING_PENDING)},
          says={C.PROBES_SCHEDULED: "a node autoscaler is adding a node (TriggeredScaleUp: pod triggered "
                                    "scale-up: [{gpu-pool 0->2 (max: 4)}])"})),
    ("NotTriggerScaleUp: the timeout runs",
     given().probing().with_pods(*probes()).after(3600).observing(nodes=nodes(
         {"cpu": "8"}, autoscaler={"j-probe-0": ("NotTriggerScaleUp", "pod didn't trigger scale-up: ")})),
     Want(Outcome.FINISHED, {C.PROBES_SCHEDULED: (FALSE, V.RESOURCE_NOT_OFFERED)})),
    ("the nodes were not all read (page bound): no verdict, waiting as before",
     given().probing().with_pods(*probes()).after(3600).observing(nodes=nodes({"cpu": "8"}, complete=False)),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES)})),
    ("the nodes could not be read (no RBAC): waiting as before",
     given().probing().with_pods(*probes()).after(3600),
     Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.WAITING_FOR_RESOURCES)})),
)
def test_probes(name, given, want):
    check(probing.apply, given, want)


@table(
    ("without probes, GPU asked, no node offers it: said, then the job failed",
     given().without_probes().with_pods(*workers()).observing(nodes=CPU_NODES),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (UNK, V.RESOURCE_NOT_OFFERED)}, requeue=290.0,
          says={C.TRAINING_STARTED: "no node offers nvidia.com/gpu (0/3 nodes have it; the pod requests 1): "
                                    "ranks 0, 1 cannot be placed"})),
    ("without probes, past the timeout: Failed with ResourceNotOffered",
     given().without_probes().with_pods(*workers()).observing(nodes=CPU_NODES).after(300),
     Want(Outcome.FINISHED, {C.TRAINING_STARTED: (FALSE, V.RESOURCE_NOT_OFFERED),
                             C.FAILED: (TRUE, V.RESOURCE_NOT_OFFERED)})),
    ("without probes, scaling up: waits",
     given().without_probes().with_pods(*workers()).after(900).observing(nodes=nodes(
         {"cpu": "8"}, autoscaler={"j-worker-0": ("Nominated", "Pod should schedule on: nodeclaim/gpu-x")})),
     Want(Outcome.CONTINUE, {C.TRAINING_STARTED: (UNK, V.WAITING_FOR_RESOURCES)},
          says={C.TRAINING_STARTED: "Nominated: Pod should schedule on: nodeclaim/gpu-x"})),
)
def test_training(name, given, want):
    check(training.apply, given, want)


@pytest.mark.parametrize("message,want", [
    (NO_GPU, ["nvidia.com/gpu"]),
    ("0/5 nodes are available: 2 Insufficient cpu, 3 Insufficient hugepages-1Gi, 1 Insufficient cpu.",
     ["cpu", "hugepages-1Gi"]),
    ("0/2 nodes are available: 2 node(s) had untolerated taint {gpu: true}. preemption: 2 Insufficient cpu", []),
    ("garbage", []),
])
def test_insufficient_reads_the_first_sentence(message, want):
    assert offers.insufficient(message) == want


def test_pod_requests_counts_sidecars_init_containers_and_overhead():
    p = {"spec": {"containers": [{"resources": {"limits": {GPU: "2"}}}, {"resources": {"requests": {GPU: "1"},
                                                                                           "limits": {GPU: "1"}}}],
                  "initContainers": [{"restartPolicy": "Always", "resources": {"limits": {GPU: "1"}}},
                                     {"resources": {"limits": {GPU: "8"}}}],
                  "overhead": {GPU: "1"}}}
    # the plain init container runs beside the sidecar started before it: max(2 + 1 + 1, 8 + 1) + 1
    assert offers.pod_requests(p, GPU) == Decimal(10)
    p["spec"]["initContainers"].pop()
    assert offers.pod_requests(p, GPU) == Decimal(5)
    assert offers.pod_requests({"spec": {"containers": [{"resources": {"requests": {"cpu": "500m"}}}]}},
                               "cpu") == Decimal("0.5")
    assert offers.pod_requests({"spec": "x"}, GPU) == 0 and offers.pod_requests(None, GPU) == 0


def test_cpu_beyond_the_largest_node_is_not_offered():
    p = asking("j-probe-0", C.ROLE_PROBE, 0, requests={"cpu": "64"}, limits={},
               message="0/2 nodes are available: 2 Insufficient cpu.")
    found = offers.find([(0, p, offers.observe.unschedulable(p))], nodes({"cpu": "15500m"}, {"cpu": "8"}),
                        spec_of(), NOW)
    assert found is not None and not found.expired
    assert found.message.startswith("no node offers 64 cpu (2/2 nodes have it, at most 15.5: node-a: 15.5, "
                                    "node-b: 8; the pod requests 64): rank 0 cannot be placed; add nodes with "
                                    "more allocatable cpu, or lower the request")


def test_the_latest_autoscaler_word_wins():
    ev = [{"reason": "TriggeredScaleUp", "message": "up", "lastTimestamp": "2026-11-30T11:00:00Z"},
          {"reason": "NotTriggerScaleUp", "message": "no", "lastTimestamp": "2026-11-30T11:05:00Z"},
          {"reason": "Scheduled", "message": "x", "lastTimestamp": "2026-11-30T11:09:00Z"},
          {"reason": "TriggeredScaleUp", "message": "?", "lastTimestamp": None}]
    assert offers.autoscaler_word(ev) == ("NotTriggerScaleUp", "no")
    ev.append({"reason": "TriggeredScaleUp", "message": "again", "eventTime": "2026-11-30T11:06:00.000000Z"})
    assert offers.autoscaler_word(ev) == ("TriggeredScaleUp", "again")
    assert offers.autoscaler_word([]) is None and offers.autoscaler_word(["x", None, {}]) is None


# ---- generated: nodes' allocatable and the scheduler's words ------------------------------
RESOURCES = ["nvidia.com/gpu", "hugepages-2Mi", "cpu", "example.com/foo", "rdma/hca"]
valid = st.sampled_from(["1", "2", "8", "500m", "1Gi", "1k", "1e3", "0"])
quantity = st.one_of(valid, valid, st.sampled_from(["-1", "x", "", "1.5.5"]), st.integers(-2, 10), st.none())
allocatable = st.one_of(st.dictionaries(st.sampled_from(RESOURCES), quantity, max_size=4), st.none())
known = st.builds(lambda n, r: f"{n} Insufficient {r}", st.integers(0, 9), st.sampled_from(RESOURCES))
item = st.one_of(known, known, st.builds(lambda r: f"1 Insufficient {r}", st.text(max_size=12)),
                 st.sampled_from(["1 node(s) didn't match pod anti-affinity rules",
                                  "2 node(s) had untolerated taint {gpu: true}", "1 Too many pods"]))
structured = st.builds(lambda n, items, tail: f"0/{n} nodes are available: {', '.join(items)}.{tail}",
                       st.integers(0, 9), st.lists(item, max_size=3),
                       st.sampled_from(["", " preemption: 0/3 nodes are available: 3 Insufficient cpu."]))
message = st.one_of(structured, structured, structured, st.text(max_size=60))
amounts = st.dictionaries(st.sampled_from(RESOURCES), quantity, max_size=3)
container = st.one_of(st.fixed_dictionaries({"resources": st.fixed_dictionaries(
    {}, optional={"limits": amounts, "requests": amounts})}), st.fixed_dictionaries({"resources": st.text(max_size=3)}))
# a pod that asks for R and a scheduler that finds R insufficient, most of the time
asked = st.builds(lambda r, q, n, others, msg: ([{"resources": {"limits": {r: q}}}] + others,
                                                f"0/{n} nodes are available: {n} Insufficient {r}." if msg else msg),
                  st.sampled_from(RESOURCES), valid, st.integers(1, 6), st.lists(container, max_size=2),
                  st.one_of(st.just(True), st.just(True), message))


@given_(nodes_=st.lists(allocatable, max_size=6), complete=st.booleans(),
        pods=st.lists(st.one_of(asked, asked, st.tuples(st.lists(container, max_size=3), message)),
                     min_size=1, max_size=3),
        word=st.sampled_from([None, "TriggeredScaleUp", "NotTriggerScaleUp", "Nominated"]),
        after=st.integers(0, 1000))
def test_generated_never_raises_and_says_no_node_offers_only_when_none_does(nodes_, complete, pods, word, after):
    read = NodeOffers(tuple((f"node-{i}", a) for i, a in enumerate(nodes_)), complete,
                      {"j-probe-0": (word, "m")} if word else {})
    unplaced = []
    for r, (containers, msg) in enumerate(pods):
        p = pod(f"j-probe-{r}", C.ROLE_PROBE, r)
        p["spec"]["containers"] = containers
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": msg, "lastTransitionTime": SINCE}]
        unplaced.append((r, p, msg))
    found = offers.find(unplaced, read, spec_of(), NOW + timedelta(seconds=after))
    if found is None:
        return
    assert complete and nodes_, "said without every node read"
    assert found.message.startswith("no node offers ")
    assert found.scaling == (word in ("TriggeredScaleUp", "Nominated") and unplaced[0][0] == 0
                             and bool(offers.shortages(unplaced[0][1], unplaced[0][2], read)))
    assert not (found.expired and found.scaling)
    for r, p, msg in unplaced:
        for short in offers.shortages(p, msg, read):
            assert short.resource in offers.insufficient(msg)  # the scheduler named it
            req = offers.pod_requests(p, short.resource)
            assert req > 0 and short.requests == req
            for a in nodes_:  # truly no node offers as much as one pod requests
                q = parse_quantity(a.get(short.resource)) if isinstance(a, dict) else None
                assert q is None or q < req
            assert f"no node offers {'' if not short.offers else offers._num(req, short.resource) + ' '}{short.resource} (" \
                in found.message or "more resource(s) no node offers" in found.message
    assert len(found.message) <= 400
    assert ("a node autoscaler is adding a node" if found.scaling else "scheduleTimeoutSeconds") in found.message


@pytest.mark.parametrize("count, name_len", [(2, 5), (6, 20), (12, 40), (30, 60)])
def test_many_resources_no_node_offers_keep_the_fix_and_the_deadline(count, name_len):
    """However many resources no node offers, the message stays within 400 characters with
    the fix and what happens next whole; the resources left out are counted."""
    names = [f"example.com/{'r' * (name_len - 4)}{i:03d}" for i in range(count)]
    p = asking("j-probe-0", C.ROLE_PROBE, 0, limits={n: "1" for n in names},
               message="0/3 nodes are available: " + ", ".join(f"3 Insufficient {n}" for n in names) + ".")
    found = offers.find([(0, p, offers.observe.unschedulable(p))], CPU_NODES, spec_of(), NOW)
    assert found is not None
    m = found.message
    assert len(m) <= 400, (len(m), m)
    assert m.startswith(f"no node offers {names[0]} (0/3 nodes have it" if name_len < 60 else "no node offers")
    assert "add nodes whose device plugin advertises" in m and "scheduleTimeoutSeconds=300" in m, m
    shown = sum(n in m for n in names)
    assert shown == count or f"+{count - shown + 1} more resource(s)" in m or f"+{count - shown} more resource(s)" in m, m


TAINTED = NodeOffers((("node-a", {"cpu": "8"}), ("node-b", {"cpu": "8"}), ("node-c", {GPU: "4"})), True, {},
                     {"node-c": ({"gpu": "a100"}, [{"key": "gpu", "value": "true", "effect": "NoSchedule"}])})


@pytest.mark.parametrize("tolerations, selector, want", [
    (None, None, "node-c (taint gpu=true:NoSchedule)"),
    ([{"key": "gpu", "operator": "Exists"}], None, None),  # tolerated: node-c is busy, wait
    ([{"key": "gpu", "value": "true", "effect": "NoSchedule"}], {"gpu": "h100"}, "node-c (nodeSelector gpu=h100)"),
    ([{"operator": "Exists"}], {"gpu": "a100"}, None),
    ([{"key": "gpu", "value": "false"}], None, "node-c (taint gpu=true:NoSchedule)"),
])
def test_a_resource_only_on_nodes_the_pod_may_not_use_is_not_offered(tolerations, selector, want):
    """The scheduler says Insufficient nvidia.com/gpu for node-a and node-b and rules node-c
    out by its taint or the pod's nodeSelector: the GPU is offered to no pod of the job, so
    the job says so (naming node-c and why) rather than wait for ever; a pod that may use
    node-c only waits for its GPUs."""
    p = asking("j-probe-0", C.ROLE_PROBE, 0,
               message="0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint.")
    if tolerations:
        p["spec"]["tolerations"] = tolerations
    if selector:
        p["spec"]["nodeSelector"] = selector
    found = offers.find([(0, p, offers.observe.unschedulable(p))], TAINTED, spec_of(), NOW)
    if want is None:
        assert found is None
        return
    assert found is not None and want in found.message, found
    assert found.message.startswith("no node the pod may use offers 1 nvidia.com/gpu (ruled out: node-c (")
    assert "let the pods onto node-c" in found.message and len(found.message) <= 400


@pytest.mark.parametrize("ranks_nodes", [(2, 2), (3, 3)])
def test_a_resource_only_a_tainted_node_offers_is_named_when_the_nodes_left_are_too_few(ranks_nodes):
    """The scheduler rules the one node that offers example.com/foo out by its taint and says
    Insufficient for the others, so too few nodes remain for one rank each (classify:
    unschedulable); the verdict is still what no node the pods may use offers, naming the
    tainted node and the fix, not the scheduler's summary (the e2e test
    test_a_resource_only_a_tainted_node_offers_is_not_offered caught it)."""
    n, total = ranks_nodes
    taint = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    alloc = [{"cpu": "8"} for _ in range(total - 1)] + [{"cpu": "8", "example.com/foo": "4"}]
    last = f"node-{chr(97 + total - 1)}"
    offered = NodeOffers(tuple((f"node-{chr(97 + i)}", a) for i, a in enumerate(alloc)), True, {},
                         {last: ({}, taint)})
    msg = (f"0/{total} nodes are available: {total - 1} Insufficient example.com/foo, 1 node(s) had "
           "untolerated taint {dedicated: ml}.")
    pods = [asking(f"j-probe-{r}", C.ROLE_PROBE, r, limits={"example.com/foo": "1"}, message=msg) for r in range(n)]
    check(probing.apply, given().nodes(n).probing().with_pods(*pods).observing(nodes=offered),
          Want(Outcome.CONTINUE, {C.PROBES_SCHEDULED: (UNK, V.RESOURCE_NOT_OFFERED)},
               says={C.PROBES_SCHEDULED: f"ruled out: {last} (taint dedicated=ml:NoSchedule)"}))
