"""Generated reconcile sequences against a simulated apiserver (hypothesis stateful testing).

Each sequence creates a job with a generated spec, then interleaves operator steps with
what a cluster does and what goes wrong in one: pods scheduled, started, evicted, vanished at any
phase (deleted by hand, evicted and collected, missing from one list), stripped of their
address, finished with good or bad probe reports (another job's UID, a wrong rank, NaN bandwidth, an
incorrect all-reduce, a bandwidth under the threshold, ok with a failure, garbage);
training pods succeed or fail; API calls fail (409, 422, 500, no answer) on status writes,
creates, deletes and reads; the job is deleted and applied again under its name while its
pods remain; it is suspended and resumed; its status is edited by hand (a condition dropped or
flipped, the master address removed, shapes an older operator wrote); time passes.

Invariants (checked after every rule, and by the simulation at each create and status
write, see simapi.py): no exception escapes a step; no training pod before Validated=True;
never two pods for one rank, nor a pod of an old attempt, nor one of an attempt other than
the one the stored status records; no validation from a report that fails the checks, nor
without a master address; and once faults stop, every job reaches a terminal condition (or a
waiting one that names what it waits for) within a bounded number of steps.

CI runs a few dozen derandomized sequences; ``make fuzz`` (HYPOTHESIS_PROFILE=fuzz) runs
2,000.
"""

from __future__ import annotations

import json
import math
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from disttrain.api import constants
from disttrain.shell.runner import Reconciler
from disttrain_probe.contract import vocabulary

from .simapi import NS, SimApi, env_of, kube_for, later, rfc3339

NODES = ["node-a", "node-b", "node-c"]
NODE_IP = {n: f"10.100.0.{11 + i}" for i, n in enumerate(NODES)}
TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "example/train:1",
                                     "command": ["python", "/workspace/train.py"]}]}}
REPORT_KINDS = ["good", "failure", "garbage", "wrong_uid", "wrong_rank", "nan",
                "incorrect", "slow", "contradiction", "no_message"]
DRAIN_STEPS = 120

