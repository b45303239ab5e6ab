"""Generated container states (issue 30, item 3: the kubelet's word is evidence): every state
the kubelet reports of a probe pod (OOMKilled, a signal, ContainerCannotRun, StartError,
CreateContainerConfigError, CreateContainerError, an init container's failure, eviction,
preemption, activeDeadlineSeconds, a lost node), at every rank and probe phase, beside peers
that waited, timed out dialling it, passed or still run; and the same statuses partly missing
or malformed. A reconcile step never raises; a well-formed one is decided by the kubelet's
reason on the right node, and never names a firewall, a port or a path for it."""

import copy
import json

from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import constants as C
from disttrain.children import kubelet
from disttrain.reconcile import conditions as cond
from disttrain_probe.contract import vocabulary as V

from ..support.fixtures import job, node_name, pod, report
from ..support.reconcile import NOW, advance, step

STARTED, ENDED = "2026-11-30T11:59:40Z", "2026-11-30T11:59:55Z"
NETWORK_WORDS = ("firewall", "MasterPort", "drops", "nothing listens", "NetworkPolicy", "port 29500",
                 "intercept")
LIMITS = {"limits": {"memory": "64Mi"}}
PHASES = ("config", "inventory", "rendezvous", "connectivity", "choice", "versions", "collective", "report")

# (name, pod phase, status fields, the verdict's reason); a container's state under "probe"
# or "install-probe" (init), or the pod's own reason
STATES = [
    ("oom", "Failed", {"term": {"exitCode": 137, "reason": "OOMKilled"}}, V.OOM_KILLED),
    ("sigkill", "Failed", {"term": {"exitCode": 137, "reason": "Error"}}, V.PROBE_CONTAINER_FAILED),
    ("sigsegv", "Failed", {"term": {"exitCode": 139, "reason": "Error"}}, V.PROBE_CONTAINER_FAILED),
    ("sigterm", "Failed", {"term": {"exitCode": 143}}, V.PROBE_CONTAINER_FAILED),
    ("cannot run", "Failed", {"term": {"exitCode": 128, "reason": "ContainerCannotRun",
                                       "message": "exec: python: not found"}}, V.PROBE_CONTAINER_FAILED),
    ("start error", "Failed", {"term": {"exitCode": 128, "reason": "StartError"}}, V.PROBE_CONTAINER_FAILED),
    ("config", "Pending", {"wait": {"reason": "CreateContainerConfigError",
                                    "message": 'configmap "cfg" not found'}}, V.PROBE_CONFIG_ERROR),
    ("create", "Pending", {"wait": {"reason": "CreateContainerError", "message": "mount failed"}},
     V.PROBE_CONTAINER_FAILED),
    ("init failed", "Failed", {"init": {"exitCode": 1, "reason": "Error"}}, V.PROBE_CONTAINER_FAILED),
    ("init oom", "Failed", {"init": {"exitCode": 137, "reason": "OOMKilled"}}, V.OOM_KILLED),
    ("evicted", "Failed", {"pod": ("Evicted", "The node was low on resource: memory. Container probe was "
                                              "using 900Mi, request is 0."),
                           "term": {"exitCode": 137, "reason": "Error"}}, V.PROBE_POD_LOST),
    ("preempted", "Failed", {"pod": ("Preempting", "Preempted in order to admit critical pod")}, V.PROBE_POD_LOST),
    ("deadline", "Failed", {"pod": (kubelet.POD_DEADLINE, "Pod was active on the node longer than the "
                                                          "specified deadline")}, V.PROBE_TIMEOUT),
    ("node lost", "Running", {"pod": ("NodeLost", "Node node-x which was running pod is unresponsive")},
     V.PROBE_POD_LOST),
]


def killed_pod(rank, n, state, phase, message):
    _, pod_phase, fields, _ = state
    p = pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase=pod_phase, node=node_name(rank),
            host_ip=f"10.100.0.1{rank}", started_at=STARTED)
    p["spec"]["containers"] = [{"name": "probe", "resources": copy.deepcopy(LIMITS)}]
    rep = report(rank, node_name(rank), ok=False, world_size=n, failure={
        "reason": V.RENDEZVOUS_TIMEOUT, "phase": phase, "message": "ended without a final report"})
    rep["phase"], rep["final"] = phase, False
    raw = {"pessimistic": json.dumps(rep), "none": "", "log": "Killed"}[message]
    if "term" in fields:
        term = dict(fields["term"], finishedAt=ENDED, message=raw)
        p["status"]["containerStatuses"] = [{"name": "probe", "state": {"terminated": term}}]
    if "wait" in fields:
        p["status"]["containerStatuses"] = [{"name": "probe", "state": {"waiting": dict(fields["wait"])}}]
    if "init" in fields:
        p["status"]["initContainerStatuses"] = [{"name": "install-probe", "state": {
            "terminated": dict(fields["init"], finishedAt=ENDED)}}]
        p["status"]["containerStatuses"] = [{"name": "probe", "state": {"waiting": {"reason": "PodInitializing"}}}]
    if "pod" in fields:
        p["status"]["reason"], p["status"]["message"] = fields["pod"]
    return p


