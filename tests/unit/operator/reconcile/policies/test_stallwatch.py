"""The stall watch while training (:mod:`disttrain.reconcile.policies.stallwatch`, through
:mod:`disttrain.reconcile.policies.training`): the pods it builds, Progressing from the
sidecars' readiness and words, and runPolicy.onStall."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import constants as C
from disttrain.children import progresswatch as pw
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import stallwatch, training
from disttrain.reconcile.step import Outcome
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, table
from tests.support.builders import given as given_
from tests.support.reconcile import workers

UNK, TRUE, FALSE = C.UNKNOWN, C.TRUE, C.FALSE
NOW = "2026-11-30T12:00:00Z"


def watched(*ready, said=()):
    """Running training pods whose progress sidecar is Ready (True), not Ready (False) or
    not started (None); ``said``: (rank, summary) readiness words, said at NOW."""
    pods = workers(*["Running"] * len(ready))
    for p, r in zip(pods, ready):
        p["spec"]["initContainers"] = [{"name": pw.SIDECAR_NAME}]
        p["status"]["initContainerStatuses"] = [] if r is None else [
            {"name": pw.SIDECAR_NAME, "ready": r, "started": True}]
    words = [pw.ProgressEvent(f"j-worker-{r}", text, NOW) for r, text in said]
    return pods, words


def job(*ready, said=(), **run_policy):
    pods, words = watched(*ready, said=said)
    return given_(len(ready)).training().run_policy(stallTimeoutSeconds=60, **run_policy).with_pods(*pods)\
        .observing(progress=words)


STUCK = [(1, "progress: r1 python seq=1532 idle=70s at=train.py:88(load_batch)"),
         (0, "progress: r0 collective seq=1533 idle=70s op=all_reduce")]
SLOW = [(2, "progress: straggler r2 share=0.025 median=0.875 counted=3 below=1; r2 python seq=900 idle=0s")]
WAIT = [(1, "progress: r1 python seq=1532 idle=40s at=ckpt.py:12(save)"),
        (0, "progress: r0 collective seq=1533 idle=40s op=all_reduce")]


@table(
    ("not watched (no stallTimeoutSeconds): no Progressing, no sidecar",
     given_().training().workers("Running", "Running"),
     Want(Outcome.CONTINUE, {C.PROGRESSING: None})),
    ("every sidecar Ready: advancing, looked at again in a minute for a straggler's word",
     job(True, True),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (TRUE, V.COLLECTIVES_ADVANCING)},
          more=lambda s: s.plan.requeue_after == stallwatch.STRAGGLER_RECHECK_S)),
    ("a Ready pod's word says its rank is the straggler: True Straggler naming its node",
     job(True, True, True, said=SLOW),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (TRUE, V.STRAGGLER), C.FAILED: (UNK, V.TRAINING_RUNNING)},
          says={C.PROGRESSING: "rank 2 (node-c) waits in them 2% of the time against the median rank's 88%"},
          deletes=[])),
    ("no sidecar started yet: not reported, looked at again",
     job(None, None),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (UNK, V.PROGRESS_NOT_REPORTED)},
          more=lambda s: s.plan.requeue_after == 5.0)),
    ("rank 1 in Python under the timeout: a wait, said as such",
     job(False, False, said=WAIT),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (UNK, V.RANKS_WAITING), C.FAILED: (UNK, V.TRAINING_RUNNING)},
          says={C.PROGRESSING: "rank 1 (node-b) is in Python at ckpt.py:12 (save)"}, deletes=[])),
    ("rank 1 in Python past the timeout, onStall Fail: the job fails naming it",
     job(False, False, said=STUCK, onStall="Fail"),
     Want(Outcome.FINISHED, {C.PROGRESSING: (FALSE, V.RANK_STUCK_IN_PYTHON), C.FAILED: (TRUE, V.TRAINING_STALLED)},
          says={C.FAILED: "rank 1 (node-b) is in Python at train.py:88 (load_batch)"})),
    ("past the timeout, onStall Restart with a restart left: gang restart",
     job(False, False, said=STUCK, backoffLimit=1),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (FALSE, V.RANK_STUCK_IN_PYTHON), C.TRAINING_STARTED: (UNK, V.RESTARTING)},
          deletes=["j-worker-0", "j-worker-1"], status={"restarts": 1},
          says={C.TRAINING_STARTED: "rank 1 (node-b)"})),
    ("past the timeout, onStall Restart without restarts left: Failed TrainingStalled",
     job(False, False, said=STUCK),
     Want(Outcome.FINISHED, {C.FAILED: (TRUE, V.TRAINING_STALLED)})),
    ("past the timeout, onStall Wait: only said",
     job(False, False, said=STUCK, onStall="Wait"),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (FALSE, V.RANK_STUCK_IN_PYTHON), C.FAILED: (UNK, V.TRAINING_RUNNING)},
          deletes=[])),
)
def test_stall_watch(name, given, want):
    check(training.apply, given, want)


STUCK_DETAILS = [
    {"rank": 0, "node": "node-a", "where": "collective", "seq": 1533, "op": "all_reduce", "waitingSeq": 1533,
     "idleSeconds": 70, "stale": False},
    {"rank": 1, "node": "node-b", "where": "python", "seq": 1532, "idleSeconds": 70,
     "frame": "train.py:88 (load_batch)", "stale": False}]


@table(
    ("each rank's word is kept, the culprit's frame included",
     job(False, False, said=STUCK, onStall="Wait"),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (FALSE, V.RANK_STUCK_IN_PYTHON)},
          more=lambda s: s.st.raw["progress"]["rankDetails"] == STUCK_DETAILS
          and s.st.raw["progress"]["ranks"] == [1])),
    ("ranks of Ready sidecars are kept as advancing, without detail",
     job(True, True),
     Want(Outcome.CONTINUE, {C.PROGRESSING: (TRUE, V.COLLECTIVES_ADVANCING)},
          more=lambda s: [(d["rank"], d["where"], d["idleSeconds"]) for d in s.st.raw["progress"]["rankDetails"]]
          == [(0, "advancing", 0), (1, "advancing", 0)])),
)
def test_status_keeps_each_ranks_detail(name, given, want):
    check(training.apply, given, want)


def test_watched_pods_carry_the_sidecar_and_the_wrapped_trainer():
    s = given_().run_policy(stallTimeoutSeconds=120).validated().probes("Succeeded", "Succeeded").build()
    training.apply(s)
    assert len(s.plan.creates) == 2
    for p in s.plan.creates:
        inits = [c["name"] for c in p["spec"].get("initContainers") or []]
        assert inits[:2] == [pw.INSTALL_NAME, pw.SIDECAR_NAME], inits
        trainer = next(c for c in p["spec"]["containers"] if c["name"] == "trainer")
        assert trainer["command"][:2] == ["/bin/sh", "-c"] and "torch.distributed.run" in trainer["command"]
        side = p["spec"]["initContainers"][1]
        assert side["readinessProbe"]["exec"]["command"][-1] == "30"  # half the timeout, at most 30 s
    assert cond.get(s.conds, C.PROGRESSING) is None


def test_a_trainer_without_a_command_is_said_to_be_unwatched_and_not_polled():
    """An image's entrypoint cannot be wrapped: the pods carry no recorder. Progressing says
    why once, instead of ProgressNotReported looked at again every 5 s for ever."""
    pods, _ = watched(None, None)
    for p in pods:
        p["spec"].pop("initContainers", None)
        for c in p["spec"]["containers"]:
            c.pop("command", None)
    s = given_().training().run_policy(stallTimeoutSeconds=60).with_pods(*pods).build()
    training.apply(s)
    c = cond.get(s.conds, C.PROGRESSING)
    assert (c["status"], c["reason"]) == (UNK, V.PROGRESS_NOT_REPORTED) and "no command" in c["message"]
    assert s.plan.requeue_after is None or s.plan.requeue_after > 5.0


FROZEN = [(1, "progress: r1 collective seq=1532 idle=70s op=all_reduce stale"),
          (0, "progress: r0 collective seq=1533 idle=70s op=all_reduce")]


def _excluded(s) -> list:
    return [e["node"] for e in s.status.get("excludedNodes") or []]


def test_a_restart_after_a_frozen_rank_probes_again_without_its_node():
    """RankUnresponsive names node-b: the restart records it in status.excludedNodes, says
    "without node-b", probes again (the validated placement held node-b), and every pod
    created from then on carries a required nodeAffinity NotIn node-b."""
    s = job(False, False, said=FROZEN, backoffLimit=2).build()
    training.apply(s)
    assert cond.get(s.conds, C.PROGRESSING)["reason"] == V.RANK_UNRESPONSIVE
    assert _excluded(s) == ["node-b"] and s.status["excludedNodes"][0] == {
        "node": "node-b", "reason": V.RANK_UNRESPONSIVE, "restart": 1}
    started = cond.get(s.conds, C.TRAINING_STARTED)
    assert started["reason"] == V.RESTARTING and "gang restart 1/2 without node-b after: rank 1 (node-b)" in started["message"]
    assert cond.get(s.conds, C.VALIDATED)["reason"] == V.PROBING  # probing again, whatever reprobeOnFailure says
    assert sorted(s.plan.deletes) == ["j-worker-0", "j-worker-1"]


def _not_in(pod) -> list:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [e["values"] for t in terms for e in t["matchExpressions"] if e["operator"] == "NotIn"]


def test_every_pod_created_avoids_the_excluded_nodes():
    excluded = [{"node": "node-b", "reason": V.RANK_UNRESPONSIVE, "restart": 1}, "garbled", {"node": 7}]
    s = given_().validated().probes("Succeeded", "Succeeded").status(excludedNodes=excluded).build()
    training.apply(s)
    assert s.plan.creates and all(_not_in(p) == [["node-b"]] for p in s.plan.creates)
    plain = given_().validated().probes("Succeeded", "Succeeded").build()
    training.apply(plain)
    assert plain.plan.creates and not any("NotIn" in str(p["spec"].get("affinity")) for p in plain.plan.creates)


def test_a_rank_stuck_in_python_is_restarted_on_the_same_nodes():
    """The script's own doing: no node is left out, no probe again unless the policy says so."""
    s = job(False, False, said=STUCK, backoffLimit=2).build()
    training.apply(s)
    assert _excluded(s) == [] and "without" not in cond.get(s.conds, C.TRAINING_STARTED)["message"]


