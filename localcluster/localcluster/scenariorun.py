"""Run one scenario: build its cluster, start the operator, apply its job, check the outcome.

``python -m localcluster.scenariorun <name|path> [--keep]`` (``make demo SCENARIO=...``)
prints the conditions as they change and exits 0 when the scenario's ``expect`` holds.
The cluster is the one of $DISTTRAIN_CLUSTER_INSTANCE (0 by default); an `up` that fails
halfway is undone with `down`, so nothing is left half-created. :func:`check` (pure)
decides whether a job's status meets an expectation.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import yaml

from localcluster.common import config
from localcluster.scenarios import altlibs, loader, nodeplan
from localcluster.scenarios import scenario as scn

JOB = "ddp-digits"


@dataclass
class Outcome:
    """The result of a run: ``ok``, why not, seconds from apply to the expected
    condition (None if never), and the job as last seen."""

    ok: bool
    why: str = ""
    seconds: Optional[float] = None
    total_seconds: float = 0.0
    job: Optional[dict] = None
    conditions: list = field(default_factory=list)
    rank_nodes: dict = field(default_factory=dict)  # probe rank -> node, as the probes were placed
    struck_at: Optional[float] = None  # seconds from apply to the scenario's strike (``seconds`` then counts from it)


def _condition(job: Optional[dict], ctype: str) -> Optional[dict]:
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def substitute(text: str, rank_nodes: dict[int, str]) -> str:
    """Replace ``{node:N}`` with the node of probe rank N (left as is while unknown)."""
    for r, n in rank_nodes.items():
        text = text.replace(f"{{node:{r}}}", n)
    return text


def check(job: Optional[dict], expect: scn.Expect, rank_nodes: dict[int, str]) -> tuple[Optional[bool], str]:
    """(True, '') when the expected condition is met, (False, why) when it can no longer
    be, (None, what is awaited) otherwise. ``phase`` is checked after the condition."""
    from disttrain.api import constants as k

    c = _condition(job, expect.condition)
    phase = ((job or {}).get("status") or {}).get("phase")
    waiting = c is not None and c.get("reason") in k.WAITING_REASONS and c.get("reason") != expect.reason
    # Unknown is never final: an expected Unknown/<reason> may follow Unknown/<another> (the
    # first poll may see ProbesPending before the scheduler's word reached the operator)
    undecided = c is not None and c.get("status") == "Unknown" and (
        expect.status != "Unknown" or bool(expect.reason) and c.get("reason") != expect.reason)
    if c is None or waiting or undecided:
        if phase in ("Succeeded", "Failed"):
            return False, f"job {phase} but {expect.condition} is {c and c.get('status')}"
        return None, f"{expect.condition} not yet decided"
    got = (c.get("status"), c.get("reason"))
    if c.get("status") != expect.status or (expect.reason and c.get("reason") != expect.reason):
        return False, (f"{expect.condition} is {got[0]}/{got[1]}, expected {expect.status}/"
                       f"{expect.reason or '*'}: {c.get('message', '')}")
    missing = [s for s in (substitute(x, rank_nodes) for x in expect.messageContains)
               if s not in (c.get("message") or "")]
    if missing:
        if any("{node:" in m for m in missing):
            return None, "waiting for probe placement"
        return False, f"{expect.condition} message lacks {missing}: {c.get('message', '')}"
    extra = [s for s in (substitute(x, rank_nodes) for x in expect.messageLacks)
             if s in (c.get("message") or "")]
    if extra:
        return False, f"{expect.condition} message should not name {extra}: {c.get('message', '')}"
    lines = (((job or {}).get("status") or {}).get("probe") or {}).get("interfacesNotChosen") or []
    absent = [s for s in expect.notChosenContains if not any(s in str(x) for x in lines)]
    if absent:
        return False, f"status.probe.interfacesNotChosen lacks {absent}: {lines}"
    if expect.socketIfname is not None:
        got_if = (((job or {}).get("status") or {}).get("rendezvous") or {}).get("socketIfname")
        if got_if is None:
            if phase in ("Succeeded", "Failed"):
                return False, f"job {phase} without status.rendezvous.socketIfname"
            return None, "waiting for status.rendezvous.socketIfname"
        if got_if != expect.socketIfname:
            return False, (f"status.rendezvous.socketIfname is {got_if}, expected "
                           f"{expect.socketIfname} ({expect.condition}: {c.get('message', '')})")
    if expect.phase and phase != expect.phase:
        if phase in ("Succeeded", "Failed"):
            return False, f"job {phase}, expected {expect.phase}"
        return None, f"condition met; waiting for phase {expect.phase} (now {phase})"
    return True, ""


def check_phase(job: Optional[dict], phase: Optional[str]) -> tuple[Optional[bool], str]:
    """Whether the job reached ``phase`` (True when None), can no longer (False), or not yet."""
    got = ((job or {}).get("status") or {}).get("phase")
    if phase is None or got == phase:
        return True, ""
    if got in ("Succeeded", "Failed"):
        return False, f"job {got}, expected {phase}"
    return None, f"condition met; waiting for phase {phase} (now {got})"


def describe_problems(text: str, expect: scn.Expect) -> list[str]:
    """What ``kubectl describe dtj`` output (``text``) lacks for a user to act without
    reading logs: the expected condition with its status and reason under Conditions and,
    for a false condition, a Warning Event with that reason whose message starts with
    ``<Type>=False``. Returns the problems (empty: all there). Pure."""
    head, _, events = text.partition("\nEvents:")
    problems = []
    entries = re.split(r"\n\s*Last Transition Time:", head.partition("Conditions:")[2])
    fields = [dict(re.findall(r"^\s*(Type|Status|Reason):\s+(\S+)\s*$", e, re.M)) for e in entries]
    mine = [f for f in fields if f.get("Type") == expect.condition]
    if not mine:
        problems.append(f"no {expect.condition} under Conditions")
    elif mine[0].get("Status") != expect.status or (expect.reason and mine[0].get("Reason") != expect.reason):
        problems.append(f"{expect.condition} under Conditions is {mine[0]}, expected "
                        f"{expect.status}/{expect.reason or '*'}")
    if expect.status == "False" and expect.reason and not re.search(
            rf"^\s*Warning\s+{re.escape(expect.reason)}\s+.*\b{re.escape(expect.condition)}=False",
            events, re.M):
        problems.append(f"no Warning Event {expect.reason} with {expect.condition}=False")
    return problems


def describe(ns: str) -> str:
    """``kubectl describe dtj <job> -n ns`` as a user runs it ('' if it fails)."""
    out = _kubectl("describe", "dtj", JOB, "-n", ns, check_=False)
    return out.stdout if out.returncode == 0 else ""


def _kubectl(*args: str, input: Optional[str] = None, check_: bool = True):
    from localcluster.cluster.operator_install import kubectl
    return kubectl(*args, input=input, check=check_)


def _job_pods(ns: str) -> list[dict]:
    """The job's pods in ``ns`` as the API returns them ([] when the list fails)."""
    out = _kubectl("get", "pods", "-n", ns, "-l", f"disttrain.dev/job-name={JOB}", "-o", "json",
                   check_=False)
    return json.loads(out.stdout).get("items", []) if out.returncode == 0 else []


