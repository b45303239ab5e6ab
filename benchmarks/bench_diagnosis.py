"""Time to diagnosis: `kubectl apply` -> the false condition, probe on vs a plain job.

For every failing scenario in ``scenarios/`` (``expect.status: "False"``, discovered from the
folder, so new scenarios are measured without editing this file) the scenario's cluster is
built (:func:`localcluster.scenariorun.prepare`, as ``make demo SCENARIO=...`` does) and the
job runs twice, one after the other:

1. **with probes** (the scenario's job as is): seconds from ``kubectl apply`` to the
   scenario's expected condition (:func:`localcluster.scenariorun.run_job`, the same check
   as ``tests/e2e/test_scenarios.py``); the user sees that condition's reason and message;
2. **without probes** (the same job with ``spec.probe.enabled: false``: the operator creates
   plain torchrun pods, rank 0 first with ``MASTER_ADDR`` = rank 0's node address, or its DNS name on the pod
   network, the interface only if
   the job names one, i.e. what a user would run by hand): seconds from ``kubectl apply``
   until it fails (a worker pod Failed or a container exited non-zero, or the job Failed),
   succeeds, or the cap (``--cap``, default 300 s) passes; the user sees the pods' states
   and the last line of each worker's log;
   For a scenario whose fault strikes while the job trains (``strike``), the strike comes
   once Progressing is True (:func:`localcluster.scenariorun.run_job`) and the seconds
   count from it;
3. **as a Kubeflow PyTorchJob** (the peer: the same job translated by
   :func:`localcluster.cluster.kubeflow.pytorchjob_documents`, one Master and numNodes-1 Workers
   with the same image, command and env, run by Kubeflow's training operator v1.8.1 that
   ``localcluster up --kubeflow`` starts): seconds from ``kubectl apply`` to the
   PyTorchJob's ``Failed`` condition (or ``Succeeded``), else the cap; the user sees the
   job's conditions, the pods' states and the first log line naming an error, if any.
   ``restartPolicy: Never`` by default (``--pytorchjob-restart-policy``): the setting
   under which a PyTorchJob says Failed soonest (one failed pod fails the job); with
   upstream's examples' OnFailure a failing rank restarts in place and the job never
   says Failed. A ``strike`` comes :data:`PEER_WARMUP_S` after every rank's training process
   runs (a PyTorchJob has no Progressing), and the cap counts from it.

The report gives per scenario probe seconds, plain seconds (``>= cap`` when capped), the
ratio plain / probe (a lower bound when capped) and what the user sees in each case, and
the same against the PyTorchJob with every scenario where the peer is faster or equally
informative (its conditions, pod states and logs name every node the product's message
names and carry an error line) stated; it is
printed and written to ``benchmarks/results/diagnosis.json`` and ``diagnosis.md``. Times
are wall-clock seconds measured by this script (polling every 0.5 s), on a shared machine:
noisy, which is why the report is a ratio against the baseline measured right next to it.
The issue's goal: >= 20x everywhere, and no scenario where the plain job fails faster than
the probe explains; rows that miss it are marked, never hidden.

    make bench-diagnosis                       # every failing scenario, cap 300 s
    .venv/bin/python benchmarks/bench_diagnosis.py --cap 60 --scenario firewall-master-drop
    .venv/bin/python benchmarks/bench_diagnosis.py --cap 60 --columns probe,pytorchjob

Use a cluster instance of your own when others share the machine
(``DISTTRAIN_CLUSTER_INSTANCE=N``, see ``localcluster/localcluster/common/config.py``).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parents[1]
GOAL_RATIO = 20.0
POLL_SECONDS = 0.5
JOB = "ddp-digits"
COLUMNS = ("probe", "plain", "pytorchjob")
PEER = "PyTorchJob"


# ---- pure parts ------------------------------------------------------------------------


def failing_scenarios(names: list[str], only: Optional[list[str]] = None) -> list[Any]:
    """The scenarios among ``names`` (loaded with :func:`localcluster.scenarios.loader.load`) whose
    expected status is False, in name order, restricted to ``only`` when given.
    Raises ``localcluster.scenarios.scenario.ScenarioError`` for a file that does not load and
    ValueError for a name in ``only`` that is not a failing scenario."""
    from localcluster.scenarios import loader

    loaded = [loader.load(n) for n in sorted(names)]
    failing = [s for s in loaded if s.expect.status == "False"]
    if only:
        known = {s.name for s in failing}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise ValueError(f"not a failing scenario: {', '.join(unknown)} "
                             f"(failing ones: {', '.join(sorted(known))})")
        failing = [s for s in failing if s.name in only]
    return failing


def plain_documents(docs: list[dict]) -> list[dict]:
    """The scenario's documents with the DistTrainingJob's ``spec.probe.enabled`` false
    (everything else unchanged). The input is not modified."""
    out = json.loads(json.dumps(docs))
    for d in out:
        if d.get("kind") == "DistTrainingJob":
            d.setdefault("spec", {}).setdefault("probe", {})["enabled"] = False
    return out


def _container_state(pod: dict) -> tuple[Optional[int], str]:
    """(first non-zero exit code or None, a short text of the first container's state)."""
    code = None
    text = ""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        st = cs.get("state") or {}
        if "terminated" in st:
            t = st["terminated"]
            if t.get("exitCode") not in (None, 0) and code is None:
                code = int(t["exitCode"])
            text = text or f"terminated exit {t.get('exitCode')} ({t.get('reason') or '-'})"
        elif "waiting" in st:
            text = text or f"waiting ({st['waiting'].get('reason') or '-'})"
        elif "running" in st:
            text = text or "running"
    return code, text


def plain_verdict(job: Optional[dict], pods: list[dict]) -> Optional[str]:
    """Whether a job without probes has ended: ``"failed"`` (a worker pod Failed, a worker
    container exited non-zero, or the job's phase is Failed), ``"succeeded"`` (the job's
    phase is Succeeded), or None while it is still pending or running."""
    for p in pods:
        if (p.get("status") or {}).get("phase") == "Failed" or _container_state(p)[0] is not None:
            return "failed"
    phase = ((job or {}).get("status") or {}).get("phase")
    if phase == "Failed":
        return "failed"
    if phase == "Succeeded":
        return "succeeded"
    return None


def pod_summary(pod: dict, last_log_line: str = "") -> str:
    """One line a user would read from ``kubectl get pod`` / ``kubectl logs``: name, phase,
    container state (or the init container still running or failed) or the scheduler's
    message, and the last log line."""
    st = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "?")
    _, ctext = _container_state(pod)
    for ic in st.get("initContainerStatuses") or []:  # the one still in the way, if any
        ist = ic.get("state") or {}
        if "terminated" in ist and ist["terminated"].get("exitCode") == 0:
            continue
        how = next(iter(ist), "waiting")
        detail = (ist.get(how) or {}).get("reason") or (
            f"exit {ist['terminated'].get('exitCode')}" if how == "terminated" else "")
        ctext = f"init {ic.get('name')} {how}" + (f" ({detail})" if detail else "")
        break
    why = ""
    for c in st.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            why = f"{c.get('reason')}: {c.get('message', '')}"
    parts = [f"{name} {st.get('phase', 'Pending')}"]
    if ctext:
        parts.append(ctext)
    if why:
        parts.append(why)
    if last_log_line:
        parts.append(f'log: "{last_log_line}"')
    return ", ".join(parts)


