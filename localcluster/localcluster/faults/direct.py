"""The direct path for generated faults (issue 31): one case in seconds instead of minutes.

The case's node networks are built as plain network namespaces with the proving ground's
own code (``nodeplan.topology``, ``netns.ensure_fabric``/``ensure_node``: NICs, decoys,
rate limits, firewalls; ``routing``: routers and path-MTU black holes; ``podnet``: each
node's cni0 and pod routes, which a hostNetwork probe sees too), so the fault is the one
the cluster would have; no apiserver, no kubelet. Every namespace is named
``dtjf-<6 hex>-*`` (:data:`PREFIX`), never the cluster's ``dtj-*``. Each node's
``/etc/hosts`` and ``resolv.conf`` are files under ``/etc/netns/<ns>/``, which
``ip netns exec`` binds over ``/etc`` for its process. One real probe process per rank runs
in its node's namespace (its own UTS namespace with the node's hostname) with the
environment of the operator's probe pod (``directplan.probe_env``), launched as the operator
launches them (a gang: all at once; else rank 0 first, the others once it started). The finished pods go to the operator's own
verdict (``directplan.verdict_of``) and the conditions to ``grade.grade``.

:func:`run_case` returns the grade; :func:`sweep` removes namespaces of an earlier run that
ended without its clean-up (none of its processes left). Needs root, iproute2, nft, tc.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from localcluster.common.config import REPO_ROOT, NodeSpec, pod_cidr
from localcluster.faults import directplan as P
from localcluster.faults.generate import Case
from localcluster.faults.grade import Grade, grade
from localcluster.network import netns, podnet, routing
from localcluster.network.topology import NodeTopology, peer_hosts
from localcluster.scenarios import nodeplan

PREFIX = "dtjf-"
ETC_NETNS = Path("/etc/netns")
PEER_DELAY_SECONDS = 1.0  # rank 0's container started -> the operator creates the others
DEADLINE_SLACK_SECONDS = 60  # activeDeadlineSeconds = probe.timeoutSeconds + 60


class DirectError(RuntimeError):
    """The case's networks could not be built (not graded: an error)."""


def _etc(ns: str) -> Path:
    return ETC_NETNS / ns


def teardown(prefix: str) -> None:
    """Delete every namespace named ``prefix*`` and its ``/etc/netns`` files (no error for
    what is gone). The processes in them must have ended."""
    for ns in netns.list_netns():
        if ns.startswith(prefix):
            netns.delete_netns(ns)
    for d in ETC_NETNS.glob(f"{prefix}*") if ETC_NETNS.is_dir() else []:
        shutil.rmtree(d, ignore_errors=True)


def sweep() -> list[str]:
    """Remove the ``dtjf-*`` namespaces (and files) no process runs in any more, left by a
    run that was killed; returns their names. A live run's namespaces are left alone."""
    gone = [ns for ns in netns.list_netns() if ns.startswith(PREFIX) and not netns.netns_pids(ns)]
    for ns in gone:
        netns.delete_netns(ns)
    live = {ns for ns in netns.list_netns() if ns.startswith(PREFIX)}
    for d in ETC_NETNS.glob(f"{PREFIX}*") if ETC_NETNS.is_dir() else []:
        if d.name not in live:
            shutil.rmtree(d, ignore_errors=True)
    return gone


def build(case: Case, prefix: str, dns_lines: list[str]) -> dict[str, str]:
    """Build ``case``'s networks under ``prefix``; returns node name -> its namespace.
    Raises DirectError naming what failed (the caller tears down)."""
    sc = case.scenario
    topos = nodeplan.topology(sc)
    fabric = prefix + "fabric"
    try:
        netns.ensure_fabric(list(sc.segments), fabric)
        pairs = routing.plan(sc.routers, {k: v.subnet for k, v in sc.segments.items()}, prefix)
        routing.ensure(pairs, fabric, [], prefix)
        routes = [(pod_cidr(t.index), t.internal_ip) for t in topos]
        peers = peer_hosts(topos)
        out = {}
        for t in topos:
            ns = out[t.name] = f"{prefix}{t.name}"
            _etc_files(ns, t, peers, dns_lines)
            netns.ensure_node(NodeSpec(t.index), t, ns, fabric)
            podnet.ensure_node(ns, pod_cidr(t.index), routes)
        return out
    except (RuntimeError, ValueError, OSError) as e:
        raise DirectError(f"building {case.name}'s networks: {e}") from e


