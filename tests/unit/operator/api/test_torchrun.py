"""Recognising the user's own torchrun, and the options that would override the
validated rendezvous (disttrain.api.torchrun), checked against torch's own parser."""
import pytest

from disttrain.api import torchrun
from disttrain.api.constants import RESERVED_ENV as RESERVED

KW = torchrun.Passed(num_nodes=2, nproc=1, backend="static", port=29500)


@pytest.mark.parametrize("argv,found", [
    (["torchrun", "t.py"], True),
    (["/opt/conda/bin/torchrun", "--nproc-per-node=8", "t.py"], True),
    (["python3", "-u", "-m", "torch.distributed.run", "t.py"], True),
    (["python", "-mtorch.distributed.run", "t.py"], True),
    (["env", "A=1", "torchrun", "t.py"], True),
    (["bash", "-c", "cd /w && torchrun t.py"], True),
    (["/bin/sh", "-ec", "exec torchrun t.py\necho done"], True),
    (["python", "train.py"], False),
    (["python", "-m", "pkg.torchrun"], False),
    (["python", "-c", "import torchrun"], False),
    (["bash", "-c", "echo torchrun"], False),  # an argument, not the command
    (["bash", "-c", "echo 'unbalanced"], False),
    (["bash", "script.sh"], False),
    ([], False),
])
def test_launches(argv, found):
    assert bool(torchrun.launches(argv)) is found


@pytest.mark.parametrize("argv,bad", [
    (["torchrun", "--nnodes=2", "--nproc-per-node=1", "--master-port=29500", "--rdzv-backend=static", "t.py"], []),
    (["torchrun", "--nnodes", "2:2", "t.py", "--nnodes=9", "--master-addr=x"], []),  # the script's own args
    (["torchrun", "--node-rank=$(PET_NODE_RANK)", "--master-addr=$(PET_MASTER_ADDR)", "t.py"], []),
    # no shell: ${...} reaches torchrun as written, only the kubelet's $(...) is expanded
    (["torchrun", "--master-addr=${PET_MASTER_ADDR}", "--node-rank=$NODE_RANK", "t.py"],
     ["--master-addr=${PET_MASTER_ADDR}", "--node-rank=$NODE_RANK"]),
    (["torchrun", "--max-restarts=3", "--rdzv-conf=join_timeout=60", "-m", "pkg"], []),
    (["torchrun", "--nnodes=4", "t.py"], ["--nnodes=4"]),
    (["torchrun", "--nnode=4", "t.py"], ["--nnode=4"]),  # argparse abbreviation
    (["torchrun", "--nproc_per_node", "8", "t.py"], ["--nproc_per_node 8"]),
    (["torchrun", "--node-rank=0", "--master_addr", "10.0.0.1", "t.py"], ["--node-rank=0", "--master_addr 10.0.0.1"]),
    (["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=h:1", "--rdzv-id=j", "t.py"],
     ["--rdzv-backend=c10d", "--rdzv-endpoint=h:1"]),  # static: the id only prefixes the store's keys
    (["torchrun", "--rdzv-id=$(PET_NODE_RANK)", "t.py"], ["--rdzv-id=$(PET_NODE_RANK)"]),  # not the same on every pod
    (["torchrun", "--standalone", "t.py"], ["--standalone"]),
    (["torchrun", "--node-rank=$(PET_NNODES)", "t.py"], ["--node-rank=$(PET_NNODES)"]),  # another variable
    (["bash", "-c", "torchrun --master-port 1234 t.py"], ["--master-port 1234"]),
])
def test_conflicting_options(argv, bad):
    assert [o.text for o, _ in torchrun.conflicting_options(argv, KW)] == bad


def test_standalone_is_fine_on_one_node():
    assert torchrun.conflicting_options(["torchrun", "--standalone", "t.py"], torchrun.Passed(1, 1)) == []


def test_our_option_table_is_torchs():
    """The option table, abbreviations included, resolves every option of the installed
    torch's parser to the same dest (torchrun reads PET_<DEST>)."""
    run = pytest.importorskip("torch.distributed.run")
    parser = run.get_args_parser()
    for action in parser._actions:
        for opt in action.option_strings:
            if opt.startswith("--"):
                assert torchrun._resolve_long(opt) == (action.dest, action.nargs != 0), opt
    assert parser.allow_abbrev


def test_pet_variables_reach_torchrun(monkeypatch):
    """torch reads PET_<DEST> as the default of every option the command leaves unset."""
    run = pytest.importorskip("torch.distributed.run")
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "1",
           "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29511", "PET_RDZV_BACKEND": "c10d",
           "PET_RDZV_ENDPOINT": "h:29400", "PET_RDZV_ID": "uid-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    a = run.parse_args(["t.py"])
    assert (a.nnodes, a.node_rank, a.nproc_per_node, a.master_addr, a.master_port) == ("2", 1, "1", "10.0.0.1", 29511)
    assert (a.rdzv_backend, a.rdzv_endpoint, a.rdzv_id) == ("c10d", "h:29400", "uid-1")
    assert run.parse_args(["--nnodes=4", "t.py"]).nnodes == "4"  # an option beats its variable