def peer(rank, n, kind):
    """A rank that only waited for the killed one, timed out dialling it, passed, or runs."""
    base = dict(host_ip=f"10.100.0.1{rank}", started_at=STARTED)
    if kind == "running":
        return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Running", node=node_name(rank), **base)
    if kind == "passed":
        rep = report(rank, node_name(rank), world_size=n)
    else:
        reason = {"waited": V.RENDEZVOUS_TIMEOUT, "timeout": V.MASTER_PORT_TIMEOUT,
                  "refused": V.MASTER_PORT_REFUSED, "allreduce": V.ALL_REDUCE_TIMEOUT}[kind]
        rep = report(rank, node_name(rank), ok=False, world_size=n, failure={
            "reason": reason, "phase": "rendezvous",
            "message": "MASTER_ADDR 10.100.0.10:29500: node-a's firewall drops it, or nothing listens there"})
        rep["master"]["hostCheck"] = {"r": "timeout"}
    return pod(f"j-probe-{rank}", C.ROLE_PROBE, rank, phase="Succeeded" if kind == "passed" else "Failed",
               node=node_name(rank), exit_code=0 if kind == "passed" else 1, message=json.dumps(rep),
               finished_at=ENDED, **base)


JUNK = st.one_of(st.none(), st.integers(-5, 300), st.text(max_size=8), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2), st.booleans())


def malform(draw, p):
    """Drop or replace some of the pod status' fields with garbage."""
    stat = p["status"]
    for key in draw(st.lists(st.sampled_from(["containerStatuses", "initContainerStatuses", "reason",
                                              "message", "conditions", "phase"]), max_size=3)):
        stat[key] = draw(JUNK)
    for cs in stat.get("containerStatuses") or [] if isinstance(stat.get("containerStatuses"), list) else []:
        term = ((cs.get("state") or {}).get("terminated")) if isinstance(cs, dict) else None
        if isinstance(term, dict):
            for key in draw(st.lists(st.sampled_from(["exitCode", "reason", "finishedAt", "message"]),
                                     max_size=2)):
                term[key] = draw(JUNK)


@st.composite
def runs(draw):
    n = draw(st.integers(2, 4))
    rank = draw(st.integers(0, n - 1))
    state = draw(st.sampled_from(STATES))
    phase = draw(st.sampled_from(PHASES))
    message = draw(st.sampled_from(["pessimistic", "none", "log"]))
    pods = [killed_pod(rank, n, state, phase, message) if r == rank else
            peer(r, n, draw(st.sampled_from(["running", "passed", "waited", "timeout", "refused", "allreduce"])))
            for r in range(n)]
    malformed = draw(st.booleans())
    if malformed:
        malform(draw, pods[rank])
    return n, rank, state, pods, malformed


@given(runs())
def test_a_probe_the_kubelet_ended_is_the_verdict_on_its_node(run):
    n, rank, state, pods, malformed = run
    body = job(n)
    body = advance(body, step(body, []))
    plan = step(body, pods, now=NOW)  # never raises
    v = cond.get(plan.status["conditions"], C.VALIDATED)
    kubelet_reasons = (V.OOM_KILLED, V.PROBE_CONTAINER_FAILED, V.PROBE_CONFIG_ERROR)
    if v["reason"] in kubelet_reasons:
        assert not [w for w in NETWORK_WORDS if w in v["message"]], v["message"]
        assert len(v["message"]) <= 400
    if malformed:
        return
    assert (v["status"], v["reason"]) == ("False", state[3]), (state[0], v)
    assert node_name(rank) in v["message"], (state[0], v["message"])
    assert not [w for w in NETWORK_WORDS if w in v["message"]], v["message"]
    for ctype in C.CHECK_CONDITIONS[1:]:
        assert cond.get(plan.status["conditions"], ctype)["status"] != "False"


TRAIN_STATES = [  # (pod phase, the trainer's state, words Failed's message must have)
    ("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, ["OOMKilled", "64Mi"]),
    ("Failed", {"terminated": {"exitCode": 139, "reason": "Error"}}, ["SIGSEGV"]),
    ("Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}, ["exited 3"]),
    ("Failed", {"terminated": {"exitCode": 128, "reason": "ContainerCannotRun"}}, ["ContainerCannotRun"]),
    ("Pending", {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "s" not found'}},
     ['Secret "s"']),
    ("Pending", {"waiting": {"reason": "CreateContainerError", "message": "no such file"}},
     ["CreateContainerError"]),
    ("Pending", {"waiting": {"reason": "InvalidImageName"}}, ["InvalidImageName"]),
]


@st.composite
def trainings(draw):
    phase, state, words = draw(st.sampled_from(TRAIN_STATES))
    rank = draw(st.integers(0, 1))
    first_is_sidecar = draw(st.booleans())
    pods = [pod(f"j-worker-{r}", C.ROLE_WORKER, r, attempt=0, phase="Running", node=node_name(r),
                container="trainer", started_at=STARTED) for r in range(2)]
    p = pods[rank]
    p["status"]["phase"] = phase
    trainer = {"name": "trainer", "resources": copy.deepcopy(LIMITS)}
    statuses = [{"name": "trainer", "state": copy.deepcopy(state)}]
    if first_is_sidecar:  # a log shipper listed first, stopped by the kubelet after the trainer ended
        p["spec"]["containers"] = [{"name": "shipper"}, trainer]
        statuses.insert(0, {"name": "shipper", "state": {"terminated": {"exitCode": 143, "reason": "Error"}}})
    else:
        p["spec"]["containers"] = [trainer]
    p["status"]["containerStatuses"] = statuses
    malformed = draw(st.booleans())
    if malformed:
        malform(draw, p)
    return rank, words, pods, malformed


@given(trainings())
def test_a_failed_training_rank_names_the_kubelets_reason(run):
    from ..support.reconcile import validated_body
    rank, words, pods, malformed = run
    plan = step(validated_body(), pods, now=NOW)  # never raises
    f = cond.get(plan.status["conditions"], C.FAILED)
    if malformed:
        return
    assert f["status"] == "True", f
    assert f"rank {rank}" in f["message"] and node_name(rank) in f["message"], f["message"]
    for w in words:
        assert w in f["message"], (w, f["message"])
    assert len(f["message"]) <= 400