def _rank_nodes(pods: list[dict]) -> dict[int, str]:
    """Probe rank -> node, from the job's ``pods``."""
    res = {}
    for p in pods:
        name = p["metadata"]["name"]
        node = (p.get("spec") or {}).get("nodeName")
        # the probes' pods, or in place the training pods that probe (workers are pinned to
        # the nodes their rank's probe validated: the same map either way)
        if node and (f"{JOB}-probe-" in name or f"{JOB}-worker-" in name):
            try:
                res[int(name.rsplit("-", 1)[1])] = node
            except ValueError:
                pass
    return res


def sidecar_check(injected: dict[str, bool]) -> Optional[str]:
    """Why a ``mesh`` scenario proves nothing, or None: every pod of the job seen
    (``injected``: pod name -> whether it carries ``istio-proxy``) must carry the sidecar,
    and at least one must have been seen; else the outcome says nothing about the mesh."""
    if not injected:
        return "no pod of the job was seen, so none was seen with Istio's sidecar"
    bare = sorted(name for name, has in injected.items() if not has)
    return f"pods without Istio's sidecar (istio-proxy): {', '.join(bare)}" if bare else None


def run_job(sc: scn.Scenario, ns: str, say=print, training_timeout: float = 300.0,
            run: int = 0, restore: Optional[Callable[[], Any]] = None) -> Outcome:
    """Apply the scenario's job in namespace ``ns`` (created) and wait for ``expect`` (of
    run ``run`` of its ``repeat``: :meth:`scenario.Expect.for_run`). A ``strike`` is carried
    out once Progressing is True and undone at the end; ``restore`` brings a lost node back
    (default: the scenario's cluster, ``bringup.up``)."""
    sc = sc.model_copy(update={"expect": sc.expect.for_run(run)})
    _kubectl("create", "namespace", ns, check_=False)
    if sc.kueue is not None:  # the job's namespace gets Kueue's LocalQueue
        from localcluster.cluster import kueue, kueue_objects
        from localcluster.common.kubeconfig import admin_client
        kueue.apply(admin_client(config.state_dir()), kueue_objects.local_queue(ns))
        if sc.kueue.holdSeconds:
            _hold_quota(sc, ns, say)
    if sc.networkPolicies:  # enforced before the job's first pod exists
        from localcluster.cluster import netpol
        netpol.apply_policies(sc.networkPolicies, ns)
    if sc.mesh:  # the sidecar is injected from the job's first pod on
        from localcluster.cluster import mesh
        mesh.enable(ns)
    docs = loader.job_documents(sc)
    t0 = time.monotonic()
    _kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    strike = _Striker(sc, t0, training_timeout, say, restore)
    try:
        return _watch(sc, ns, t0, training_timeout, say, strike)
    finally:
        strike.undo()