def test_a_kubeflow_style_torchrun_command_is_refused_naming_the_defaulted_field_by_value():
    """A PyTorchJob user's container command, torchrun with c10d, in a job that leaves
    spec.rendezvous at its default (static): refused naming the option and the field's
    value as the user would write it ("static", not the Python enum's name)."""
    from pydantic import ValidationError

    from disttrain.api.types import DistTrainingJobSpec

    spec = {"numNodes": 2, "numProcPerNode": "auto", "template": {"spec": {"containers": [{
        "name": "pytorch", "image": "x",
        "command": ["torchrun", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                    "--rdzv_endpoint=$(MASTER_ADDR):$(MASTER_PORT)", "train.py"]}]}}}
    with pytest.raises(ValidationError) as e:
        DistTrainingJobSpec.model_validate(spec)
    text = str(e.value)
    assert ("spec.template.spec.containers[0].command: torchrun option --rdzv_backend=c10d contradicts "
            "the validated rendezvous (spec.rendezvous.backend is static)") in text
    assert "RendezvousBackend" not in text
    # the endpoint is the operator's master address and port whatever the backend: not named;
    # the spec change the command meant is offered
    assert "(also" not in text
    assert "or set spec.rendezvous.backend: c10d" in text


@pytest.mark.parametrize("argv,words,lacks", [
    (["torchrun", "--master-port=1234", "t.py"], ["or set spec.rendezvous.port: 1234"], ["(also"]),
    # static: PET_RDZV_BACKEND is unset, $(PET_RDZV_BACKEND) would reach torchrun as written
    (["torchrun", "--rdzv-backend=etcd", "t.py"], ["; remove it"], ["or set", "PET_RDZV_BACKEND"]),
    (["torchrun", "--rdzv-endpoint=h:1", "t.py"], ["remove it or write $(MASTER_ADDR):$(MASTER_PORT)"], []),
    (["torchrun", "--nnodes=3", "--master-port=1", "--node-rank=0", "--master-addr=x", "t.py"],
     ["--nnodes=3", "or set spec.numNodes: 3", "(also --master-port=1, --node-rank=0 and 1 more)"], []),
])
def test_torchrun_problem_names_the_others_and_the_spec_fix(argv, words, lacks):
    from disttrain.api.types import DistTrainingJobSpec, torchrun_option_problem

    spec = DistTrainingJobSpec.model_construct(**DistTrainingJobSpec.model_validate(
        {"numNodes": 2, "numProcPerNode": 1, "template": {"spec": {"containers": [
            {"name": "t", "image": "x"}]}}}).__dict__)
    spec.template.spec["containers"][0]["command"] = argv
    msg = torchrun_option_problem(spec)
    assert msg is not None and len(msg) <= 400
    for w in words:
        assert w in msg, msg
    for w in lacks:
        assert w not in msg, msg


# ---- references to the operator's variables (issue 30: jobset-resnet-fixed, fast-llm-train) ----
C10D = torchrun.Passed(num_nodes=2, nproc=1, backend="c10d", port=29500)
ENV1 = torchrun.Passed(num_nodes=2, nproc=1, launcher="env")


