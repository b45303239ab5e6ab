"""Scenario files (localcluster/scenarios/scenario.py), nft rendering (firewall.py), the expectation
check (scenariorun.check) and the cluster instance settings (config.py): all pure."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from localcluster import scenariorun
from localcluster.common.config import REPO_ROOT
from localcluster.network import firewall, topology
from localcluster.scenarios import loader, nodeplan, scenario
from localcluster.scenarios import scenario as scn


def parse(text: str) -> scn.Scenario:
    return loader.parse(textwrap.dedent(text), "t.yaml")


@pytest.mark.parametrize("name", loader.all_names() + loader.regression_names())
def test_every_checked_in_scenario_loads(name):
    sc = loader.load(name)
    assert sc.name == name.rsplit("/", 1)[-1] and sc.description
    topos = nodeplan.topology(sc)
    assert len(topos) == sc.nodes
    assert loader.job_documents(sc)
    if sc.expect.status == "True" and sc.expect.condition != "Progressing":  # a healthy cluster must still
        assert sc.expect.phase == "Succeeded", f"{name}: expect.phase: Succeeded"


def test_minimal_scenario_is_the_default_cluster():
    sc = parse("expect: {status: 'True'}\n")
    topos = nodeplan.topology(sc)
    a, b = topos
    assert [ln.name for ln in a.links] == ["docker0", "eth0", "eth1"]
    assert a.links[0].addresses == ["172.17.0.1/16"] and a.links[0].segment is None
    assert a.links[1].addresses == ["10.100.0.11/24"] and a.links[1].fabric_peer == "mgmt-node-a"
    assert b.links[2].addresses == ["10.101.0.12/24"] and b.links[2].fabric_peer == "data-node-b"
    assert (a.internal_ip, b.internal_ip) == ("10.100.0.11", "10.100.0.12")
    hosts = topology.peer_hosts(topos)
    assert "10.100.0.11 node-a" in hosts and "::ffff:10.101.0.12 node-b-data" in hosts


def test_overrides_replace_fields_per_node_and_ipv6_and_mtu():
    sc = parse("""
        nodes: 2
        segments:
          mgmt: {subnet: 10.100.0.0/24, subnet6: "fd00:100::/64"}
        defaults:
          nics: [{name: eth0, segment: mgmt, mtu: 9000}]
          env: {NCCL_DEBUG: INFO}
          hosts: ["127.0.1.1 {node}"]
        nodeOverrides:
          node-b:
            nics: [{name: enp4s0, segment: mgmt, addresses: [10.100.0.99/24]}]
            gpus: 4
        expect: {status: 'True'}
        """)
    a, b = nodeplan.topology(sc)
    assert a.links[1].addresses == ["10.100.0.11/24", "fd00:100::b/64"] and a.links[1].mtu == 9000
    assert b.links[1].name == "enp4s0" and b.internal_ip == "10.100.0.99"
    assert (a.gpus, b.gpus) == (None, 4)
    assert a.hosts == ["127.0.1.1 node-a"] and b.env == {"NCCL_DEBUG": "INFO"}
    assert topology.NodeTopology.from_json(b.to_json()) == b


@pytest.mark.parametrize("text,where", [
    ("nodes: 2\nexpect:\n  status: 'True'\n  colour: red\n", "t.yaml:4: expect.colour: Extra inputs"),
    ("nodes: 0\nexpect: {status: 'True'}\n", "t.yaml:1: nodes:"),
    ("expect: {status: 'True'}\ndefaults:\n  nics:\n    - {name: eth0, segment: mgmt}\n"
     "    - {name: eth1, segment: mgmt, mtu: 10}\n", "t.yaml:5: defaults.nics.1.mtu"),
    ("expect: {status: 'True'}\ndefaults:\n  nics:\n    - {name: eth0, segment: nowhere}\n",
     "defaults.nics.0.segment: unknown segment 'nowhere'"),
    ("expect: {status: 'True'}\nnodeOverrides:\n  node-z: {gpus: 1}\n",
     "t.yaml:3: nodeOverrides.node-z: no such node"),
    ("expect: {status: 'True'}\ndefaults:\n  firewall:\n    input:\n      - {dport: 29500, action: drop}\n",
     "t.yaml:5: defaults.firewall.input.0: dport needs proto"),
    ("expect: {status: 'True'}\ndefaults:\n  firewall:\n    input:\n      - {proto: tcp, dport: 70000, action: drop}\n",
     "t.yaml:5: defaults.firewall.input.0.dport"),
    ("expect: {status: 'True'}\ndefaults:\n  nics: [{name: eth0, segment: mgmt, addresses: [10.1.2.3]}]\n",
     "t.yaml:3: defaults.nics.0.addresses"),
    ("nodes: 2\n", "t.yaml:1: expect: Field required"),
    ("nodes: [1\n", "t.yaml:2: not valid YAML"),
    ("expect: {status: 'True'}\ndefaults:\n  decoys: []\n  nics: [{name: eth0, segment: mgmt, addresses: ['fd00::1/64']}]\n",
     "no NIC with an IPv4 address"),
    ("expect: {status: 'True'}\nsegments:\n  mgmt: {subnet: 10.100.0.0/24}\n",
     "t.yaml:2: segments: the default NICs (eth0 on mgmt, eth1 on data) need segment(s) data"),
    ("expect: {status: 'True'}\njob:\n  network:\n    portRange: abc\n", "t.yaml:4: job.network.portRange"),
    ("expect: {status: 'True'}\njob:\n  numNodes: 0\n", "t.yaml:3: job.numNodes"),
    ("expect: {status: 'True'}\ndefaults: {gpus: 1}\nnodes: 2\ndefaults: {gpus: 2}\n",
     "t.yaml:4: defaults: given twice (also on line 2)"),
    ("expect: {status: 'True'}\ndescription: !include other.yaml\n", "t.yaml:2: not valid scenario YAML"),
    ("expect: {status: 'False', condition: NetworkValidatd}\n", "t.yaml:1: expect.condition: 'NetworkValidatd'"),
    ("expect:\n  status: 'False'\n  reason: EphemeralPortBlocked\n", "t.yaml:3: expect.reason: 'EphemeralPortBlocked'"),
    ("expect: {status: 'False', condition: MasterReachable, reason: EphemeralPortsBlocked}\n",
     "is reported on NetworkValidated"),
    ("expect: {status: 'True'}\ndefaults:\n  firewall:\n    input:\n      - {proto: tcp, dport: '0100', action: drop}\n",
     "no leading zeros"),
    ("expect: {status: 'True'}\njob:\n  template: {spec: {hostNetwork: true, containers: [{name: t}]}}\n",
     "spec.network.hostNetwork"),
])
def test_errors_name_line_and_field(text, where):
    with pytest.raises(scn.ScenarioError) as e:
        loader.parse(text, "t.yaml")
    assert where in str(e.value)


def test_resolve_by_name_or_path(tmp_path):
    assert loader.resolve("healthy") == loader.SCENARIO_DIR / "healthy.yaml"
    f = tmp_path / "mine.yaml"
    f.write_text("expect: {status: 'True'}\n")
    assert loader.load(str(f)).name == "mine"
    with pytest.raises(scn.ScenarioError, match="known: .*healthy"):
        loader.resolve("no-such-scenario")


def test_job_overrides_deep_merge():
    sc = parse("expect: {status: 'True'}\njob: {numNodes: 3, network: {socketIfname: eth2}}\n")
    job = [d for d in loader.job_documents(sc) if d["kind"] == "DistTrainingJob"][0]
    assert job["spec"]["numNodes"] == 3
    assert job["spec"]["network"] == {"hostNetwork": True, "socketIfname": "eth2"}


def test_firewall_render():
    fw = {"policy": "accept", "input": [
        {"iifname": "lo", "action": "accept"},
        {"state": ["established", "related"], "action": "accept"},
        {"proto": "tcp", "dport": 29500, "action": "accept"},
        {"proto": "tcp", "state": ["new"], "action": "drop"},
        {"proto": "tcp", "dport": "29500", "saddr": "10.100.0.0/24", "action": "reject"},
        {"proto": "udp", "dport": "1000-2000", "action": "reject"},
    ]}
    text = firewall.render(fw)
    assert text.startswith("table inet disttrain\ndelete table inet disttrain\n")
    assert "type filter hook input priority 0; policy accept;" in text
    body = [ln.strip() for ln in text.splitlines()]
    assert body[5:11] == ['iifname "lo" accept', "ct state established,related accept",
                          "tcp dport 29500 accept", "meta l4proto tcp ct state new drop",
                          "ip saddr 10.100.0.0/24 tcp dport 29500 reject with tcp reset",
                          "udp dport 1000-2000 reject"]
    assert firewall.render(None) == "table inet disttrain\ndelete table inet disttrain\n"


def _job(*conds, phase=None):
    return {"status": {"phase": phase, "conditions": [
        {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds]}}


def test_check_expectations():
    e = scn.Expect(condition="MasterReachable", status="False", reason="MasterPortTimeout",
                   messageContains=["{node:0}", "29500"])
    assert scenariorun.check(None, e, {})[0] is None
    assert scenariorun.check(_job(("MasterReachable", "Unknown", "NotCheckedYet", "")), e, {})[0] is None
    hit = _job(("MasterReachable", "False", "MasterPortTimeout", "node-b: 10.100.0.12:29500 timed out"))
    assert scenariorun.check(hit, e, {0: "node-b"}) == (True, "")
    assert scenariorun.check(hit, e, {})[0] is None  # placement not known yet
    assert scenariorun.check(hit, e, {0: "node-a"})[0] is False
    e_lacks = e.model_copy(update={"messageContains": [], "messageLacks": ["node-a"]})
    assert scenariorun.check(hit, e_lacks, {})[0] is True
    assert scenariorun.check(_job(("MasterReachable", "False", "MasterPortTimeout", "node-a: x")),
                             e_lacks, {})[0] is False
    wrong = _job(("MasterReachable", "False", "MasterPortRefused", "x"))
    assert scenariorun.check(wrong, e, {0: "node-b"})[0] is False
    passed = _job(("NetworkValidated", "True", "InterfaceSelected", "eth0 (10.100.0.0/24) chosen on every node"))
    passed["status"]["probe"] = {"interfacesNotChosen": ["not chosen: docker0 172.17.0.1 (DuplicateAddress: x)"]}
    e_why = scn.Expect(condition="NetworkValidated", status="True", notChosenContains=["docker0 172.17.0.1"])
    assert scenariorun.check(passed, e_why, {}) == (True, "")
    e_why = e_why.model_copy(update={"notChosenContains": ["PodNetworkDevice"]})
    assert scenariorun.check(passed, e_why, {})[0] is False
    e2 = scn.Expect(status="True", phase="Succeeded")
    assert scenariorun.check(_job(("Validated", "True", "AllChecksPassed", ""), phase="Running"), e2, {})[0] is None
    assert scenariorun.check(_job(("Validated", "True", "AllChecksPassed", ""), phase="Succeeded"), e2, {})[0]
    assert scenariorun.check(_job(("Validated", "True", "AllChecksPassed", ""), phase="Failed"), e2, {})[0] is False


def test_an_expected_unknown_waits_through_another_unknown_reason():
    """Unknown is never final: the first poll of a job may see Unknown/ProbesPending before
    the scheduler's word reached the operator (the scenario gpu-not-offered failed so, by
    chance, whenever the first poll came early)."""
    e = scn.Expect(condition="ProbesScheduled", status="Unknown", reason="ResourceNotOffered")
    assert scenariorun.check(_job(("ProbesScheduled", "Unknown", "ProbesPending", "0/2")), e, {})[0] is None
    assert scenariorun.check(_job(("ProbesScheduled", "Unknown", "ResourceNotOffered", "no node")), e, {})[0] is True
    assert scenariorun.check(_job(("ProbesScheduled", "False", "ResourceNotOffered", "no node")), e, {})[0] is False
    assert scenariorun.check(_job(("ProbesScheduled", "Unknown", "ProbesPending", "0/2"), phase="Failed"),
                             e, {})[0] is False


def _config_in(instance: str) -> list[str]:
    code = ("from localcluster.common import config as c; from localcluster.cluster import operator_install as o; "
            "print(c.INSTANCE, c.APISERVER_PORT, c.ETCD_CLIENT_PORT, c.ETCD_PEER_PORT, "
            "c.CONTROLLER_MANAGER_PORT, c.SCHEDULER_PORT, c.KUBELET_PORT_BASE, o.LIVENESS_PORT, "
            "o.METRICS_PORT, c.FABRIC_NS, c.NodeSpec(0).netns, c.state_dir().name)")
    env = {k: v for k, v in os.environ.items() if k not in ("DISTTRAIN_STATE_DIR",)}
    env["DISTTRAIN_CLUSTER_INSTANCE"] = instance
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True, cwd=REPO_ROOT).stdout.split()


def test_cluster_instance_zero_is_todays_cluster():
    assert _config_in("") == ["0", "16443", "23790", "23800", "16457", "16459", "16500", "18080",
                              "18090", "dtj-fabric", "dtj-node-a", ".localcluster"]


def test_cluster_instance_shifts_ports_names_and_state():
    assert _config_in("1") == ["1", "17443", "24790", "24800", "17457", "17459", "17500", "19080",
                               "19090", "dtj1-fabric", "dtj1-node-a", ".localcluster-1"]


def test_process_matching_does_not_confuse_instances(tmp_path):
    from localcluster.common.procs import mentions
    st = tmp_path / ".localcluster"
    assert mentions(["etcd", f"--data-dir={st}/etcd"], st)
    assert mentions(["python", "-m", "localcluster.nodes.nodeagent", "--state", str(st)], st)
    assert not mentions(["python", "--state", f"{st}-1"], st)
    assert not mentions(["etcd", f"--data-dir={st}-1/etcd"], st)


DESCRIBE = """Name:         ddp-digits
Namespace:    sc-x
Kind:         DistTrainingJob
Status:
  Conditions:
    Last Transition Time:  2026-12-01T02:33:20Z
    Message:               2 probe pods scheduled, one per node (rank:node 0:node-b, 1:node-a)
    Observed Generation:   1
    Reason:                AllProbesScheduled
    Status:                True
    Type:                  ProbesScheduled
    Last Transition Time:  2026-12-01T02:33:23Z
    Message:               node-b (rank 1): connection to MASTER_ADDR 10.100.0.11:29500 timeout
    Observed Generation:   1
    Reason:                MasterPortTimeout
    Status:                False
    Type:                  MasterReachable
  Phase:                Failed