class _Striker:
    """The scenario's strike (none: inert): due ``delaySeconds`` after Progressing=True."""

    def __init__(self, sc: scn.Scenario, t0: float, wait: float, say,
                 restore: Optional[Callable[[], Any]]) -> None:
        self.sc, self.t0, self.say, self.restore = sc, t0, say, restore
        self.deadline = t0 + wait  # for Progressing=True
        self.due: Optional[float] = None
        self.at: Optional[float] = None  # monotonic time of the strike
        self.undo = lambda: None

    def pending(self) -> bool:
        return self.sc.strike is not None and self.at is None

    def step(self, job: Optional[dict], pods: list[dict]) -> Optional[str]:
        """Strike when due; why the run cannot go on, else None."""
        from localcluster import bringup, strikes
        s = self.sc.strike
        if s is None or self.at is not None:
            return None
        c = _condition(job, "Progressing")
        if self.due is None and c is not None and c.get("status") == "True":
            self.due = time.monotonic() + s.delaySeconds
        if self.due is None:
            return f"Progressing never turned True before the strike" if time.monotonic() > self.deadline else None
        if time.monotonic() < self.due:
            return None
        workers = {p["metadata"]["name"]: p for p in pods}
        by_rank = {r: workers[n] for r in range(self.sc.nodes) if (n := f"{JOB}-worker-{r}") in workers}
        try:
            self.undo = strikes.strike(s, by_rank, config.state_dir(),
                                       lambda: ((self.restore or (lambda: bringup.up(scenario=self.sc)))(), _settle()),
                                       self.say)
        except strikes.StrikeError as e:
            return f"strike {s.fault} failed: {e}"
        self.at = time.monotonic()
        return None


def _settle() -> None:
    from localcluster import strikes
    strikes.wait_settled(lambda: json.loads(_kubectl("get", "nodes", "-o", "json").stdout).get("items", []))