@pytest.mark.parametrize("argv,passed,bad", [
    # the operator sets MASTER_ADDR/MASTER_PORT (and PET_*) to the validated values: consistent
    (["bash", "-xc", "torchrun --nproc_per_node=1 --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT r.py\n"],
     KW, []),
    (["bash", "-c", 'torchrun --master_addr="${MASTER_ADDR}" --master-port ${PET_MASTER_PORT} r.py'], KW, []),
    (["bash", "-c", "torchrun --master_addr=$(MASTER_ADDR) --node_rank=$(NODE_RANK) r.py"], KW, []),
    (["torchrun", "--master_addr=$(MASTER_ADDR)", "--master_port=$(MASTER_PORT)", "--node_rank=$(NODE_RANK)",
      "--nnodes=$(PET_NNODES)", "--nproc_per_node=$(PET_NPROC_PER_NODE)", "r.py"], KW, []),
    (["sh", "-c", "torchrun --nnodes=${PET_NNODES}:${PET_NNODES} --node_rank=$PET_NODE_RANK r.py"], KW, []),
    # --rdzv_endpoint: the master's address and the port, whatever the backend
    (["bash", "-c", "torchrun --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} r.py"], KW, []),
    (["bash", "-c", "torchrun --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT --rdzv_id=$PET_RDZV_ID r.py"],
     C10D, []),
    (["torchrun", "--rdzv-endpoint=$(PET_RDZV_ENDPOINT)", "--rdzv-id=$(PET_RDZV_ID)", "r.py"], C10D, []),
    (["torchrun", "--rdzv-endpoint=$(PET_RDZV_ENDPOINT)", "r.py"], KW,  # static: not set, reaches torchrun as written
     ["--rdzv-endpoint=$(PET_RDZV_ENDPOINT)"]),
    (["bash", "-c", "torchrun --rdzv_endpoint=$MASTER_ADDR r.py"], C10D, ["--rdzv_endpoint=$MASTER_ADDR"]),  # port 29400
    (["bash", "-c", "torchrun --rdzv_endpoint=$MASTER_ADDR:29400 r.py"], C10D, ["--rdzv_endpoint=$MASTER_ADDR:29400"]),
    (["bash", "-c", "torchrun --rdzv_id=$PET_NODE_RANK r.py"], C10D, ["--rdzv_id=$PET_NODE_RANK"]),
    # a variable that means something else, or that the operator does not set
    (["bash", "-c", "torchrun --node_rank=$RANK --nnodes=$WORLD_SIZE r.py"], KW,
     ["--node_rank=$RANK", "--nnodes=$WORLD_SIZE"]),
    (["bash", "-c", "torchrun --node_rank=$RANK --nnodes=$WORLD_SIZE r.py"], ENV1, []),  # env launcher, 1 per pod
    (["bash", "-c", "torchrun --node_rank=$RANK r.py"], torchrun.Passed(2, 2, launcher="env"), ["--node_rank=$RANK"]),
    (["bash", "-c", "torchrun --node_rank=$MASTER_PORT --master_addr=$NODE_RANK r.py"], KW,
     ["--node_rank=$MASTER_PORT", "--master_addr=$NODE_RANK"]),
    (["bash", "-c", "torchrun --master_addr=$(hostname -i) --node_rank=${JOB_COMPLETION_INDEX} r.py"], KW,
     ["--master_addr=$(hostname -i)", "--node_rank=${JOB_COMPLETION_INDEX}"]),
    (["bash", "-c", "torchrun --master_addr='$MASTER_ADDR' r.py"], KW, ["--master_addr='$MASTER_ADDR'"]),  # quoted
    (["torchrun", "--master_addr=$$(MASTER_ADDR)", "r.py"], KW, ["--master_addr=$$(MASTER_ADDR)"]),  # the escape
    # line continuations hide nothing (fast-llm-train)
    (["/bin/bash", "-c", "torchrun --rdzv_backend=static \\\n   --rdzv_endpoint=${MASTER_ADDR}:${MASTER_PORT} \\\n"
      "   --node_rank=${RANK} \\\n   --nnodes=${PET_NNODES} \\\n   --no_python \\\n   python t.py \\\n   --nnodes=9"],
     KW, ["--node_rank=${RANK}"]),
    (["bash", "-c", "set -e\nexport A=1\nexec torchrun \\\n  --nnodes=3 t.py"], KW, ["--nnodes=3"]),
    (["bash", "-c", "A=1 python -u -m torch.distributed.run \\\n --nproc_per_node=4 t.py | tee log"], KW,
     ["--nproc_per_node=4"]),
    (["bash", "-c", "torchrun --nnodes=\\\n3 t.py"], KW, ["--nnodes=3"]),  # a continuation inside a word
])
def test_references_to_the_operators_variables(argv, passed, bad):
    assert [o.text for o, _ in torchrun.conflicting_options(argv, passed)] == bad


@pytest.mark.parametrize("user_env,bad", [({"NNODES": "2"}, []), ({"NNODES": "3"}, ["--nnodes=$NNODES"]), ({}, ["--nnodes=$NNODES"])])
def test_the_containers_own_literal_variables_are_read(user_env, bad):
    argv = ["bash", "-c", "torchrun --nnodes=$NNODES t.py"]
    assert [o.text for o, _ in torchrun.conflicting_options(argv, KW, user_env)] == bad


def _problem(container, **spec):
    from disttrain.api.types import DistTrainingJobSpec, torchrun_option_problem

    s = DistTrainingJobSpec.model_construct(**DistTrainingJobSpec.model_validate(
        {"numNodes": 2, "numProcPerNode": 1, **spec, "template": {"spec": {"containers": [
            {"name": "t", "image": "x"}]}}}).__dict__)
    s.template.spec["containers"][0].update(container)
    return torchrun_option_problem(s)


