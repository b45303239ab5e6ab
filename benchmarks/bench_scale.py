"""Scale: the product as the job, the cluster and the number of jobs grow (issue 11, section 3).

Three measurements, each a section of the report (``benchmarks/results/scale.json`` and
``scale.md``; ``--out`` elsewhere for trial runs):

1. **Nodes** (``--nodes 2,8,16,32``): the local cluster with that many simulated nodes
   (``localcluster up --nodes N``) runs the example job with ``numNodes: N`` (launcher
   ``env``, the trainer ``sleep 3``: what is measured is validation and launch, not
   training), probe on and probe off (``--runs`` each, alternating). Per run: seconds from
   ``kubectl apply`` to ``Validated`` and to every training pod Running; the probe's phase
   times (slowest rank, from ``status.probe.phaseSeconds``) and the operator-measured probe
   duration; the CPU seconds the probe processes spent (summed over ranks and the busiest
   rank: all simulated nodes share this machine's cores, so the wall time is mostly
   contention, and the CPU time is what transfers to a real cluster); the API requests the
   operator made for the job; a timeline of the job's pods (created, scheduled, running,
   ended, as a watch sees them) that section 4 of the issue reads. After each size the
   operator's peak RSS (VmHWM; the operator is restarted per size).
2. **Planner** (``--planner-ranks 64,256,1024,4096``): the probe's connectivity plan
   (``disttrain_probe.phases.connectivity.plan``, pure) beyond what the machine hosts: dials per
   rank (min/mean/max) and in total, against a full mesh.
3. **Many jobs** (``--jobs 100``): that many DistTrainingJobs applied at once on a 2-node
   cluster (probes off by default, ``--jobs-probe`` to turn them on; each job its own
   rendezvous port on the node network, trainer ``sleep 3``): seconds until every job
   reached Succeeded or Failed, how many of each, the operator's peak RSS, API requests
   per job, the highest request rate seen in any second, and the retries the operator
   logged (kopf's "Will retry" lines): a tight retry loop shows as a rate far above the
   per-job average and many retries.

API requests are counted by the apiserver itself: the benchmark creates a FlowSchema that
matches the operator's ServiceAccount (``disttrain-system/disttrain-operator``) at the
priority level such requests get anyway (``workload-low``), and reads
``apiserver_flowcontrol_dispatched_requests_total{flow_schema="bench-disttrain-operator"}``
from the apiserver's /metrics before and after (a watch counts once, when it starts).

Probe CPU time is sampled every 0.1 s from ``/proc/<pid>/stat`` (utime+stime of the
process and its waited-for children) of every process running ``disttrain_probe`` inside
one of this cluster instance's network namespaces; a lower bound by at most one sample
(0.1 s) per rank.

    make bench-scale                                    # everything, as the issue asks
    .venv/bin/python benchmarks/bench_scale.py --nodes 2,8 --jobs 10 --out /tmp/scale
    .venv/bin/python benchmarks/bench_scale.py --planner-only
    .venv/bin/python benchmarks/bench_scale.py --render  # scale.md from scale.json

Use your own cluster instance when others share the machine (DISTTRAIN_CLUSTER_INSTANCE).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
JOB = "ddp-digits"
FLOW_SCHEMA = "bench-disttrain-operator"
OPERATOR_SA = ("disttrain-system", "disttrain-operator")  # operator_install's identity
TRAIN_COMMAND = ["sleep", "3"]
SAMPLE_SECONDS = 0.1
DEFAULT_NODES = (2, 8, 16, 32)
DEFAULT_RANKS = (32, 64, 256, 1024, 4096)  # 32: the full-mesh limit, for contrast


# ---- pure parts ------------------------------------------------------------------------


def planner_rows(ranks: list[int]) -> list[dict]:
    """The probe's connectivity plan at each world size in ``ranks``: dials per rank
    (min, mean, max), total dials, distinct pairs, the full mesh's pairs and the seconds
    the plan took to compute. Uses ``disttrain_probe.phases.connectivity.plan`` (not changed here)."""
    from disttrain_probe.phases import connectivity as C

    out = []
    for world in ranks:
        t0 = time.perf_counter()
        plan = C.plan(world, C.plan_seed("10.100.0.11", 29500, world))
        took = time.perf_counter() - t0
        dials = [len(v) for v in plan.values()]
        out.append({"ranks": world, "per_rank_min": min(dials), "per_rank_max": max(dials),
                    "per_rank_mean": sum(dials) / world, "total_dials": sum(dials),
                    "pairs": sum(dials) // 2, "full_mesh_pairs": world * (world - 1) // 2,
                    "full_mesh": world <= C.FULL_MESH_MAX, "plan_seconds": took})
    return out


def flow_schema() -> dict:
    """A FlowSchema that gives the operator's requests a metric label of their own
    (``flow_schema="bench-disttrain-operator"``) without changing how they are served
    (the priority level ServiceAccounts get by default)."""
    ns, name = OPERATOR_SA
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
        "metadata": {"name": FLOW_SCHEMA, "labels": {"app.kubernetes.io/managed-by": "bench-scale"}},
        "spec": {
            "priorityLevelConfiguration": {"name": "workload-low"},
            "matchingPrecedence": 1000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount",
                              "serviceAccount": {"namespace": ns, "name": name}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                   "clusterScope": True, "namespaces": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }


def dispatched(metrics_text: str, schema: str = FLOW_SCHEMA) -> float:
    """Requests the apiserver dispatched for FlowSchema ``schema``: the sum of
    ``apiserver_flowcontrol_dispatched_requests_total`` samples with that flow_schema in a
    Prometheus text exposition (0 when there is none yet)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("apiserver_flowcontrol_dispatched_requests_total{") and \
                f'flow_schema="{schema}"' in line:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                pass
    return total