def _watch(sc: scn.Scenario, ns: str, t0: float, training_timeout: float, say, strike: _Striker) -> Outcome:
    seen: dict[str, tuple] = {}
    met_at = None
    deadline = t0 + sc.expect.withinSeconds
    job = None
    rank_nodes: dict[int, str] = {}
    injected: dict[str, bool] = {}  # pod name -> carries istio-proxy (scenarios with mesh)
    live = sc.expect.condition == "Progressing"  # it changes as training goes: a mismatch is not final
    while True:
        out = _kubectl("get", "dtj", JOB, "-n", ns, "-o", "json", check_=False)
        job = json.loads(out.stdout) if out.returncode == 0 else None
        now = time.monotonic() - t0
        for cnd in ((job or {}).get("status") or {}).get("conditions") or []:
            key = (cnd.get("status"), cnd.get("reason"))
            if seen.get(cnd["type"]) != key:
                seen[cnd["type"]] = key
                say(f"  {now:6.1f}s {cnd['type']:<20} {cnd.get('status'):<7} {cnd.get('reason')}: "
                    f"{cnd.get('message', '')}")
        pods = _job_pods(ns)
        rank_nodes.update(_rank_nodes(pods))  # kept: a probe still running at the verdict is deleted
        if strike.pending():
            failed = strike.step(job, pods)
            if failed or not strike.pending():
                if failed:
                    return Outcome(False, failed, None, now, job, _conds(job), rank_nodes)
                deadline = (strike.at or 0.0) + sc.expect.withinSeconds
            time.sleep(0.5)
            continue
        if sc.mesh:
            injected.update({p["metadata"]["name"]: "istio-proxy" in [
                c.get("name") for c in (p.get("spec") or {}).get("initContainers") or []] for p in pods})
        cond_only = sc.expect.model_copy(update={"phase": None})
        if met_at is None and check(job, cond_only, rank_nodes)[0]:
            met_at = now
            if sc.expect.phase:
                deadline = t0 + met_at + training_timeout
        verdict, why = check(job, sc.expect, rank_nodes)
        if live and met_at is not None:  # seen as expected once; it may move on: only the phase is left
            verdict, why = check_phase(job, sc.expect.phase)
        if verdict and sc.mesh and (bare := sidecar_check(injected)):
            verdict, why = False, f"{why}; but {bare}"
        if verdict is False and live and ((job or {}).get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            verdict = None  # not yet: the verdict may still come
        struck = None if strike.at is None else strike.at - t0
        if verdict is not None:
            return Outcome(bool(verdict), why, _since(met_at, struck), now, job, _conds(job), rank_nodes, struck)
        if time.monotonic() > deadline:
            return Outcome(False, f"timed out after {now:.0f}s: {why}", _since(met_at, struck), now, job,
                           _conds(job), rank_nodes, struck)
        time.sleep(0.5)


def _conds(job: Optional[dict]) -> list:
    return ((job or {}).get("status") or {}).get("conditions") or []


def _since(met_at: Optional[float], struck: Optional[float]) -> Optional[float]:
    """Seconds to the verdict: from apply, or from the strike when there was one."""
    return met_at if met_at is None or struck is None else met_at - struck


def holder_pods(cpu: str) -> tuple[int, str]:
    """(pods, CPU request of each) that together hold a quota of ``cpu`` (a Kubernetes
    quantity: "2", "1.5", "2500m"): pods of at most one CPU each, so that every one fits a
    node whose CPUs are partly requested by DaemonSets (the NetworkPolicy enforcer's
    100m); one pod of all the quota fits no 2-CPU node then, and holds the quota forever."""
    millis = int(float(cpu[:-1])) if cpu.endswith("m") else int(float(cpu) * 1000)
    pods = max(1, -(-millis // 1000))
    return pods, f"{millis // pods}m"


def _hold_quota(sc: scn.Scenario, ns: str, say=print) -> None:
    """A batch/v1 Job queued in the same LocalQueue that holds all of the quota's CPU for
    ``kueue.holdSeconds``: the scenario's job waits in the queue until it ends."""
    from localcluster.cluster import kueue_objects
    from localcluster.common.config import UTILITY_IMAGE
    cpu = dict(kueue_objects.Options.from_json(sc.kueue.options().to_json()).quota).get("cpu", "1")
    pods, per_pod = holder_pods(cpu)
    hold = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "quota-holder", "labels": {kueue_objects.QUEUE_LABEL: kueue_objects.LOCAL_QUEUE}},
            "spec": {"suspend": True, "backoffLimit": 0, "parallelism": pods, "completions": pods,
                     "template": {"spec": {
                         "restartPolicy": "Never", "containers": [{
                             "name": "hold", "image": UTILITY_IMAGE,
                             "command": ["sleep", str(sc.kueue.holdSeconds)],
                             "resources": {"requests": {"cpu": per_pod, "memory": "64Mi"}}}]}}}}
    _kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(hold))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = _kubectl("get", "job", "quota-holder", "-n", ns, "-o", "jsonpath={.spec.suspend}", check_=False)
        if out.stdout.strip() == "false":
            say(f"  a batch Job holds the queue's {cpu} CPU for {sc.kueue.holdSeconds}s")
            return
        time.sleep(0.5)
    say("  the quota holder was not admitted within 60s; applying the job anyway")


