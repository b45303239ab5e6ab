"""Fault injection on the real local cluster (harness: tests/e2e/chaos.py).

`make test` runs a bounded subset: one job whose rank 1 fails once (a gang restart), with
three operator kills at seeded random points and one apiserver restart mid-probe. `make
chaos` (DISTTRAIN_CHAOS=long) runs at least 20 kills over several jobs, some of them the
variant that exhausts runPolicy.backoffLimit, and a few apiserver restarts, and prints a
summary table. DISTTRAIN_CHAOS_SEED=<n> replays a run's kill points.
"""

from __future__ import annotations

import os
import random
import uuid

import pytest

from . import chaos

pytestmark = pytest.mark.e2e

LONG = os.environ.get("DISTTRAIN_CHAOS") == "long"


# One seed for the whole long run (drawn once, printed by every test), so that
# DISTTRAIN_CHAOS_SEED replays all of it; the bounded tests default to a fixed one.
_RUN_SEED = random.SystemRandom().randrange(1, 10**6)


def _seed(default: int | None) -> int:
    raw = os.environ.get("DISTTRAIN_CHAOS_SEED")
    if raw:
        return int(raw)
    return default if default is not None else _RUN_SEED


def _run(cluster, plans: list[chaos.JobPlan], seed: int) -> list[chaos.JobRun]:
    h = chaos.Harness(cluster.state_dir, seed)
    print(f"\nfault injection seed {seed} (replay: DISTTRAIN_CHAOS_SEED={seed})")
    runs = []
    for plan in plans:
        ns = f"chaos-{uuid.uuid4().hex[:6]}"
        print(f"job {plan.index} ({plan.variant}) in {ns}: " + "; ".join(str(f) for f in plan.faults))
        run = h.run_job(plan, ns)
        print(run.describe())
        runs.append(run)
        h.delete_namespace(ns)
    chaos.print_summary(runs, seed)
    return runs


def test_operator_killed_and_apiserver_restarted_job_still_ends_right(cluster, operator):
    """Three operator kills (seeded stages among probing, verdict, training start, the
    failed rank and the gang restart) and one apiserver restart mid-probe: the job still
    trains after exactly one gang restart, with no duplicate and no orphaned pod."""
    seed = _seed(9)
    plans = chaos.draw_plans(seed, jobs=1, kills=3, apiserver_restarts=1)
    runs = _run(cluster, plans, seed)
    assert all(r.fired for r in runs)
    bad = [r.describe() for r in runs if not r.ok]
    assert not bad, "\n".join(bad)


def test_training_pod_deleted_by_hand_restarts_the_gang_without_recreating_the_attempt(cluster, operator):
    """Rank 1's training pod is deleted by hand while it runs (kubectl delete pod): the
    job gang-restarts once and trains; the watch of every pod change shows no pod of
    attempt 0 created again and no overlap of attempts."""
    seed = _seed(9)
    plan = chaos.JobPlan(0, chaos.DELETE_ONCE, (chaos.Fault("delete-pod", "rank1-running", 0.5),))
    runs = _run(cluster, [plan], seed)
    assert all(r.fired for r in runs)
    bad = [r.describe() for r in runs if not r.ok]
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(not LONG, reason="the long fault-injection run: make chaos")
def test_chaos_long(cluster, operator):
    """At least 20 operator kills spread over every stage, a few apiserver restarts, jobs
    that succeed after a gang restart and jobs that exhaust backoffLimit."""
    seed = _seed(None)
    jobs = int(os.environ.get("DISTTRAIN_CHAOS_JOBS", "7"))
    kills = int(os.environ.get("DISTTRAIN_CHAOS_KILLS", "21"))
    plans = chaos.draw_plans(seed, jobs=jobs, kills=kills, apiserver_restarts=3, fail_always_every=3)
    runs = _run(cluster, plans, seed)
    fired = sum(1 for r in runs for f in r.fired if f.fault.kind == "kill")
    assert fired >= min(20, kills), f"only {fired} kills fired"
    bad = [r.describe() for r in runs if not r.ok]
    assert not bad, "\n".join(bad)


def _node_loss(cluster, cases: list[tuple[int, str]], seed: int) -> list[chaos.NodeLossRun]:
    h = chaos.Harness(cluster.state_dir, seed)
    print(f"\nnode loss seed {seed} (replay: DISTTRAIN_CHAOS_SEED={seed})")
    runs = []
    for victim, phase in cases:
        ns = f"nodeloss-{uuid.uuid4().hex[:6]}"
        try:
            run = chaos.run_node_loss(h, victim, phase, ns)
        finally:
            h.delete_namespace(ns)  # first: the restarted agent then deletes the lost pod
            chaos.restore_nodes(len(cluster.node_names), h.core)
        print(run.describe())
        runs.append(run)
    chaos.print_node_loss_summary(runs, seed)
    return runs


def test_node_lost_mid_probe_is_named_within_the_probe_budget(cluster, operator):
    """The node of one probe rank (seeded: rank 0, the rendezvous store, or rank 1) dies
    mid-probe: links down, node agent and pod processes killed. The job fails within the
    probe budget with ProbePodLost naming that node, not a ProbeTimeout listing pods."""
    rng = random.Random(seed := _seed(9))
    victim = rng.choice([0, 1])
    # a gather phase: the peer's report comes at its phase deadline, ~35 s sooner than from
    # the collective (make chaos covers every phase)
    phase = rng.choice([ph for ph in chaos.LOSS_PHASES[victim] if ph != "collective"])
    runs = _node_loss(cluster, [(victim, phase)], seed)
    bad = [r.describe() for r in runs if not r.ok]
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(not LONG, reason="the long fault-injection run: make chaos")
def test_node_loss_long(cluster, operator):
    """Every rank at every phase of LOSS_PHASES, in a seeded order."""
    rng = random.Random(seed := _seed(None))
    cases = [(r, ph) for r, phases in sorted(chaos.LOSS_PHASES.items()) for ph in phases]
    rng.shuffle(cases)
    runs = _node_loss(cluster, cases, seed)
    bad = [r.describe() for r in runs if not r.ok]
    assert not bad, "\n".join(bad)