def cpu_seconds(stat_text: str, clk_tck: int) -> float:
    """utime + stime + cutime + cstime of a ``/proc/<pid>/stat`` line, in seconds.
    Raises ValueError for a malformed line."""
    fields = stat_text.rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime..cstime are fields 14..17
    return sum(int(x) for x in fields[11:15]) / clk_tck


def peak_rss_bytes(status_text: str) -> Optional[int]:
    """VmHWM (peak resident set) of a ``/proc/<pid>/status`` text, in bytes (None if absent)."""
    for line in status_text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def max_rate(samples: list[tuple[float, float]]) -> float:
    """The highest rate (per second) between consecutive (seconds, count) samples at least
    0.5 s apart; 0 for fewer than two samples."""
    best, last = 0.0, None
    for t, c in samples:
        if last is not None and t - last[0] >= 0.5:
            best = max(best, (c - last[1]) / (t - last[0]))
            last = (t, c)
        elif last is None:
            last = (t, c)
    return best


def job_documents(example: list[dict], nodes: int, probe: bool, name: str = JOB,
                  port: Optional[int] = None, probe_timeout: int = 300) -> list[dict]:
    """The example's DistTrainingJob for a scale run: ``numNodes`` = ``nodes``, launcher
    env, the trainer ``sleep 3`` (no script, so no ConfigMap), probe on or off with
    ``probe_timeout`` seconds of budget (every simulated node's probe imports torch on
    the same two cores: the default 60 s, of which inventory gets 30 %, is the budget of a
    real node, not of 32 sharing a laptop), optionally its own rendezvous port. The input
    is not modified."""
    job = json.loads(json.dumps(next(d for d in example if d.get("kind") == "DistTrainingJob")))
    job["metadata"]["name"] = name
    spec = job["spec"]
    spec.update({"numNodes": nodes, "numProcPerNode": 1, "launcher": "env"})
    spec.setdefault("probe", {}).update(enabled=probe, timeoutSeconds=probe_timeout)
    if port is not None:
        spec.setdefault("rendezvous", {})["port"] = port
    pod = spec["template"]["spec"]
    pod.pop("volumes", None)
    c = pod["containers"][0]
    c.pop("volumeMounts", None)
    c["command"] = list(TRAIN_COMMAND)
    return [job]


