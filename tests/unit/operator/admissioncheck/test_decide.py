"""The admission check controller's decisions over one Workload's life (pure)."""
from __future__ import annotations

import kopf
from hypothesis import given
from hypothesis import strategies as st

from disttrain.admissioncheck import answer as A
from disttrain.admissioncheck import decide as D
from disttrain.admissioncheck import shadow as S
from disttrain.api import constants
from disttrain_probe.contract import vocabulary as V

from .checked import CHECK, NODES, checked, probe_pods, seen, shadow_of
from .workloads import pod_set, template, workload


def state_of(d: D.Decision) -> list[str]:
    return [b["status"]["admissionChecks"][0]["state"] for b in d.answers]


def test_an_awaiting_workload_gets_one_preflight_only_job_owned_by_it_and_a_pending_answer():
    wl = checked()
    d = D.decide(seen(wl))
    job = d.create
    assert job is not None and d.delete is None
    assert job["kind"] == constants.KIND and job["metadata"]["labels"] == {constants.LABEL_PREFLIGHT_ONLY: "true"}
    assert job["metadata"]["ownerReferences"][0]["uid"] == wl["metadata"]["uid"]
    assert job["spec"]["numNodes"] == 3 and job["spec"]["rendezvous"]["port"] == 23456
    assert S.workload_of(job) == wl["metadata"]["name"]
    # as the job's watch handler gets it: kopf's read-only body, a Mapping and no dict
    assert S.workload_of(kopf.Body(job)) == wl["metadata"]["name"]
    assert state_of(d) == [A.PENDING] and d.answers[0]["status"]["admissionChecks"][0]["name"] == CHECK
    assert D.decide(seen(wl)).create == job  # same name and body every time: the create is idempotent


def test_the_other_checks_of_the_workload_are_never_written():
    d = D.decide(seen(checked()))
    assert all(len(b["status"]["admissionChecks"]) == 1 for b in d.answers)
    assert {b["status"]["admissionChecks"][0]["name"] for b in d.answers} == {CHECK}


def test_a_validated_shadow_is_ready_pinning_the_job_to_the_nodes_it_labels():
    wl = checked()
    job = shadow_of(wl, "True")
    job["status"]["nodes"] = [{"rank": r, "name": n, "interface": "eth1"} for r, n in enumerate(NODES)]
    d = D.decide(seen(wl, job, probe_pods(job), labelled=("node-old",)))
    assert state_of(d) == [A.READY]
    key = D.label_key(wl)
    assert d.label_key == key and d.label == tuple(NODES) and d.unlabel == ("node-old",)
    updates = d.answers[0]["status"]["admissionChecks"][0]["podSetUpdates"]
    assert [u["nodeSelector"] for u in updates] == [{key: "true"}] * 2
    assert [u["annotations"] for u in updates] == [{A.SOCKET_IFNAME_ANNOTATION: "eth1"}] * 2
    assert d.event is not None and d.event[:2] == ("Normal", "PreflightReady")
    assert d.event_on == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train", "uid": "job-uid"}


def test_ready_waits_until_every_rank_s_probe_is_seen_on_a_node():
    wl = checked()
    job = shadow_of(wl, "True")
    d = D.decide(seen(wl, job, probe_pods(job, [0, 2])))
    assert state_of(d) == [A.PENDING] and d.label == () and d.requeue


def test_ready_is_withheld_when_a_check_condition_is_false_despite_validated():
    wl = checked()
    job = shadow_of(wl, "True", checks={V.MASTER_REACHABLE: ("False", "MasterUnreachable", "node-b cannot")})
    d = D.decide(seen(wl, job, probe_pods(job)))
    assert A.READY not in state_of(d) and d.label == ()


def test_a_node_at_fault_is_retry_with_the_verdict_in_the_message_and_an_event():
    wl = checked()
    job = shadow_of(wl, "False", reason=V.EPHEMERAL_PORTS_BLOCKED,
                    message="node-b drops connections on ports 32768-60999; open them on node-b")
    d = D.decide(seen(wl, job, probe_pods(job)))
    entry = d.answers[0]["status"]["admissionChecks"][0]
    assert entry["state"] == A.RETRY and "node-b drops" in entry["message"]
    assert entry["requeueAfterSeconds"] == A.RETRY_AFTER_SECONDS
    assert d.event is not None and d.event[:2] == ("Warning", "PreflightRetry") and d.label == ()


