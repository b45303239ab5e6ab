"""Pure builders: spec -> probe and worker pods."""

import pytest

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec, nproc_for
from disttrain.children.names import JobRef
from disttrain.children.pods import Rendezvous, TorchrunOptions, build_worker_pod, torchrun_command
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from tests.support.builders import spec_of
from tests.support.fixtures import job

REF = JobRef("j", "ns", "uid-1")


def env(ctr):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr["env"]}


def test_probe_leaves_the_trainers_pythonpath_as_it_is():
    """Found on real nodes: the example's torch comes from a shared tree on PYTHONPATH
    (the pod spec's, the image's ENV or the node's); a PYTHONPATH of the probe's own
    replaced it, so the probe had no torch. The probe runs from its launcher instead."""
    for entry in (None, {"name": "PYTHONPATH", "value": "/opt/torch"},
                  {"name": "PYTHONPATH", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}}):
        s = spec_of()
        if entry:
            s.template.spec["containers"][0].setdefault("env", []).append(entry)
        probe = build_probe_pod(REF, s, 1, ProbeMaster("10.100.0.10"), attempt=0, probe_image="probe:1")["spec"]["containers"][0]
        assert probe["command"] == ["python", constants.PROBE_LAUNCHER]
        assert [x for x in probe["env"] if x["name"] == "PYTHONPATH"] == ([entry] if entry else [])


def test_probe_pod_runs_in_training_image_with_same_constraints():
    s = spec_of()
    pod = build_probe_pod(REF, s, 1, ProbeMaster("10.100.0.10"), attempt=3, probe_image="probe:1")
    ps = pod["spec"]
    assert pod["metadata"]["name"] == "j-probe-1"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert pod["metadata"]["labels"][constants.LABEL_ATTEMPT] == "3"
    assert ps["nodeSelector"] == {"pool": "gpu"} and ps["tolerations"]
    probe = ps["containers"][0]
    assert probe["image"] == "example/train:1" and probe["resources"] == {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}
    assert probe["command"] == ["python", constants.PROBE_LAUNCHER]
    assert ps["initContainers"][0]["image"] == "probe:1"
    e = env(probe)
    assert (e["RANK"], e["WORLD_SIZE"], e["MASTER_ADDR"], e["MASTER_PORT"]) == ("1", "2", "10.100.0.10", "29500")
    assert "PYTHONPATH" not in e and e["FOO"] == "bar"
    anti = ps["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"][constants.LABEL_ROLE] == constants.ROLE_PROBE
    assert ps["restartPolicy"] == "Never" and probe["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_rank0_probe_uses_its_own_host_ip_as_master():
    pod = build_probe_pod(REF, spec_of(), 0, ProbeMaster(), attempt=1)
    assert env(pod["spec"]["containers"][0])["MASTER_ADDR"] == {"fieldRef": {"fieldPath": "status.hostIP"}}


def test_probe_in_probe_image_has_no_init_container():
    s = spec_of(probe={"useTrainingImage": False, "image": "probe:2"})
    pod = build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1)
    assert pod["spec"]["initContainers"] == [] and pod["spec"]["containers"][0]["image"] == "probe:2"


def test_worker_pinned_with_validated_rendezvous_torchrun():
    s = spec_of()
    pod = build_worker_pod(REF, s, 1, "node-b", Rendezvous("10.100.0.10", 29500, "eth1", exact=True), attempt=0)
    ps = pod["spec"]
    term = ps["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"][-1] == {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}
    ctr = ps["containers"][0]
    assert ctr["command"] == ["python", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--node-rank=1",
                              "--master-addr=10.100.0.10", "--master-port=29500",
                              "/workspace/train.py", "--epochs", "3"]
    e = env(ctr)
    # NCCL reads a plain name as a prefix (eth1 would match eth10): "=" makes it exact.
    assert (e["NCCL_SOCKET_IFNAME"], e["GLOO_SOCKET_IFNAME"]) == ("=eth1", "eth1")
    assert e["PET_NODE_RANK"] == "1" and e["PET_NNODES"] == "2"
    assert "RANK" not in e  # torchrun sets RANK per process