def test_no_node_is_excluded_when_no_restart_is_left():
    s = job(False, False, said=FROZEN).build()
    training.apply(s)
    assert cond.get(s.conds, C.FAILED)["reason"] == V.TRAINING_STALLED and _excluded(s) == []


def _partitioned(tcp: str, said_at: str = NOW, host_ips: bool = True, nodes: int = 2, reporter: int = 0):
    """Every rank waits in all_reduce #1533; rank 0's sidecar says ``tcp`` (its segment) at
    ``said_at``; the nodes' addresses on eth1 are 10.101.0.(11+r) (status.nodes), the pods'
    hostIPs 10.100.0.(11+r)."""
    pods, _ = watched(*[False] * nodes)
    if host_ips:
        for r, p in enumerate(pods):
            p["status"]["hostIP"] = p["status"]["podIP"] = f"10.100.0.{11 + r}"
    words = [pw.ProgressEvent(f"j-worker-{r}", f"progress: {tcp + '; ' if r == reporter else ''}r{r} collective "
                              f"seq=1533 idle=70s op=all_reduce", said_at) for r in range(nodes)]
    b = given_(nodes).training().run_policy(stallTimeoutSeconds=60, onStall="Wait").with_pods(*pods)
    b.status(nodes=[{"rank": r, "name": f"node-{'abc'[r]}", "interface": "eth1", "address": f"10.101.0.{11 + r}"}
                    for r in range(nodes)])
    s = b.observing(progress=words).build()
    training.apply(s)
    return cond.get(s.conds, C.PROGRESSING)


