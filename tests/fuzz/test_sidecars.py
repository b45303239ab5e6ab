"""Generated pod templates with the trainer and 0 to 3 sidecars (plain containers and
native ones, initContainers with restartPolicy Always) and plain init containers, in
random positions, through the builders.

Invariants: the rendezvous environment and the torchrun wrapping go to the trainer alone;
every sidecar and init container reaches the training pod exactly as written; the probe
container requests what the whole training pod asks of its node (computed here phase by
phase of the pod's life, the way the kubelet runs it), with valid requests and limits (a
limit at least the request; an extended resource's limit equal to it).
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from disttrain.api.podresources import OVERCOMMITTABLE, quantity
from disttrain.api.types import DistTrainingJobSpec, trainer_index
from disttrain.children.names import JobRef
from disttrain.children.pods import Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, build_probe_pod

pytestmark = pytest.mark.fuzz

REF = JobRef("j", "ns", "uid-1")
RESOURCES = ("cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi")
amounts = st.one_of(st.integers(0, 64), st.sampled_from(["100m", "1500m", "0.5", "64Mi", "1Gi", "2", "1e3"]),
                    st.floats(0, 16, allow_nan=False).map(lambda f: round(f, 3)))


@st.composite
def resources(draw):
    out = {}
    for key in ("requests", "limits"):
        section = draw(st.dictionaries(st.sampled_from(RESOURCES), amounts, max_size=3))
        if section:
            out[key] = section
    return out


@st.composite
def templates(draw):
    """(pod spec, trainerContainer or None): the trainer among 0-3 sidecars, plain init
    containers among the native sidecars, each in a random place."""
    named = draw(st.sampled_from(["trainer", "pytorch", "node", "main"]))
    trainer = {"name": named, "image": "example/train:1", "command": ["python", "train.py"],
               "resources": draw(resources())}
    sidecars = []
    for i in range(draw(st.integers(0, 3))):
        native = draw(st.booleans())
        sidecars.append({"name": f"side-{i}", "image": "example/train:1", "command": ["sh", "-c", "sleep 1d"],
                         "resources": draw(resources()), **({"restartPolicy": "Always"} if native else {})})
    inits = [{"name": f"init-{i}", "image": "i:1", "resources": draw(resources())}
             for i in range(draw(st.integers(0, 2)))]
    plain = [x for x in sidecars if "restartPolicy" not in x]
    containers = draw(st.permutations(plain + [trainer]))
    init_containers = draw(st.permutations([x for x in sidecars if "restartPolicy" in x] + inits))
    pod_spec = {"containers": containers, **({"initContainers": init_containers} if init_containers else {})}
    chosen = named if named == "main" and len(containers) > 1 else None
    return pod_spec, chosen


def _no_floats(obj):
    """``obj`` with every float written as a quantity string (what the models take)."""
    if isinstance(obj, float):
        return repr(obj)
    if isinstance(obj, list):
        return [_no_floats(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _no_floats(v) for k, v in obj.items()}
    return obj


def _without_resources(pod_spec):
    """``pod_spec`` without its containers' resources: the models refuse an extended resource
    requested without a limit, or fractional, as the Pod API does (docs/admission.md); the
    builders still get every amount as written (below), as an older CRD may have stored it."""
    return {k: [{f: v for f, v in c.items() if f != "resources"} for c in x] if k.endswith("ontainers") else x
            for k, x in pod_spec.items()}


def _requests(ctr) -> dict[str, Decimal]:
    res = ctr.get("resources") or {}
    out = {k: quantity(v) for k, v in (res.get("limits") or {}).items()}
    out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
    return out


def _phases(pod_spec) -> list[list[dict]]:
    """The containers running together in each phase of the pod's life: each plain init
    container beside the native sidecars started before it, then the containers beside
    every native sidecar."""
    phases, started = [], []
    for c in pod_spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            started.append(c)
        else:
            phases.append(started + [c])
    return phases + [started + pod_spec["containers"]]


def _needs(pod_spec) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for running in _phases(pod_spec):
        total: dict[str, Decimal] = {}
        for c in running:
            for k, q in _requests(c).items():
                total[k] = total.get(k, Decimal(0)) + q
        for k, q in total.items():
            out[k] = max(out.get(k, Decimal(0)), q)
    return out


@given(templates())
def test_sidecars_in_any_place_pass_through_and_the_probe_reserves_the_pod(t):
    pod_spec, chosen = t
    note(repr(t))
    spec = DistTrainingJobSpec.model_validate({
        "numNodes": 2, "numProcPerNode": 1, "network": {"hostNetwork": True},
        "template": {"spec": _no_floats(_without_resources(pod_spec))},
        **({"trainerContainer": chosen} if chosen else {})})
    spec.template.spec = pod_spec  # as an older CRD may have stored it: cpu: 0.5 as a number
    i = trainer_index(spec)
    assert pod_spec["containers"][i]["command"] == ["python", "train.py"]
    worker = build_worker_pod(REF, spec, 0, "node-a", Rendezvous("10.0.0.1", 29500, "eth1"), 0)["spec"]
    for j, ctr in enumerate(worker["containers"]):
        env = {e["name"] for e in ctr.get("env") or []}
        if j == i:
            assert {"MASTER_ADDR", "PET_NODE_RANK"} <= env
            assert ctr["command"][1:3] == ["-m", "torch.distributed.run"]
            assert any(p.get("hostPort") == 29500 for p in ctr["ports"])
        else:
            assert ctr == pod_spec["containers"][j]  # untouched: no env, no torchrun, no port
    assert worker.get("initContainers", []) == pod_spec.get("initContainers", [])
    probe = build_probe_pod(REF, spec, 0, ProbeMaster(), 1, "probe:1")["spec"]["containers"][0]
    res = probe["resources"]
    got = {k: quantity(v) for k, v in (res.get("requests") or {}).items()}
    want = {k: q for k, q in _needs(pod_spec).items()}
    assert set(got) == set(want)
    for k, q in want.items():  # canonical strings round up at the nano-unit only
        assert q <= got[k] <= q + Decimal("1e-9"), (k, q, got[k])
    for k, v in (res.get("limits") or {}).items():
        assert all(isinstance(x, str) for x in (v, *(res.get("requests") or {}).values()))
        if k in OVERCOMMITTABLE:
            assert quantity(v) >= got.get(k, Decimal(0)), k
        else:
            assert quantity(v) == got[k], k
    assert all(k in (res.get("limits") or {}) for k in got if k not in OVERCOMMITTABLE)