def _etc_files(ns: str, topo: NodeTopology, peers: list[str], dns_lines: list[str]) -> None:
    d = _etc(ns)
    d.mkdir(parents=True, exist_ok=True)
    (d / "hosts").write_text(P.hosts_text(topo, peers, dns_lines))
    (d / "resolv.conf").write_text(P.resolv_text())


@dataclass
class _Rank:
    place: P.RankPlace
    pod: dict
    proc: subprocess.Popen
    report: Path
    log: Path
    started_at: str


def _rfc3339(t: Optional[datetime] = None) -> str:
    return (t or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _start(place: P.RankPlace, ns: str, pod: dict, tmp: Path) -> _Rank:
    """Start ``pod``'s probe in ``ns`` with the node's hostname; its output to a log file."""
    report, log = tmp / f"report-{place.rank}.json", tmp / f"probe-{place.rank}.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/root", "LANG": "C.UTF-8",
           "PYTHONPATH": str(REPO_ROOT / "probe_image")}
    env.update(P.probe_env(pod, place, str(report)))
    cmd = ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"',
           place.node, sys.executable, "-m", "disttrain_probe"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=str(tmp), stdout=out, stderr=subprocess.STDOUT)
    return _Rank(place, pod, proc, report, log, _rfc3339())


def _finish(r: _Rank, deadline: float) -> dict:
    """Wait for ``r`` until ``deadline`` (monotonic; killed past it) and return its pod as
    observed finished."""
    try:
        code: Optional[int] = r.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        r.proc.kill()
        r.proc.wait()
        code = None
    report = r.report.read_text(errors="replace") if r.report.exists() else ""
    log = r.log.read_text(errors="replace") if r.log.exists() else ""
    return P.finished_pod(r.pod, r.place, P.termination_message(report, log, code), code, r.started_at)


def run_probes(case: Case, places: list[P.RankPlace], spaces: dict[str, str], tmp: Path) -> list[dict]:
    """Run one probe per rank as the operator launches them (a gang: all at once with rank
    0's name; else rank 0 first, the others with its address and start time once it
    started); returns the finished pods in rank order. Every process has ended when this
    returns."""
    body = P.job_body(case)
    spec = P.spec_of(body)
    deadline = time.monotonic() + spec.probe.timeout_seconds + DEADLINE_SLACK_SECONDS
    master, gang = P.rank0_master(body, places[0]), P.all_at_once(body)
    ranks: list[_Rank] = []
    try:
        ranks.append(_start(places[0], spaces[places[0].node], P.probe_pod(body, 0, None, None), tmp))
        if not gang:
            time.sleep(PEER_DELAY_SECONDS)
        for p in places[1:]:
            pod = P.probe_pod(body, p.rank, master, None if gang else ranks[0].started_at)
            ranks.append(_start(p, spaces[p.node], pod, tmp))
        return [_finish(r, deadline) for r in ranks]
    finally:
        for r in ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()


@dataclass(frozen=True)
class DirectResult:
    """One case's direct run: its grade, the operator's verdict, seconds it took."""

    grade: Grade
    verdict: P.Verdict
    seconds: float


def new_prefix() -> str:
    """A fresh namespace prefix, ``dtjf-<6 hex>-``."""
    return f"{PREFIX}{uuid.uuid4().hex[:6]}-"


def run_case(case: Case, keep_tmp: bool = False, prefix: Optional[str] = None) -> DirectResult:
    """Build ``case``'s networks (namespaces ``prefix*``, default :func:`new_prefix`), run
    its probes, take the operator's verdict and grade it; always tears its namespaces down.
    Raises DirectError when the networks could not be built, ValueError for a case the
    direct path cannot run (``directplan.cluster_only``)."""
    why = P.cluster_only(case)
    if why:
        raise ValueError(f"{case.name} is cluster-only: {why}")
    t0 = time.monotonic()
    prefix = prefix or new_prefix()
    body = P.job_body(case)
    places = P.places(case, body, nodeplan.topology(case.scenario))
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        spaces = build(case, prefix, P.cluster_dns_lines(body, places))
        pods = run_probes(case, places, spaces, tmp)
    finally:
        teardown(prefix)
        if not keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    v = P.verdict_of(body, pods, P.rank0_master(body, places[0]), datetime.now(timezone.utc))
    g = grade(case.expectation, v.conditions, v.rank_nodes, v.socket_ifname)
    return DirectResult(g, v, time.monotonic() - t0)