def test_lost_packets_to_a_peer_on_the_chosen_interface_name_the_link():
    c = _partitioned("tcp peer=10.101.0.12 sockets=2 unacked=1448 retrans=7")
    assert (c["status"], c["reason"]) == (FALSE, V.COLLECTIVE_STALLED), c
    assert ("every rank waits in all_reduce #1533 for 70 s: node-a <-> node-b on eth1 loses packets: 1448 B "
            "unacked after 7 TCP retransmits") in c["message"], c["message"]
    assert "check node-a, node-b: firewall rules between them" in c["message"]


def test_the_link_reads_the_same_whichever_end_saw_the_losses():
    """Found on the real kubelets: the end that dropped reported first, node-b <-> node-a."""
    c = _partitioned("tcp peer=10.101.0.11 sockets=1 unacked=99 retrans=4", reporter=1)
    assert "node-a <-> node-b on eth1 loses packets: 99 B unacked after 4 TCP" in c["message"], c["message"]


def test_lost_packets_to_a_peers_pod_address_name_the_link_on_the_node_network():
    c = _partitioned("tcp peer=10.100.0.12 sockets=1 unacked=99 retrans=3")
    assert "node-a <-> node-b on the node network loses packets: 99 B unacked after 3 TCP" in c["message"]


def test_the_peer_common_to_every_silent_link_is_the_one_named():
    tcp = "tcp peer=10.101.0.13 sockets=1 unacked=10 retrans=5"
    c = _partitioned(tcp, nodes=3)  # only node-a's word: one link a-c
    assert "node-a <-> node-c" in c["message"] and "node-b" not in c["message"].partition("check")[2]