Events:
  Type     Reason              Age   From                Message
  ----     ------              ----  ----                -------
  Normal   AllProbesScheduled  12s   disttrain-operator  ProbesScheduled=True: 2 probe pods scheduled
  Warning  MasterPortTimeout   9s    disttrain-operator  MasterReachable=False: node-b (rank 1): ...
"""


def test_describe_problems_accepts_conditions_and_warning_event():
    e = scn.Expect(condition="MasterReachable", status="False", reason="MasterPortTimeout")
    assert scenariorun.describe_problems(DESCRIBE, e) == []
    assert scenariorun.describe_problems(DESCRIBE, scn.Expect(condition="ProbesScheduled", status="True")) == []


def test_describe_problems_names_what_is_missing():
    e = scn.Expect(condition="MasterReachable", status="False", reason="MasterPortTimeout")
    no_event = DESCRIBE.replace("  Warning  MasterPortTimeout", "  Normal   MasterPortTimeout")
    assert scenariorun.describe_problems(no_event, e) == [
        "no Warning Event MasterPortTimeout with MasterReachable=False"]
    wrong = scn.Expect(condition="MasterReachable", status="False", reason="MasterPortRefused")
    probs = scenariorun.describe_problems(DESCRIBE, wrong)
    assert len(probs) == 2 and "expected False/MasterPortRefused" in probs[0]
    absent = scn.Expect(condition="VersionsConsistent", status="False", reason="NCCLVersionMismatch")
    assert "no VersionsConsistent under Conditions" in scenariorun.describe_problems(DESCRIBE, absent)


def test_repeat_and_slow_fields_and_same_outcome_over_runs():
    from localcluster import scenariorun as sr
    sc = loader.parse("slow: true\nexpect: {status: 'True', repeat: 5}\n", "t.yaml")
    assert sc.slow and sc.expect.repeat == 5
    with pytest.raises(scn.ScenarioError, match="expect.repeat"):
        loader.parse("expect: {status: 'True', repeat: 0}\n", "t.yaml")

    def run(ok, ifname):
        return sr.Outcome(ok, "" if ok else "failed", 1.0, 2.0,
                          {"status": {"rendezvous": {"socketIfname": ifname}}})
    assert sr.same_outcome([run(True, "eth0")] * 5).ok
    mixed = sr.same_outcome([run(True, "eth0"), run(True, "cni0")])
    assert not mixed.ok and "different interfaces: ['eth0', 'cni0']" in mixed.why
    assert sr.same_outcome([run(True, "eth0"), run(False, "eth0")]).why == "failed"


@pytest.mark.parametrize("cpu, pods, each", [("2", 2, "1000m"), ("1", 1, "1000m"), ("500m", 1, "500m"),
                                             ("1.5", 2, "750m"), ("2500m", 3, "833m"), ("4", 4, "1000m")])
def test_the_quota_holder_splits_its_cpu_into_pods_that_fit_a_node(cpu, pods, each):
    # one pod of 2 CPU fits no 2-CPU node once a DaemonSet requests 100m there: it stayed
    # Pending and held the quota forever (kueue-queued, after the NetworkPolicy scenarios)
    assert scenariorun.holder_pods(cpu) == (pods, each)


def test_a_mesh_scenario_proves_something_only_when_every_pod_carried_the_sidecar():
    assert scenariorun.sidecar_check({"j-probe-0": True, "j-worker-0": True}) is None
    assert scenariorun.sidecar_check({"j-probe-0": True, "j-worker-0": False}) == \
        "pods without Istio's sidecar (istio-proxy): j-worker-0"
    assert "no pod of the job was seen" in scenariorun.sidecar_check({})


@pytest.mark.parametrize("nodes", [1, 2, 5, 64])
def test_default_topology_is_the_plan_of_a_scenario_with_no_settings(nodes):
    """The network and the nodes build the plain cluster without the scenario model
    (network/topology.py); it must stay the plan the scenario model makes of the defaults."""
    plain = nodeplan.topology(scn.Scenario(nodes=nodes, expect=scn.Expect(status="True")))
    assert topology.default_topology(nodes) == plain
    assert [t.to_json() for t in topology.default_topology(nodes)] == [t.to_json() for t in plain]


def test_the_regression_sample_is_drawn_by_its_seed_from_the_kept_cases():
    from localcluster.scenarios import loader
    names = loader.regression_names()
    a, b = loader.regression_sample(3, 1), loader.regression_sample(3, 1)
    assert a == b and set(a) <= set(names) and len(a) == min(3, len(names)) and a == sorted(a)
    if len(names) > 3:
        assert any(loader.regression_sample(3, s) != a for s in range(2, 40))  # another seed, another draw


def test_the_scenario_sample_keeps_the_always_ones_and_draws_the_rest_by_its_seed():
    from localcluster.scenarios import loader
    names = loader.all_names()
    always = ("healthy", "sidecar-first", "no-such-scenario")
    a = loader.scenario_sample(5, 7, always)
    assert a == loader.scenario_sample(5, 7, always) and a == sorted(a)
    assert {"healthy", "sidecar-first"} <= set(a) and "no-such-scenario" not in a and len(a) == 7
    assert set(a) <= set(names)
    assert any(loader.scenario_sample(5, s, always) != a for s in range(8, 40))  # another seed, another draw
    pool = ["healthy", "slow-link", "mtu-black-hole"]
    assert loader.scenario_sample(5, 7, always, pool) == sorted(pool)  # no more than k: all of them


@pytest.mark.parametrize("text, field", [
    ("strike: {fault: partition, rank: 1}", "peerRank"),
    ("strike: {fault: freeze, rank: 1, peerRank: 0}", "peerRank"),
    ("strike: {fault: partition, rank: 1, peerRank: 1}", "peerRank"),
    ("strike: {fault: freeze, rank: 2}", "strike"),
    ("strike: {fault: melt, rank: 1}", "fault"),
    ("training: {script: no-such-script}", "training"),
    ("training: {env: {lower: x}}", "training"),
])
def test_a_strike_or_training_that_cannot_run_is_refused_naming_the_field(text, field):
    base = "job: {runPolicy: {stallTimeoutSeconds: 30}}\nexpect: {condition: Progressing, status: 'False'}\n"
    with pytest.raises(scenario.ScenarioError, match=field):
        parse(base + text + "\n")


def test_a_strike_needs_the_stall_watch():
    with pytest.raises(scenario.ScenarioError, match="stallTimeoutSeconds"):
        parse("strike: {fault: freeze, rank: 1}\nexpect: {condition: Progressing, status: 'False'}\n")


def test_training_replaces_the_script_and_adds_the_env():
    sc = parse("training: {script: allreduce-loop, env: {STALL_RANK: '1'}}\nexpect: {status: 'True'}\n")
    docs = loader.job_documents(sc)
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert "dist.all_reduce(t)" in cm["data"]["train_digits.py"]
    job = next(d for d in docs if d["kind"] == "DistTrainingJob")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "STALL_RANK", "value": "1"} in env and len({e["name"] for e in env}) == len(env)


def _node(name, ready="True", taints=()):
    return {"metadata": {"name": name}, "spec": {"taints": [{"key": k} for k in taints]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_a_lost_node_is_unsettled_until_ready_and_untainted():
    from localcluster import strikes
    nodes = [_node("node-a"), _node("node-b", ready="Unknown"),
             _node("node-c", taints=["node.kubernetes.io/unreachable"]), _node("node-d", taints=["gpu"]),
             {"metadata": {"name": "node-e"}}]
    assert strikes.unsettled(nodes) == ["node-b", "node-c", "node-e"]


def test_training_env_goes_to_the_trainer_when_a_sidecar_is_listed_first():
    import yaml as _yaml

    sc = parse("training: {env: {STALL_RANK: '1'}}\nexpect: {status: 'True'}\n")
    example = REPO_ROOT / "examples" / "ddp-digits.yaml"
    tmp = [d for d in _yaml.safe_load_all(example.read_text()) if d]
    for d in tmp:
        if d.get("kind") == "DistTrainingJob":
            d["spec"]["template"]["spec"]["containers"].insert(0, {"name": "log-shipper", "image": "busybox"})
    path = REPO_ROOT / ".localcluster-test-example.yaml"
    path.write_text(_yaml.safe_dump_all(tmp))
    try:
        got = next(d for d in loader.job_documents(sc, example=path) if d["kind"] == "DistTrainingJob")
    finally:
        path.unlink()
    shipper, main = got["spec"]["template"]["spec"]["containers"]
    assert {"name": "STALL_RANK", "value": "1"} in main["env"] and "env" not in shipper