def test_a_job_at_fault_is_rejected():
    wl = checked()
    job = shadow_of(wl, "False", reason=V.NETWORK_POLICY_BLOCKS, message="policy deny-all drops the job's traffic")
    assert state_of(D.decide(seen(wl, job, probe_pods(job)))) == [A.REJECTED]


def test_an_answer_already_written_is_not_written_again_nor_said_again():
    wl = checked()
    job = shadow_of(wl, "False", reason=V.EPHEMERAL_PORTS_BLOCKED, message="node-b drops")
    first = D.decide(seen(wl, job, probe_pods(job)))
    assert first.event is not None
    wl["status"]["admissionChecks"][0] = dict(first.answers[0]["status"]["admissionChecks"][0], state="Pending")
    again = D.decide(seen(wl, job, probe_pods(job)))  # Kueue has not moved the state yet
    assert state_of(again) == [A.RETRY]
    wl["status"]["admissionChecks"][0] = first.answers[0]["status"]["admissionChecks"][0]
    assert D.decide(seen(wl, job, probe_pods(job))).answers == ()  # Retry: not awaiting any more
    wl = checked()
    running = shadow_of(wl)
    pending = D.decide(seen(wl, running))
    wl["status"]["admissionChecks"][0] = pending.answers[0]["status"]["admissionChecks"][0]
    again = D.decide(seen(wl, running))
    assert again.answers == () and again.event is None and again.requeue


def test_a_shadow_of_an_earlier_attempt_is_deleted_before_probing_again():
    wl = checked(retry=1)
    old = shadow_of(checked(), "False", reason=V.EPHEMERAL_PORTS_BLOCKED, message="x")
    d = D.decide(seen(wl, old, probe_pods(old)))
    assert d.delete == old["metadata"]["name"] and d.create is None and d.answers == ()
    gone = dict(old, metadata=dict(old["metadata"], deletionTimestamp="2026-12-01T12:00:00Z"))
    d = D.decide(seen(wl, gone))
    assert d.delete is None and d.create is None and d.requeue
    d = D.decide(seen(wl))
    assert d.create is not None and d.create["metadata"]["annotations"][S.ANN_ATTEMPT] == "1"


def test_a_workload_that_loses_its_quota_mid_probe_frees_the_nodes_and_keeps_labels():
    wl = checked(quota=False)
    job = shadow_of(checked())
    d = D.decide(seen(wl, job, probe_pods(job), labelled=("node-a",)))
    assert d.delete == job["metadata"]["name"] and d.answers == () and d.unlabel == ()


def test_a_finished_workload_loses_its_shadow_and_its_nodes_lose_the_label():
    wl = checked(state="Ready", finished=True)
    job = shadow_of(checked(), "True")
    d = D.decide(seen(wl, job, labelled=("node-a", "node-b")))
    assert d.delete == job["metadata"]["name"] and d.unlabel == ("node-a", "node-b")
    assert d.label_key == D.label_key(wl) and d.answers == ()


def test_a_deactivated_workload_ends_cleanly():
    wl = checked()
    wl["spec"]["active"] = False
    job = shadow_of(checked())
    d = D.decide(seen(wl, job, labelled=("node-c",)))
    assert d.delete == job["metadata"]["name"] and d.unlabel == ("node-c",) and d.answers == ()


def test_an_admitted_workload_keeps_the_label_its_pods_select_on():
    wl = checked(state="Ready")
    d = D.decide(seen(wl, labelled=("node-a",)))
    assert d.unlabel == () and d.answers == () and d.create is None


def test_a_vanished_workload_s_nodes_lose_the_label_it_was_remembered_by():
    d = D.decide(seen(None, labelled=("node-a",), key="preflight.disttrain.dev/train-pf-wluid1"))
    assert d.unlabel == ("node-a",) and d.label_key == "preflight.disttrain.dev/train-pf-wluid1"


def test_a_workload_the_check_cannot_read_is_rejected_without_probes():
    wl = checked()
    wl["metadata"]["ownerReferences"][0]["kind"] = "MPIJob"
    d = D.decide(seen(wl))
    assert state_of(d) == [A.REJECTED] and d.create is None
    assert "OwnerUnsupported" in d.answers[0]["status"]["admissionChecks"][0]["message"]