def timeline_summary(events: dict[str, dict[str, float]]) -> dict[str, Optional[float]]:
    """From a run's timeline (pod name -> {created, scheduled, running, ended} in seconds
    after apply; under "job" the job's conditions -> when first seen True or False) the
    operator-side milestones: first probe pod created, all probes scheduled, all probes
    running, all probes ended, Validated, first and last training pod created, all
    training pods scheduled and running. Missing: None."""
    def pods(role: str) -> list[dict]:
        return [v for k, v in events.items() if k != "job" and v.get("role") == role]

    def first(role: str, key: str) -> Optional[float]:
        xs = [p[key] for p in pods(role) if key in p]
        return min(xs) if xs else None

    def last(role: str, key: str) -> Optional[float]:
        ps = pods(role)
        xs = [p[key] for p in ps if key in p]
        return max(xs) if ps and len(xs) == len(ps) else None

    job = events.get("job") or {}
    return {
        "probe_created_first": first("probe", "created"),
        "probe_created_last": last("probe", "created"),
        "probe_scheduled_last": last("probe", "scheduled"),
        "probe_running_first": first("probe", "running"),
        "probe_running_last": last("probe", "running"),
        "probe_ended_last": last("probe", "ended"),
        "validated": job.get("Validated"),
        "worker_created_first": first("worker", "created"),
        "worker_created_last": last("worker", "created"),
        "worker_scheduled_last": last("worker", "scheduled"),
        "worker_running_last": last("worker", "running"),
    }


