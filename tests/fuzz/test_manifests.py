"""Generated DistTrainingJob manifests through the CRD (a model of the apiserver's
admission, tests/fuzz/crd_admission.py, with the CRD's CEL rules evaluated by cel-python),
the pydantic models and the builders.

Invariants:
- the CRD admits a manifest exactly when the operator accepts what the apiserver would
  store for it (its first reconcile step sets no InvalidSpec; nulls, extremes and wrong
  shapes in every field included): admission and the operator read the same rules the
  same way. The one deliberate difference is below;
- what the CRD admits, pydantic accepts and ``job_name_problem`` passes; the one deliberate
  difference: torchrun flags in the container command that contradict the spec are found
  by the operator (pydantic), not the CRD (telling torchrun's options from the script's
  needs torchrun's parser; see docs/admission.md);
- what pydantic accepts with a good name, the CRD admits too (the rules are the same);
- the builders never raise for anything pydantic accepts, and the pods and Service they
  build have valid names, labels and hostnames, unique container and volume names, string
  commands, and with a torchrun command of the user's the command is left as written and
  the rendezvous is handed over in PET_* variables.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from pydantic import ValidationError

from disttrain.api import constants, torchrun
from disttrain.api.fieldpath import spec_error_message
from disttrain.api.jobname import job_name_problem
from disttrain.api.types import DistTrainingJobSpec, trainer_index, trainer_of
from disttrain.children.names import JobRef, uses_dns_hostnames
from disttrain.children.pods import Rendezvous, build_worker_pod
from disttrain.children.probepod import ProbeMaster, build_probe_pod
from disttrain.children.service import build_headless_service
from disttrain.reconcile.loop import reconcile
from disttrain.reconcile.policies.gang import CAP_WORKLOAD_API
from disttrain.reconcile.step import Observed
from disttrain_probe.contract import vocabulary

from ..support.fixtures import TEMPLATE, json_parser
from .crd_admission import admit, crd_schema, stored_form
from .manifests import (
    NETWORK_FIELDS,
    PROBE_FIELDS,
    RENDEZVOUS_FIELDS,
    RUN_POLICY_FIELDS,
    SCHEDULING_FIELDS,
    SPEC_OPTIONAL,
    SPEC_REQUIRED,
    manifests,
)

pytestmark = pytest.mark.fuzz

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _pydantic(spec_body) -> tuple[DistTrainingJobSpec | None, str]:
    try:
        return DistTrainingJobSpec.model_validate(spec_body), ""
    except ValidationError as e:
        return None, spec_error_message(e)


NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def operator_verdict(obj: dict) -> tuple[bool, str]:
    """Whether the operator acts on ``obj`` as the apiserver would store it (no CRD rule
    applied): (True, "") or (False, the InvalidSpec message). The first reconcile step, on
    a cluster that serves every gang API (what it serves is not known at admission)."""
    body = stored_form(obj)
    body["metadata"] = dict(body.get("metadata") or {}, uid="uid-1", generation=1)
    plan = reconcile(Observed.of(body, [], NOW, capabilities={CAP_WORKLOAD_API}), json_parser,
                     probe_image="probe:1")
    conds = {x["type"]: x for x in plan.status.get("conditions") or []}
    for x in conds.values():
        assert x.get("reason") != vocabulary.OPERATOR_ERROR, x
    failed = conds.get(constants.FAILED) or {}
    if failed.get("status") == "True" and failed.get("reason") == vocabulary.INVALID_SPEC:
        return False, failed.get("message", "")
    return True, ""


def _agree(m: dict) -> str:
    """Check that admission and the operator agree on ``m``; returns what happened."""
    stored, crd_errors = admit(m)
    accepted, why = operator_verdict(m)
    if stored is not None and not accepted:
        assert "torchrun option" in why, f"CRD admitted, the operator refused: {why}"
        return "admitted, refused by the operator: a contradicting torchrun option"
    assert (stored is not None) == accepted, (
        f"CRD: {'admitted' if stored is not None else crd_errors}; operator: {why or 'accepted'}")
    return "both accept" if accepted else "both refuse"


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(manifests())
def test_crd_admission_is_operator_acceptance(m):
    note(repr(m))
    event(_agree(m))


def _job(name: str, **spec) -> dict:
    return {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistTrainingJob",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"numNodes": 2, "template": TEMPLATE, **spec}}


@pytest.mark.parametrize("m,outcome", [
    # a null network field is that field unset, to the CRD's rules as to the operator
    (_job("7up", network={"subdomain": None}), "both refuse"),
    (_job("7up", network={"enableDNSHostnames": None, "hostNetwork": True}), "both accept"),
    (_job("7up", network={"subdomain": None, "enableDNSHostnames": None}), "both refuse"),
    (_job("7up", network={"subdomain": "svc", "enableDNSHostnames": None}), "both accept"),
    (_job("ddp", network=None, probe=None, runPolicy=None, rendezvous=None, launcher=None,
          numProcPerNode=None, suspend=None), "both accept"),
    (_job("ddp", probe={"image": None, "maxLinkImbalance": None}), "both accept"),
    # an explicit gang gives the pods DNS names: the name must fit them
    (_job("7up", network={"hostNetwork": True}, runPolicy={"schedulingPolicy": {"gang": "coscheduling"}}),
     "both refuse"),
    (_job("ddp", network={"enableDNSHostnames": False}, runPolicy={"schedulingPolicy": {"gang": "volcano"}}),
     "both refuse"),
    (_job("7up", network={"hostNetwork": True}, runPolicy={"schedulingPolicy": {"gang": "auto"}}),
     "both accept"),
    (_job("ddp", numProcPerNode=257), "both refuse"),
    (_job("ddp", numProcPerNode=2**40), "both refuse"),
    (_job("ddp", runPolicy={"activeDeadlineSeconds": 2**31}), "both refuse"),
    # the trainer: the only container, the one trainerContainer names, or the one named so
    (_job("ddp", template={"spec": {"containers": [{"name": "logs"}, {"name": "main"}]}}), "both refuse"),
    (_job("ddp", template={"spec": {"containers": [{"name": "logs"}, {"name": "pytorch"}]}}), "both accept"),
    (_job("ddp", template={"spec": {"containers": [{"name": "node"}, {"name": "trainer"}]}}), "both refuse"),
    (_job("ddp", trainerContainer="main", template={"spec": {"containers": [{"name": "logs"}, {"name": "main"}]}}),
     "both accept"),
    (_job("ddp", trainerContainer="main"), "both refuse"),
    (_job("ddp", template={"spec": {"containers": [{"name": "x"}]}}), "both accept"),
])
def test_crd_and_operator_agree_on_the_cases_that_once_split_them(m, outcome):
    assert _agree(m) == outcome


@pytest.mark.parametrize("path,table", [
    ((), {**SPEC_REQUIRED, **SPEC_OPTIONAL}), (("network",), NETWORK_FIELDS),
    (("probe",), PROBE_FIELDS), (("rendezvous",), RENDEZVOUS_FIELDS),
    (("runPolicy",), RUN_POLICY_FIELDS), (("runPolicy", "schedulingPolicy"), SCHEDULING_FIELDS),
])
def test_the_manifests_strategy_generates_every_spec_field(path, table):
    node = crd_schema()["properties"]["spec"]
    for part in path:
        node = node["properties"][part]
    assert set(table) == set(node["properties"]), "tests/fuzz/manifests.py: add the new field"


def _valid_label_key(k: str) -> bool:
    prefix, _, name = k.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.fullmatch(name))


def _check_object_meta(meta: dict, what: str) -> None:
    assert isinstance(meta["name"], str) and len(meta["name"]) <= 253, what
    assert DNS1123_SUBDOMAIN.fullmatch(meta["name"]), (what, meta["name"])
    for k, v in (meta.get("labels") or {}).items():
        assert isinstance(k, str) and _valid_label_key(k), (what, "label key", k)
        assert isinstance(v, str) and len(v) <= 63 and LABEL_VALUE.fullmatch(v), (what, "label", k, v)
    for k, v in (meta.get("annotations") or {}).items():
        assert isinstance(k, str) and _valid_label_key(k) and isinstance(v, str), (what, "annotation", k)


def _check_pod(pod: dict, spec: DistTrainingJobSpec, raw_trainer: dict, role: str) -> None:
    name = pod["metadata"]["name"]
    _check_object_meta(pod["metadata"], name)
    ps = pod["spec"]
    for key in ("hostname", "subdomain"):
        if key in ps:
            assert len(ps[key]) <= 63 and DNS1123_LABEL.fullmatch(ps[key]), (name, key, ps[key])
    names = [x["name"] for x in (ps.get("initContainers") or []) + ps["containers"]]
    assert len(names) == len(set(names)), (name, "container names", names)
    vols = [v["name"] for v in ps.get("volumes") or []]
    assert len(vols) == len(set(vols)), (name, "volume names", vols)
    for ctr in (ps.get("initContainers") or []) + ps["containers"]:
        for key in ("command", "args"):
            assert all(isinstance(a, str) for a in ctr.get(key) or []), (name, key)
        mounts = [m["mountPath"] for m in ctr.get("volumeMounts") or []]
        assert len(mounts) == len(set(mounts)), (name, "mountPaths", mounts)
        for e in ctr.get("env") or []:
            assert isinstance(e["name"], str) and e["name"], (name, e)
            assert isinstance(e.get("value", ""), str) or isinstance(e.get("valueFrom"), dict), (name, e)
    for s in (ps.get("securityContext") or {}).get("sysctls") or []:
        assert isinstance(s["name"], str) and isinstance(s["value"], str), (name, s)
    terms = (((ps.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    assert terms is None or (isinstance(terms, list) and all(isinstance(t, dict) for t in terms)), name
    if role == constants.ROLE_WORKER:  # the rendezvous goes to the trainer alone
        others = [c for i, c in enumerate(ps["containers"]) if i != trainer_index(spec)]
        assert all(e["name"] != "PET_NNODES" for c in others for e in c.get("env") or []), name
    if role == constants.ROLE_WORKER and spec.launcher == "torchrun":
        trainer = ps["containers"][trainer_index(spec)]
        env = {e["name"]: e.get("value") for e in trainer["env"]}
        wrapped = trainer["command"][:1] == ["torchrun"] or trainer["command"][1:3] == ["-m", "torch.distributed.run"]
        if not wrapped or torchrun.launches(list(raw_trainer.get("command") or []) + list(raw_trainer.get("args") or [])):
            # the user's own torchrun: left as written
            assert trainer.get("command") == raw_trainer.get("command"), name
            assert trainer.get("args") == raw_trainer.get("args"), name
        for var in ("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT"):
            assert var in env, (name, var)
        if spec.rendezvous.backend == "c10d":
            assert env.get("PET_RDZV_BACKEND") == "c10d" and env.get("PET_RDZV_ENDPOINT"), name


def _build_all(name: str, spec: DistTrainingJobSpec) -> None:
    job = JobRef(name, "ns", "uid-1")
    raw_trainer = trainer_of(spec)
    n = spec.num_nodes
    for rank in sorted({0, min(1, n - 1), n - 1}):
        master = None if rank == 0 else "10.0.0.1"
        probe = build_probe_pod(job, spec, rank, ProbeMaster(master, "2026-01-01T00:00:00Z"), 1)
        _check_pod(probe, spec, raw_trainer, constants.ROLE_PROBE)
        for rdzv in (Rendezvous("10.0.0.1", spec.rendezvous.port, "eth1", exact=True),
                     Rendezvous("ddp-0.ddp", spec.rendezvous.port)):
            worker = build_worker_pod(job, spec, rank, "node-a" if rank else None, rdzv, 2)
            _check_pod(worker, spec, raw_trainer, constants.ROLE_WORKER)
    if uses_dns_hostnames(spec) and not spec.network.subdomain:
        svc = build_headless_service(job, spec)
        assert len(svc["metadata"]["name"]) <= 63 and DNS1035_LABEL.fullmatch(svc["metadata"]["name"]), svc
        _check_object_meta(svc["metadata"], "service")


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(manifests())
def test_crd_pydantic_and_builders_agree(m):
    note(repr(m))
    name = m["metadata"]["name"]
    stored, crd_errors = admit(m)
    note(f"CRD: {'admitted' if stored else crd_errors}")
    event("CRD admitted" if stored is not None else "CRD refused")
    raw_spec, raw_err = _pydantic(m["spec"])
    note(f"pydantic (raw): {raw_err or 'accepted'}")
    raw_name_problem = job_name_problem(name, raw_spec) if raw_spec else None
    if stored is not None:
        spec, err = _pydantic(stored["spec"])
        assert spec is not None or "torchrun" in err, f"CRD admitted, pydantic refused: {err}"
        if spec is None:
            event("admitted, then refused by the operator: contradicting torchrun option")
        elif torchrun.launches(list(trainer_of(spec).get("command") or [])
                               + list(trainer_of(spec).get("args") or [])):
            event("admitted: the user's own torchrun")
        if spec is not None:
            assert job_name_problem(name, spec) is None, "CRD admitted a name the operator refuses"
            _build_all(name, spec)
    elif raw_spec is not None and raw_name_problem is None:
        pytest.fail(f"pydantic accepted and the name is fine, the CRD refused: {crd_errors}")
    if raw_spec is not None and raw_name_problem is None:
        _build_all(name, raw_spec)