def test_user_ifname_value_passed_through_as_nccl_reads_it():
    s = spec_of(probe={"enabled": False}, network={"socketIfname": "^docker0,lo"})
    ctr = build_worker_pod(REF, s, 0, None, Rendezvous("m", 1, "^docker0,lo"), 0)["spec"]["containers"][0]
    assert env(ctr)["NCCL_SOCKET_IFNAME"] == "^docker0,lo"


def test_env_launcher_sets_ranks():
    s = spec_of(launcher="env", numProcPerNode=1)
    ctr = build_worker_pod(REF, s, 1, "node-b", Rendezvous("10.0.0.1", 29500), 0)["spec"]["containers"][0]
    e = env(ctr)
    assert (e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"]) == ("1", "2", "0")
    assert ctr["command"][0] == "python" and "NCCL_SOCKET_IFNAME" not in e


def test_node_pin_is_added_to_every_existing_term():
    tmpl = job()["spec"]["template"]
    tmpl["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                              {"matchExpressions": [{"key": "b", "operator": "Exists"}]}]}}}
    s = DistTrainingJobSpec.model_validate({"numNodes": 2, "template": tmpl})
    terms = build_worker_pod(REF, s, 0, "node-a", Rendezvous("x", 1), 0)["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(t["matchExpressions"][-1]["values"] == ["node-a"] for t in terms) and len(terms) == 2


@pytest.mark.parametrize("cmd,tail", [
    (["python", "-m", "pkg.train", "--x"], ["-m", "pkg.train", "--x"]),
    (["python3", "train.py"], ["train.py"]),
    (["/bin/sh", "-c", "echo hi"], ["--no-python", "/bin/sh", "-c", "echo hi"]),
])
def test_torchrun_wrapping(cmd, tail):
    out = torchrun_command(cmd, [], TorchrunOptions(2, 4, 0, "static", "id"), Rendezvous("m", 1))
    assert out[-len(tail):] == tail and "--nproc-per-node=4" in out


def test_torchrun_c10d_uses_endpoint():
    out = torchrun_command(["python", "t.py"], [], TorchrunOptions(2, 1, 0, "c10d", "id"), Rendezvous("m", 7))
    assert "--rdzv-endpoint=m:7" in out and not any(a.startswith("--node-rank") for a in out)


def test_nproc_auto_counts_gpus():
    tmpl = job()["spec"]["template"]
    tmpl["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    s = DistTrainingJobSpec.model_validate({"numNodes": 2, "template": tmpl})
    assert nproc_for(s) == 8
    assert nproc_for(spec_of()) == 1


def test_pod_network_gives_dns_hostnames_and_a_headless_service():
    from disttrain.children.names import master_dns_name
    from disttrain.children.service import build_headless_service

    s = spec_of(network={"hostNetwork": False})
    p0 = build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1)
    assert p0["spec"]["hostname"] == "j-0" and p0["spec"]["subdomain"] == "j"
    assert "hostNetwork" not in p0["spec"]
    e = env(p0["spec"]["containers"][0])
    assert e["MASTER_ADDR"] == master_dns_name(REF, s) == "j-0.j"
    assert e["HOST_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    w1 = build_worker_pod(REF, s, 1, "node-b", Rendezvous("j-0.j", 29500, "eth0", exact=True), attempt=0)
    assert w1["spec"]["hostname"] == "j-1" and w1["spec"]["subdomain"] == "j"
    svc = build_headless_service(REF, s)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {constants.LABEL_JOB: "j"}
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_dns_hostnames_off_uses_pod_ip_and_user_subdomain_names_the_service():
    s = spec_of(network={"hostNetwork": False, "enableDNSHostnames": False})
    p0 = build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1)
    assert env(p0["spec"]["containers"][0])["MASTER_ADDR"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "subdomain" not in p0["spec"]
    s = spec_of(network={"hostNetwork": True, "enableDNSHostnames": True, "subdomain": "workers"})
    p0 = build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1)
    assert env(p0["spec"]["containers"][0])["MASTER_ADDR"] == "j-0.workers"
    assert p0["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_long_job_name_hostname_is_a_dns_label():
    from disttrain.children.names import pod_hostname

    h = pod_hostname("x" * 80, 12)
    assert len(h) == 63 and h.endswith("-12")


def test_port_range_becomes_the_pods_sysctl_only_without_host_network():
    s = spec_of(network={"hostNetwork": False, "portRange": "60000-61000"})
    for pod in (build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1),
                build_worker_pod(REF, s, 0, "node-a", Rendezvous("j-0.j", 29500, None), attempt=0)):
        assert pod["spec"]["securityContext"]["sysctls"] == [
            {"name": "net.ipv4.ip_local_port_range", "value": "60000 61000"}]
    s = spec_of(network={"hostNetwork": True, "portRange": "60000-61000"})
    assert "sysctls" not in (build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1)["spec"].get("securityContext") or {})


@pytest.mark.parametrize("command,args", [
    (["torchrun", "--nproc-per-node=1", "/w/train.py", "--epochs", "3"], []),
    (["python", "-m", "torch.distributed.run"], ["--nnodes=$(PET_NNODES)", "train.py"]),
    (["bash", "-c", "pip install -q x && torchrun --node_rank=$PET_NODE_RANK train.py"], []),
])
def test_users_own_torchrun_is_left_as_written_with_the_rendezvous_in_pet_env(command, args):
    tmpl = job()["spec"]["template"]
    tmpl["spec"]["containers"][0].update(command=command, args=args)
    s = DistTrainingJobSpec.model_validate({"numNodes": 2, "template": tmpl})
    ctr = build_worker_pod(REF, s, 1, "node-b", Rendezvous("10.0.0.1", 29500, "eth1"), 0)["spec"]["containers"][0]
    assert (ctr["command"], ctr["args"]) == (command, args)
    e = env(ctr)
    assert (e["PET_NNODES"], e["PET_NODE_RANK"], e["PET_NPROC_PER_NODE"]) == ("2", "1", "1")
    assert (e["PET_MASTER_ADDR"], e["PET_MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert "PET_RDZV_BACKEND" not in e  # static: torchrun's default backend, from master addr/port


def test_c10d_hands_the_endpoint_to_torchrun_in_pet_env():
    tmpl = job()["spec"]["template"]
    tmpl["spec"]["containers"][0]["command"] = ["torchrun", "train.py"]
    s = DistTrainingJobSpec.model_validate({"numNodes": 2, "template": tmpl, "rendezvous": {"backend": "c10d"}})
    e = env(build_worker_pod(REF, s, 0, None, Rendezvous("j-0.j", 29400), 0)["spec"]["containers"][0])
    assert (e["PET_RDZV_BACKEND"], e["PET_RDZV_ENDPOINT"], e["PET_RDZV_ID"]) == ("c10d", "j-0.j:29400", "uid-1")


def test_torchrun_command_returns_a_torchrun_command_unchanged():
    cmd = ["torchrun", "--nproc-per-node=2", "t.py"]
    assert torchrun_command(cmd, ["--x"], TorchrunOptions(2, 2, 0, "static", "id"), Rendezvous("m", 1)) == cmd + ["--x"]


def test_builders_take_nulls_in_the_template_as_absent():
    """A job that slipped past an older CRD (nulls, a user mount where the probe mounts its
    program) still builds: nothing raises, the operator's additions are there."""
    tmpl = job()["spec"]["template"]
    tmpl["metadata"] = {"labels": None, "annotations": None}
    tmpl["spec"].update(affinity={"nodeAffinity": None, "podAntiAffinity": None}, tolerations=None,
                        securityContext={"sysctls": None}, volumes=None)
    tmpl["spec"]["containers"][0].update(env=None, resources=None, securityContext=None,
                                         volumeMounts=[{"name": "x", "mountPath": constants.PROBE_INSTALL_DIR}])
    s = DistTrainingJobSpec.model_validate({"numNodes": 2, "template": tmpl,
                                            "network": {"portRange": "60000-61000"}})
    probe = build_probe_pod(REF, s, 1, ProbeMaster("10.0.0.1"), attempt=1)
    mounts = [m["mountPath"] for m in probe["spec"]["containers"][0]["volumeMounts"]]
    assert mounts == [constants.PROBE_INSTALL_DIR]  # the probe program's, once
    assert probe["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert probe["spec"]["securityContext"]["sysctls"][0]["value"] == "60000 61000"
    worker = build_worker_pod(REF, s, 1, "node-b", Rendezvous("10.0.0.1", 29500), 0)
    assert worker["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert worker["metadata"]["labels"][constants.LABEL_RANK] == "1" and worker["metadata"]["annotations"] == {}


def test_host_network_rank0_declares_the_rendezvous_port_as_host_port():
    from disttrain.children.pods import Rendezvous, build_worker_pod
    from disttrain.children.probepod import ProbeMaster, build_probe_pod

    s = spec_of()
    s.network.host_network = True
    rv = Rendezvous("10.0.0.1", 29500, "eth1", exact=True)
    for pod in (build_probe_pod(REF, s, 0, ProbeMaster(), 1), build_worker_pod(REF, s, 0, "node-a", rv, 0)):
        ports = pod["spec"]["containers"][0]["ports"]
        assert {"name": "rendezvous", "containerPort": 29500, "hostPort": 29500, "protocol": "TCP"} in ports
    for pod in (build_probe_pod(REF, s, 1, ProbeMaster("10.0.0.1"), 1), build_worker_pod(REF, s, 1, "node-b", rv, 0)):
        assert not any(p.get("hostPort") for p in pod["spec"]["containers"][0].get("ports") or [])
    s.network.host_network = False
    assert not build_probe_pod(REF, s, 0, ProbeMaster(), 1)["spec"]["containers"][0].get("ports")


def test_probe_pod_says_how_many_gpus_the_pod_requested():
    from disttrain.children.probepod import ProbeMaster, build_probe_pod

    s = spec_of()
    assert env(build_probe_pod(REF, s, 0, ProbeMaster(), 1)["spec"]["containers"][0])["DISTTRAIN_PROBE_GPUS"] == "0"
    s.template.spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    assert env(build_probe_pod(REF, s, 0, ProbeMaster(), 1)["spec"]["containers"][0])["DISTTRAIN_PROBE_GPUS"] == "8"


def test_probe_pod_runs_one_process_per_training_process():
    """numProcPerNode 2: the probe pod is told to run 2 processes; RANK/WORLD_SIZE stay the
    node rank and numNodes (one pod, one report per node). auto with 8 GPUs: 8. With one
    process per node nothing is added (the pod is as before)."""
    s = spec_of(numProcPerNode=2)
    e = env(build_probe_pod(REF, s, 1, ProbeMaster("10.0.0.1"), 1)["spec"]["containers"][0])
    assert (e["RANK"], e["WORLD_SIZE"], e["DISTTRAIN_PROBE_NPROC_PER_NODE"]) == ("1", "2", "2")
    s = spec_of(numProcPerNode="auto")
    s.template.spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    assert env(build_probe_pod(REF, s, 0, ProbeMaster(), 1)["spec"]["containers"][0])[
        "DISTTRAIN_PROBE_NPROC_PER_NODE"] == "8"
    for one in (spec_of(numProcPerNode=1), spec_of(numProcPerNode="auto")):
        assert "DISTTRAIN_PROBE_NPROC_PER_NODE" not in env(build_probe_pod(REF, one, 0, ProbeMaster(), 1)
                                                           ["spec"]["containers"][0])


def test_worker_with_two_processes_per_node_runs_torchrun_with_two():
    """The training pod: torchrun --nproc-per-node=2 (wrapped), or the user's own torchrun
    reading PET_NPROC_PER_NODE=2; world size numNodes x 2."""
    rv = Rendezvous("10.0.0.1", 29500, "eth1", exact=True)
    s = spec_of(numProcPerNode=2)
    ctr = build_worker_pod(REF, s, 1, "node-b", rv, 0)["spec"]["containers"][0]
    assert "--nproc-per-node=2" in ctr["command"] and "--nnodes=2" in ctr["command"]
    assert env(ctr)["PET_NPROC_PER_NODE"] == "2"
    s.template.spec["containers"][0]["command"] = ["torchrun", "/workspace/train.py"]
    ctr = build_worker_pod(REF, s, 1, "node-b", rv, 0)["spec"]["containers"][0]
    assert ctr["command"] == ["torchrun", "/workspace/train.py"]
    assert (env(ctr)["PET_NPROC_PER_NODE"], env(ctr)["PET_NNODES"], env(ctr)["PET_NODE_RANK"]) == ("2", "2", "1")


def test_rank_0_beacon_port_and_its_host_port_with_host_network():
    """The beacon (the port after rendezvous.port) is passed to every probe; with
    hostNetwork rank 0's probe declares it as a hostPort (another job's rank 0 may use that
    port on the node: the scheduler keeps them apart), on the pod network no port is
    declared (each pod has its own ports)."""
    def pod_of(s, rank):
        return build_probe_pod(REF, s, rank, ProbeMaster(None if rank == 0 else "10.100.0.10"), attempt=1)

    def env(s, rank=1):
        return {e["name"]: e.get("value") for e in pod_of(s, rank)["spec"]["containers"][0]["env"]}

    def ports(s, rank):
        return pod_of(s, rank)["spec"]["containers"][0].get("ports") or []
    s = spec_of(network={"hostNetwork": False})
    assert env(s)["DISTTRAIN_PROBE_BEACON_PORT"] == str(s.rendezvous.port + 1)
    assert env(s, 0)["DISTTRAIN_PROBE_BEACON_PORT"] == str(s.rendezvous.port + 1)
    assert not any(p.get("hostPort") for p in ports(s, 0))
    h = spec_of(network={"hostNetwork": True})
    b = h.rendezvous.port + 1
    assert env(h)["DISTTRAIN_PROBE_BEACON_PORT"] == str(b)
    assert {"name": "probe-beacon", "containerPort": b, "hostPort": b, "protocol": "TCP"} in ports(h, 0)
    assert not any(p.get("containerPort") == b for p in ports(h, 1))
    top = spec_of(network={"hostNetwork": False})
    top.rendezvous.port = 65535
    assert env(top)["DISTTRAIN_PROBE_BEACON_PORT"] == "65534"


def test_probe_pods_carry_another_dns_name_of_the_job_with_dns_hostnames():
    """Rank r > 0 gets its own name, rank 0 rank 1's: a name that resolves tells a late
    record of rank 0 from a Service or DNS path that does not work."""
    def env(s, rank):
        pod = build_probe_pod(REF, s, rank, ProbeMaster(), attempt=1)
        return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    s = spec_of(network={"hostNetwork": False, "subdomain": "workers"})
    assert env(s, 0)["DISTTRAIN_PROBE_PEER_DNS_NAME"] == "j-1.workers"
    assert env(s, 2)["DISTTRAIN_PROBE_PEER_DNS_NAME"] == "j-2.workers"
    off = spec_of(network={"hostNetwork": False, "enableDNSHostnames": False})
    assert "DISTTRAIN_PROBE_PEER_DNS_NAME" not in env(off, 1)


def test_a_probe_pod_tells_the_probe_its_share_of_the_termination_messages():
    # a probe pod runs the probe and the init container that installs it (the template's
    # sidecars stay out): its share of the kubelet's 12 KiB is the whole 4096 bytes
    body = job()
    body["spec"]["template"]["spec"]["initContainers"] = [
        {"name": f"side{i}", "image": "s:1", "restartPolicy": "Always"} for i in range(3)]
    for s in (spec_of(template=body["spec"]["template"]), spec_of(probe={"useTrainingImage": False})):
        pod = build_probe_pod(REF, s, 0, ProbeMaster(), attempt=1)
        n = len(pod["spec"]["containers"]) + len(pod["spec"].get("initContainers") or [])
        probe = pod["spec"]["containers"][0]
        budget = next(e["value"] for e in probe["env"] if e["name"] == "DISTTRAIN_PROBE_REPORT_BYTES")
        assert budget == str(min(4096, 12288 // n)) == "4096"