def _f(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _med(xs: list) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def size_row(nodes: int, runs: list[dict], rss: Optional[int]) -> dict:
    """Medians over the runs of one cluster size, probe on and off, and the overhead."""
    on = [r for r in runs if r["probe"]]
    off = [r for r in runs if not r["probe"]]
    phases: dict[str, list] = {}
    for r in on:
        for k, v in (r.get("phase_seconds") or {}).items():
            phases.setdefault(k, []).append(v)
    row = {
        "nodes": nodes, "runs_on": len(on), "runs_off": len(off),
        "validated_s": _med([r.get("validated_s") for r in on]),
        "running_on_s": _med([r.get("running_s") for r in on]),
        "running_off_s": _med([r.get("running_s") for r in off]),
        "probe_duration_s": _med([r.get("probe_duration_s") for r in on]),
        "phase_seconds": {k: _med(v) for k, v in phases.items()},
        "probe_cpu_total_s": _med([r.get("probe_cpu_total_s") for r in on]),
        "probe_cpu_max_s": _med([r.get("probe_cpu_max_s") for r in on]),
        "probe_wall_max_s": _med([r.get("probe_wall_max_s") for r in on]),
        "requests_on": _med([r.get("requests") for r in on]),
        "requests_off": _med([r.get("requests") for r in off]),
        "operator_peak_rss_bytes": rss,
        "outcomes": sorted({str(r.get("phase")) for r in runs}),
    }
    if row["running_on_s"] is not None and row["running_off_s"]:
        row["overhead_s"] = row["running_on_s"] - row["running_off_s"]
        row["overhead_ratio"] = row["running_on_s"] / row["running_off_s"]
    return row


def markdown(data: dict) -> str:
    """The report: nodes table, probe phases, planner table, many-jobs figures."""
    meta = data.get("meta") or {}
    out = ["# Scale (benchmarks/bench_scale.py)", "",
           f"{meta.get('date', '?')}, cluster on {meta.get('cpus', '?')} CPU(s) "
           f"({meta.get('machine', '?')}), commit {meta.get('commit', '?')}, "
           f"cluster instance {meta.get('instance', '?')}."
           + (f" Note: {meta['note']}." if meta.get("note") else ""), ""]
    sizes = data.get("sizes") or []
    if sizes:
        out += ["## Nodes", "",
                "Medians over the runs. Seconds from `kubectl apply` (the trainer is `sleep 3`). "
                "Every simulated node shares this machine's cores: the wall times are mostly "
                "contention; the probes' CPU seconds are what transfers to a real cluster. "
                "Requests: made by the operator for one job (the apiserver's count). "
                "Overhead = all training pods Running, probe on minus probe off. "
                f"spec.probe.timeoutSeconds {meta.get('probe_timeout', '?')}.", "",
                "| nodes | apply -> Validated | apply -> pods Running (on / off) | overhead | "
                "probe duration | probe CPU s (all ranks / busiest) | busiest probe's wall s | "
                "requests per job (on / off) | operator peak RSS MiB | outcome |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for r in sizes:
            rss = r.get("operator_peak_rss_bytes")
            over = "-" if r.get("overhead_s") is None else \
                f"+{r['overhead_s']:.2f} s ({r['overhead_ratio']:.2f}x)"
            out.append(
                f"| {r['nodes']} | {_f(r['validated_s'])} | {_f(r['running_on_s'])} / "
                f"{_f(r['running_off_s'])} | {over} | {_f(r['probe_duration_s'])} | "
                f"{_f(r['probe_cpu_total_s'])} / {_f(r['probe_cpu_max_s'])} | "
                f"{_f(r['probe_wall_max_s'])} | {_f(r['requests_on'], 0)} / "
                f"{_f(r['requests_off'], 0)} | {_f(rss / 2**20 if rss else None, 0)} | "
                f"{', '.join(r['outcomes'])} |")
        names = sorted({k for r in sizes for k in r.get("phase_seconds") or {}})
        if names:
            out += ["", "Probe phases (slowest rank, seconds, median):", "",
                    "| nodes | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
            for r in sizes:
                out.append(f"| {r['nodes']} | "
                           + " | ".join(_f((r.get("phase_seconds") or {}).get(n)) for n in names)
                           + " |")
        tl = [r for r in sizes if r.get("timeline_on")]
        if tl:
            keys = list(tl[0]["timeline_on"])
            out += ["", "Where the time goes (seconds after apply, median; probe on, then "
                    "probe off for the training pods):", "",
                    "| nodes | " + " | ".join(keys) + " | off: worker_created_last | "
                    "off: worker_running_last |", "|---" * (len(keys) + 3) + "|"]
            for r in tl:
                off = r.get("timeline_off") or {}
                out.append(f"| {r['nodes']} | "
                           + " | ".join(_f(r["timeline_on"].get(k)) for k in keys)
                           + f" | {_f(off.get('worker_created_last'))} | "
                           f"{_f(off.get('worker_running_last'))} |")
    planner = data.get("planner") or []
    if planner:
        out += ["", "## Probe plan beyond this machine", "",
                "`disttrain_probe.phases.connectivity.plan` (pure): which peers each rank dials, per "
                "network probed. Up to its full-mesh limit every rank dials every peer; beyond, "
                "ring neighbours (+-1, +-2) and two rounds of random disjoint pairs.", "",
                "| ranks | dials per rank (min / mean / max) | total dials | pairs | full mesh pairs "
                "| plan computed in |", "|---|---|---|---|---|---|"]
        for p in planner:
            out.append(f"| {p['ranks']} | {p['per_rank_min']} / {p['per_rank_mean']:.2f} / "
                       f"{p['per_rank_max']} | {p['total_dials']} | {p['pairs']} | "
                       f"{p['full_mesh_pairs']} | {p['plan_seconds'] * 1000:.1f} ms |")
    many = data.get("many")
    if many:
        rss = many.get("operator_peak_rss_bytes")
        out += ["", "## Many jobs at once", "",
                f"{many['jobs']} DistTrainingJobs of {many['job_nodes']} node(s) applied at once "
                f"on a {many['cluster_nodes']}-node cluster, probes {'on' if many['probe'] else 'off'}, "
                f"trainer `sleep 3`.", "",
                "| jobs | all at an outcome after | outcomes | requests per job | highest "
                "requests/s | operator peak RSS MiB | retries logged |",
                "|---|---|---|---|---|---|---|",
                f"| {many['jobs']} | {_f(many.get('all_done_s'), 1)} s | "
                + ", ".join(f"{k} {v}" for k, v in sorted((many.get('outcomes') or {}).items()))
                + f" | {_f(many.get('requests_per_job'), 1)} | {_f(many.get('max_rate'), 0)} | "
                f"{_f(rss / 2**20 if rss else None, 0)} | {many.get('retries', '-')} |"]
    return "\n".join(out) + "\n"


# ---- on the cluster ---------------------------------------------------------------------


class ProbeCpu(threading.Thread):
    """Samples every 0.1 s the CPU seconds and lifetime of each process running
    ``disttrain_probe`` inside one of this cluster instance's network namespaces."""

    def __init__(self):
        super().__init__(daemon=True)
        from localcluster.common.config import NODE_NS_PREFIX

        self.clk = os.sysconf("SC_CLK_TCK")
        self.prefix = NODE_NS_PREFIX
        self.stop_evt = threading.Event()
        self.seen: dict[int, dict] = {}  # pid -> {cpu, first, last}

    def _our_netns(self) -> set[int]:
        out = set()
        try:
            for p in Path("/run/netns").iterdir():
                if p.name.startswith(self.prefix):
                    try:
                        out.add(p.stat().st_ino)
                    except OSError:
                        pass
        except OSError:
            pass
        return out

    def run(self) -> None:
        netns, refreshed = self._our_netns(), time.monotonic()
        while not self.stop_evt.is_set():
            now = time.monotonic()
            if now - refreshed > 1.0:  # pod namespaces come and go
                netns, refreshed = self._our_netns(), now
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                pid = int(d.name)
                try:
                    if pid not in self.seen:  # the cheap test first: most pids are not ours
                        if os.stat(d / "ns" / "net").st_ino not in netns:
                            continue
                        cmd = (d / "cmdline").read_bytes()
                        if b"disttrain_probe" not in cmd:
                            continue  # (a container's pid runs containerinit before exec)
                        self.seen[pid] = {"cpu": 0.0, "first": now, "last": now,
                                          "cmd": cmd.replace(b"\0", b" ").decode(errors="replace")[:200]}
                    self.seen[pid]["cpu"] = cpu_seconds((d / "stat").read_text(), self.clk)
                    self.seen[pid]["last"] = now
                except (OSError, ValueError, IndexError):
                    continue
            self.stop_evt.wait(SAMPLE_SECONDS)

    def result(self) -> dict:
        """CPU seconds summed over the probe processes and of the busiest one, and the
        longest-lived one's wall seconds (None when none was seen)."""
        self.stop_evt.set()
        self.join(timeout=5)
        if not self.seen:
            return {"probe_cpu_total_s": None, "probe_cpu_max_s": None, "probe_wall_max_s": None,
                    "probe_processes": 0}
        v = list(self.seen.values())
        return {"probe_cpu_total_s": sum(x["cpu"] for x in v),
                "probe_cpu_max_s": max(x["cpu"] for x in v),
                "probe_wall_max_s": max(x["last"] - x["first"] for x in v),
                "probe_processes": len(v)}


class _Timeline(threading.Thread):
    """Watches one kind of object in a namespace (``list_fn(*args)``, re-watched every 5 s
    or when a watch breaks) and hands each object to :meth:`record` with the seconds after
    ``t0`` it was seen; :meth:`result` stops the watch and returns ``events``."""

    def __init__(self, list_fn, args: tuple, t0: float):
        super().__init__(daemon=True)
        self.list_fn, self.args, self.t0 = list_fn, args, t0
        self.events: dict = {}
        self.stop_evt = threading.Event()

    def record(self, obj: Any, now: float) -> None:
        raise NotImplementedError

    def run(self) -> None:
        from kubernetes import watch

        w = watch.Watch()
        while not self.stop_evt.is_set():
            try:
                for ev in w.stream(self.list_fn, *self.args, timeout_seconds=5):
                    self.record(ev["object"], time.monotonic() - self.t0)
                    if self.stop_evt.is_set():
                        break
            except Exception:  # a broken watch: start another
                time.sleep(0.2)
        w.stop()

    def result(self) -> dict:
        self.stop_evt.set()
        self.join(timeout=10)
        return self.events


class PodTimeline(_Timeline):
    """Per pod of the namespace, the seconds after ``t0`` when a watch first saw it created,
    scheduled (nodeName), running (a container running or already ended) and ended (phase
    Succeeded/Failed), with its role label."""

    def __init__(self, core, ns: str, t0: float):
        super().__init__(core.list_namespaced_pod, (ns,), t0)

    def record(self, pod: Any, now: float) -> None:
        from disttrain.api import constants

        e = self.events.setdefault(pod.metadata.name, {
            "role": (pod.metadata.labels or {}).get(constants.LABEL_ROLE)})
        e.setdefault("created", now)
        if pod.spec.node_name:
            e.setdefault("scheduled", now)
        if any(s.state.running or s.state.terminated for s in pod.status.container_statuses or []):
            e.setdefault("running", now)
        if pod.status.phase in ("Succeeded", "Failed"):
            e.setdefault("ended", now)


class JobTimeline(_Timeline):
    """Per condition of the namespace's DistTrainingJobs, the seconds after ``t0`` when a
    watch first saw it True or False (e.g. ``Validated``, ``TrainingStarted``)."""

    def __init__(self, custom, ns: str, t0: float):
        super().__init__(custom.list_namespaced_custom_object,
                         ("disttrain.dev", "v1alpha1", ns, "disttrainingjobs"), t0)

    def record(self, job: dict, now: float) -> None:
        for c in (job.get("status") or {}).get("conditions") or []:
            if c.get("status") in ("True", "False"):
                self.events.setdefault(c["type"], now)


def _clients():
    from kubernetes import client
    from kubernetes import config as kconfig

    from localcluster.common import config as lc_config

    kconfig.load_kube_config(str(lc_config.state_dir() / "admin.kubeconfig"))
    return client.CoreV1Api(), client.CustomObjectsApi(), client.ApiClient()


def _admin():
    from localcluster.common import config as lc_config
    from localcluster.common.kubeconfig import admin_client

    return admin_client(lc_config.state_dir())


def request_count() -> float:
    """The operator's requests so far (the FlowSchema's dispatched counter)."""
    return dispatched(_admin().request("GET", "/metrics") or "")


def ensure_flow_schema() -> None:
    """Create (or keep) the FlowSchema that counts the operator's requests."""
    from localcluster.common.kubeapi import ApiError

    try:
        _admin().post("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", flow_schema())
    except ApiError as e:
        if e.status != 409:
            raise


def operator_peak_rss() -> Optional[int]:
    """The host-process operator's VmHWM in bytes (None if it does not run)."""
    from localcluster.cluster import operator_install

    pid = operator_install.pid()
    try:
        return peak_rss_bytes(Path(f"/proc/{pid}/status").read_text()) if pid else None
    except OSError:
        return None


def _condition(job: dict, ctype: str) -> Optional[dict]:
    return next((c for c in (job.get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), None)


def run_job(core, custom, nodes: int, probe: bool, probe_timeout: int = 300,
            timeout: float = 600.0, say=print) -> dict:
    """One scale run: apply, wait for Validated, all training pods Running, and the end."""
    from localcluster.cluster.operator_install import kubectl

    example = [d for d in yaml.safe_load_all((REPO / "examples" / "ddp-digits.yaml").read_text()) if d]
    ns = f"scale-{nodes}-{'on' if probe else 'off'}-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", ns)
    docs = job_documents(example, nodes, probe, probe_timeout=probe_timeout)
    before = request_count()
    cpu = ProbeCpu()
    cpu.start()
    t0 = time.monotonic()
    tl, jtl = PodTimeline(core, ns, t0), JobTimeline(custom, ns, t0)
    tl.start()
    jtl.start()
    custom.create_namespaced_custom_object("disttrain.dev", "v1alpha1", ns, "disttrainingjobs", docs[0])
    validated = running = None
    job: dict = {}
    while time.monotonic() - t0 < timeout:
        now = time.monotonic() - t0
        job = custom.get_namespaced_custom_object("disttrain.dev", "v1alpha1", ns,
                                                  "disttrainingjobs", JOB)
        v = _condition(job, "Validated")
        if validated is None and v and v.get("status") == "True":
            validated = now
        if running is None:
            pods = core.list_namespaced_pod(ns, label_selector="disttrain.dev/role=worker").items
            if len(pods) == nodes and all(p.status.phase in ("Running", "Succeeded") for p in pods):
                running = now
        if (job.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.1)
    took = time.monotonic() - t0
    events = tl.result()
    events["job"] = jtl.result()  # conditions as a watch saw them (Validated, ...)
    probe_cpu = cpu.result()
    after = request_count()
    kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
    st = job.get("status") or {}
    pst = st.get("probe") or {}
    bad = next((c for c in st.get("conditions") or [] if c.get("status") == "False"
                and c.get("type") not in ("Succeeded", "Failed")), None)
    r = {"nodes": nodes, "probe": probe, "validated_s": validated, "running_s": running,
         "phase": st.get("phase"), "total_s": took, "requests": after - before,
         "why": f"{bad['type']}=False {bad.get('reason')}: {bad.get('message')}" if bad else "",
         "phase_seconds": pst.get("phaseSeconds") or {},
         "probe_duration_s": pst.get("durationSeconds"), "timeline": timeline_summary(events),
         **probe_cpu}
    say(f"  {nodes} nodes, probe {'on ' if probe else 'off'}: Validated {_f(validated)} s, "
        f"pods Running {_f(running)} s, {r['phase']} after {took:.1f} s, "
        f"{r['requests']:.0f} requests, probe CPU {_f(probe_cpu['probe_cpu_total_s'])} s "
        f"({probe_cpu['probe_processes']} processes)" + (f"; {r['why']}" if r["why"] else ""))
    return r


def measure_size(nodes: int, runs: int, probe_timeout: int = 300, say=print) -> dict:
    """Cluster of ``nodes`` nodes, a fresh operator, ``runs`` runs probe on and off. The
    nodes are node agents, the lighter mode (32 and 64 real kubelets do not fit 2 cores
    and 24 GiB; `make bench` measures real nodes against it at 2 and 8)."""
    from localcluster import bringup
    from localcluster.cluster import operator_install

    say(f"  {nodes} nodes as node agents (the lighter mode; not real kubelets)")
    bringup.up(nodes=nodes, timeout=600, runtime="agent")
    operator_install.stop()
    operator_install.start()
    ensure_flow_schema()
    core, custom, _ = _clients()
    results = []
    for i in range(runs * 2):
        results.append(run_job(core, custom, nodes, probe=(i % 2 == 0),
                               probe_timeout=probe_timeout, say=say))
    row = size_row(nodes, results, operator_peak_rss())
    row["runs"] = results
    for key, probe in (("timeline_on", True), ("timeline_off", False)):
        tls = [r["timeline"] for r in results if r["probe"] == probe]
        row[key] = {k: _med([t.get(k) for t in tls]) for k in (tls[0] if tls else {})}
    return row


def measure_many(jobs: int, job_nodes: int, probe: bool, timeout: float, say=print) -> dict:
    """``jobs`` DistTrainingJobs at once on a 2-node cluster (each its own rendezvous
    port); outcomes, time to all outcomes, requests, peak RSS, retries logged."""
    from localcluster import bringup
    from localcluster.cluster import operator_install
    from localcluster.cluster.operator_install import kubectl
    from localcluster.common import config as lc_config

    bringup.up(nodes=max(2, job_nodes), timeout=600)
    operator_install.stop()
    operator_install.start()
    ensure_flow_schema()
    core, custom, _ = _clients()
    log = lc_config.state_dir() / "logs" / "operator.log"
    log_start = log.stat().st_size if log.exists() else 0
    example = [d for d in yaml.safe_load_all((REPO / "examples" / "ddp-digits.yaml").read_text()) if d]
    ns = f"scale-many-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", ns)
    docs = [job_documents(example, job_nodes, probe, name=f"job-{i:03d}", port=30000 + i)[0]
            for i in range(jobs)]
    before = request_count()
    samples = [(0.0, before)]
    t0 = time.monotonic()
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    phases: dict[str, str] = {}
    done_at = None
    next_sample = 1.0
    while time.monotonic() - t0 < timeout:
        now = time.monotonic() - t0
        if now >= next_sample:
            samples.append((now, request_count()))
            next_sample = now + 1.0
        items = custom.list_namespaced_custom_object("disttrain.dev", "v1alpha1", ns,
                                                     "disttrainingjobs").get("items", [])
        phases = {i["metadata"]["name"]: (i.get("status") or {}).get("phase") or "-" for i in items}
        if len(phases) == jobs and all(p in ("Succeeded", "Failed") for p in phases.values()):
            done_at = now
            break
        time.sleep(0.5)
    after = request_count()
    samples.append((time.monotonic() - t0, after))
    rss = operator_peak_rss()
    kubectl("delete", "namespace", ns, "--wait=true", "--timeout=600s", check=False)
    text = log.read_text(errors="replace")[log_start:] if log.exists() else ""
    outcomes: dict[str, int] = {}
    for p in phases.values():
        outcomes[p] = outcomes.get(p, 0) + 1
    r = {"jobs": jobs, "job_nodes": job_nodes, "cluster_nodes": max(2, job_nodes), "probe": probe,
         "all_done_s": done_at, "outcomes": outcomes, "requests": after - before,
         "requests_per_job": (after - before) / jobs, "max_rate": max_rate(samples),
         "operator_peak_rss_bytes": rss, "retries": text.lower().count("will retry"),
         "errors_logged": text.count("Traceback")}
    say(f"  {jobs} jobs: all done after {_f(done_at, 1)} s, {outcomes}, "
        f"{r['requests_per_job']:.1f} requests/job, peak {r['max_rate']:.0f} requests/s, "
        f"RSS {_f(rss / 2**20 if rss else None, 0)} MiB, {r['retries']} retries logged")
    return r


def _meta() -> dict:
    from localcluster.common import config as lc_config

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                            capture_output=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           text=True, capture_output=True).stdout.strip()
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "machine": platform.machine(),
            "commit": (commit + (" plus uncommitted changes" if dirty else "")) or "?",
            "instance": lc_config.INSTANCE, "load": os.getloadavg()[0]}


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if any(x < 1 for x in out):
        raise argparse.ArgumentTypeError(f"{text!r}: positive integers")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=_ints, default=list(DEFAULT_NODES),
                        help="cluster sizes (default 2,8,16,32; at most 64)")
    parser.add_argument("--runs", type=int, default=1, help="runs per size, probe on and off each")
    parser.add_argument("--probe-timeout", type=int, default=300,
                        help="spec.probe.timeoutSeconds of the jobs (default 300; see job_documents)")
    parser.add_argument("--planner-ranks", type=_ints, default=list(DEFAULT_RANKS))
    parser.add_argument("--jobs", type=int, default=100, help="jobs at once (0: skip)")
    parser.add_argument("--jobs-nodes", type=int, default=2, help="numNodes of each of those jobs")
    parser.add_argument("--jobs-probe", action="store_true", help="probes on for those jobs")
    parser.add_argument("--jobs-timeout", type=float, default=900.0)
    parser.add_argument("--planner-only", action="store_true", help="only the pure planner table")
    parser.add_argument("--note", default="", help="a sentence for the report's header")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--render", action="store_true", help="only rewrite scale.md from scale.json")
    args = parser.parse_args(argv)
    if args.render:
        data = json.loads((args.out / "scale.json").read_text())
        (args.out / "scale.md").write_text(markdown(data))
        return 0
    from localcluster.common import config as lc_config

    if any(n > lc_config.MAX_NODES for n in args.nodes) or args.runs < 1 or args.jobs < 0:
        parser.error(f"--nodes at most {lc_config.MAX_NODES}, --runs >= 1, --jobs >= 0")
    say = print
    data: dict[str, Any] = {"meta": _meta(), "planner": planner_rows(args.planner_ranks)}
    data["meta"]["probe_timeout"] = args.probe_timeout
    if args.note:
        data["meta"]["note"] = args.note
    if not args.planner_only:
        say(f"cluster instance {lc_config.INSTANCE}; sizes {args.nodes}; {args.jobs} jobs at once")
        data["sizes"] = []
        for n in sorted(args.nodes):
            say(f"== {n} nodes")
            data["sizes"].append(measure_size(n, args.runs, args.probe_timeout, say=say))
        if args.jobs:
            say(f"== {args.jobs} jobs at once")
            data["many"] = measure_many(args.jobs, args.jobs_nodes, args.jobs_probe,
                                        args.jobs_timeout, say=say)
    md = markdown(data)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(data, indent=2) + "\n")
    (args.out / "scale.md").write_text(md)
    print(f"written: {args.out / 'scale.json'}, {args.out / 'scale.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
