"""A Workload read into a plan (:mod:`disttrain.admissioncheck.workload`): the owner's
kind, the pod sets holding ranks in rank order, where Kueue placed them, the rendezvous the
job will use; and a problem naming the field for anything else, never an exception."""
import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.admissioncheck import workload as W
from disttrain.admissioncheck.topology import Domain

from .workloads import hostname_assignment, pod_set, pytorchjob, template, workload


def test_pytorchjob_master_is_rank_0_then_the_workers_on_kubeflows_port():
    plan = W.parse_workload(pytorchjob(workers=3))
    assert isinstance(plan, W.Plan)
    assert plan.kind == W.PYTORCHJOB and plan.owner == "train"
    assert [(p.name, p.first_rank, p.count) for p in plan.pod_sets] == [("master", 0, 1), ("worker", 1, 3)]
    assert plan.num_nodes == 4 and plan.master_port == 23456 and plan.socket_ifname is None
    assert plan.rank_of(0)[0].name == "master" and plan.rank_of(2) == (plan.pod_sets[1], 1)
    with pytest.raises(IndexError):
        plan.rank_of(4)


def test_pytorchjob_without_a_master_starts_at_worker_0_on_the_default_port():
    plan = W.parse_workload(pytorchjob(workers=2, master=False))
    assert [p.name for p in plan.pod_sets] == ["worker"] and plan.pod_sets[0].first_rank == 0
    assert plan.master_port == W.PYTORCHJOB_DEFAULT_PORT


def test_trainjob_ranks_are_the_node_pod_set_only():
    wl = workload("TrainJob", [pod_set("dataset-initializer", 1, template("init")),
                               pod_set("node", 4, template("node", env=[{"name": "PET_MASTER_PORT", "value": "29400"}]))])
    plan = W.parse_workload(wl)
    assert [p.name for p in plan.pod_sets] == ["node"] and plan.others == ("dataset-initializer",)
    assert plan.num_nodes == 4 and plan.master_port == 29400 and plan.pod_sets[0].trainer == "node"


def test_jobset_every_replicated_job_in_order_and_the_job_s_own_interface():
    env = [{"name": "MASTER_PORT", "value": "3000"}, {"name": "NCCL_SOCKET_IFNAME", "value": "eth1"}]
    wl = workload("JobSet", [pod_set("leader", 1, template("trainer", env=env)), pod_set("workers", 2, template("trainer"))])
    plan = W.parse_workload(wl)
    assert [(p.name, p.first_rank) for p in plan.pod_sets] == [("leader", 0), ("workers", 1)]
    assert plan.master_port == 3000 and plan.socket_ifname == "eth1"


def test_job_defaults_to_torchruns_port_and_its_pod_set_main():
    plan = W.parse_workload(workload("Job", [{"count": 2, "template": template("trainer")}]))
    assert plan.kind == W.JOB and plan.pod_sets[0].name == "main"
    assert plan.master_port == W.TORCHRUN_DEFAULT_PORT and plan.num_nodes == 2


def test_the_admission_gives_flavors_partial_counts_and_the_topology_domains():
    wl = pytorchjob(workers=3, admission=[hostname_assignment("master", ["n0"]),
                                          {**hostname_assignment("worker", ["n1", "n2"]), "count": 2}])
    plan = W.parse_workload(wl)
    worker = plan.pod_sets[1]
    assert worker.count == 2 and plan.num_nodes == 3  # partial admission: Kueue's count wins
    assert worker.flavors == {"cpu": "default-flavor"}
    assert worker.domains == (Domain({"kubernetes.io/hostname": "n1"}, 1), Domain({"kubernetes.io/hostname": "n2"}, 1))


def test_the_plan_holds_a_copy_of_the_template():
    wl = pytorchjob()
    plan = W.parse_workload(wl)
    wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["image"] = "changed"
    assert plan.pod_sets[0].template["spec"]["containers"][0]["image"] == "train:1"


def _with(wl, path, value):
    wl = copy.deepcopy(wl)
    node = wl
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return wl


BASE = pytorchjob(workers=1)