@pytest.mark.parametrize("tcp, said_at", [
    ("tcp peer=192.0.2.7 sockets=1 unacked=10 retrans=9", NOW),  # no node of the job
    ("tcp peer=10.101.0.11 sockets=1 unacked=10 retrans=9", NOW),  # the pod's own node
])
def test_lost_packets_that_are_no_evidence_of_a_link_between_the_jobs_nodes_name_none(tcp, said_at):
    c = _partitioned(tcp, said_at)
    assert (c["status"], c["reason"]) == (FALSE, V.COLLECTIVE_STALLED), c
    assert "nothing yet says which" in c["message"] and "<->" not in c["message"], c["message"]


def test_a_word_from_an_earlier_wait_is_no_link_evidence_and_an_old_word_of_this_wait_is():
    """The kubelet's spam filter holds back words after 25 Events: a word of this wait (said
    after the sidecar last turned not Ready) keeps its evidence however old; one said before
    tells of an earlier wait."""
    pods, _ = watched(False, False)
    for p in pods:
        p["status"]["conditions"] = [{"type": "ContainersReady", "status": "False",
                                      "lastTransitionTime": "2026-11-30T11:55:00Z"}]
    b = given_().training().with_pods(*pods).status(nodes=[
        {"rank": r, "name": f"node-{'ab'[r]}", "interface": "eth1", "address": f"10.101.0.{11 + r}"} for r in (0, 1)])
    line = "progress: tcp peer=10.101.0.12 sockets=1 unacked=10 retrans=9; r0 collective seq=1 idle=9s"
    for at, found in (("2026-11-30T11:56:00Z", 1), ("2026-11-30T11:50:00Z", 0)):
        s = b.observing(progress=[pw.ProgressEvent("j-worker-0", line, at)]).build()
        assert len(stallwatch.links(s, dict(enumerate(pods)), s.now.timestamp())) == found, at

def _node_gone(ready="False", containers_ready="True", gates=False):
    """Rank 0 waits in all_reduce #1533 for 70 s; rank 1's sidecar status still says Ready
    and its pod's Ready condition is ``ready`` (ContainersReady ``containers_ready``), set
    40 s ago."""
    pods, _ = watched(False, True)
    pods[1]["status"]["conditions"] = [
        {"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-30T11:59:20Z"},
        {"type": "ContainersReady", "status": containers_ready, "lastTransitionTime": "2026-11-30T11:50:00Z"}]
    if gates:
        pods[1]["spec"]["readinessGates"] = [{"conditionType": "example.com/ready"}]
    words = [pw.ProgressEvent("j-worker-0", "progress: r0 collective seq=1533 idle=70s op=all_reduce", NOW)]
    s = given_().training().run_policy(stallTimeoutSeconds=60, onStall="Wait").with_pods(*pods)\
        .observing(progress=words).build()
    training.apply(s)
    return cond.get(s.conds, C.PROGRESSING)


