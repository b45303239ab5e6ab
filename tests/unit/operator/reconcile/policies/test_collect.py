"""The probe reports of an attempt (:func:`disttrain.reconcile.policies.verdict.collect`): one
checked outcome per rank for the verdict, or why there is none."""

import json

from disttrain.api import constants as C
from disttrain.children import kubelet, observe
from disttrain.reconcile.policies import verdict
from disttrain.reconcile.step import ProbeRun
from disttrain_probe.contract import vocabulary as V
from tests.support.builders import Want, check, given, table
from tests.support.fixtures import pod, report
from tests.support.reconcile import finished_probes


def ended(rank, message, exit_code, phase="Failed", status=None):
    """Rank ``rank``'s probe pod, ended with this termination message and exit code; ``status``:
    more of the pod's status (an eviction's reason)."""
    p = pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase=phase, node="node-b", host_ip="10.100.0.11",
            message=message, exit_code=exit_code)
    p["status"].update(status or {})
    return p


def collect(s):
    """:func:`verdict.collect` over the job's probe pods by rank."""
    return verdict.collect(s, ProbeRun(None, {observe.int_label(p, C.LABEL_RANK): p for p in s.ours}))


def rank1(error_reason=None, error="", running=False):
    """A check of rank 1's outcome (rank 0's is a good report): its error reason and a
    substring of its error (None: it has a report)."""
    def ok(outcomes):
        o0, o1 = outcomes
        if o0.report is None or o0.error or (o1.running, o1.error_reason if o1.error else None) != (running, error_reason):
            return False
        return (o1.report is not None) is (error_reason is None and not running) and error in (o1.error or "")
    return ok


GOOD0 = finished_probes()[0]
EVICTED = {"reason": "Evicted", "message": "The node was low on memory."}
CUT = json.dumps({**report(1, "node-b"), "pad": "x" * 4096})[:3072]
TRACEBACK = "starting\nTraceback (most recent call last):\n  File probe.py\nImportError: no torch"


@table(
    ("every rank reported: two reports",
     given().with_pods(*finished_probes()),
     Want(rank1())),
    ("a rank still running: marked, not waited for",
     given().with_pods(GOOD0, pod("j-probe-1", C.ROLE_PROBE, 1, phase="Running", node="node-b")),
     Want(rank1(running=True))),
    ("exited 1 without a report: the exception of the log's tail",
     given().with_pods(GOOD0, ended(1, TRACEBACK, 1)),
     Want(rank1(V.PROBE_FAILED, "j-probe-1 on node-b: probe exited 1 without a report: ImportError: no torch"))),
    ("exited 0 with no report: invalid",
     given().with_pods(GOOD0, ended(1, "hello", 0, phase="Succeeded")),
     Want(rank1(V.PROBE_REPORT_INVALID, "j-probe-1 on node-b: report invalid: not JSON"))),
    ("a broken JSON report: invalid, whatever the exit code",
     given().with_pods(GOOD0, ended(1, '{"v": 1, "rank"', 3)),
     Want(rank1(V.PROBE_REPORT_INVALID, "report invalid"))),
    ("a report the kubelet cut at a 4-container pod's share (3072 bytes): invalid, and says so",
     given().with_pods(GOOD0, ended(1, CUT, 0, phase="Succeeded")),
     Want(rank1(V.PROBE_REPORT_INVALID, "the kubelet cut it at 3072 bytes, the share of each of 4 containers"))),
    ("a broken report of another length: invalid, no word of the kubelet",
     given().with_pods(GOOD0, ended(1, CUT[:3000], 0, phase="Succeeded")),
     Want(rank1(V.PROBE_REPORT_INVALID, "report invalid: not JSON: Unterminated string"))),
    ("evicted before it reported: lost",
     given().with_pods(GOOD0, ended(1, None, None, status=EVICTED)),
     Want(rank1(V.PROBE_POD_LOST, "j-probe-1 on node-b ended before it reported (Evicted: The node was low on "
                                  "memory.)"))),
    ("a report of another job: not trusted",
     given().with_pods(GOOD0, ended(1, json.dumps(report(1, "node-b", job_uid="uid-0")), 0, phase="Succeeded")),
     Want(rank1(V.PROBE_REPORT_INVALID, "uid-0"))),
    ("a report of an older attempt: not trusted",
     given().probing(attempt=2).with_pods(
         pod("j-probe-0", C.ROLE_PROBE, 0, attempt=2, phase="Succeeded", node="node-a", host_ip="10.100.0.10",
             message=json.dumps(report(0, "node-a", attempt=2)), exit_code=0),
         pod("j-probe-1", C.ROLE_PROBE, 1, attempt=2, phase="Succeeded", node="node-b",
             message=json.dumps(report(1, "node-b", attempt=1)), exit_code=0)),
     Want(rank1(V.PROBE_REPORT_INVALID, "attempt"))),
)
def test_collect(name, given, want):
    check(collect, given, want)


def test_a_rank_the_kubelet_ended_or_lost_takes_its_outcome_from_that_not_its_report():
    """``ProbeRun.killed`` and ``.lost`` (what probing saw) decide those ranks' outcomes: the
    pessimistic report a killed probe left is dropped, a lost rank is no longer running."""
    s = given().with_pods(*finished_probes()).build()
    by_rank = {observe.int_label(p, C.LABEL_RANK): p for p in s.ours}
    oom = kubelet.ContainerFailure(kubelet.OOM, "OOMKilled", container="probe", exit_code=137, memory_limit="64Mi")
    killed = verdict.collect(s, ProbeRun(None, by_rank, killed={1: oom}))
    assert killed[0].report is not None and killed[1].report is None
    assert killed[1].error_reason == V.OOM_KILLED and "OOMKilled" in (killed[1].error or "")
    lost = verdict.collect(s, ProbeRun(None, by_rank, lost={1: "for 40s"}))
    assert lost[1].error_reason == V.PROBE_POD_LOST and not lost[1].running
    assert "node-b was lost during the probe" in (lost[1].error or "")
    assert [o.error for o in verdict.collect(s, ProbeRun(None, by_rank))] == [None, None]