def ratio(probe_s: Optional[float], plain_s: Optional[float]) -> Optional[float]:
    """plain / probe (how many times sooner the probe explains it), None if either is
    missing or the probe time is not positive."""
    if probe_s is None or plain_s is None or probe_s <= 0:
        return None
    return plain_s / probe_s


def ratio_text(probe_s: Optional[float], plain_s: Optional[float], plain_end: str) -> str:
    """The ratio as the report prints it: ``>= 31.2x`` when the plain run was capped,
    ``n/a`` when the plain job succeeded (nothing to diagnose without probes) or a time is
    missing."""
    r = ratio(probe_s, plain_s)
    if r is None or plain_end == "succeeded":
        return "n/a"
    return f"{'>= ' if plain_end == 'capped' else ''}{r:.1f}x"


def assess(probe_s: Optional[float], plain_s: Optional[float], plain_end: str,
           goal: float = GOAL_RATIO, who: str = "plain") -> str:
    """Whether a row meets the issue's goal: ``met`` (>= goal x, capped rows count with the
    cap as a lower bound), ``below goal`` (the probe is sooner, but by less than ``goal`` x),
    ``<who> fails sooner`` (the other job fails before the probe explains; ``who`` names
    it, e.g. ``plain`` or ``PyTorchJob``), ``<who> succeeded``, ``no probe verdict``, or
    ``capped below goal`` (the other job had not failed at the cap, which is less than
    ``goal`` times the probe's seconds: the cap, not the job, bounds the ratio; a stall's
    verdict waits ``stallTimeoutSeconds`` by design)."""
    if probe_s is None:
        return "no probe verdict"
    if plain_end == "succeeded":
        return f"{who} succeeded"
    r = ratio(probe_s, plain_s)
    if r is None:
        return "no probe verdict"
    if plain_end == "failed" and plain_s < probe_s:
        return f"{who} fails sooner"
    if r >= goal:
        return "met"
    return "capped below goal" if plain_end == "capped" else "below goal"


