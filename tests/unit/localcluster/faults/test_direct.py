"""The direct path's pure parts (localcluster/faults/directplan.py) and the runner's
``--direct`` split: which generated cases need the whole cluster, each probe's environment
derived from the operator's own probe pod, the placement, the kubelet's termination
message, the operator's verdict on finished pods, and cluster-only cases skipped, never
graded."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain_probe.contract import probe_env as PE
from disttrain_probe.contract import vocabulary as V
from localcluster.faults import directplan as P
from localcluster.faults import generate, runner
from localcluster.faults import grammar as G
from localcluster.faults.grade import RIGHT, Grade

SEEDS = st.integers(min_value=0, max_value=10**6)
INDEXES = st.integers(min_value=0, max_value=999)


def _dns_nodes(c: generate.Case) -> bool:
    return any(o.dns and o.dns.records for o in c.scenario.nodeOverrides.values())


@settings(max_examples=150)
@given(SEEDS, INDEXES)
def test_cluster_only_exactly_for_policies_pod_network_and_node_dns(seed, i):
    c = generate.case(seed, i)
    body = P.job_body(c)
    pod_network = body["spec"]["network"].get("hostNetwork") is False
    needs = isinstance(c.fault, G.PolicyFault) or pod_network or _dns_nodes(c)
    why = P.cluster_only(c)
    assert (why is not None) == needs, (c.name, why)
    if isinstance(c.fault, (G.FirewallFault, G.IslandsFault, G.MtuFault, G.SlowLinkFault)):
        assert why is None


def test_each_cluster_only_reason_names_what_needs_the_cluster():
    policy = next(c for i in range(400) if isinstance((c := generate.case(1, i)).fault, G.PolicyFault))
    assert "NetworkPolicy" in P.cluster_only(policy)
    dns = next(c for i in range(400) if _dns_nodes(c := generate.case(1, i)))
    assert "CoreDNS" in P.cluster_only(dns) and dns.fault.describe()
    port_range = next(c for i in range(400) if isinstance((c := generate.case(1, i)).fault, G.Healthy)
                      and c.fault.shape == "port-range")
    assert "pod network" in P.cluster_only(port_range)


def _case(cls: str, seed: int = 1) -> generate.Case:
    return next(c for i in range(400) if P.cluster_only(c := generate.case(seed, i, [cls])) is None)


def test_probe_env_is_the_operators_pod_env_resolved_on_the_node():
    """A gang (the proving ground serves the workload API): every rank is given rank 0's DNS
    name and no start time, as the operator creates them all at once."""
    c = _case("firewall")
    body = P.job_body(c)
    assert P.all_at_once(body) and P.spec_of(body).network.enable_dns_hostnames is True
    r0 = P.RankPlace(0, "node-c", "10.100.0.13", "ddp-digits-probe-0")
    r1 = P.RankPlace(1, "node-a", "10.100.0.11", "ddp-digits-probe-1")
    master = P.rank0_master(body, r0)
    assert master == G.MASTER_NAME
    e0 = P.probe_env(P.probe_pod(body, 0, None, None), r0, "/tmp/r0.json")
    e1 = P.probe_env(P.probe_pod(body, 1, master, None), r1, "/tmp/r1.json")
    assert (e0["MASTER_ADDR"], e1["MASTER_ADDR"]) == (G.MASTER_NAME, G.MASTER_NAME)
    assert (e0["NODE_NAME"], e0["POD_NAME"], e0["HOST_IP"]) == ("node-c", "ddp-digits-probe-0", "10.100.0.13")
    assert (e1["RANK"], e1["WORLD_SIZE"]) == ("1", str(c.scenario.nodes))
    assert PE.MASTER_STARTED_AT not in e0 and PE.MASTER_STARTED_AT not in e1
    assert e0[PE.REPORT_PATH] == "/tmp/r0.json"
    assert e0[PE.JOB_UID] == P.JOB_UID and e0[PE.TIMEOUT_SECONDS] == "60"  # the example's probe budget
    assert e0["OMP_NUM_THREADS"] == "1"  # the trainer's env, merged under the probe's
    if c.scenario.job.get("network", {}).get("socketIfname"):
        assert e0[PE.SOCKET_IFNAME] == c.scenario.job["network"]["socketIfname"]


def test_without_a_gang_rank_0_first_and_the_others_get_its_address_and_start():
    body = P.job_body(_case("firewall"))
    body["spec"]["runPolicy"] = {"schedulingPolicy": {"gang": "none"}}
    assert not P.all_at_once(body)
    r0 = P.RankPlace(0, "node-c", "10.100.0.13", "ddp-digits-probe-0")
    master = P.rank0_master(body, r0)
    assert master == "10.100.0.13"  # hostNetwork without DNS hostnames: rank 0's node address
    e0 = P.probe_env(P.probe_pod(body, 0, None, None), r0, "/r0")
    e1 = P.probe_env(P.probe_pod(body, 1, master, "2026-12-06T05:00:00Z"),
                     P.RankPlace(1, "node-a", "10.100.0.11", "ddp-digits-probe-1"), "/r1")
    assert (e0["MASTER_ADDR"], e1["MASTER_ADDR"]) == ("10.100.0.13", "10.100.0.13")
    assert e1[PE.MASTER_STARTED_AT] == "2026-12-06T05:00:00Z" and PE.MASTER_STARTED_AT not in e0
    assert P.cluster_dns_lines(body, [r0]) == []


def test_probe_env_refuses_a_value_with_no_direct_meaning():
    pod = {"spec": {"containers": [{"name": "probe", "env": [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}}
    with pytest.raises(ValueError, match="TOKEN"):
        P.probe_env(pod, P.RankPlace(0, "node-a", "10.100.0.11", "p"), "/r")
    pod["spec"]["containers"][0]["env"] = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
    with pytest.raises(ValueError, match="metadata.uid"):
        P.probe_env(pod, P.RankPlace(0, "node-a", "10.100.0.11", "p"), "/r")


def test_dns_hostnames_become_fully_qualified_hosts_lines_after_the_nodes_own():
    c = _case("names")
    body = P.job_body(c)
    places = [P.RankPlace(0, "node-b", "10.100.0.12", "p0"), P.RankPlace(1, "node-a", "10.100.0.11", "p1")]
    assert P.rank0_master(body, places[0]) == G.MASTER_NAME
    lines = P.cluster_dns_lines(body, places)
    assert lines == [f"10.100.0.12 {G.MASTER_NAME} {G.MASTER_NAME}.{P.NAMESPACE}.svc.cluster.local",
                     f"10.100.0.11 ddp-digits-1.ddp-digits ddp-digits-1.ddp-digits.{P.NAMESPACE}.svc.cluster.local"]
    from localcluster.network.topology import default_topology
    topo = default_topology(2)[0]
    topo.hosts = ["127.0.0.1 ddp-digits-0.ddp-digits"]
    text = P.hosts_text(topo, ["10.100.0.11 node-a"], lines).splitlines()
    # the node's own entry is its only answer for that name (glibc would return every line)
    assert text[:3] == ["127.0.0.1 localhost", topo.hosts[0], "10.100.0.11 node-a"]
    assert text[3:] == [f"10.100.0.12 {G.MASTER_NAME}.{P.NAMESPACE}.svc.cluster.local", lines[1]]
    assert sum(G.MASTER_NAME in ln.split() for ln in text) == 1
    topo.hosts = []
    assert P.hosts_text(topo, [], lines).splitlines()[1:] == lines
    assert "ndots:5" in P.resolv_text() and f"search {P.NAMESPACE}.svc.cluster.local" in P.resolv_text()


@given(SEEDS, INDEXES)
def test_placement_is_a_seeded_permutation(seed, i):
    c = generate.case(seed, i)
    order = P.placement(c, c.scenario.nodes)
    assert sorted(order) == list(range(c.scenario.nodes)) and order == P.placement(c, c.scenario.nodes)


def test_termination_message_as_the_kubelet_keeps_it():
    assert P.termination_message('{"v": 1}', "log", 0) == '{"v": 1}'
    assert len(P.termination_message("x" * 10000, "", 1).encode()) == P.MESSAGE_LIMIT
    log = "\n".join(f"line {i}" for i in range(200))
    tail = P.termination_message("", log, 1)
    assert tail.startswith("line 120") and tail.endswith("line 199")
    assert P.termination_message("", log, 0) == ""  # exit 0 without a report: nothing


def test_verdict_of_finished_pods_is_the_operators_verdict():
    c = _case("firewall")
    body = P.job_body(c)
    body["spec"]["numNodes"] = 2
    places = [P.RankPlace(0, "node-b", "10.100.0.12", "ddp-digits-probe-0"),
              P.RankPlace(1, "node-a", "10.100.0.11", "ddp-digits-probe-1")]
    master = P.rank0_master(body, places[0])
    ts = "2026-12-06T05:00:00Z"
    pods = [P.finished_pod(P.probe_pod(body, 0, None, None), places[0], "Traceback: boom", 1, ts),
            P.finished_pod(P.probe_pod(body, 1, master, ts), places[1], "", None, ts)]
    assert pods[1]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    v = P.verdict_of(body, pods, master, datetime(2026, 12, 6, 5, 1, tzinfo=timezone.utc))
    val = next(x for x in v.conditions if x["type"] == V.VALIDATED)
    assert val["status"] == "False" and v.rank_nodes == {0: "node-b", 1: "node-a"}
    assert "node-b" in val["message"] or any("node-b" in (x.get("message") or "") for x in v.conditions)
    assert v.socket_ifname is None


def test_direct_run_skips_cluster_only_cases_and_never_grades_them(tmp_path, monkeypatch):
    from localcluster.faults import direct
    monkeypatch.setattr(direct, "sweep", lambda: [])
    ran = []

    def fake_run_case(case):
        ran.append(case.name)
        return direct.DirectResult(Grade(RIGHT, ""), None, 0.5)
    monkeypatch.setattr(direct, "run_case", fake_run_case)
    cases = range(0, 40)
    out = tmp_path / "r.md"
    outcomes = runner.run(1, cases, None, out, folder=tmp_path / "kept", say=lambda *_: None, direct=True)
    only = [generate.case(1, i).name for i in cases if P.cluster_only(generate.case(1, i))]
    assert only and outcomes.count(runner.SKIPPED) == len(only)
    assert set(ran).isdisjoint(only) and len(ran) == len(cases) - len(only)
    assert runner.summary_line(outcomes).startswith(f"{len(ran)} cases: 100.0% right")
    page = out.read_text()
    assert "| cluster-only |" in page and "Not right" not in page and "s a case" in page
    assert not (tmp_path / "kept").exists()