@pytest.mark.parametrize("container,spec,words", [
    ({"command": ["bash", "-c", "torchrun --node_rank=${RANK} t.py"]}, {},
     ["torchrun option --node_rank=${RANK} reads RANK, which the operator does not set (with launcher torchrun, "
      "torchrun sets it per process); remove it (torchrun reads PET_NODE_RANK) or write $(PET_NODE_RANK)"]),
    ({"command": ["bash", "-c", "torchrun --node_rank=$(hostname) t.py"]}, {},
     ["reads $(hostname), which the operator cannot check"]),
    ({"command": ["torchrun", "--master-addr=${PET_MASTER_ADDR}", "t.py"]}, {},
     ["contradicts the validated rendezvous", "or write $(PET_MASTER_ADDR)"]),
    ({"command": ["torchrun", "--rdzv-id=$(PET_NODE_RANK)", "t.py"]}, {"rendezvous": {"backend": "c10d"}},
     ["remove it (torchrun reads PET_RDZV_ID) or write $(PET_RDZV_ID)"]),
    ({"command": ["bash", "-c", "torchrun --nnodes=$N t.py"], "env": [{"name": "N", "value": "3"}]}, {},
     ["--nnodes=$N contradicts the validated rendezvous (spec.numNodes is 2)"]),
    ({"command": ["torchrun", "--node-rank=$(R)", "t.py"], "env": [{"name": "R", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]}, {},
     ["torchrun option --node-rank=$(R) reads R, which the operator does not set"]),
])
def test_the_message_names_the_variable_and_a_fix_that_is_set(container, spec, words):
    msg = _problem(container, **spec)
    assert msg is not None and len(msg) <= 400, msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("container", [
    {"command": ["bash", "-c", "torchrun --nnodes=$N t.py"], "env": [{"name": "N", "value": "2"}]},
    {"command": ["bash", "-xc", "torchrun --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT t.py"]},
])
def test_a_spec_whose_options_say_the_operators_values_is_admitted(container):
    assert _problem(container) is None


@pytest.mark.parametrize("launcher,backend,nproc", [("torchrun", "static", 1), ("torchrun", "c10d", 2), ("env", "static", 1)])
def test_operator_env_is_what_the_training_pod_gets(launcher, backend, nproc):
    """torchrun.operator_env (what the check expands with) names every rendezvous variable
    build_worker_pod sets, with its value (per-pod ones standing for the pod's)."""
    from disttrain.children.names import JobRef
    from disttrain.children.pods import Rendezvous, build_worker_pod
    from tests.support.builders import spec_of

    s = spec_of(launcher=launcher, rendezvous={"backend": backend, "port": 29511}, numProcPerNode=nproc)
    pod = build_worker_pod(JobRef("j", "ns", "uid-1"), s, 1, "n", Rendezvous("10.0.0.9", 29511, "eth1"), 0)
    got = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]
           if not e["name"].endswith("SOCKET_IFNAME")}
    ours = torchrun.operator_env(torchrun.Passed(2, nproc, backend, 29511, launcher))
    stand_ins = {torchrun.MASTER: "10.0.0.9", torchrun.NODE_RANK: "1", torchrun.RUN_ID: "uid-1"}
    for sym, real in stand_ins.items():
        ours = {k: v.replace(sym, real) for k, v in ours.items()}
    assert {k: v for k, v in got.items() if k in ours or k.startswith("PET_") or k in RESERVED} == ours


# Commands that start torchrun in ways the shell reader cannot follow: wrapping them would
# start a second torchrun on the same rendezvous (found by an adversarial review).
RUNS_UNREAD = [
    ["bash", "-c", 'x=$(echo ")"); torchrun --nnodes=4 t.py'],
    ["bash", "-c", "N=$(grep -c '(' f); torchrun t.py"],
    ["bash", "-c", "cat > c.yaml <<EOF\nname: don't panic\nEOF\ntorchrun t.py"],
    ["bash", "-o", "pipefail", "-c", "torchrun t.py"],
    ["timeout", "3600", "torchrun", "t.py"],
    ["env", "-u", "X", "torchrun", "t.py"],
    ["bash", "-c", "bash -c 'torchrun --nnodes=4 t.py'"],
    ["python", "-m", "torch.distributed.launch", "t.py"],
]


@pytest.mark.parametrize("argv", RUNS_UNREAD)
def test_a_command_naming_torchrun_is_never_wrapped_in_another(argv):
    from disttrain.children.pods import Rendezvous, TorchrunOptions, torchrun_command

    assert torchrun.runs_torchrun(argv)
    wrapped = torchrun_command(argv, [], TorchrunOptions(2, 1, 0, "static", "uid"), Rendezvous("10.0.0.1", 29500))
    assert wrapped == argv


@pytest.mark.parametrize("argv", [["python", "train.py"], ["python", "torchrun_utils.py"],
                                  ["python", "-m", "mypkg.torchrun"], ["bash", "-c", "python my-torchrun-helper.py"]])
def test_a_command_that_only_resembles_torchrun_is_wrapped(argv):
    assert not torchrun.runs_torchrun(argv)