def markdown(rows: list[dict], cap: float, meta: dict) -> str:
    """The results as a Markdown table with a header naming the cap and the machine."""
    out = [
        "# Time to diagnosis (benchmarks/bench_diagnosis.py)",
        "",
        f"{meta['date']}, cluster on {meta['cpus']} CPU(s) ({meta['machine']}), commit "
        f"{meta['commit']}. Seconds from `kubectl apply` to the scenario's expected false "
        f"condition (probe) and to the first failed pod / Failed job without probes (plain), "
        f"capped at **{cap:g} s** (`>= {cap:g}` = still not failed at the cap). Ratio = plain / "
        f"probe; goal >= {GOAL_RATIO:g}x. Faults that strike while the job trains "
        f"(`stall-*`, the scenario language's `strike`): seconds from the strike (the "
        f"probe column: to Progressing=False; the peer's: to its Failed), and for a "
        f"script's own stall (no strike) from `kubectl apply`; their verdict waits the job's "
        f"`stallTimeoutSeconds` (30 s) by design, so against a job capped at {cap:g} s the "
        f"ratio is *capped below goal*: gloo's default timeout, 1800 s, would end the peer."
        + (f" Note: {meta['note']}." if meta.get("note") else ""),
        "",
        "How to read it: *plain s* stops at the first failed pod, although the job itself "
        "often still says Running (the other ranks hang at `init_process_group` or are "
        "killed by torchrun): \"job failed (phase Running)\" means exactly that, and the cause "
        "is only in a pod log. *(succeeded)* rows are faults the plain job does not hit "
        "here: without the probes' one-pod-per-node rule two ranks share a node "
        "(not-enough-nodes: the job runs on fewer nodes than asked), and gloo on CPU never "
        "loads NCCL (version-skew: on GPUs NCCL would hang or fail at init). *below goal* "
        "marks a plain job that fails fast by itself (gloo refuses a missing interface at "
        "once): the probe is still first, and says it in a condition rather than a log.",
        "",
        "| scenario | probe s | plain s | ratio | goal | with probes the user sees | "
        "without probes the user sees |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        probe = "-" if r["probe_s"] is None else f"{r['probe_s']:.1f}"
        cells = [r["scenario"], probe, time_cell(r["plain_s"], r["plain_end"], cap), r["ratio"],
                 r["assessment"], r["probe_sees"], r["plain_sees"]]
        out.append(_md_row(cells))
    if any(r.get("pj_end") for r in rows):
        out += [""] + peer_markdown(rows, cap, meta)
    return "\n".join(out) + "\n"


def _md_row(cells: list) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def time_cell(seconds: Optional[float], end: Optional[str], cap: float) -> str:
    """A time as the tables print it: ``>= cap`` when capped, ``-`` when not measured,
    ``(succeeded)`` appended when the job trained instead of failing."""
    if end == "capped":
        return f">= {cap:g}"
    if seconds is None:
        return "-"
    return f"{seconds:.1f}" + (" (succeeded)" if end == "succeeded" else "")


NODE_NAME = re.compile(r"\bnode-[a-z]{1,2}\b")


def named_nodes(text: str) -> list[str]:
    """The simulated nodes (node-a, ..., node-aa, ...) ``text`` names, sorted, once each."""
    return sorted(set(NODE_NAME.findall(text or "")))


def peer_verdict(job: Optional[dict]) -> Optional[str]:
    """Whether a PyTorchJob has ended: ``"failed"`` once its condition Failed is True,
    ``"succeeded"`` once Succeeded is True, None before (Created, Running, Restarting)."""
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Failed", "Succeeded"):
            return c["type"].lower()
    return None


def conditions_text(job: Optional[dict]) -> str:
    """The job's conditions as ``kubectl describe`` lists them: ``Type=Status Reason:
    message`` joined by "; " ('no conditions' when it has none)."""
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return "; ".join(f"{c.get('type')}={c.get('status')} {c.get('reason') or '-'}: "
                     f"{c.get('message') or ''}".rstrip(": ") for c in conds) or "no conditions"


def first_error_line(logs: list[tuple[str, str]]) -> str:
    """The first line naming an error (the words :func:`telling_line` looks for; not a
    traceback's header, frame or ``raise`` line) among ``logs``, a list of (label, log
    text) in the order a user reads them, as ``label: line``; '' when no log names one."""
    for label, text in logs:
        for ln in (text or "").splitlines():
            ln = ln.strip()
            if any(w in ln for w in _ERROR_WORDS) and not ln.startswith(_NOT_A_CAUSE):
                return f"{label}: {ln}"
    return ""


# A traceback's header, its frames and source lines name no cause (its last line does).
_NOT_A_CAUSE = ("traceback :", "Traceback (most recent call last)", "File \"", "raise ")


def peer_informative(product_message: str, peer_sees: str, first_error: str) -> bool:
    """Whether what the PyTorchJob user sees is as informative as the product's verdict,
    by a mechanical lower bar: an error line in some log, and every node the product's
    message names also named there (conditions, pod states, logs)."""
    return bool(first_error) and all(n in peer_sees for n in named_nodes(product_message))


def peer_faster(probe_s: Optional[float], peer_s: Optional[float], peer_end: Optional[str]) -> bool:
    """True when the PyTorchJob said Failed no later than the product's verdict (or the
    product gave none)."""
    return peer_end == "failed" and peer_s is not None and (probe_s is None or peer_s <= probe_s)


def peer_findings(rows: list[dict]) -> list[str]:
    """One sentence per scenario where the peer is faster or equally informative, plus
    the scenarios where the fault does not bite the PyTorchJob (it trains)."""
    out = []
    for r in rows:
        if not r.get("pj_end"):
            continue
        probe = "no verdict" if r["probe_s"] is None else f"{r['probe_s']:.1f} s"
        if r.get("pj_faster"):
            out.append(f"{r['scenario']}: the {PEER} says Failed after {r['pj_s']:.1f} s, no later "
                       f"than the product's verdict ({probe}).")
        if r.get("pj_informative"):
            out.append(f"{r['scenario']}: the {PEER} user sees an error line naming every node "
                       f"the product names ({r.get('pj_first_error', '')[:160]}).")
        if r["pj_end"] == "succeeded":
            out.append(f"{r['scenario']}: the {PEER} trains to Succeeded (the fault does not "
                       f"bite it here), after {r['pj_s']:.1f} s.")
    return out


def _yes_no(v: Optional[bool]) -> str:
    return "-" if v is None else "yes" if v else "no"


def peer_markdown(rows: list[dict], cap: float, meta: dict) -> list[str]:
    """The section against Kubeflow's PyTorchJob: a table and the findings."""
    pj = meta.get("pytorchjob") or {}
    out = [
        f"## Against Kubeflow's {PEER} (training operator {pj.get('version', '?')})",
        "",
        f"The same job as a {PEER} (Master + Workers, same image, command and env; "
        f"restartPolicy {pj.get('restartPolicy', '?')}), run by Kubeflow's training operator on "
        f"the same cluster: seconds from `kubectl apply` to its `Failed` condition, capped at "
        f"**{cap:g} s**. Ratio = {PEER} / probe; goal >= {GOAL_RATIO:g}x. *peer as informative*: "
        "what its user sees (conditions, pod states, logs) carries an error line and names "
        "every node the product's message names (a mechanical lower bar, not a judgment of "
        "the fix)." + (f" The {PEER} column is reused from the run of {pj['reusedFrom']} "
                       f"(`--peer-from`); only the probe column was re-run."
                       if pj.get("reusedFrom") else ""),
        "",
        f"| scenario | probe s | {PEER} s | ratio | goal | peer faster | peer as informative | "
        f"with the {PEER} the user sees |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if not r.get("pj_end"):
            continue
        probe = "-" if r["probe_s"] is None else f"{r['probe_s']:.1f}"
        out.append(_md_row([r["scenario"], probe, time_cell(r["pj_s"], r["pj_end"], cap),
                            r["pj_ratio"], r["pj_assessment"],
                            _yes_no(r.get("pj_faster")), _yes_no(r.get("pj_informative")),
                            r["pj_sees"]]))
    found = peer_findings(rows)
    out += ["", f"Where the {PEER} is faster or equally informative (or trains):", ""]
    out += [f"- {f}" for f in found] or [f"- none: in every scenario measured the {PEER} is "
                                         "slower and less informative."]
    return out


_ERROR_WORDS = ("Error", "Exception", "error:", "failed", "timed out", "Traceback")


def telling_line(log: str) -> str:
    """The log line a user would quote: the last one naming an error (torchrun ends a
    failure with a banner and a summary, the cause comes before), else the last line that
    is not a ``====``/``----`` banner; '' for an empty log."""
    lines = [ln.strip() for ln in (log or "").splitlines()]
    lines = [ln for ln in lines if ln and any(ch.isalnum() for ch in ln)]
    for ln in reversed(lines):
        if any(w in ln for w in _ERROR_WORDS) and not ln.startswith("traceback :"):
            return ln
    return lines[-1] if lines else ""


def _short(text: str, n: int = 240) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ---- runs on the cluster --------------------------------------------------------------


def _clients():
    from kubernetes import client
    from kubernetes import config as kconfig

    from localcluster.common import config as lc_config

    kconfig.load_kube_config(str(lc_config.state_dir() / "admin.kubeconfig"))
    return client.CoreV1Api(), client.CustomObjectsApi(), client.ApiClient()


def _delete_namespace(ns: str) -> None:
    from localcluster.cluster.operator_install import kubectl

    kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)


def _last_log_line(ns: str, pod: str) -> str:
    from localcluster.cluster.operator_install import kubectl

    out = kubectl("logs", "-n", ns, pod, "--tail=60", check=False)
    return _short(telling_line(out.stdout or ""), 200)


def _poll(t0: float, fetch, verdict, cap: float, who: str, say=print) -> tuple:
    """Every POLL_SECONDS: ``fetch()`` (a transient API error is said and the last good
    answer kept) until ``verdict(answer)`` is not None or ``cap`` seconds after ``t0``
    (monotonic) passed. Returns (verdict or "capped", seconds after t0, last answer)."""
    last = None
    while True:
        now = time.monotonic() - t0
        try:
            last = fetch()
        except Exception as e:  # a transient API error: keep polling
            say(f"  {who}: poll error {e}")
        v = verdict(last)
        if v is not None:
            return v, now, last
        if now >= cap:
            return "capped", cap, last
        time.sleep(POLL_SECONDS)


def run_probe(sc, say=print) -> dict:
    """The scenario's job with probes: seconds from apply to its expected condition, and
    that condition as the user reads it."""
    from localcluster import scenariorun

    ns = f"bd-{sc.name[:40]}-{uuid.uuid4().hex[:5]}"
    try:
        o = scenariorun.run_job(sc, ns, say=lambda *_: None)
    finally:
        _delete_namespace(ns)
    c = next((x for x in o.conditions if x.get("type") == sc.expect.condition), {})
    sees = f"{c.get('type')}={c.get('status')} {c.get('reason')}: {_short(c.get('message', ''), 300)}"
    say(f"  probe: {'ok' if o.ok else 'NOT MET'} after "
        f"{'-' if o.seconds is None else f'{o.seconds:.1f}s'}: {sees}")
    return {"ok": o.ok, "why": o.why, "seconds": o.seconds if o.ok else None,
            "condition": c, "sees": sees}


def run_plain(sc, cap: float, say=print) -> dict:
    """The scenario's job without probes: seconds from apply until it fails (or succeeds),
    else ``cap``; what the user sees (pods, last log lines)."""
    from localcluster.cluster.operator_install import kubectl
    from localcluster.scenarios import loader

    core, custom, api = _clients()
    ns = f"bd-plain-{sc.name[:34]}-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", ns, check=False)
    docs = plain_documents(loader.job_documents(sc))

    def fetch() -> tuple:
        job = custom.get_namespaced_custom_object("disttrain.dev", "v1alpha1", ns,
                                                  "disttrainingjobs", JOB)
        items = core.list_namespaced_pod(ns, label_selector="disttrain.dev/role=worker").items
        return job, [api.sanitize_for_serialization(p) for p in items]

    try:
        t0 = time.monotonic()
        kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
        end, seconds, last = _poll(t0, fetch, lambda jp: plain_verdict(*jp) if jp else None,
                                   cap, "plain", say)
        job, pods = last or (None, [])
        summaries = [pod_summary(p, _last_log_line(ns, p["metadata"]["name"]))
                     for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
        jphase = ((job or {}).get("status") or {}).get("phase")
    finally:
        _delete_namespace(ns)
    if end == "capped":
        head = f"nothing failed within {cap:g}s (job phase {jphase})"
    elif end == "failed" and jphase != "Failed":
        head = f"a worker failed (job phase {jphase})"
    else:
        head = f"job {end} (phase {jphase})"
    sees = head + ("; " + "; ".join(summaries) if summaries else "; no worker pods")
    say(f"  plain: {end} after {seconds:.1f}s: {_short(sees, 400)}")
    return {"end": end, "seconds": seconds, "job_phase": jphase, "pods": summaries, "sees": sees}


def _pod_logs(ns: str, pod: dict) -> list[tuple[str, str]]:
    """(``pod/container``, log) for the pod's init containers, then its containers."""
    from localcluster.cluster.operator_install import kubectl

    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    out = []
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        log = kubectl("logs", "-n", ns, name, "-c", c["name"], "--limit-bytes=200000", check=False)
        out.append((f"{name}/{c['name']}", log.stdout or ""))
    return out


def run_pytorchjob(sc, cap: float, restart_policy: str, probe_message: str = "",
                   say=print) -> dict:
    """The scenario's job as a Kubeflow PyTorchJob: seconds from apply until its Failed
    (or Succeeded) condition, else ``cap``; what the user sees at that moment."""
    from localcluster.cluster import kubeflow
    from localcluster.cluster.operator_install import kubectl
    from localcluster.scenarios import loader

    core, custom, api = _clients()
    ns = f"bd-pj-{sc.name[:36]}-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", ns, check=False)
    docs = kubeflow.pytorchjob_documents(loader.job_documents(sc), restart_policy=restart_policy)
    strike = PeerStrike(sc, ns, say)

    def pods_now() -> list[dict]:
        items = core.list_namespaced_pod(ns, label_selector=f"training.kubeflow.org/job-name={JOB}").items
        return sorted((api.sanitize_for_serialization(p) for p in items), key=lambda p: p["metadata"]["name"])

    def fetch() -> dict:
        if sc.strike is not None and strike.at is None:
            strike.step(pods_now())
        return custom.get_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", JOB)

    try:
        t0 = time.monotonic()
        kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
        if sc.strike is None:
            end, seconds, job = _poll(t0, fetch, peer_verdict, cap, PEER, say)
        else:  # the cap counts from the strike, as the probe column's seconds do
            end, seconds, job = _poll(t0, fetch, lambda j: "struck" if strike.at is not None else peer_verdict(j),
                                      STRIKE_WAIT_S, PEER, say)
            if end == "struck" and strike.at is not None:
                end, seconds, job = _poll(strike.at, fetch, peer_verdict, cap, PEER, say)
        pods = pods_now()
        logs = {p["metadata"]["name"]: _pod_logs(ns, p) for p in pods}
    finally:
        strike.undo()
        _delete_namespace(ns)
    summaries = [pod_summary(p, _short(telling_line(next(
        (t for label, t in reversed(logs[p["metadata"]["name"]])), "")), 200)) for p in pods]
    first = _short(first_error_line([x for p in pods for x in logs[p["metadata"]["name"]]]), 240)
    head = (f"nothing failed within {cap:g}s" if end == "capped" else f"{PEER} {end}")
    sees = (f"{head}; conditions: {conditions_text(job)}; "
            + ("; ".join(summaries) if summaries else "no pods")
            + f"; first error line: {first or 'none'}")
    informative = peer_informative(probe_message, sees, first)
    say(f"  {PEER}: {end} after {seconds:.1f}s: {_short(sees, 400)}")
    return {"end": end, "seconds": seconds, "sees": sees, "first_error": first,
            "conditions": ((job or {}).get("status") or {}).get("conditions") or [],
            "pods": summaries, "informative": informative}


