"""Fault injection on the local cluster: the harness behind tests/e2e/test_chaos.py and
``make chaos``.

What is injected, and how:

- **operator killed**: SIGKILL to the operator process (as an OOM kill or a lost node
  would), a random pause, then started again (:mod:`localcluster.cluster.operator_install`), at a
  random point after one of the :data:`STAGES` of a job's life was reached;
- **apiserver restarted**: SIGTERM to the kube-apiserver (SIGKILL after 5 s), then started
  again with the same flags (:func:`localcluster.cluster.controlplane.ensure_control_plane`), while
  the probes run;
- **a training pod deleted by hand** (``kubectl delete pod``) while it runs: the attempt
  ends in a gang restart, and no pod of it is created again;
- **node lost** (:func:`lose_node`): the node's links go down first, so nothing it sends
  afterwards (no FIN, no RST) reaches a peer, as when a machine loses power; then its node
  agent (the kubelet), or on a real node its kubelet, containerd, shims and containers, and
  every process of its pods are killed. The Node and its pods stay
  in the API as they were (Ready, Running) until the node lifecycle controller acts
  (node-monitor-grace-period), exactly as for a real lost machine.

What is checked after each job (:func:`JobRun.check`):

- the job ends as it should (``Succeeded``, or the expected ``Failed`` reason), with the
  expected ``status.restarts`` and ``status.probe.attempt``, and its status never goes
  back (restarts never decrease, a terminal condition stays);
- **duplicates**, from a watch of every pod change in the job's namespace, in order:
  two pods alive for one (role, rank) at once; a pod of one (role, rank, attempt) created
  twice (an old attempt's pod created again); a training pod created while a pod of
  another attempt still exists (a gang restart must delete every rank first) or while a
  probe pod still runs;
- **orphans**: a pod without the job as its controller owner, or a pod left that cleanup
  should have deleted (a probe pod after a pass, a pod of an older attempt, a pod still
  running after the job finished).

Kill points come from a seeded RNG (:func:`draw_plans`); the seed and every kill point are
printed, so a failing run can be replayed with ``DISTTRAIN_CHAOS_SEED``.
"""

from __future__ import annotations

import copy
import json
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from disttrain.api import constants
from disttrain.children import observe
from disttrain_probe.contract import vocabulary
from localcluster import strikes
from localcluster.cluster import controlplane, operator_install
from localcluster.common import procs
from localcluster.nodes.loss import lose_node
from localcluster.nodes.realnode.base import node_dir

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "ddp-digits.yaml"
JOB = "ddp-digits"

# The points of a job's life after which the operator is killed, in the order they happen
# (the probe run, its verdict, the first training pods, the failed rank, the gang restart).
STAGES = ("probe-created", "probing", "verdict", "training-start", "rank-failed", "restart")
# The longest random delay (s) after each stage: a window in which the operator is acting.
STAGE_DELAY = {"probe-created": 1.5, "probing": 3.0, "verdict": 0.6, "training-start": 0.6,
               "rank-failed": 0.6, "restart": 2.0}

# Job variants: training fails on rank 1 on attempt 0 only (one gang restart, then it
# trains), or on every attempt (backoffLimit 1 is exceeded).
# DELETE_ONCE: rank 1 of attempt 0 only waits (it never fails on its own); its pod is
# deleted by hand while it runs (a "delete-pod" fault), which must end the attempt in a gang
# restart that creates nothing of attempt 0 again.
FAIL_ONCE, FAIL_ALWAYS, PLAIN, DELETE_ONCE = "fail-once", "fail-always", "plain", "delete-once"
EXPECTED = {FAIL_ONCE: (constants.SUCCEEDED, vocabulary.ALL_RANKS_SUCCEEDED),
            FAIL_ALWAYS: (constants.FAILED, vocabulary.BACKOFF_LIMIT_EXCEEDED),
            DELETE_ONCE: (constants.SUCCEEDED, vocabulary.ALL_RANKS_SUCCEEDED)}

# Runs the example's training script unless this rank is the one made to fail on this
# attempt (the attempt comes from the pod's disttrain.dev/attempt label, downward API).
FAIL_SCRIPT = '''"""Chaos tests: fail rank FAIL_RANK on attempt FAIL_ATTEMPT ("any": every attempt)."""
import os
import runpy
import sys
import time

attempt, rank = os.environ.get("TRAIN_ATTEMPT"), os.environ.get("RANK")
want = os.environ.get("FAIL_ATTEMPT", "0")
if rank == os.environ.get("FAIL_RANK", "1") and want in ("any", attempt):
    print(f"rank {rank}, attempt {attempt}: failing on purpose (fault injection)", flush=True)
    sys.exit(1)
if rank == os.environ.get("FAIL_RANK", "1") and os.environ.get("HANG_ATTEMPT") == attempt:
    print(f"rank {rank}, attempt {attempt}: waiting to be deleted (fault injection)", flush=True)
    time.sleep(600)
runpy.run_path("/workspace/train_digits.py", run_name="__main__")
'''