def test_pod_sets_that_land_differently_are_rejected_naming_the_pod_set():
    master = template(ports=[{"name": "pytorchjob-port", "containerPort": 23456}], nodeSelector={"pool": "cpu"})
    wl = workload("PyTorchJob", [pod_set("master", 1, master), pod_set("worker", 2, template())],
                  admission=[])
    wl["status"].update(conditions=[{"type": "QuotaReserved", "status": "True"}],
                        admissionChecks=[{"name": CHECK, "state": "Pending"}])
    d = D.decide(seen(wl))
    msg = d.answers[0]["status"]["admissionChecks"][0]["message"]
    assert state_of(d) == [A.REJECTED] and S.PODSETS_DIFFER in msg and "spec.podSets[1]" in msg


def test_a_preflight_undecided_for_too_long_is_retry():
    wl = checked()
    job = shadow_of(wl, "Unknown", reason="Probing", message="waiting", born="2026-12-01T11:00:00Z")
    d = D.decide(seen(wl, job, probe_pods(job)))
    assert state_of(d) == [A.RETRY] and "did not decide" in d.answers[0]["status"]["admissionChecks"][0]["message"]
    fresh = shadow_of(wl, "Unknown", reason="Probing", message="waiting")
    assert state_of(D.decide(seen(wl, fresh, probe_pods(fresh)))) == [A.PENDING]


def test_a_workload_without_our_check_is_left_alone():
    wl = checked()
    wl["status"]["admissionChecks"] = [{"name": "other-check", "state": "Pending"}]
    assert not D.concerned(wl, frozenset({CHECK}))
    assert D.decide(seen(wl)) == D.Decision(label_key=D.label_key(wl))


def test_the_shadow_pins_the_probes_to_the_one_topology_domain_assigned():
    from .workloads import hostname_assignment
    wl = checked()
    rack = {"name": "master", "flavors": {"cpu": "default"}, "count": 1, "topologyAssignment": {
        "levels": ["rack"], "domains": [{"values": ["r1"], "count": 1}]}}
    wl["status"]["admission"]["podSetAssignments"] = [
        rack, dict(rack, name="worker", count=2, topologyAssignment={
            "levels": ["rack"], "domains": [{"values": ["r1"], "count": 2}]})]
    job = D.decide(seen(wl)).create
    assert job is not None and job["spec"]["template"]["spec"]["nodeSelector"] == {"rack": "r1"}
    wl["status"]["admission"]["podSetAssignments"] = [hostname_assignment("master", ["n1"]),
                                                      hostname_assignment("worker", ["n2", "n3"])]
    job = D.decide(seen(wl)).create
    assert job is not None and "nodeSelector" not in job["spec"]["template"]["spec"]


def test_flavor_names_are_read_from_the_assignments():
    assert D.flavor_names(checked()) == ["default"]
    assert D.flavor_names({"status": {"admission": "garbage"}}) == []


def test_the_shadow_s_spec_is_one_the_crd_and_the_reconcile_loop_accept():
    import glob

    import jsonschema
    import yaml

    from disttrain.api.types import DistTrainingJobSpec

    from .checked import ROOT
    job = D.decide(seen(checked())).create
    assert job is not None
    (crd_path,) = glob.glob(str(ROOT / "charts" / "disttrain-operator" / "crds" / "*.yaml"))
    crd = yaml.safe_load(open(crd_path))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    jsonschema.validate(job["spec"], schema)
    spec = DistTrainingJobSpec.model_validate(job["spec"])
    assert spec.num_nodes == 3 and spec.probe.placement == "Pods"


def test_a_retry_s_nodes_are_kept_off_by_the_next_round_s_probes():
    wl = checked()
    job = shadow_of(wl, "False", reason=V.EPHEMERAL_PORTS_BLOCKED,
                    message="node-b drops connections on ports 32768-60999; open them on node-b")
    d = D.decide(seen(wl, job, probe_pods(job)))
    assert state_of(d) == [A.RETRY] and d.avoid == "node-b"
    nxt = checked(retry=1)
    nxt["metadata"]["annotations"] = {S.ANN_AVOID: d.avoid}
    body = D.decide(seen(nxt)).create
    assert body is not None
    terms = body["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-b"]} in terms[0]["matchExpressions"]
    assert S.avoid_more(nxt, ["node-b"]) is None and S.avoid_more(nxt, ["node-c"]) == "node-b,node-c"