PEER_WARMUP_S = 10.0  # a PyTorchJob has no Progressing: strike this long after every rank's process runs
STRIKE_WAIT_S = 600.0  # at most this long from apply to the strike


def pytorchjob_ranks(pods: list[dict]) -> dict[int, dict]:
    """Node rank -> pod of a PyTorchJob's pods: ``<job>-master-0`` is rank 0, ``<job>-worker-i``
    rank i + 1; other pods are left out. Pure."""
    out = {}
    for p in pods:
        name = str((p.get("metadata") or {}).get("name", ""))
        index = name.rsplit("-", 1)[-1]
        if name == f"{JOB}-master-0":
            out[0] = p
        elif name.startswith(f"{JOB}-worker-") and index.isascii() and index.isdigit():
            out[int(index) + 1] = p
    return out


class PeerStrike:
    """A scenario's strike on the PyTorchJob's pods (master-0 is rank 0, worker-i rank
    i + 1): carried out :data:`PEER_WARMUP_S` + ``delaySeconds`` after every rank's training
    process runs; :meth:`undo` at the end. Inert for a scenario without one."""

    def __init__(self, sc, ns: str, say=print) -> None:
        self.sc, self.ns, self.say = sc, ns, say
        self.due: Optional[float] = None
        self.at: Optional[float] = None  # monotonic time of the strike
        self.undo = lambda: None

    def step(self, pods: list[dict]) -> None:
        from localcluster import bringup, strikes
        from localcluster.common import config as lc_config
        s = self.sc.strike
        if s is None or self.at is not None:
            return
        by_rank = pytorchjob_ranks(pods)
        running = [r for r, p in by_rank.items() if strikes.trainer_pid(p["metadata"].get("uid", ""))]
        if self.due is None and len(running) >= self.sc.nodes:
            self.due = time.monotonic() + PEER_WARMUP_S + s.delaySeconds
        if self.due is None or time.monotonic() < self.due:
            return
        self.undo = strikes.strike(s, by_rank, lc_config.state_dir(),
                                   lambda: bringup.up(scenario=self.sc), self.say)
        self.at = time.monotonic()