def now() -> float:
    """Seconds on the monotonic clock."""
    return time.monotonic()


# ---- the job ------------------------------------------------------------------------------
def job_docs(variant: str = FAIL_ONCE, epochs: int = 3, probe_timeout: int = 120,
             backoff_limit: int = 1) -> list[dict[str, Any]]:
    """The example job (ConfigMap + DistTrainingJob) made to fail once or always on rank 1
    (``variant``), with ``backoff_limit`` gang restarts and ``epochs`` short epochs;
    ``PLAIN``: the example as it is, with ``probe_timeout``. The probe gets twice the
    example's budget by default: these runs test the operator, and an apiserver restart on
    a loaded 2-core machine can hold a probe's torch import past the example's 18 s
    inventory share (a ProbeInternalError that says nothing about the operator)."""
    docs = list(yaml.safe_load_all(EXAMPLE.read_text()))
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    job = next(d for d in docs if d["kind"] == constants.KIND)
    spec = job["spec"]
    spec["probe"]["timeoutSeconds"] = probe_timeout
    if variant == PLAIN:
        return docs
    cm["data"]["fail_rank.py"] = FAIL_SCRIPT
    spec["runPolicy"] = {"backoffLimit": backoff_limit}
    ctr = spec["template"]["spec"]["containers"][0]
    ctr["command"] = ["python", "/workspace/fail_rank.py"]
    ctr["env"] = list(ctr.get("env") or []) + [
        {"name": "EPOCHS", "value": str(epochs)},
        {"name": "FAIL_RANK", "value": "1"},
        {"name": "FAIL_ATTEMPT", "value": {FAIL_ALWAYS: "any", DELETE_ONCE: "never"}.get(variant, "0")},
        {"name": "HANG_ATTEMPT", "value": "0" if variant == DELETE_ONCE else "never"},
        {"name": "TRAIN_ATTEMPT",
         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{constants.LABEL_ATTEMPT}']"}}},
    ]
    return docs


# ---- plans --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    """One injected fault: ``kind`` "kill" (the operator), "apiserver" (a restart) or
    "delete-pod" (rank 1's training pod deleted by hand, as ``kubectl delete pod``),
    ``delay`` seconds after ``stage`` was reached; ``downtime``: seconds the killed
    operator stays down before it is started again."""

    kind: str
    stage: str
    delay: float
    downtime: float = 0.0

    def __str__(self) -> str:
        what = {"kill": "kill operator", "apiserver": "restart apiserver",
                "delete-pod": "delete rank 1's training pod"}[self.kind]
        down = f", down {self.downtime:.1f}s" if self.kind == "kill" else ""
        return f"{what} at {self.stage}+{self.delay:.2f}s{down}"


@dataclass(frozen=True)
class JobPlan:
    """One job of a chaos run: its variant and the faults injected into it."""

    index: int
    variant: str
    faults: tuple[Fault, ...]


def draw_plans(seed: int, jobs: int, kills: int, apiserver_restarts: int,
               fail_always_every: int = 0) -> list[JobPlan]:
    """``jobs`` job plans with ``kills`` operator kills in all, spread over :data:`STAGES`
    as evenly as the count allows, and ``apiserver_restarts`` apiserver restarts during the
    probes (one per job, the first jobs). Every ``fail_always_every``-th job (0: none) is
    the variant that exhausts backoffLimit. Deterministic for a given ``seed``."""
    rng = random.Random(seed)
    stages = [STAGES[i % len(STAGES)] for i in range(kills)]
    rng.shuffle(stages)
    per_job: list[list[Fault]] = [[] for _ in range(jobs)]
    for i, stage in enumerate(stages):
        per_job[i % jobs].append(Fault("kill", stage, round(rng.uniform(0, STAGE_DELAY[stage]), 2),
                                       round(rng.uniform(0, 2.0), 1)))
    for j in rng.sample(range(jobs), min(jobs, apiserver_restarts)):
        per_job[j].append(Fault("apiserver", "probing", round(rng.uniform(0, 2.0), 2)))
    plans = []
    for j, faults in enumerate(per_job):
        variant = FAIL_ALWAYS if fail_always_every and j % fail_always_every == fail_always_every - 1\
            else FAIL_ONCE
        faults.sort(key=lambda f: (STAGES.index(f.stage), f.delay))
        plans.append(JobPlan(j, variant, tuple(faults)))
    return plans


# ---- the cluster --------------------------------------------------------------------------
def api_client(state: Path) -> client.ApiClient:
    """An API client authenticated as the cluster admin of the local cluster at ``state``."""
    return config.new_client_from_config(config_file=str(state / "admin.kubeconfig"))


def restart_apiserver(state: Path) -> float:
    """Stop the kube-apiserver (SIGTERM, SIGKILL after 5 s) and start it again with the same
    flags; returns the seconds it was unavailable. Raises ControlPlaneError if it does not
    come back."""
    t = now()
    procs.stop_tracked(state, "kube-apiserver", grace=5.0)
    controlplane.ensure_control_plane(state)
    return now() - t


def kill_operator(downtime: float) -> float:
    """SIGKILL the operator, wait ``downtime`` seconds, start it again (without
    reinstalling); returns the seconds until it was live again."""
    t = now()
    operator_install.stop(signal.SIGKILL)
    time.sleep(downtime)
    operator_install.start(reinstall=False)
    return now() - t


def restore_nodes(nodes: int, core: client.CoreV1Api, timeout: float = 180) -> None:
    """Bring every node back (`localcluster up`: links up, agents started) and wait until
    every node is Ready and carries no taint the node lifecycle controller puts on a lost
    node (``node.kubernetes.io/...``), for ``strikes.NODES_STABLE_SECONDS`` in a row.
    Raises RuntimeError if `up` fails, TimeoutError if that does not happen."""
    p = subprocess.run([sys.executable, "-m", "localcluster", "up", "--nodes", str(nodes)],
                       cwd=REPO, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"localcluster up failed: {p.stderr[-2000:]}")
    sanitize = client.ApiClient().sanitize_for_serialization
    strikes.wait_settled(lambda: [sanitize(n) for n in core.list_node().items], timeout)


def probe_phase(state: Path, ns: str, pod: dict[str, Any]) -> Optional[str]:
    """The phase a running probe is in, from the report it writes before each phase (the
    node agent keeps the termination-message file under ``<state>/pods``); None before."""
    uid = observe.meta(pod).get("uid")
    files = [state / "pods" / f"{ns}_{observe.name(pod)}_{uid}" / "probe.termination-log"]
    node = (pod.get("spec") or {}).get("nodeName")
    if node:  # a real kubelet keeps it under its root dir, one file per container start
        files += sorted((node_dir(state, node) / "kubelet" / "pods" / str(uid)
                         / "containers" / "probe").glob("*"), key=lambda f: f.stat().st_mtime)[-1:]
    for f in files:
        try:
            return json.loads(f.read_text()).get("phase")
        except (OSError, ValueError, AttributeError):
            continue
    return None


# ---- the pod watch ------------------------------------------------------------------------
@dataclass
class PodLife:
    """One pod (one UID) as the watch saw it; times in seconds since the job was applied."""

    uid: str
    name: str
    role: str
    rank: int
    attempt: int
    owner: Optional[str]
    added: float
    node: Optional[str] = None
    phase: str = "Pending"
    deleted: Optional[float] = None  # from a DELETED event, or the re-list that missed it
    obj: dict[str, Any] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        """Not deleted (as far as the watch knows)."""
        return self.deleted is None

    @property
    def running(self) -> bool:
        """Not deleted and not finished (its processes may run)."""
        return self.exists and self.phase not in observe.TERMINAL_PHASES

    def __str__(self) -> str:
        return f"{self.name} (uid {self.uid[:8]}, attempt {self.attempt}, {self.phase})"


class PodWatch(threading.Thread):
    """Watches every pod of one namespace and checks, at each creation, the invariants that
    need the order of events (see the module docstring). Survives apiserver restarts: it
    resumes from the last resourceVersion, or re-lists (a pod gone from the list is marked
    deleted, at the re-list)."""

    def __init__(self, api: client.ApiClient, ns: str, t0: float):
        super().__init__(name=f"podwatch-{ns}", daemon=True)
        self.core = client.CoreV1Api(api)
        self.ns = ns
        self.t0 = t0
        self.lock = threading.Lock()
        self.pods: dict[str, PodLife] = {}
        self.duplicates: list[str] = []
        self.events = 0
        self.relists = 0
        self.rv: Optional[str] = None
        self.halt = threading.Event()

    def t(self) -> float:
        """Seconds since the job was applied."""
        return round(now() - self.t0, 2)

    def run(self) -> None:
        """Thread body: list, then watch until :meth:`stop`; never raises."""
        while not self.halt.is_set():
            try:
                if self.rv is None:
                    self._relist()
                w = watch.Watch()
                for ev in w.stream(self.core.list_namespaced_pod, self.ns, resource_version=self.rv,
                                   allow_watch_bookmarks=True, timeout_seconds=15,
                                   _request_timeout=30):
                    if self.halt.is_set():
                        w.stop()
                        break
                    typ, obj = ev.get("type"), ev.get("raw_object") or {}
                    if typ == "ERROR":
                        self.rv = None
                        break
                    self.rv = observe.meta(obj).get("resourceVersion") or self.rv
                    if typ != "BOOKMARK":
                        self._on(typ, obj, self.t())
            except ApiException as exc:
                if exc.status == 410:
                    self.rv = None
                else:
                    self.halt.wait(0.3)
            except Exception:  # noqa: BLE001 - the apiserver is restarting: retry
                self.halt.wait(0.3)

    def stop(self) -> None:
        """Stop watching (the thread ends within its watch timeout)."""
        self.halt.set()

    def _relist(self) -> None:
        raw = self.core.list_namespaced_pod(self.ns, _preload_content=False, _request_timeout=30)
        data = json.loads(raw.data)
        t = self.t()
        with self.lock:
            self.relists += 1
            seen = {observe.meta(p).get("uid") for p in data.get("items") or []}
            for life in self.pods.values():  # deletions first: no false overlap from the gap
                if life.exists and life.uid not in seen:
                    life.deleted = t
        for p in data.get("items") or []:
            self._on("MODIFIED", p, t)
        self.rv = (data.get("metadata") or {}).get("resourceVersion")

    def _on(self, typ: str, pod: dict[str, Any], t: float) -> None:
        uid = observe.meta(pod).get("uid") or ""
        with self.lock:
            self.events += 1
            life = self.pods.get(uid)
            if life is None:
                if typ == "DELETED":
                    return
                life = PodLife(uid=uid, name=observe.name(pod), role=observe.role(pod),
                               rank=observe.int_label(pod, constants.LABEL_RANK),
                               attempt=observe.int_label(pod, constants.LABEL_ATTEMPT),
                               owner=observe.controller_uid(pod), added=t)
                self._check_new(life)
                self.pods[uid] = life
            life.obj = pod
            life.phase = observe.phase(pod)
            life.node = observe.node(pod) or life.node
            if typ == "DELETED":
                life.deleted = t

    def _check_new(self, new: PodLife) -> None:
        for p in self.pods.values():
            same_rank = p.role == new.role and p.rank == new.rank
            if same_rank and p.running:
                self.duplicates.append(f"t={new.added}s: {new} created while {p} still runs "
                                       f"(two pods for {new.role} rank {new.rank})")
            elif same_rank and p.attempt == new.attempt:
                self.duplicates.append(f"t={new.added}s: {new} is the second pod of {new.role} rank "
                                       f"{new.rank} attempt {new.attempt} (first: {p})")
            if new.role == constants.ROLE_WORKER and p.role == constants.ROLE_WORKER and p.exists\
                    and p.attempt != new.attempt:
                self.duplicates.append(f"t={new.added}s: {new} created while {p} of another attempt "
                                       "still exists (gang restart overlap)")
            if new.role == constants.ROLE_WORKER and p.role == constants.ROLE_PROBE and p.running:
                self.duplicates.append(f"t={new.added}s: training pod {new} created while probe {p} runs")

    def snapshot(self) -> list[PodLife]:
        """A copy of every pod seen so far."""
        with self.lock:
            return [copy.copy(p) for p in self.pods.values()]


# ---- one job under faults -----------------------------------------------------------------
def stages_reached(pods: list[PodLife], n: int) -> set[str]:
    """Which of :data:`STAGES` the job has reached, from the pods seen."""
    out: set[str] = set()
    probes = [p for p in pods if p.role == constants.ROLE_PROBE and p.attempt == 1]
    workers0 = [p for p in pods if p.role == constants.ROLE_WORKER and p.attempt == 0]
    if probes:
        out.add("probe-created")
    if any(p.phase != "Pending" for p in probes):
        out.add("probing")
    if len(probes) == n and all(p.phase in observe.TERMINAL_PHASES for p in probes):
        out.add("verdict")
    if workers0:
        out.add("training-start")
    if any(p.rank == 1 and p.phase == "Failed" for p in workers0):
        out.add("rank-failed")
    if any(p.rank == 1 and p.phase == "Running" for p in workers0):
        out.add("rank1-running")  # only DELETE_ONCE's plan waits for it
    if any(p.role == constants.ROLE_WORKER and p.attempt == 1 for p in pods):
        out.add("restart")
    return out


@dataclass
class Fired:
    """A fault that was injected: ``at`` seconds after the job was applied; ``took``: seconds
    the operator (or the apiserver) was unavailable."""

    fault: Fault
    at: float  # seconds after apply
    took: float  # seconds the operator (or the apiserver) was unavailable


@dataclass
class JobRun:
    """One job driven through its plan; :meth:`check` lists what went wrong."""

    plan: JobPlan
    ns: str
    seed: int
    n: int = 2
    fired: list[Fired] = field(default_factory=list)
    skipped: list[Fault] = field(default_factory=list)
    seconds: float = 0.0
    status: dict[str, Any] = field(default_factory=dict)
    job_uid: str = ""
    final_pods: list[dict[str, Any]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    watch_events: int = 0
    relists: int = 0

    @property
    def outcome(self) -> str:
        """``<Succeeded|Failed>/<reason>`` of the True outcome condition, or "unfinished (...)"."""
        for ctype in (constants.SUCCEEDED, constants.FAILED):
            x = _cond(self.status, ctype)
            if x and x.get("status") == "True":
                return f"{ctype}/{x.get('reason')}"
        return f"unfinished ({self.status.get('phase')})"

    @property
    def ok(self) -> bool:
        """No invariant broken and the expected end."""
        return not (self.duplicates or self.orphans or self.problems or self.regressions)

    def describe(self) -> str:
        """The run in a few lines: outcome, every fault fired, every violation."""
        lines = [f"job {self.plan.index} ({self.plan.variant}, namespace {self.ns}, seed {self.seed}): "
                 f"{self.outcome} in {self.seconds:.0f}s"]
        lines += [f"  fired {f.fault} at t={f.at:.1f}s (unavailable {f.took:.1f}s)" for f in self.fired]
        lines += [f"  skipped {f} (stage not reached)" for f in self.skipped]
        lines += [f"  DUPLICATE {x}" for x in self.duplicates]
        lines += [f"  ORPHAN {x}" for x in self.orphans]
        lines += [f"  PROBLEM {x}" for x in self.problems + self.regressions]
        return "\n".join(lines)

    def check(self, pods_seen: list[PodLife]) -> None:
        """Fill duplicates/orphans/problems from the final status and pods."""
        st = self.status
        want_type, want_reason = EXPECTED[self.plan.variant]
        got = _cond(st, want_type)
        if not got or got.get("status") != "True" or got.get("reason") != want_reason:
            self.problems.append(f"expected {want_type}=True {want_reason}, got {self.outcome}: "
                                 f"{(got or {}).get('message') or _cond_summary(st)}")
        if st.get("restarts") != 1:
            self.problems.append(f"status.restarts is {st.get('restarts')!r}, expected 1")
        if (st.get("probe") or {}).get("attempt") != 1:
            self.problems.append(f"status.probe.attempt is {(st.get('probe') or {}).get('attempt')!r}, "
                                 "expected 1")
        validated = (_cond(st, constants.VALIDATED) or {}).get("status") == "True"
        for p in pods_seen:
            if p.owner != self.job_uid:
                self.orphans.append(f"{p} is not the job's (controller uid {p.owner})")
        for pod in self.final_pods:
            name, role, attempt = observe.name(pod), observe.role(pod), observe.int_label(pod, constants.LABEL_ATTEMPT)
            if observe.controller_uid(pod) != self.job_uid:
                self.orphans.append(f"{name} left without the job as controller")
            elif role == constants.ROLE_PROBE and validated:
                self.orphans.append(f"probe pod {name} left after the probe passed (keepPods OnFailure)")
            elif role == constants.ROLE_WORKER and attempt != st.get("restarts"):
                self.orphans.append(f"{name} of attempt {attempt} left (last attempt {st.get('restarts')})")
            elif not observe.finished(pod) or observe.deleting(pod):
                self.orphans.append(f"{name} still {observe.phase(pod)}"
                                    f"{' (terminating)' if observe.deleting(pod) else ''} after the job finished")


def _cond(status: dict[str, Any], ctype: str) -> Optional[dict[str, Any]]:
    for x in status.get("conditions") or []:
        if isinstance(x, dict) and x.get("type") == ctype:
            return x
    return None


def _cond_summary(status: dict[str, Any]) -> str:
    return "; ".join(f"{x.get('type')}={x.get('status')} {x.get('reason')}"
                     for x in status.get("conditions") or [] if isinstance(x, dict))


class Harness:
    """Runs jobs under faults on the local cluster at ``state`` (the operator must be
    running, started by :func:`localcluster.cluster.operator_install.start`)."""

    def __init__(self, state: Path, seed: int, say: Callable[[str], None] = print):
        self.state = state
        self.seed = seed
        self.say = say
        self.api = api_client(state)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def _get_job(self, ns: str) -> Optional[dict[str, Any]]:
        try:
            return self.custom.get_namespaced_custom_object(constants.GROUP, constants.VERSION, ns, constants.PLURAL, JOB,
                                                            _request_timeout=5)
        except Exception:  # noqa: BLE001 - apiserver restarting: try again
            return None

    def _apply(self, ns: str, docs: list[dict[str, Any]]) -> str:
        for d in docs:
            if d["kind"] == "ConfigMap":
                self.core.create_namespaced_config_map(ns, d)
        job = next(d for d in docs if d["kind"] == constants.KIND)
        made = self.custom.create_namespaced_custom_object(constants.GROUP, constants.VERSION, ns, constants.PLURAL, job)
        return made["metadata"]["uid"]

    def _fire(self, f: Fault, ns: str) -> float:
        if f.kind == "kill":
            return kill_operator(f.downtime)
        if f.kind == "delete-pod":
            t = now()
            self.core.delete_namespaced_pod(f"{JOB}-worker-1", ns)
            return now() - t
        return restart_apiserver(self.state)

    def run_job(self, plan: JobPlan, ns: str, timeout: float = 400) -> JobRun:
        """Create ``ns``, apply the job of ``plan``, inject its faults, wait for the job to
        finish and its pods to settle, and check the invariants. Never raises for a
        failed check (see :attr:`JobRun.ok`); raises on a cluster error."""
        run = JobRun(plan=plan, ns=ns, seed=self.seed)
        self.core.create_namespace({"metadata": {"name": ns}})
        t0 = now()
        pw = PodWatch(self.api, ns, t0)
        pw.start()
        pending = list(plan.faults)
        first_seen: dict[str, float] = {}
        last_restarts, terminal_seen = -1, None
        try:
            run.job_uid = self._apply(ns, job_docs(plan.variant))
            while now() - t0 < timeout:
                t = now() - t0
                for stage in stages_reached(pw.snapshot(), run.n):
                    first_seen.setdefault(stage, t)
                due = [f for f in pending if f.stage in first_seen and t >= first_seen[f.stage] + f.delay]
                if due:
                    f = due[0]
                    pending.remove(f)
                    took = self._fire(f, ns)
                    run.fired.append(Fired(f, round(t, 2), round(took, 2)))
                    self.say(f"  t={t:5.1f}s {f} (unavailable {took:.1f}s)")
                    continue
                job = self._get_job(ns)
                if job is not None:
                    run.status = job.get("status") or {}
                    r = run.status.get("restarts")
                    if isinstance(r, int):
                        if r < last_restarts:
                            run.regressions.append(f"status.restarts went from {last_restarts} to {r}")
                        last_restarts = max(last_restarts, r)
                    if terminal_seen and run.outcome != terminal_seen:
                        run.regressions.append(f"terminal outcome {terminal_seen} became {run.outcome}")
                    if run.outcome.startswith(("Succeeded", "Failed")):
                        terminal_seen = terminal_seen or run.outcome
                        if not pending or all(f.stage not in first_seen for f in pending):
                            break
                time.sleep(0.2)
            run.seconds = now() - t0
            run.skipped = pending
            run.final_pods = self._settle(ns)
            time.sleep(0.5)
        finally:
            pw.stop()
        job = self._get_job(ns)
        if job is not None:
            run.status = job.get("status") or {}
        run.duplicates = list(pw.duplicates)
        run.watch_events, run.relists = pw.events, pw.relists
        run.check(pw.snapshot())
        return run

    def _settle(self, ns: str, timeout: float = 60) -> list[dict[str, Any]]:
        """The namespace's pods once none is running or terminating (or after ``timeout``)."""
        deadline = now() + timeout
        pods: list[dict[str, Any]] = []
        while now() < deadline:
            try:
                raw = self.core.list_namespaced_pod(ns, _preload_content=False, _request_timeout=10)
                pods = json.loads(raw.data).get("items") or []
            except Exception:  # noqa: BLE001
                time.sleep(0.5)
                continue
            if all(observe.finished(p) and not observe.deleting(p) for p in pods):
                return pods
            time.sleep(0.5)
        return pods

    def delete_namespace(self, ns: str) -> None:
        """Delete ``ns`` without waiting (the garbage collector removes what is in it)."""
        try:
            self.core.delete_namespace(ns)
        except ApiException:
            pass


def summary_rows(runs: list[JobRun]) -> list[dict[str, Any]]:
    """One row per job for the summary table."""
    rows = []
    for r in runs:
        kills = [f for f in r.fired if f.fault.kind == "kill"]
        rows.append({
            "job": r.plan.index, "variant": r.plan.variant, "namespace": r.ns,
            "kills": len(kills), "apiserver": sum(f.fault.kind == "apiserver" for f in r.fired),
            "stages": ",".join(f.fault.stage for f in kills),
            "duplicates": len(r.duplicates), "orphans": len(r.orphans),
            "outcome": r.outcome, "ok": r.ok, "seconds": round(r.seconds, 1),
        })
    return rows


def print_summary(runs: list[JobRun], seed: int, say: Callable[[str], None] = print) -> None:
    """The summary table (kills, jobs, duplicates, orphans, outcomes, time per job)."""
    from rich.console import Console
    from rich.table import Table

    rows = summary_rows(runs)
    table = Table(title=f"fault injection, seed {seed}")
    for col in ("job", "variant", "kills", "apiserver", "stages killed at", "duplicates", "orphans",
                "outcome", "ok", "seconds"):
        table.add_column(col)
    for row in rows:
        table.add_row(str(row["job"]), row["variant"], str(row["kills"]), str(row["apiserver"]),
                      row["stages"], str(row["duplicates"]), str(row["orphans"]), row["outcome"],
                      "yes" if row["ok"] else "NO", f"{row['seconds']:.0f}")
    kills = sum(r["kills"] for r in rows)
    table.add_row("all", f"{len(rows)} jobs", str(kills), str(sum(r["apiserver"] for r in rows)), "",
                  str(sum(r["duplicates"] for r in rows)), str(sum(r["orphans"] for r in rows)),
                  f"{sum(r['ok'] for r in rows)}/{len(rows)} as expected", "",
                  f"{sum(r['seconds'] for r in rows) / max(1, len(rows)):.0f} avg")
    console = Console(width=160, record=True)
    with console.capture() as cap:
        console.print(table)
    say(cap.get())


# ---- a node lost mid-probe ----------------------------------------------------------------
PROBE_PHASES = ("inventory", "rendezvous", "connectivity", "choice", "versions", "collective", "report")
# Phases of the victim's probe at which its node is lost; rank 0 (the rendezvous store) only
# once the other rank has joined it: lost before that, the peer's dial to the master fails
# and the verdict is MasterPortTimeout naming rank 0's node (see docs/conditions.md).
LOSS_PHASES = {0: ("connectivity", "collective"), 1: ("rendezvous", "connectivity", "collective")}


@dataclass
class NodeLossRun:
    """One job whose probe lost a node: when, and what the operator concluded."""

    victim_rank: int
    phase: str
    ns: str
    node: str = ""
    phases_at_loss: dict[int, Optional[str]] = field(default_factory=dict)
    lost_after: float = 0.0  # seconds from the first probe pod's creation to the loss
    verdict_after: Optional[float] = None  # seconds from the loss to Validated=False
    budget: float = 0.0  # the probe budget (s), counted from the first probe pod
    validated: dict[str, Any] = field(default_factory=dict)
    workers: int = 0
    probes_after: dict[int, str] = field(default_factory=dict)  # rank -> "kept" | "deleting" | "gone"
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The expected verdict, in time, and nothing else went wrong."""
        return not self.problems

    def describe(self) -> str:
        """The run in one line, then its problems."""
        v = self.validated
        return (f"node loss: rank {self.victim_rank}'s node {self.node} lost in phase {self.phase} "
                f"(probe phases {self.phases_at_loss}) {self.lost_after:.1f}s into the probe; verdict "
                f"{'never' if self.verdict_after is None else f'{self.verdict_after:.1f}s later'} "
                f"(budget {self.budget:.0f}s): {v.get('reason')}: {v.get('message')}"
                + "".join(f"\n  PROBLEM {p}" for p in self.problems))

    def check(self) -> None:
        """Fill :attr:`problems` from the verdict, its timing and the pods after it."""
        v = self.validated
        if (v.get("status"), v.get("reason")) != ("False", vocabulary.PROBE_POD_LOST):
            self.problems.append(f"expected Validated=False {vocabulary.PROBE_POD_LOST}, got "
                                 f"{v.get('status')} {v.get('reason')}: {v.get('message')}")
        elif not str(v.get("message", "")).startswith(f"{self.node} was lost"):
            self.problems.append(f"the message does not name the lost node {self.node} first: {v.get('message')}")
        if self.verdict_after is None or self.lost_after + self.verdict_after > self.budget:
            self.problems.append(f"no verdict within the probe budget ({self.budget:.0f}s)")
        if self.workers:
            self.problems.append(f"{self.workers} training pod(s) created")
        # the lost node's probe is deleted (it stays Terminating until the node is back); the
        # others are kept for their logs (keepPods OnFailure)
        want = {r: "deleting" if r == self.victim_rank else "kept" for r in (0, 1)}
        if self.verdict_after is not None and self.probes_after != want:
            self.problems.append(f"probe pods after the verdict: {self.probes_after}, expected {want}")


def _lose_when(state: Path, ns: str, pw: PodWatch, victim: int, phase: str,
               timeout: float) -> tuple[dict[int, dict], dict[int, Optional[str]]]:
    """Wait until the victim's probe reached ``phase`` (and, for rank 0, the other rank has
    joined its store), reading the reports the probes write before each phase; returns the
    probe pods and their phases then. Raises TimeoutError if it never happens (e.g. the
    probe ended first)."""
    deadline = now() + timeout
    want = PROBE_PHASES.index(phase)
    while now() < deadline:
        probes = {p.rank: p.obj for p in pw.snapshot() if p.role == constants.ROLE_PROBE and p.exists}
        if len(probes) == 2 and all(observe.node(p) for p in probes.values()):
            phases = {r: probe_phase(state, ns, p) for r, p in probes.items()}
            idx = {r: PROBE_PHASES.index(x) if x in PROBE_PHASES else -1 for r, x in phases.items()}
            other = 1 - victim
            if idx[victim] >= want and (victim != 0 or idx[other] >= PROBE_PHASES.index("connectivity")):
                return probes, phases
            if any(observe.finished(p) for p in probes.values()):
                break
        time.sleep(0.02)
    raise TimeoutError(f"rank {victim}'s probe never reached {phase} while both ran")


def run_node_loss(h: "Harness", victim: int, phase: str, ns: str, timeout: float = 150) -> NodeLossRun:
    """Apply the example job, lose the node of probe rank ``victim`` when its probe reaches
    ``phase`` (:func:`lose_node`), and record the operator's verdict. The caller restores
    the node (:func:`restore_nodes`) after deleting ``ns``."""
    from disttrain.reconcile.policies.deadline import PROBE_SLACK_SECONDS

    run = NodeLossRun(victim_rank=victim, phase=phase, ns=ns)
    docs = job_docs(PLAIN, probe_timeout=60)
    run.budget = float(next(d for d in docs if d["kind"] == constants.KIND)["spec"]["probe"]["timeoutSeconds"]
                       + PROBE_SLACK_SECONDS)
    h.core.create_namespace({"metadata": {"name": ns}})
    t0 = now()
    pw = PodWatch(h.api, ns, t0)
    pw.start()
    try:
        h._apply(ns, docs)
        probes, run.phases_at_loss = _lose_when(h.state, ns, pw, victim, phase, timeout=90)
        first = min(p.added for p in pw.snapshot() if p.role == constants.ROLE_PROBE)
        run.node = observe.node(probes[victim]) or ""
        lose_node(h.state, run.node)
        lost = now()
        run.lost_after = lost - t0 - first
        while now() - lost < timeout:
            job = h._get_job(ns) or {}
            v = _cond(job.get("status") or {}, constants.VALIDATED) or {}
            if v.get("status") == "False":
                run.verdict_after = now() - lost
                run.validated = v
                break
            time.sleep(0.25)
        time.sleep(2.0)  # the cleanup after the verdict, or a training pod, would show by now
        seen = pw.snapshot()
        run.workers = sum(1 for p in seen if p.role == constants.ROLE_WORKER)
        run.probes_after = {p.rank: "gone" if not p.exists else "deleting" if observe.deleting(p.obj) else "kept"
                            for p in seen if p.role == constants.ROLE_PROBE}
    finally:
        pw.stop()
    run.check()
    return run


def print_node_loss_summary(runs: list[NodeLossRun], seed: int, say: Callable[[str], None] = print) -> None:
    """A table of the node-loss runs: who was lost when, and the verdict's reason and delay."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"node lost mid-probe, seed {seed}")
    for col in ("rank lost", "node", "phase", "into probe (s)", "verdict after (s)", "budget (s)",
                "reason", "ok"):
        table.add_column(col)
    for r in runs:
        table.add_row(str(r.victim_rank), r.node, r.phase, f"{r.lost_after:.1f}",
                      "-" if r.verdict_after is None else f"{r.verdict_after:.1f}", f"{r.budget:.0f}",
                      str(r.validated.get("reason")), "yes" if r.ok else "NO")
    console = Console(width=160, record=True)
    with console.capture() as cap:
        console.print(table)
    say(cap.get())