# resources as users write them: integers (the apiserver takes them; the kubernetes client's
# models do not) and strings; probes with an int-or-string port
RESOURCES = [None, {"limits": {"cpu": 2}}, {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": 2}},
             {"limits": {"example.com/fpga": 1, "memory": 1073741824}}, {"limits": {"cpu": "500m"}}]
PROBES = [None, {"tcpSocket": {"port": 8080}}, {"httpGet": {"port": "http", "path": "/"}}]


def template(resources, liveness) -> dict:
    t = json.loads(json.dumps(TEMPLATE))
    ctr = t["spec"]["containers"][0]
    if resources:
        ctr["resources"] = resources
    if liveness:
        ctr["livenessProbe"] = liveness
        ctr["ports"] = [{"containerPort": 8080, "name": "http"}]
    return t


specs = st.fixed_dictionaries({
    "numNodes": st.integers(1, 3),
    "template": st.builds(template, st.sampled_from(RESOURCES), st.sampled_from(PROBES)),
    "network": st.fixed_dictionaries({"hostNetwork": st.booleans()}),
    "probe": st.fixed_dictionaries({
        "enabled": st.sampled_from([True, True, True, False]),
        "keepPods": st.sampled_from(["OnFailure", "Never", "Always"]),
        "minBusBandwidthGBps": st.sampled_from([0, 0, 1.0]),
        "timeoutSeconds": st.sampled_from([10, 60]),
    }),
    "runPolicy": st.fixed_dictionaries({
        "backoffLimit": st.integers(0, 2),
        "reprobeOnFailure": st.booleans(),
        "cleanPodPolicy": st.sampled_from(["Running", "All", "None"]),
    }),
})


def probe_report(pod: dict, kind: str, min_busbw: float = 0.0) -> tuple[str, bool]:
    """(termination message, whether it is a report the operator may trust and pass)."""
    env = env_of(pod)
    rank = int(env["RANK"])
    ok = kind in ("good", "slow", "incorrect", "nan", "wrong_uid", "wrong_rank", "contradiction")
    r = {
        "v": 1, "rank": rank, "worldSize": int(env["WORLD_SIZE"]),
        "jobUid": env["DISTTRAIN_PROBE_JOB_UID"], "attempt": int(env["DISTTRAIN_PROBE_ATTEMPT"]),
        "pod": pod["metadata"]["name"], "node": pod["spec"].get("nodeName"), "ok": ok,
        "phase": "report" if ok else "rendezvous",
        "failure": None if ok else {"reason": vocabulary.MASTER_PORT_TIMEOUT, "phase": "rendezvous",
                                    "message": "connection to MASTER_ADDR timed out"},
        "master": {"addr": env.get("MASTER_ADDR"), "port": int(env["MASTER_PORT"])},
        "chosen": {"ifname": "eth1", "addr": "10.101.0.11", "subnet": "10.101.0.0/24"} if ok else None,
        "allreduce": {"bytes": 4194304, "iterations": 10, "seconds": 0.1, "algbwGBps": 2.0,
                      "busbwGBps": 2.0, "correct": True} if ok else None,
        "backend": "gloo", "warnings": [], "truncated": False,
    }
    if kind == "wrong_uid":
        r["jobUid"] = "u-of-another-job"
    elif kind == "wrong_rank":
        r["rank"] = (rank + 1) % 7
    elif kind == "nan":
        r["allreduce"]["busbwGBps"] = math.nan
    elif kind == "incorrect":
        r["allreduce"]["correct"] = False
    elif kind == "slow":
        r["allreduce"]["busbwGBps"] = 0.0001
    elif kind == "contradiction":
        r["failure"] = {"reason": "MasterPortTimeout", "message": "x"}
    if kind == "garbage":
        return "{not json", False
    if kind == "no_message":
        return "", False
    text = json.dumps(r)  # NaN is written as NaN, as a buggy probe would
    good = kind == "good" or (kind == "slow" and min_busbw == 0)
    return text, good


def _unscheduled(p):
    return not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")\
        and not p["status"].get("conditions")


def _startable(p):
    return bool(p["spec"].get("nodeName")) and p["status"].get("phase") == "Pending"


def _running(role):
    return lambda p: p["status"].get("phase") == "Running" and p["metadata"]["labels"][constants.LABEL_ROLE] == role


def _any(pred):
    """A rule precondition: some simulated pod matches ``pred``."""
    return lambda self: hasattr(self, "sim") and any(pred(p) for p in self.sim.pods.values())


class ReconcileMachine(RuleBasedStateMachine):
    """The operator against a simulated cluster; see the module docstring."""

    @initialize(spec=specs, nodes=st.sampled_from([3, 3, 2]))
    def create_job(self, spec, nodes):
        self.sim = SimApi()
        self.nodes = NODES[:nodes]
        self.spec = spec
        self.sim.add_job(spec)
        self.op = Reconciler(kube_for(self.sim), probe_image="probe:1")
        self.steps = 0

    # ---- the operator ------------------------------------------------------------------
    @rule()
    def operator_step(self):
        self.op.step(NS, "j", now=self.sim.now)  # must not raise, whatever the state
        self.steps += 1

    # ---- the cluster ---------------------------------------------------------------------
    def _pods(self, pred):
        return sorted((p for p in self.sim.pods.values() if pred(p)), key=lambda p: p["metadata"]["name"])

    def _free_node(self, pod):
        role = pod["metadata"]["labels"][constants.LABEL_ROLE]
        used = {p["spec"].get("nodeName") for p in self.sim.pods.values()
                if p is not pod and p["metadata"]["labels"].get(constants.LABEL_ROLE) == role
                and p["status"].get("phase") in ("Pending", "Running") and p["spec"].get("nodeName")}
        free = [n for n in self.nodes if n not in used]
        return free[0] if free else None

    def schedule_one(self, pod):
        node = self._free_node(pod)
        if node is None:
            pod["status"]["conditions"] = [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": f"0/{len(self.nodes)} nodes are available: {len(self.nodes)} node(s) didn't "
                           "match pod anti-affinity rules."}]
            return
        pod["spec"]["nodeName"] = node
        pod["status"].update(hostIP=NODE_IP[node], podIP=NODE_IP[node], conditions=[
            {"type": "PodScheduled", "status": "True"}])

    @rule(policy=st.sampled_from(["deny-ingress", "deny-egress", "admit-job", "junk", "none"]))
    def network_policy(self, policy):
        """A NetworkPolicy appears in (or all leave) the job's namespace, at any moment."""
        specs = {"deny-ingress": {"podSelector": {}, "policyTypes": ["Ingress"]},
                 "deny-egress": {"podSelector": {}, "policyTypes": ["Egress"]},
                 "admit-job": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]},
                 "junk": ["not", {"a": "policy"}]}
        if policy == "none":
            self.sim.network_policies.clear()
        else:
            self.sim.network_policies.append({"metadata": {"name": policy}, "spec": specs[policy]})

    @precondition(_any(_unscheduled))
    @rule(i=st.integers(0, 5))
    def schedule(self, i):
        pending = self._pods(_unscheduled)
        if pending:
            self.schedule_one(pending[i % len(pending)])

    @precondition(_any(_startable))
    @rule(i=st.integers(0, 5))
    def start(self, i):
        ready = self._pods(_startable)
        if ready:
            p = ready[i % len(ready)]
            p["status"].update(phase="Running", startTime=rfc3339(self.sim.now), containerStatuses=[
                {"name": p["spec"]["containers"][0]["name"], "state": {"running": {"startedAt": rfc3339(self.sim.now)}}}])

    def finish(self, pod, code: int, message: str):
        ctr = pod["spec"]["containers"][0]["name"]
        pod["status"].update(phase="Succeeded" if code == 0 else "Failed", containerStatuses=[
            {"name": ctr, "state": {"terminated": {"exitCode": code, "message": message,
                                                   "startedAt": rfc3339(self.sim.now),
                                                   "finishedAt": rfc3339(self.sim.now)}}}])

    @precondition(_any(_running(constants.ROLE_PROBE)))
    @rule(i=st.integers(0, 5), kind=st.sampled_from(REPORT_KINDS))
    def finish_probe(self, i, kind):
        running = self._pods(_running(constants.ROLE_PROBE))
        if running:
            p = running[i % len(running)]
            if kind in ("good", "slow") and not self._world_up(p):
                kind = "failure"  # a real probe cannot pass before every rank has joined
            text, good = probe_report(p, kind, float(self.spec["probe"]["minBusBandwidthGBps"]))
            self.sim.good_reports[p["metadata"]["uid"]] = good
            ok = kind in ("good", "slow", "incorrect", "nan", "wrong_uid", "wrong_rank", "contradiction")
            self.finish(p, 0 if ok else 1, text)

    def _world_up(self, pod) -> bool:
        """Every rank of the pod's probe attempt runs or has run (it can pass only then)."""
        labels = pod["metadata"]["labels"]
        peers = [p for p in self.sim.pods.values() if p["metadata"]["labels"].get(constants.LABEL_ROLE) == constants.ROLE_PROBE
                 and p["metadata"]["labels"].get(constants.LABEL_ATTEMPT) == labels[constants.LABEL_ATTEMPT]
                 and p["metadata"].get("ownerReferences") == pod["metadata"].get("ownerReferences")
                 and p["status"].get("phase") in ("Running", "Succeeded")]
        return len(peers) == int(env_of(pod)["WORLD_SIZE"])

    @precondition(_any(_running(constants.ROLE_WORKER)))
    @rule(i=st.integers(0, 5), ok=st.booleans())
    def finish_worker(self, i, ok):
        running = self._pods(_running(constants.ROLE_WORKER))
        if running:
            self.finish(running[i % len(running)], 0 if ok else 1, "" if ok else "Traceback: boom")

    @precondition(_any(lambda p: p["status"].get("phase") in ("Pending", "Running") and p["spec"].get("nodeName")))
    @rule(i=st.integers(0, 5))
    def evict(self, i):
        live = self._pods(lambda p: p["status"].get("phase") in ("Pending", "Running") and p["spec"].get("nodeName"))
        if live:
            p = live[i % len(live)]
            p["status"].update(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")

    @precondition(_any(lambda p: True))
    @rule(i=st.integers(0, 5), how=st.sampled_from(["deleted", "evicted-and-collected", "unlisted"]))
    def vanish(self, i, how):
        """A pod disappears at any phase: deleted by hand (kubectl delete pod --force), evicted
        and garbage-collected, or simply missing from one list; the operator must neither
        re-create an attempt it has ended nor lose track of one it has not."""
        pods = self._pods(lambda p: True)
        name = pods[i % len(pods)]["metadata"]["name"]
        if how == "unlisted":  # it still exists (a create of its name is refused: 409)
            self.sim.unlisted.add(name)
        else:
            del self.sim.pods[name]

    @precondition(_any(lambda p: p["status"].get("hostIP") or p["status"].get("podIP")))
    @rule(i=st.integers(0, 5))
    def lose_address(self, i):
        """A pod whose status shows no address (a kubelet that restarted, a status rebuilt)."""
        pods = self._pods(lambda p: p["status"].get("hostIP") or p["status"].get("podIP"))
        p = pods[i % len(pods)]
        p["status"].update(hostIP=None, podIP=None)

    @rule()
    def kubelet_removes_deleted_and_gc(self):
        job = self.sim.job()
        live_uid = job["metadata"]["uid"] if job else None
        for name, p in list(self.sim.pods.items()):
            owner = next((r["uid"] for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
            if p["metadata"].get("deletionTimestamp") or (owner is not None and owner != live_uid):
                del self.sim.pods[name]
        for name, svc in list(self.sim.services.items()):
            owner = next((r["uid"] for r in svc["metadata"].get("ownerReferences") or []), None)
            if owner != live_uid:
                del self.sim.services[name]

    @rule()
    def delete_and_reapply_job(self):
        """kubectl delete dtj j && kubectl apply: a new UID; the old pods stay until GC."""
        self.sim.add_job(self.spec)

    @rule(value=st.booleans())
    def set_suspend(self, value):
        """kubectl patch dtj j --type=merge -p '{"spec":{"suspend":...}}'."""
        job = self.sim.job()
        if job is not None:
            job["spec"]["suspend"] = value
            job["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1000)

    @rule(kind=st.sampled_from(["restarts-string", "condition-without-status", "fractional-time",
                                "node-without-rank", "garbage-probe", "null-status", "drop-condition",
                                "flip-condition", "drop-master-addr", "tamper-condition"]),
          which=st.sampled_from(constants.ALL_CONDITIONS))
    def hand_edit_status(self, kind, which):
        job = self.sim.job()
        if job is None:
            return
        st_ = job.get("status") or {}
        job["status"] = st_
        if kind == "restarts-string":
            st_["restarts"] = str(st_.get("restarts") or 0)
        elif kind == "condition-without-status" and st_.get("conditions"):
            st_["conditions"][0].pop("status", None)
        elif kind == "fractional-time":
            st_["startTime"] = "2026-11-30T12:00:00.123456+00:00"
        elif kind == "node-without-rank":
            st_.setdefault("nodes", []).append({"name": "node-x"})
        elif kind == "garbage-probe":
            st_["probe"] = "garbage"
        elif kind == "null-status":
            job["status"] = None
        elif kind == "drop-condition":  # a tool that rewrites status, an older operator
            st_["conditions"] = [x for x in st_.get("conditions") or [] if x.get("type") != which]
        elif kind == "flip-condition":
            for x in st_.get("conditions") or []:
                if x.get("type") == which and x.get("status") in ("True", "False"):
                    x["status"] = {"True": "False", "False": "True"}[x["status"]]
        elif kind == "tamper-condition":  # the chosen condition loses its status, its reason is no string
            for x in st_.get("conditions") or []:
                if x.get("type") == which:
                    x.pop("status", None)
                    x["reason"] = {"edited": True}
        elif kind == "drop-master-addr":
            (st_.get("rendezvous") or {}).pop("masterAddr", None)
        if kind in ("null-status", "garbage-probe"):
            # the status no longer records the attempts: what remains is the pods' labels,
            # which the simulation checks on every create (never below an existing pod's)
            uid = job["metadata"]["uid"]
            self.sim.max_attempt = {k: v for k, v in self.sim.max_attempt.items() if k[0] != uid}
        job["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1000)

    @rule(kind=st.sampled_from(["status", "create_pod", "delete_pod", "read", "create_service"]),
          code=st.sampled_from([409, 422, 500, 0, None, None, None]))
    def fault(self, kind, code):
        if code is None:
            self.sim.faults.pop(kind, None)
        else:
            self.sim.faults[kind] = code

    @rule(seconds=st.sampled_from([0.5, 2, 5, 30, 120]))
    def tick(self, seconds):
        self.sim.now = later(self.sim.now, seconds)

    # ---- invariants ----------------------------------------------------------------------
    @invariant()
    def no_violation(self):
        assert not hasattr(self, "sim") or not self.sim.violations, self.sim.violations

    @invariant()
    def status_is_json_clean(self):
        job = self.sim.job() if hasattr(self, "sim") else None
        if job is not None:
            json.dumps(job.get("status"), allow_nan=False)

    @invariant()
    def messages_are_one_bounded_line(self):
        job = self.sim.job() if hasattr(self, "sim") else None
        st_ = (job or {}).get("status")
        for c in (st_.get("conditions") if isinstance(st_, dict) else None) or []:
            m = c.get("message") if isinstance(c, dict) else None
            if isinstance(m, str):  # hand edits here never touch a message: every one is the operator's
                assert "\n" not in m and len(m) <= 400, (c.get("type"), m)

    def teardown(self):
        if not hasattr(self, "sim"):
            return
        self.drain()

    def drain(self):
        """Faults stop and the cluster behaves: the job must reach an outcome in bounded steps."""
        self.sim.faults.clear()
        self.set_suspend(False)
        for _ in range(DRAIN_STEPS):
            self.kubelet_removes_deleted_and_gc()
            for p in self._pods(lambda p: not p["spec"].get("nodeName") and not p["status"].get("conditions")):
                self.schedule_one(p)
            for p in self._pods(_startable):
                self.start(0)
            for p in self._pods(lambda p: p["status"].get("phase") == "Running"):
                if p["metadata"]["labels"][constants.LABEL_ROLE] == constants.ROLE_PROBE:
                    if not self._world_up(p):
                        continue
                    text, good = probe_report(p, "good")
                    self.sim.good_reports[p["metadata"]["uid"]] = good
                    self.finish(p, 0, text)
                else:
                    self.finish(p, 0, "")
            self.op.step(NS, "j", now=self.sim.now)
            self.sim.now = later(self.sim.now, 5)
            assert not self.sim.violations, self.sim.violations
            job = self.sim.job()
            if job is None:
                return
            conds = {x["type"]: x for x in (job.get("status") or {}).get("conditions") or []}
            if any(conds.get(t, {}).get("status") == "True" for t in (constants.SUCCEEDED, constants.FAILED)):
                return
        pods = [(n, p["metadata"]["labels"], p["status"].get("phase"), p["spec"].get("nodeName"),
                 p["metadata"].get("deletionTimestamp")) for n, p in sorted(self.sim.pods.items())]
        from disttrain.reconcile.loop import reconcile
        from disttrain.reconcile.step import Observed
        from disttrain.shell.runner import parse_report
        job = self.sim.job()
        plan = reconcile(Observed.of(job, self.sim.pods.values(), self.sim.now), parse_report) if job else None
        failures = kube_for(self.sim).apply(job, plan) if job else None
        raise AssertionError(f"no outcome after {DRAIN_STEPS} steps without faults: last plan "
                             f"{plan and (plan.creates, plan.deletes, plan.events, plan.status_changed)} "
                             f"failures {failures}; pods {pods}; "
                             f"status {json.dumps((self.sim.job() or {}).get('status'))[:3000]}")


SEQUENCES = 2000 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 40
ReconcileMachine.TestCase.settings = settings(
    max_examples=SEQUENCES, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestReconcileMachine = ReconcileMachine.TestCase