def _meta() -> dict:
    import os

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                            capture_output=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           text=True, capture_output=True).stdout.strip()
    if commit and dirty:
        commit += " plus uncommitted changes"
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "machine": platform.machine(), "commit": commit or "?"}


def peer_from_row(previous: dict, scenario: str) -> Optional[dict]:
    """The PyTorchJob run of ``scenario`` as :func:`_row` takes it (seconds, end,
    informative, sees, first_error, conditions, pods), from a previous diagnosis.json's
    rows; None when that report has no PyTorchJob figure for it. Pure."""
    row = next((r for r in previous.get("rows") or [] if r.get("scenario") == scenario), None)
    if not row or row.get("pj_end") is None:
        return None
    return {"seconds": row.get("pj_s"), "end": row["pj_end"],
            "informative": row.get("pj_informative"), "sees": row.get("pj_sees") or "-",
            "first_error": row.get("pj_first_error") or "", "conditions": row.get("pj_conditions") or [],
            "pods": row.get("pj_pods") or []}


def _row(sc, p: Optional[dict], q: Optional[dict], k: Optional[dict]) -> dict:
    """One report row from the three runs (None: that column was not run)."""
    p = p or {"seconds": None, "ok": None, "why": "not run", "condition": {}, "sees": "-"}
    row = {
        "scenario": sc.name,
        "expected": f"{sc.expect.condition}={sc.expect.status} {sc.expect.reason or ''}".strip(),
        "probe_s": p["seconds"], "probe_ok": p["ok"], "probe_why": p["why"],
        "probe_sees": _short(p["sees"], 300), "probe_condition": p["condition"],
        "plain_s": None, "plain_end": None, "ratio_value": None, "ratio": "n/a",
        "assessment": "not run", "plain_sees": "-", "plain_pods": [],
    }
    if q is not None:
        row.update({"plain_s": q["seconds"], "plain_end": q["end"],
                    "ratio_value": ratio(p["seconds"], q["seconds"]),
                    "ratio": ratio_text(p["seconds"], q["seconds"], q["end"]),
                    "assessment": assess(p["seconds"], q["seconds"], q["end"]),
                    "plain_sees": _short(q["sees"], 400), "plain_pods": q["pods"]})
    if k is not None:
        row.update({"pj_s": k["seconds"], "pj_end": k["end"],
                    "pj_ratio_value": ratio(p["seconds"], k["seconds"]),
                    "pj_ratio": ratio_text(p["seconds"], k["seconds"], k["end"]),
                    "pj_assessment": assess(p["seconds"], k["seconds"], k["end"], who=PEER),
                    # without the probe run there is nothing to compare with
                    "pj_faster": peer_faster(p["seconds"], k["seconds"], k["end"])
                    if p["ok"] is not None else None,
                    "pj_informative": k["informative"] if p["ok"] is not None else None,
                    "pj_sees": _short(k["sees"], 500),
                    "pj_first_error": k["first_error"], "pj_conditions": k["conditions"],
                    "pj_pods": k["pods"]})
    return row


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cap", type=float, default=300.0,
                        help="seconds to wait for the plain job and the PyTorchJob to fail "
                             "(default 300)")
    parser.add_argument("--scenario", action="append", default=[],
                        help="only this failing scenario (repeatable); default: all of them")
    parser.add_argument("--columns", default=",".join(COLUMNS),
                        help=f"which runs, comma-separated (default {','.join(COLUMNS)})")
    parser.add_argument("--pytorchjob-restart-policy", default="Never",
                        choices=["Never", "OnFailure", "ExitCode", "Always"],
                        help="the PyTorchJob replicas' restartPolicy (default Never: it fails "
                             "the job at the first failed pod)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results",
                        help="folder for diagnosis.json and diagnosis.md")
    parser.add_argument("--peer-from", type=Path, default=None,
                        help=f"a previous diagnosis.json: take the {PEER} column from it instead "
                             f"of running it (the peer does not change with the product; the "
                             f"ratios are recomputed against this run's probe column)")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite diagnosis.md from the diagnosis.json in --out")
    args = parser.parse_args(argv)
    if args.cap <= 0:
        parser.error("--cap must be positive")
    columns = [c.strip() for c in args.columns.split(",") if c.strip()]
    if not columns or any(c not in COLUMNS for c in columns):
        parser.error(f"--columns takes some of {', '.join(COLUMNS)}")
    reused: dict = {}
    if args.peer_from is not None:
        if "pytorchjob" in columns:
            parser.error("--peer-from replaces the pytorchjob column: leave it out of --columns")
        try:
            reused = json.loads(args.peer_from.read_text())
        except (OSError, ValueError) as e:
            parser.error(f"--peer-from {args.peer_from}: {e}")
    if args.render:
        data = json.loads((args.out / "diagnosis.json").read_text())
        (args.out / "diagnosis.md").write_text(markdown(data["rows"], data["cap_s"], data["meta"]))
        return 0

    from rich.console import Console
    from rich.table import Table

    from localcluster import scenariorun
    from localcluster.cluster import kubeflow
    from localcluster.common import config as lc_config
    from localcluster.common.kubeconfig import admin_client
    from localcluster.scenarios import loader
    from localcluster.scenarios import scenario as scn

    console = Console(highlight=False, soft_wrap=True)
    try:
        scenarios = failing_scenarios(loader.all_names(), args.scenario or None)
        if "pytorchjob" in columns:
            kubeflow.check_built()
    except (ValueError, scn.ScenarioError, kubeflow.KubeflowError) as e:
        console.print(f"error: {e}", markup=False)
        return 2
    console.print(f"cluster instance {lc_config.INSTANCE}; {len(scenarios)} failing scenario(s): "
                  f"{', '.join(s.name for s in scenarios)}; runs: {', '.join(columns)}; "
                  f"cap {args.cap:g}s", markup=False)

    def say(m: str) -> None:
        console.print(m, markup=False)

    rows = []
    for sc in scenarios:
        console.rule(f"[bold]{sc.name}")
        scenariorun.prepare(sc, say=lambda *_: None)
        if "pytorchjob" in columns:
            state = lc_config.state_dir()
            kubeflow.ensure(state, admin_client(state))
        p = run_probe(sc, say=say) if "probe" in columns else None
        q = run_plain(sc, args.cap, say=say) if "plain" in columns else None
        k = (run_pytorchjob(sc, args.cap, args.pytorchjob_restart_policy,
                            ((p or {}).get("condition") or {}).get("message", ""), say=say)
             if "pytorchjob" in columns else None)
        if k is None and reused:
            k = peer_from_row(reused, sc.name)
        rows.append(_row(sc, p, q, k))
    table = Table(title=f"apply -> diagnosis (seconds; plain and {PEER} capped at {args.cap:g}s)")
    for col in ("scenario", "probe s", "plain s", "ratio", "goal", f"{PEER} s", "ratio", "goal"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["scenario"], "-" if r["probe_s"] is None else f"{r['probe_s']:.1f}",
                      time_cell(r["plain_s"], r["plain_end"], args.cap), r["ratio"],
                      r["assessment"], time_cell(r.get("pj_s"), r.get("pj_end"), args.cap),
                      r.get("pj_ratio", "-"), r.get("pj_assessment", "not run"))
    console.print(table)
    for r in rows:
        console.print(f"{r['scenario']}:\n  with probes: {r['probe_sees']}\n"
                      f"  without:     {r['plain_sees']}\n"
                      f"  {PEER}:  {r.get('pj_sees', '-')}", markup=False)
    meta = _meta()
    meta["columns"] = columns
    if "pytorchjob" in columns:
        meta["pytorchjob"] = {"version": lc_config.versions()["TRAINING_OPERATOR_VERSION"],
                              "restartPolicy": args.pytorchjob_restart_policy}
    elif reused:
        old = reused.get("meta") or {}
        meta["pytorchjob"] = dict(old.get("pytorchjob") or {},
                                  reusedFrom=f"{old.get('date', '?')}, commit {old.get('commit', '?')}")
    for f in peer_findings(rows):
        console.print(f"peer: {f}", markup=False)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "diagnosis.json").write_text(json.dumps(
        {"meta": meta, "cap_s": args.cap, "goal_ratio": GOAL_RATIO,
         "cluster_instance": lc_config.INSTANCE, "rows": rows}, indent=2) + "\n")
    (args.out / "diagnosis.md").write_text(markdown(rows, args.cap, meta))
    console.print(f"written: {args.out / 'diagnosis.json'}, {args.out / 'diagnosis.md'}",
                  markup=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