def chosen_ifname(o: Outcome) -> Optional[str]:
    return (((o.job or {}).get("status") or {}).get("rendezvous") or {}).get("socketIfname")


def same_outcome(outcomes: list[Outcome]) -> Outcome:
    """Several runs of one scenario as one outcome: the first failing run, else the last,
    failed when the runs chose different interfaces (status.rendezvous.socketIfname)."""
    bad = next((o for o in outcomes if not o.ok), None)
    if bad is not None:
        return bad
    last = outcomes[-1]
    chosen = [chosen_ifname(o) for o in outcomes]
    if len(set(chosen)) > 1:
        return Outcome(False, f"the runs chose different interfaces: {chosen}", last.seconds,
                       last.total_seconds, last.job, last.conditions)
    return last


def prepare(sc: scn.Scenario, say=print) -> None:
    """Cluster up as the scenario says, and the operator running. On a failed `up` the
    cluster is taken down (nothing half-created) and the error re-raised."""
    from localcluster import bringup, cli
    from localcluster.cluster import operator_install
    from localcluster.network import firewall
    from localcluster.scenarios import altlibs
    for t in nodeplan.topology(sc):
        if t.firewall:
            firewall.check(t.firewall)
    altlibs.ensure_for(sc, say=say)  # e.g. another NCCL for version-skew (before any change)
    try:
        bringup.up(scenario=sc)
    except Exception:
        say("up failed; taking the cluster down")
        operator_install.stop(timeout=5.0)
        cli.down()
        raise
    if sc.networkPolicies:  # the enforcer only for scenarios that ask for it
        from localcluster.cluster import netpol
        netpol.ensure(say=say)
    if sc.mesh:  # the injector only for scenarios that ask for it
        from localcluster.cluster import mesh
        mesh.ensure(say=say)
    operator_install.stop()  # a fresh operator: the one running may be older code
    operator_install.start()


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m localcluster.scenariorun", description=__doc__)
    ap.add_argument("scenario", help="a name in scenarios/ or a path to a scenario file")
    ap.add_argument("--keep", action="store_true", help="keep the job's namespace afterwards")
    ap.add_argument("--placement", choices=("Pods", "InPlace"),
                    help="run the job with this spec.probe.placement (default: as the scenario says)")
    a = ap.parse_args(argv)
    try:
        sc = loader.placed(loader.load(a.scenario), a.placement)
    except scn.ScenarioError as e:
        print(f"scenario error:\n{e}", file=sys.stderr)
        return 2
    print(f"scenario {sc.name}: {sc.description.strip()}")
    print(f"cluster instance {config.INSTANCE} (state {config.state_dir()})")
    try:
        prepare(sc)
    except altlibs.AltLibError as e:
        print(f"scenario {sc.name}: {e}", file=sys.stderr)
        return 2
    outcomes: list[Outcome] = []
    for i in range(sc.expect.repeat):
        if sc.expect.repeat > 1:
            print(f"run {i + 1}/{sc.expect.repeat}")
        ns = f"sc-{sc.name[:40]}-{uuid.uuid4().hex[:5]}".lower()
        try:
            o = run_job(sc, ns, run=i)
            text = describe(ns)
            conditions_and_events = text[text.find("Status:"):] if "Status:" in text else text
            print(f"\n$ kubectl describe dtj {JOB} -n {ns}   (status and events)\n"
                  f"{conditions_and_events.rstrip()}\n")
        finally:
            if not a.keep:
                _kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", check_=False)
        outcomes.append(o)
        if not o.ok:
            break
    o = same_outcome(outcomes)
    e = sc.expect
    want = f"{e.condition}={e.status}" + (f" ({e.reason})" if e.reason else "") + \
        (f", phase {e.phase}" if e.phase else "")
    if o.ok:
        print(f"PASS {sc.name}: {want} after {o.seconds:.1f}s (total {o.total_seconds:.1f}s)")
        return 0
    print(f"FAIL {sc.name}: expected {want}: {o.why}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
