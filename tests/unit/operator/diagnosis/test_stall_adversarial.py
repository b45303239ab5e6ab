"""Adversarial cases for the stall verdict's link evidence and rules (issue 33 review).

Each test failed on the code as first reviewed and showed a defect: evidence lost to the
summary's size cap, ranks named on evidence that does not point at them, a healthy node
excluded on a readiness word from an earlier wait, an exception out of a pod status."""
from __future__ import annotations

from disttrain.api import constants as C
from disttrain.children import progresswatch as pw
from disttrain.diagnosis.stall import judge
from disttrain.diagnosis.stallfacts import LinkSilence
from disttrain.diagnosis.stallfacts import RankObservation as O
from disttrain.reconcile import conditions as cond
from disttrain.reconcile.policies import training
from disttrain_probe.contract import progress as P
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import given as given_
from tests.support.reconcile import workers

NOW = 10_000.0
T = 60
EVIDENCE = "loses packets: 1448 B unacked after 7 TCP retransmits"
PEER = P.TcpPeer(peer="10.101.0.12", sockets=2, unacked=1448, retrans=7)


def wait(r: int, node: str, seq, op="all_reduce") -> O:
    return O(r, node, P.IN_COLLECTIVE, seq=seq, seq_age_s=70, waiting_op=op, waiting_seq=seq, heard_age_s=1.0)


def _pod_records(n: int = 8, file: str = "/app/m/" + "x" * 35 + ".py"):
    """A pod's ``n`` ranks all waiting in all_reduce #1533 for 70 s, at a user frame whose
    line with every ``at`` is just under the 900-byte cap."""
    return [P.RankProgress(rank=r, local_rank=r, world_size=2 * n, pid=1, written_at=NOW, where=P.IN_COLLECTIVE,
                           seq=1533, seq_advanced_at=NOW - 70,
                           waiting=P.Collective("all_reduce", 1533, "started", NOW - 70),
                           stack=(P.Frame(file, 1234, "forward"),)) for r in range(n)]


# --- 1. tcp segments must not cost whole rank segments where dropping ``at`` would do -----

def test_tcp_segments_never_cost_a_rank_segment_that_dropping_frames_would_keep():
    """format_summary drops ``at`` (then ``op``) before it drops a rank; tcp segments added
    to the finished line dropped trailing rank segments instead. An 8-rank pod whose line was
    near 900 bytes loses rank 7 as soon as one tcp segment is added, though the ranks
    without ``at`` and the tcp segment take under 450 bytes."""
    line = P.summarize(_pod_records(), NOW)
    assert [s.rank for s in P.parse_summary(line)] == list(range(8))
    with_link = P.summarize(_pod_records(), NOW, [PEER])
    assert [s.rank for s in P.parse_summary(with_link)] == list(range(8)), with_link[-120:]
    assert P.parse_tcp(with_link) == [PEER]


def test_the_link_a_pods_line_carries_is_named_not_lost_to_the_ranks_its_segment_pushed_out():
    """End to end: node-a's sidecar names the lossy peer; the cut line leaves rank 7 unheard,
    and the verdict turns into StallNotAttributed ("one of those may not have joined it")
    with no candidate, the link evidence unused."""
    line = P.summarize(_pod_records(), NOW, [PEER])
    heard = {s.rank for s in P.parse_summary(line)}
    obs = [wait(r, "node-a", 1533) for r in sorted(heard)] + [wait(r, "node-b", 1533) for r in range(8, 16)]
    v = judge(obs, 16, T, NOW, [LinkSilence("node-a", "node-b", "eth1", EVIDENCE)])
    assert (v.reason, v.nodes) == (V.COLLECTIVE_STALLED, ("node-a", "node-b")), v
    assert "node-a <-> node-b on eth1 loses packets" in v.message, v.message


# --- 2. an unknown seq or op is taken for a different collective --------------------------

def test_a_waiting_rank_whose_seq_is_unknown_is_not_named_as_mismatched():
    """Ranks 0-6 wait in all_reduce #1533, rank 7 in all_reduce with no seq (``seq=-``: the
    recorder could not read it). Nothing says rank 7 is in another collective, yet it is
    the CollectivesMismatched culprit (a restart would name its node)."""
    obs = [wait(r, "node-a" if r < 4 else "node-b", 1533) for r in range(7)] + [wait(7, "node-b", None)]
    v = judge(obs, 8, T, NOW)
    assert 7 not in v.ranks and "node-b" not in v.nodes, v


