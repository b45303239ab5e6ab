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


# How often a field is replaced by null or junk, drawn once per manifest: 0 (a valid
# manifest), rarely (one fault in a few: the single-fault manifests that tell whether the CRD
# and the operator agree on that one field), up to often (many faults at once).
FAULT_RATE = st.shared(st.sampled_from([0, 1, 1, 2, 4, 16]), key="manifests.fault-rate")


def maybe(good: st.SearchStrategy, junk_weight: int = 1) -> st.SearchStrategy:
    """``good``, or at this manifest's fault rate (out of 64) null (a field written
    ``x: null`` or ``x: ~``) or any JSON value (wrong shapes included)."""
    if not junk_weight:
        return good
    return FAULT_RATE.flatmap(lambda w: weighted((64, good), (w, st.none()), (w, JUNK)) if w else good)


def unset_or(good: st.SearchStrategy) -> st.SearchStrategy:
    """An optional field: ``good``, or null (1 in 4), which is the field unset."""
    return weighted((3, good), (1, st.none()))


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def ints(lo: int, hi: int) -> st.SearchStrategy:
    """An integer field bounded [lo, hi]: mostly inside, often at or just past either end,
    sometimes an extreme (int32 and int64 limits and beyond, as YAML can write them) or an
    integral float (2.0: Go's JSON round trip makes it 2)."""
    edges = sorted({lo - 1, lo, hi, hi + 1, 0, -1, 2**31 - 1, 2**31, INT64_MAX, INT64_MAX + 1,
                    INT64_MIN, INT64_MIN - 1, 10**30})
    return weighted((6, st.integers(lo, hi)), (3, st.sampled_from(edges)),
                    (1, st.integers(lo, min(hi, 10**6)).map(float)))



def optional_dict(required: dict, optional: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries(required, optional=optional)


NAME_CHARS = "abz09-."
VALID_NAME = st.from_regex(r"\A[a-z][a-z0-9-]{0,40}[a-z0-9]\Z")
job_names = weighted((12, VALID_NAME), (1, st.sampled_from(["ddp-digits", "a", "job-1", "x" * 58, "x" * 59, "x" * 63, "x" * 64,
                     "my.job", "7up", "0", "a-", "-a", "ddp_digits", "DDP", "a" * 253])),
    (1, st.text(NAME_CHARS, min_size=1, max_size=70)),
    (1, st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,70}[a-z0-9]\Z")),
    (4, st.from_regex(r"\A[0-9][a-z0-9-]{0,20}[a-z0-9]\Z")),  # a Service cannot be named so
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
resource_names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "example.com/fpga"])
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
    "privileged": maybe(st.booleans()), "runAsUser": maybe(ints(0, 2**31 - 1)),
    "runAsNonRoot": maybe(st.booleans()), "capabilities": maybe(capabilities),
})
container_names = weighted((12, st.sampled_from(["trainer", "sidecar", "probe", "install-probe", "pytorch", "node"])),
                           (1, st.sampled_from(["Trainer", "t" * 64, "", "trainer.1", "t" * 63])))


# Port names as the Pod API checks them (IANA service names, unique in a container), and
# ports that meet the rendezvous port (29500 by default, 29400 when set so).
port_names = st.sampled_from(["http", "metrics", "h-2", "", "Http", "a--b", "8080", "-a", "a-", "a" * 16])