def test_a_pod_the_node_controller_marked_not_ready_is_a_rank_that_stopped_answering():
    """The kubelet of node-b is gone: its last word (sidecar Ready) stands, but the node
    lifecycle controller set the pod's Ready False (ContainersReady left True)."""
    c = _node_gone()
    assert (c["status"], c["reason"]) == (FALSE, V.RANK_UNRESPONSIVE), c
    assert c["message"].startswith("rank 1 (node-b) stopped answering 90 s ago"), c["message"]


@pytest.mark.parametrize("kw", [dict(ready="True"), dict(containers_ready="False"), dict(gates=True)])
def test_a_pod_its_kubelet_marked_not_ready_is_not_a_lost_node(kw):
    c = _node_gone(**kw)
    assert c["reason"] != V.RANK_UNRESPONSIVE, c


# --- generated: sidecar words, hand-edited status.nodes and pod statuses -------------------

_ips = st.sampled_from(["10.101.0.11", "10.101.0.12", "10.100.0.12", "192.0.2.1", "::1", "x", ""])
_tcp = st.builds(lambda ip, n, u, r: f"tcp peer={ip} sockets={n} unacked={u} retrans={r}",
                 _ips, st.integers(0, 5), st.integers(0, 10**6), st.integers(0, 50))
_words = st.lists(st.one_of(_tcp, st.sampled_from(["r0 collective seq=1533 idle=70s op=all_reduce",
                                                    "r1 python seq=1 idle=9s", "+3 more", "garbage"]),
                            st.text(max_size=30)), max_size=6).map(lambda segs: "progress: " + "; ".join(segs))
_node_entries = st.lists(st.fixed_dictionaries({}, optional={
    "rank": st.one_of(st.integers(-1, 3), st.text(max_size=2), st.none()),
    "name": st.one_of(st.sampled_from(["node-a", "node-b", "node-z"]), st.integers(), st.none()),
    "address": st.one_of(_ips, st.integers(), st.none()),
    "interface": st.one_of(st.sampled_from(["eth1", ""]), st.lists(st.integers(), max_size=1), st.none())}),
    max_size=4)
_conds = st.lists(st.one_of(st.fixed_dictionaries({
    "type": st.sampled_from(["Ready", "ContainersReady", "Other"]),
    "status": st.sampled_from(["True", "False", "Unknown", 1]),
    "lastTransitionTime": st.one_of(st.sampled_from(["2026-11-30T11:59:20Z", "yesterday", ""]), st.none())}),
    st.integers(), st.text(max_size=3)), max_size=4)


@given(words=st.lists(_words, min_size=2, max_size=2), nodes=_node_entries, conds=st.lists(_conds, min_size=2,
       max_size=2), ready=st.lists(st.booleans(), min_size=2, max_size=2),
       at=st.sampled_from([NOW, "2026-11-30T11:00:00Z", "", "not a time"]))
def test_any_words_status_and_pod_conditions_give_one_verdict_and_only_the_jobs_nodes(words, nodes, conds, ready, at):
    """Whatever the sidecars said, however status.nodes was edited and whatever conditions
    the pods carry: no exception, one Progressing line of at most 400 characters, and a
    silent link only between the job's two nodes."""
    pods, _ = watched(*ready)
    for p, c in zip(pods, conds):
        p["status"]["conditions"] = c
        p["status"]["podIP"] = p["status"]["hostIP"] = "10.100.0.12" if p is pods[1] else "10.100.0.11"
    said = [pw.ProgressEvent(f"j-worker-{r}", w, at) for r, w in enumerate(words)]
    b = given_().training().run_policy(stallTimeoutSeconds=60, onStall="Wait").with_pods(*pods)
    s = b.status(nodes=nodes).observing(progress=said).build()
    for link in stallwatch.links(s, dict(enumerate(pods)), s.now.timestamp()):
        assert {link.node_a, link.node_b} <= {"node-a", "node-b", "node-z"} and link.node_a != link.node_b
    training.apply(s)
    c = cond.get(s.conds, C.PROGRESSING)
    assert c is not None and len(c["message"]) <= 400 and "\n" not in c["message"]