def test_the_avoid_annotation_is_read_bounded_and_never_raises():
    assert S.avoided({"metadata": {"annotations": {S.ANN_AVOID: " a, ,b,a "}}}) == ("a", "b")
    many = ",".join(f"n{i}" for i in range(100))
    assert len(S.avoided({"metadata": {"annotations": {S.ANN_AVOID: many}}})) == S.MOST_AVOIDED
    assert S.avoided({"metadata": {"annotations": {S.ANN_AVOID: 7}}}) == () and S.avoided(None) == ()


def test_a_job_of_the_shadow_s_name_that_is_not_the_workload_s_is_never_deleted_nor_read():
    wl = checked()
    theirs = shadow_of(wl, "True")
    theirs["metadata"]["ownerReferences"] = []
    d = D.decide(seen(wl, theirs, probe_pods(theirs)))
    assert d.delete is None and d.create is None and d.label == ()
    assert state_of(d) == [A.RETRY] and "is not this check's" in d.answers[0]["status"]["admissionChecks"][0]["message"]
    gone = D.decide(seen(checked(quota=False), theirs))
    assert gone.delete is None


def test_too_few_nodes_once_the_culprits_are_kept_out_says_the_culprits_verdict_again():
    """Found on the cluster: 2 nodes, node-b's firewall named; the next round kept node-b
    out and its probes could not be placed, and the Retry said only the scheduler's
    "0/2 nodes are available ... node affinity", as if the job's selector were wrong."""
    wl = checked()
    blocked = "EphemeralPortsBlocked: node-b drops connections on ports 32768-60999; open them on node-b"
    job = shadow_of(wl, "False", reason=V.EPHEMERAL_PORTS_BLOCKED, message=blocked.split(": ", 1)[1])
    first = D.decide(seen(wl, job, probe_pods(job)))
    assert (first.avoid, first.avoid_why) == ("node-b", blocked)
    nxt = checked(retry=1)
    nxt["metadata"]["annotations"] = {S.ANN_AVOID: first.avoid, S.ANN_AVOID_WHY: first.avoid_why}
    job2 = shadow_of(nxt, "False", reason=V.PROBE_UNSCHEDULABLE,
                     message="rank 0: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector")
    d = D.decide(seen(nxt, job2, probe_pods(job2, ranks=[])))
    entry = d.answers[0]["status"]["admissionChecks"][0]
    assert entry["state"] == A.RETRY
    assert entry["message"].startswith("node-b kept out") and blocked in entry["message"]
    assert "affinity" not in entry["message"] and len(entry["message"]) <= 400
    assert (d.avoid, d.avoid_why) == ("", "")  # the next round probes every node again
    assert S.avoided({"metadata": {"annotations": {S.ANN_AVOID: d.avoid}}}) == ()


def test_unschedulable_probes_with_nothing_kept_out_are_the_scheduler_s_verdict():
    wl = checked()
    job = shadow_of(wl, "False", reason=V.PROBE_UNSCHEDULABLE, message="rank 0: 0/3 nodes are available: 3 Insufficient cpu")
    d = D.decide(seen(wl, job, probe_pods(job, ranks=[])))
    assert "Insufficient cpu" in d.answers[0]["status"]["admissionChecks"][0]["message"]
    assert d.avoid is None


@given(st.dictionaries(st.sampled_from(["node-a", "node-b", "node-c"]),
                       st.dictionaries(st.sampled_from([f"{A.LABEL_PREFIX}/j1", f"{A.LABEL_PREFIX}/j2",
                                                        f"{A.LABEL_PREFIX}/j3", "pool", f"{A.LABEL_PREFIX}x/j1"]),
                                       st.just("true"))),
       st.frozensets(st.sampled_from([f"{A.LABEL_PREFIX}/j1", f"{A.LABEL_PREFIX}/j2"])))
def test_orphan_labels_are_exactly_our_keys_no_live_workload_selects(nodes, live):
    out = D.orphan_labels(nodes, live)
    for node, labels in nodes.items():
        want = sorted(k for k in labels if k.startswith(A.LABEL_PREFIX + "/") and k not in live)
        assert out.get(node, []) == want
    assert all(out.values())  # no node listed with nothing to take off