def rendezvous_or(other: st.SearchStrategy) -> st.SearchStrategy:
    return weighted((3, other), (1, st.sampled_from([29500, 29400])))


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
        "ports": maybe(st.lists(optional_dict({"containerPort": maybe(rendezvous_or(ints(1, 65535)))},
                                              {"hostPort": maybe(rendezvous_or(ints(0, 65535))),
                                               "protocol": maybe(st.sampled_from(["TCP", "UDP", "HTTP"])),
                                               "name": maybe(port_names)}),
                                max_size=2)),
        "tty": maybe(st.booleans()),
        "terminationMessagePolicy": maybe(st.sampled_from(["File", "FallbackToLogsOnError", "Logs"])),
        **({"restartPolicy": maybe(st.sampled_from(["Always", "Never"]))} if init else {}),
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
    "tolerationSeconds": maybe(ints(INT64_MIN, INT64_MAX)),
})
sysctl = optional_dict({"name": maybe(st.sampled_from(["net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced",
                                                        "net.core.somaxconn"])),
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
                                                "runAsUser": maybe(ints(0, 2**31 - 1)),
                                                "fsGroup": maybe(ints(0, 2**31 - 1)),
                                                "supplementalGroups": maybe(st.lists(ints(0, 2**31 - 1), max_size=2))})),
    "hostNetwork": st.booleans(),
    "serviceAccountName": maybe(st.just("trainer")),
    # scalars of the Pod API: wrong types and integers past its limits
    "hostname": maybe(st.sampled_from(["h-1", "Bad_Host", "x" * 64])),
    "subdomain": maybe(st.sampled_from(["svc", "Bad.Sub"])),
    "hostPID": maybe(st.booleans()),
    "priority": maybe(ints(-(2**31), 2**31 - 1)),
    "terminationGracePeriodSeconds": maybe(ints(INT64_MIN, INT64_MAX)),
    "activeDeadlineSeconds": maybe(ints(1, 2**31 - 1)),
    "dnsPolicy": maybe(st.sampled_from(["ClusterFirst", "Default", "Sometimes"])),
    "restartPolicy": maybe(st.sampled_from(["Never", "Always", "Maybe"])),
})
template = st.fixed_dictionaries({"spec": maybe(pod_spec, junk_weight=0)}, optional={
    "metadata": maybe(optional_dict({}, {
        "labels": maybe(labels),
        "annotations": maybe(st.dictionaries(label_keys, maybe(st.text(max_size=5)), max_size=2)),
    })),
})
_ABSENT = object()


def fields(required: dict, optional: dict) -> st.SearchStrategy:
    """An object with the ``required`` keys and each ``optional`` key absent (1 in 3) or
    drawn from its strategy (which may give null): absent and null both common."""
    table = dict(required)
    table.update({k: weighted((1, st.just(_ABSENT)), (2, v)) for k, v in optional.items()})
    return st.fixed_dictionaries(table).map(lambda d: {k: v for k, v in d.items() if v is not _ABSENT})


def maybe_unset(good: st.SearchStrategy) -> st.SearchStrategy:
    """An optional spec field: good, unset by a null, or (at the fault rate) junk."""
    return maybe(unset_or(good))