def test_waiting_ranks_whose_op_is_unknown_are_not_named_as_mismatched():
    """node-b's line was cut past ``op`` (format_summary's last stage) or its Flight Recorder
    entry had no name: its ranks wait in "a collective #1533", the same seq as everyone.
    They are named the minority of CollectivesMismatched on the missing op alone."""
    obs = [wait(r, "node-a", 1533) for r in range(8)] + [wait(r, "node-b", 1533, op=None) for r in range(8, 12)]
    v = judge(obs, 12, T, NOW)
    assert v.ranks == () and v.nodes == (), v


def test_ranks_one_collective_ahead_in_the_next_op_with_a_lossy_link_are_not_named_mismatched():
    """A link that stopped mid-all_reduce #1533: the ranks that got their data went on to the
    next collective, which is a broadcast (DDP's buffers, FSDP's all_gather): #1534. The
    link evidence is there, yet ranks 6-7 are named as having taken another code path."""
    obs = ([wait(r, "node-a", 1533) for r in range(4)] + [wait(4, "node-b", 1533), wait(5, "node-b", 1533)]
           + [wait(6, "node-b", 1534, op="broadcast"), wait(7, "node-b", 1534, op="broadcast")])
    v = judge(obs, 8, T, NOW, [LinkSilence("node-a", "node-b", "eth1", EVIDENCE)])
    assert v.ranks == (), v
    assert "node-a <-> node-b" in v.message, v.message


# --- 3. a readiness word from an earlier wait is taken for the rank's state now --------------

def _watched_pods():
    pods = workers("Running", "Running")
    for p in pods:
        p["spec"]["initContainers"] = [{"name": pw.SIDECAR_NAME}]
        p["status"]["initContainerStatuses"] = [{"name": pw.SIDECAR_NAME, "ready": False, "started": True}]
    return pods


def test_a_word_from_before_the_pods_current_wait_does_not_exclude_a_healthy_node():
    """node-b's sidecar turned not Ready 30 s ago (its kubelet set Ready and ContainersReady
    False at 11:59:30: alive and reporting), but the kubelet's event spam filter (25 per
    object, then one per 5 minutes; docs/progress.md) held back its Events since: its latest
    word is from a 35 s checkpoint wait at 11:54. That word is taken as rank 1's state now:
    "stopped answering 360 s ago: its process is frozen or its node is gone", and the
    restart excludes node-b."""
    pods = _watched_pods()
    pods[1]["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-30T11:59:30Z"},
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": "2026-11-30T11:59:30Z"}]
    words = [pw.ProgressEvent("j-worker-0", "progress: r0 collective seq=1533 idle=400s op=all_reduce",
                              "2026-11-30T12:00:00Z"),
             pw.ProgressEvent("j-worker-1", "progress: r1 collective seq=1210 idle=35s op=all_reduce",
                              "2026-11-30T11:54:00Z")]
    s = given_().training().run_policy(stallTimeoutSeconds=300, onStall="Restart", backoffLimit=2)\
        .with_pods(*pods).observing(progress=words).build()
    training.apply(s)
    c = cond.get(s.conds, C.PROGRESSING)
    assert c["reason"] != V.RANK_UNRESPONSIVE, c
    assert "node-b" not in [e.get("node") for e in s.st.raw.get("excludedNodes") or []], s.st.raw


# --- 4. untrusted pod status --------------------------------------------------------------

def test_a_pod_condition_whose_type_is_not_a_string_raises_nothing():
    """_node_silent_for keys a dict by each condition's ``type``: a list there (the same
    untrusted shapes test_stallwatch feeds) raises TypeError out of the step."""
    pods = _watched_pods()
    pods[0]["status"]["initContainerStatuses"][0]["ready"] = True
    pods[0]["status"]["conditions"] = [{"type": ["Ready"], "status": "False"}]
    s = given_().training().run_policy(stallTimeoutSeconds=300).with_pods(*pods).build()
    training.apply(s)
    assert cond.get(s.conds, C.PROGRESSING) is not None

