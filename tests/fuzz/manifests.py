"""Hypothesis strategies for DistTrainingJob manifests: near-valid jobs (the example job's
shape) whose name, spec fields and the pod-template fields the operator reads are each
either well formed or replaced by something of the wrong shape (a string for a list, a
list for an object, null, numbers for strings, bad quantities, bad label keys, torchrun
flags that contradict the spec...)."""
from __future__ import annotations

from hypothesis import strategies as st

# Any JSON value kubectl could send (YAML -> JSON: no NaN).
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=6), ch, max_size=3),
    max_leaves=6,
)


def weighted(*choices: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, chosen with the given integer weights."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def maybe(good: st.SearchStrategy, junk_weight: int = 1) -> st.SearchStrategy:
    """Mostly ``good`` (15 in 16), sometimes any JSON value (wrong shapes included)."""
    return weighted((15, good), (junk_weight, JUNK)) if junk_weight else good


def optional_dict(required: dict, optional: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries(required, optional=optional)


NAME_CHARS = "abz09-."
VALID_NAME = st.from_regex(r"\A[a-z][a-z0-9-]{0,40}[a-z0-9]\Z")
job_names = weighted((12, VALID_NAME), (1, st.sampled_from(["ddp-digits", "a", "job-1", "x" * 58, "x" * 59, "x" * 63, "x" * 64,
                     "my.job", "7up", "0", "a-", "-a", "ddp_digits", "DDP", "a" * 253])),
    (1, st.text(NAME_CHARS, min_size=1, max_size=70)),
    (1, st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,70}[a-z0-9]\Z")),
)

label_keys = weighted(
    (4, st.sampled_from(["app", "team", "example.com/tier", "disttrain.dev/job-name",
                         "sub.example.com/" + "n" * 63, "kubernetes.io/hostname", "Good_Key.1"])),
    (1, st.sampled_from(["a/b/c", "", "-bad", "x" * 64, "p" * 254 + "/k", "UPPER.example.com/x", "app\n"])),
    (1, st.text("abAZ09-_./", min_size=0, max_size=12)),
)
label_values = weighted(
    (4, st.sampled_from(["", "v1", "a.b_c-d", "x" * 63])),
    (1, st.sampled_from(["-x", "x-", "x" * 64, "has space", "ünï", "v1\n"])),
    (1, st.text("abAZ09-_.", max_size=10)),
)
labels = st.dictionaries(label_keys, maybe(label_values), max_size=4)

quantities = weighted(
    (4, st.sampled_from(["1", "500m", "2Gi", "1.5", "1e3", "1E3", "0", "+1", "1Ki", "1k", "0.5",
                         ".5", "1.", "3.5Gi", "1e-3", 2, 8, 0])),
    (2, st.from_regex(r"\A[0-9]{1,4}(\.[0-9]{0,2})?(m|k|M|G|Ki|Mi|Gi|e[0-9])?\Z")),
    (1, st.sampled_from(["-1", "abc", "", "1 Gi", "1GB", "10x", "1e", "\u0661", "1\n", "1e999999999"])),
    (1, st.one_of(st.integers(-3, 2**40), st.floats(0, 8, allow_nan=False), st.booleans())),
)
resource_names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"])
resources = optional_dict({}, {
    "limits": maybe(st.dictionaries(resource_names, quantities, max_size=3)),
    "requests": maybe(st.dictionaries(resource_names, quantities, max_size=3)),
})

# torchrun options as users write them: values that may or may not agree with the spec.
OPTION_VALUES = {
    "--nnodes": ["1", "2", "2:2", "1:4", "$(PET_NNODES)", "$PET_NNODES"],
    "--nproc-per-node": ["1", "2", "8", "gpu", "${PET_NPROC_PER_NODE}"],
    "--nproc_per_node": ["1", "4"],
    "--node-rank": ["0", "$(PET_NODE_RANK)"], "--node_rank": ["1", "$PET_NODE_RANK"],
    "--master-addr": ["10.0.0.1", "$(PET_MASTER_ADDR)"], "--master_addr": ["localhost"],
    "--master-port": ["29500", "29501", "$(PET_MASTER_PORT)"],
    "--rdzv-backend": ["static", "c10d", "etcd"], "--rdzv-endpoint": ["x:1", "$(PET_RDZV_ENDPOINT)"],
    "--rdzv-id": ["job", "$(PET_RDZV_ID)"], "--rdzv-conf": ["join_timeout=60"],
    "--max-restarts": ["0", "3"], "--nnode": ["2"], "--nproc": ["1"], "--master": ["x"],
}
FLAGS = ["--standalone", "--no-python", "-m", "--run-path", "--", "-r3", "--monitor-interval=1"]


@st.composite
def torchrun_options(draw) -> list[str]:
    out: list[str] = []
    for _ in range(draw(weighted((1, st.just(0)), (3, st.integers(1, 3))))):
        if draw(st.integers(0, 5)) == 0:
            out.append(draw(st.sampled_from(FLAGS)))
            continue
        opt = draw(st.sampled_from(sorted(OPTION_VALUES)))
        value = draw(st.sampled_from(OPTION_VALUES[opt]))
        out += [f"{opt}={value}"] if draw(st.booleans()) else [opt, value]
    return out


@st.composite
def launch_argv(draw) -> list[str]:
    """A training command: the user's torchrun (exec form, python -m, or inside bash -c),
    a plain python command the operator wraps, or anything else."""
    script = draw(st.sampled_from([["train.py"], ["/workspace/train.py", "--epochs", "3"],
                                   ["-m", "pkg.train"], ["train.py", "--nnodes", "4"]]))
    kind = draw(st.sampled_from(["torchrun", "python-m", "bash", "python", "other"]))
    if kind == "torchrun":
        return [draw(st.sampled_from(["torchrun", "/opt/venv/bin/torchrun"]))] + draw(torchrun_options()) + script
    if kind == "python-m":
        return ["python3", "-u", "-m", "torch.distributed.run"] + draw(torchrun_options()) + script
    if kind == "bash":
        import shlex
        inner = ["torchrun"] + draw(torchrun_options()) + script
        text = draw(st.sampled_from(["", "pip install -q x && ", "cd /w; exec ", "echo 'hi' | "])) + shlex.join(inner)
        return [draw(st.sampled_from(["bash", "/bin/sh"])), draw(st.sampled_from(["-c", "-ec", "-lc"])), text]
    if kind == "python":
        return ["python"] + script
    return draw(st.lists(st.sampled_from(["echo", "run.sh", "--x", "sh", "-c", "torchrun", "'", ""]), max_size=4))


commands = weighted(
    (6, launch_argv()),
    (1, st.sampled_from(["python train.py", "torchrun train.py"])),  # a string: refused
    (1, st.lists(st.one_of(st.sampled_from(["python", "train.py"]), st.integers(), st.none()), max_size=3)),
)
args = weighted((3, st.just([])), (1, st.lists(st.sampled_from(["--epochs", "3", "--nnodes=4"]), max_size=2)),
                (1, st.sampled_from(["--epochs 3"])))

env_names = st.sampled_from(["FOO", "OMP_NUM_THREADS", "RANK", "PET_NNODES", "MASTER_ADDR",
                             "NCCL_SOCKET_IFNAME", "", "A" * 300, "PYTHONPATH", "LOCAL_RANK"])
env_var = optional_dict({"name": maybe(env_names)}, {
    "value": maybe(st.text(max_size=5)),
    "valueFrom": maybe(st.just({"fieldRef": {"fieldPath": "status.podIP"}})),
})
volume_mount = optional_dict({"name": maybe(st.sampled_from(["script", "data", "disttrain-probe"]))}, {
    "mountPath": maybe(st.sampled_from(["/workspace", "/data", "/opt/disttrain-probe", ""])),
    "readOnly": maybe(st.booleans()),
})
capabilities = optional_dict({}, {"add": maybe(st.lists(st.sampled_from(["NET_ADMIN", "SYS_PTRACE"]), max_size=2)),
                                   "drop": maybe(st.lists(st.just("ALL"), max_size=1))})
container_security = optional_dict({}, {
    "privileged": maybe(st.booleans()), "runAsUser": maybe(st.integers(0, 70000)),
    "runAsNonRoot": maybe(st.booleans()), "capabilities": maybe(capabilities),
})
container_names = weighted((12, st.sampled_from(["trainer", "sidecar", "probe", "install-probe"])),
                           (1, st.sampled_from(["Trainer", "t" * 64, "", "trainer.1", "t" * 63])))


def containers(init: bool = False) -> st.SearchStrategy:
    required = {"name": maybe(container_names, junk_weight=0 if not init else 1)}
    if not init:  # the trainer's command is what the operator reads most
        required["command"] = maybe(commands)
    one = optional_dict(required, {
        "image": maybe(st.sampled_from(["example/train:1", "ghcr.io/x/y:2", ""])),
        "args": maybe(args),
        "env": maybe(st.lists(env_var, max_size=3)),
        "resources": maybe(resources),
        "volumeMounts": maybe(st.lists(volume_mount, max_size=2)),
        "securityContext": maybe(container_security),
        "imagePullPolicy": maybe(st.sampled_from(["IfNotPresent", "Always", "Never", "Sometimes"])),
        "workingDir": maybe(st.just("/workspace")),
        "ports": maybe(st.lists(optional_dict({"containerPort": st.sampled_from([8080, 29500])},
                                              {"hostPort": st.sampled_from([29500, 1])}), max_size=2)),
    })
    return weighted((3, st.lists(maybe(one, junk_weight=0 if not init else 1), min_size=0 if init else 1,
                                 max_size=1)),
                    (1, st.lists(maybe(one, junk_weight=0 if not init else 1), min_size=0 if init else 1,
                                 max_size=3)))


node_selector_requirement = optional_dict(
    {"key": maybe(st.sampled_from(["pool", "kubernetes.io/hostname", "zone"])),
     "operator": maybe(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Is"]))},
    {"values": maybe(st.lists(st.sampled_from(["gpu", "a", "1"]), max_size=2))},
)
node_selector_term = optional_dict({}, {
    "matchExpressions": maybe(st.lists(node_selector_requirement, max_size=2)),
    "matchFields": maybe(st.lists(node_selector_requirement, max_size=1)),
})
pod_affinity_term = optional_dict({"topologyKey": maybe(st.sampled_from(["kubernetes.io/hostname", "zone"]))}, {
    "labelSelector": maybe(st.just({"matchLabels": {"app": "x"}})),
    "namespaces": maybe(st.lists(st.just("ns"), max_size=1)),
})
affinity = optional_dict({}, {
    "nodeAffinity": maybe(optional_dict({}, {
        "requiredDuringSchedulingIgnoredDuringExecution": maybe(optional_dict(
            {"nodeSelectorTerms": maybe(st.lists(maybe(node_selector_term), max_size=2))}, {})),
        "preferredDuringSchedulingIgnoredDuringExecution": maybe(st.lists(optional_dict(
            {"weight": maybe(st.integers(0, 101)), "preference": maybe(node_selector_term)}, {}), max_size=1)),
    })),
    "podAntiAffinity": maybe(optional_dict({}, {
        "requiredDuringSchedulingIgnoredDuringExecution": maybe(st.lists(maybe(pod_affinity_term), max_size=2)),
        "preferredDuringSchedulingIgnoredDuringExecution": maybe(st.lists(optional_dict(
            {"weight": maybe(st.integers(0, 101)), "podAffinityTerm": maybe(pod_affinity_term)}, {}), max_size=1)),
    })),
    "podAffinity": maybe(optional_dict({}, {
        "requiredDuringSchedulingIgnoredDuringExecution": maybe(st.lists(pod_affinity_term, max_size=1)),
    })),
})
toleration = optional_dict({}, {
    "key": maybe(st.sampled_from(["gpu", "nvidia.com/gpu", ""])),
    "operator": maybe(st.sampled_from(["Exists", "Equal", "Maybe"])),
    "value": maybe(st.sampled_from(["true", ""])),
    "effect": maybe(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", "", "Never"])),
    "tolerationSeconds": maybe(st.integers(-1, 3600)),
})
sysctl = optional_dict({"name": maybe(st.sampled_from(["net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced"])),
                        "value": maybe(st.sampled_from(["60000 61000", "1", ""]))}, {})
volume = optional_dict({"name": maybe(st.sampled_from(["script", "data", "disttrain-probe", "Bad_Name", ""]))}, {
    "configMap": maybe(st.just({"name": "ddp-digits-script"})),
    "emptyDir": maybe(st.just({})),
})
pod_spec = st.fixed_dictionaries({"containers": maybe(containers(), junk_weight=0)}, optional={
    "initContainers": maybe(containers(init=True)),
    "volumes": maybe(st.lists(volume, max_size=3)),
    "nodeSelector": maybe(st.dictionaries(label_keys, maybe(label_values), max_size=2)),
    "tolerations": maybe(st.lists(maybe(toleration), max_size=2)),
    "affinity": maybe(affinity),
    "securityContext": maybe(optional_dict({}, {"sysctls": maybe(st.lists(sysctl, max_size=2)),
                                                "runAsUser": maybe(st.integers(0, 10))})),
    "hostNetwork": st.booleans(),
    "serviceAccountName": st.just("trainer"),
})
template = st.fixed_dictionaries({"spec": maybe(pod_spec, junk_weight=0)}, optional={
    "metadata": maybe(optional_dict({}, {
        "labels": maybe(labels),
        "annotations": maybe(st.dictionaries(label_keys, maybe(st.text(max_size=5)), max_size=2)),
    })),
})
network = optional_dict({}, {
    "hostNetwork": maybe(st.booleans()),
    "enableDNSHostnames": maybe(st.booleans()),
    "subdomain": maybe(st.sampled_from(["svc", "Bad.Sub", "x" * 64])),
    "portRange": maybe(st.sampled_from(["60000-61000", "1-2", "61000-60000", "0-5", "a-b"])),
    "socketIfname": maybe(st.sampled_from(["auto", "eth1", "^docker0,lo", "=eth1", "bad name"])),
})
spec = st.fixed_dictionaries({
    "numNodes": maybe(weighted((12, st.integers(1, 8)), (2, st.sampled_from([10, 11, 100, 101, 4096])),
                               (1, st.integers(-1, 5000)))),
    "template": maybe(template, junk_weight=0),
}, optional={
    "numProcPerNode": maybe(weighted((4, st.integers(1, 8)), (4, st.just("auto")),
                                     (1, st.sampled_from([0, -1, "many", "1"])))),
    "launcher": maybe(st.sampled_from(["torchrun", "env", "mpirun"])),
    "rendezvous": maybe(optional_dict({}, {"backend": maybe(st.sampled_from(["static", "c10d", "etcd"])),
                                           "port": maybe(st.integers(0, 70000))})),
    "network": maybe(network),
    "probe": maybe(optional_dict({}, {"enabled": maybe(st.booleans()),
                                      "useTrainingImage": maybe(st.booleans())})),
})


def manifests() -> st.SearchStrategy:
    """A DistTrainingJob as kubectl would send it (one JSON object)."""
    return st.builds(
        lambda name, s: {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
                         "metadata": {"name": name, "namespace": "ns"}, "spec": s},
        job_names, spec,
    )