# Every field of the spec outside the pod template, each table checked against the CRD's
# properties (test_manifests.py): a field added to api/types.py fails that test until it is here.
NETWORK_FIELDS = {
    "hostNetwork": maybe_unset(st.booleans()),
    "enableDNSHostnames": maybe_unset(st.booleans()),
    "subdomain": maybe_unset(st.sampled_from(["svc", "svc-1", "7svc", "Bad.Sub", "x" * 63, "x" * 64, ""])),
    "portRange": maybe_unset(st.sampled_from(["60000-61000", "1-2", "1-65535", "61000-60000", "0-5",
                                        "1-65536", "99999-99999", "00001-00002", "a-b", "1-2-3"])),
    "socketIfname": maybe_unset(st.sampled_from(["auto", "eth1", "^docker0,lo", "=eth1", "bad name", "", "eth1,"])),
}
RENDEZVOUS_FIELDS = {
    "backend": maybe_unset(st.sampled_from(["static", "c10d", "etcd"])),
    "port": maybe_unset(rendezvous_or(ints(1, 65535))),
}
PROBE_FIELDS = {
    "enabled": maybe_unset(st.booleans()),
    "image": maybe_unset(st.sampled_from(["probe:1", "", "ghcr.io/x/probe@sha256:" + "a" * 64])),
    "useTrainingImage": maybe_unset(st.booleans()),
    "backend": maybe_unset(st.sampled_from(["auto", "nccl", "gloo", "mpi"])),
    "messageSizeBytes": maybe_unset(ints(4, 1 << 30)),
    "iterations": maybe_unset(ints(1, 1000)),
    "minBusBandwidthGBps": maybe_unset(st.one_of(st.floats(0, 1000), st.sampled_from(
        [0, 1, -0.0, -1e-9, 5e-324, 1e308, -1.0]))),
    "timeoutSeconds": maybe_unset(ints(5, 3600)),
    "maxLinkImbalance": maybe_unset(st.one_of(st.floats(0.5, 1001), st.sampled_from([1, 1000, 0.999, 1000.5, 0]))),
    "keepPods": maybe_unset(st.sampled_from(["Never", "OnFailure", "Always", "Sometimes"])),
    "placement": maybe_unset(st.sampled_from(["Pods", "InPlace", "inplace", ""])),
}
SCHEDULING_FIELDS = {
    "gang": maybe_unset(st.sampled_from(["auto", "workload", "coscheduling", "volcano", "none", "yes"])),
    "schedulerName": maybe_unset(st.sampled_from(["volcano", "x" * 253, "x" * 254])),
    "scheduleTimeoutSeconds": maybe_unset(ints(1, 2**31 - 1)),
}
RUN_POLICY_FIELDS = {
    "schedulingPolicy": maybe_unset(fields({}, SCHEDULING_FIELDS)),
    "backoffLimit": maybe_unset(ints(0, 100)),
    "activeDeadlineSeconds": maybe_unset(ints(1, 2**31 - 1)),
    "ttlSecondsAfterFinished": maybe_unset(ints(0, 2**31 - 1)),
    "cleanPodPolicy": maybe_unset(st.sampled_from(["All", "Running", "None", "Some"])),
    "reprobeOnFailure": maybe_unset(st.booleans()),
    "stallTimeoutSeconds": maybe_unset(ints(30, 86400)),
    "onStall": maybe_unset(st.sampled_from(["Restart", "Fail", "Wait", "restart", "Never"])),
}
SPEC_REQUIRED = {
    "numNodes": maybe(weighted((12, st.integers(1, 8)), (2, st.sampled_from([10, 11, 100, 101, 4096])),
                               (1, ints(1, 4096)))),
    # half the time a plain valid template, so the spec's own fields decide
    "template": weighted((1, template), (1, st.builds(lambda image: {"spec": {"containers": [
        {"name": "trainer", "image": image, "command": ["python", "/workspace/train.py"]}]}},
        st.sampled_from(["example/train:1", "ghcr.io/x/y:2"])))),
}
SPEC_OPTIONAL = {
    "numProcPerNode": maybe_unset(weighted((4, st.integers(1, 8)), (4, st.just("auto")),
                                     (1, st.sampled_from(["many", "1", "Auto"])), (1, ints(1, 256)))),
    "launcher": maybe_unset(st.sampled_from(["torchrun", "env", "mpirun"])),
    "rendezvous": maybe_unset(fields({}, RENDEZVOUS_FIELDS)),
    "network": maybe_unset(fields({}, NETWORK_FIELDS)),
    "probe": maybe_unset(fields({}, PROBE_FIELDS)),
    "runPolicy": maybe_unset(fields({}, RUN_POLICY_FIELDS)),
    "suspend": maybe_unset(st.booleans()),
    "trainerContainer": maybe_unset(st.sampled_from(["trainer", "sidecar", "pytorch", "node", "Trainer", ""])),
}
spec = fields(SPEC_REQUIRED, SPEC_OPTIONAL)


def manifests() -> st.SearchStrategy:
    """A DistTrainingJob as kubectl would send it (one JSON object)."""
    return st.builds(
        lambda name, s: {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
                         "metadata": {"name": name, "namespace": "ns"}, "spec": s},
        job_names, spec,
    )