@pytest.mark.parametrize("wl, reason, field", [
    (_with(BASE, ("metadata", "ownerReferences"), []), W.OWNER_UNSUPPORTED, "metadata.ownerReferences"),
    (_with(BASE, ("metadata", "ownerReferences", 0, "kind"), "MPIJob"), W.OWNER_UNSUPPORTED, "metadata.ownerReferences"),
    (_with(BASE, ("spec", "podSets", 1, "count"), "3"), W.WORKLOAD_UNREADABLE, "spec.podSets[1].count"),
    (_with(BASE, ("spec", "podSets", 0, "template"), None), W.WORKLOAD_UNREADABLE, "spec.podSets[0].template.spec"),
    (_with(BASE, ("spec", "podSets"), [pod_set("launcher", 1)]), W.NO_RANK_POD_SET, "spec.podSets"),
    (_with(_with(BASE, ("spec", "podSets", 0, "count"), 0), ("spec", "podSets", 1, "count"), 0),
     W.NO_RANK_POD_SET, "spec.podSets"),
    (_with(BASE, ("spec", "podSets", 0, "template", "spec", "containers"),
           [{"name": "a"}, {"name": "b"}]), W.TRAINER_UNKNOWN, "spec.podSets[0].template.spec.containers"),
    (_with(BASE, ("spec", "podSets", 0, "template", "spec", "containers", 0, "ports", 0, "containerPort"), 70000),
     W.RENDEZVOUS_UNREADABLE, "spec.podSets[0].template.spec.containers[pytorch]"),
    (workload("Job", [pod_set("main", 2, template("t", env=[{"name": "MASTER_PORT", "valueFrom": {}}]))]),
     W.RENDEZVOUS_UNREADABLE, "spec.podSets[0].template.spec.containers[t].env[MASTER_PORT]"),
    (workload("Job", [pod_set("main", 2, template("t", env=[{"name": "NCCL_SOCKET_IFNAME", "valueFrom": {}}]))]),
     W.RENDEZVOUS_UNREADABLE, "spec.podSets[0].template.spec.containers[t].env[NCCL_SOCKET_IFNAME]"),
    (_with(BASE, ("status",), {"admission": {"podSetAssignments": {}}}), W.WORKLOAD_UNREADABLE,
     "status.admission.podSetAssignments"),
    (_with(BASE, ("status",), {"admission": {"podSetAssignments": [{"name": "worker", "topologyAssignment": {
        "levels": ["h"], "slices": [{"domainCount": 1}]}}]}}), W.WORKLOAD_UNREADABLE,
     "status.admission.podSetAssignments[0].topologyAssignment.slices[0].valuesPerLevel"),
    (_with(BASE, ("metadata", "uid"), None), W.WORKLOAD_UNREADABLE, "metadata.uid"),
])
def test_each_unreadable_field_is_a_problem_naming_it(wl, reason, field):
    got = W.parse_workload(wl)
    assert isinstance(got, W.Problem), got
    assert (got.reason, got.field) == (reason, field)
    assert got.message.startswith(field + ": ") and len(got.message) <= 400


def test_a_field_path_built_from_long_names_is_cut_and_the_message_still_names_it():
    name = "c" * 1000
    wl = workload("Job", [pod_set("main", 2, template(name, env=[{"name": "MASTER_PORT", "valueFrom": {}}]))])
    got = W.parse_workload(wl)
    assert got.reason == W.RENDEZVOUS_UNREADABLE and len(got.field) == W.FIELD_ROOM
    assert got.message.startswith(got.field) and len(got.message) <= 400


def test_a_pod_set_named_twice_holds_its_ranks_once():
    wl = workload("JobSet", [pod_set("w", 2, template("trainer")), pod_set("w", 3, template("trainer"))])
    plan = W.parse_workload(wl)
    assert [(p.name, p.count) for p in plan.pod_sets] == [("w", 2)] and plan.num_nodes == 2


# ---- generated: any JSON-ish value, and the real shapes mutated ---------------------------

# short strings, and now and then one longer than a message (names end up in field paths)
JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=8)
                    | st.text(alphabet="ab-", min_size=390, max_size=420),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=20)
SEEDS = [pytorchjob(workers=2, admission=[hostname_assignment("worker", ["a", "b"])]),
         workload("TrainJob", [pod_set("node", 2, template("node"))]),
         workload("JobSet", [pod_set("w", 2, template("trainer", env=[{"name": "MASTER_PORT", "value": "1"}]))]),
         workload("Job", [pod_set("main", 3, template("trainer"))])]


def _paths(obj, prefix=()):
    yield prefix
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


@st.composite
def mutated(draw):
    wl = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(wl) if p]
        path = draw(st.sampled_from(paths))
        node = wl
        for key in path[:-1]:
            node = node[key]
        if draw(st.booleans()):
            node[path[-1]] = draw(JSON)
        elif isinstance(node, dict):
            del node[path[-1]]
        else:
            node.pop(path[-1])
    return wl


def _total(wl):
    got = W.parse_workload(wl)
    assert isinstance(got, (W.Plan, W.Problem))
    if isinstance(got, W.Problem):
        assert got.reason in {W.WORKLOAD_UNREADABLE, W.OWNER_UNSUPPORTED, W.NO_RANK_POD_SET,
                              W.RENDEZVOUS_UNREADABLE, W.TRAINER_UNKNOWN}
        assert got.field and got.message.startswith(got.field) and len(got.message) <= 400
    else:
        assert 1 <= got.num_nodes <= W.MAX_RANKS and 1 <= got.master_port <= 65535
        assert [p.first_rank for p in got.pod_sets] == [sum(q.count for q in got.pod_sets[:i])
                                                        for i in range(len(got.pod_sets))]


@given(mutated())
def test_a_mutated_workload_is_a_plan_or_a_problem_naming_a_field(wl):
    _total(wl)


@given(JSON)
def test_any_value_is_a_plan_or_a_problem_naming_a_field(value):
    _total(value)