def test_a_long_stall_whose_words_the_kubelet_holds_back_still_gets_its_verdict():
    """stallTimeoutSeconds 300: the sidecars turned not Ready 330 s ago and the kubelet's spam
    filter let their words through only for the first ~2 minutes; their kubelets still report
    them not Ready. The last words stand for where the ranks are (their ages count toward the
    wait, not as silence): rank 1 stuck in Python at the timeout, not "no record heard"."""
    pods, _ = watched(False, False)
    for p in pods:
        p["status"]["conditions"] = [
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T11:54:30Z"},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": "2026-11-30T11:54:30Z"}]
    words = [pw.ProgressEvent("j-worker-1", "progress: r1 python seq=1532 idle=150s at=train.py:88(load_batch)",
                              "2026-11-30T11:57:00Z"),
             pw.ProgressEvent("j-worker-0", "progress: r0 collective seq=1533 idle=150s op=all_reduce",
                              "2026-11-30T11:57:00Z")]
    s = given_().training().run_policy(stallTimeoutSeconds=300, onStall="Wait").with_pods(*pods)\
        .observing(progress=words).build()
    training.apply(s)
    c = cond.get(s.conds, C.PROGRESSING)
    assert (c["status"], c["reason"]) == (FALSE, V.RANK_STUCK_IN_PYTHON), c
    assert c["message"].startswith("rank 1 (node-b) is in Python at train.py:88 (load_batch) for 330 s"), c


def test_a_straggler_word_older_than_its_repeat_is_no_longer_a_straggler():
    pods, _ = watched(True, True, True)
    at = "2026-11-30T11:52:59Z"  # 421 s before NOW: over STRAGGLER_FRESH_S (420 s)
    old = [pw.ProgressEvent("j-worker-2", SLOW[0][1], at)]
    g = given_(3).training().run_policy(stallTimeoutSeconds=60).with_pods(*pods).observing(progress=old)
    check(training.apply, g, Want(Outcome.CONTINUE, {C.PROGRESSING: (TRUE, V.COLLECTIVES_ADVANCING)}))


def test_a_straggler_word_that_contradicts_the_rule_names_nobody():
    bad = [(2, "progress: straggler r2 share=0.500 median=0.875 counted=3 below=1; r2 python seq=9 idle=0s"),
           (1, "progress: straggler r1 share=0.025 median=0.875 counted=3 below=1; r1 python seq=9 idle=0s")]
    check(training.apply, job(True, True, True, said=bad[:1]), Want(Outcome.CONTINUE, {C.PROGRESSING: (TRUE, V.COLLECTIVES_ADVANCING)}))
    # two of three ranks saying so is more than a quarter: the shares single out nobody
    two = [(2, SLOW[0][1]), bad[1]]
    check(training.apply, job(True, True, True, said=two), Want(Outcome.CONTINUE, {C.PROGRESSING: (TRUE, V.COLLECTIVES_ADVANCING)}))


@pytest.mark.parametrize("lost", [0, 1])
def test_a_node_lost_before_its_sidecar_first_passed_is_named_from_the_others_lost_packets(lost):
    """Rank ``lost``'s sidecar last said "no records" (its node died right after training
    started); the other rank waits in all_reduce and loses packets to that node's address:
    RankUnresponsive names the rank and its node, not "none yet from rank N"."""
    pods, _ = watched(False, False)
    other = 1 - lost
    words = [pw.ProgressEvent(f"j-worker-{lost}", "progress: no records", "2026-11-30T11:59:00Z"),
             pw.ProgressEvent(f"j-worker-{other}", f"progress: tcp peer=10.101.0.{11 + lost} sockets=1 unacked=90 "
                              f"retrans=6; r{other} collective seq=1533 idle=70s op=all_reduce", NOW)]
    b = given_(2).training().run_policy(stallTimeoutSeconds=60, onStall="Wait").with_pods(*pods)
    b.status(nodes=[{"rank": r, "name": f"node-{'ab'[r]}", "interface": "eth1", "address": f"10.101.0.{11 + r}"}
                    for r in range(2)])
    s = b.observing(progress=words).build()
    training.apply(s)
    c = cond.get(s.conds, C.PROGRESSING)
    assert (c["status"], c["reason"]) == (FALSE, V.RANK_UNRESPONSIVE), c
    assert c["message"].startswith(f"rank {lost} (node-{'ab'[lost]}) is unreachable ("), c["message"]
