"""Every condition message the diagnosis writes is at most 400 characters (Validated's at
most 320, since Failed repeats it), over scenario-like reports and generated ones, with
and without the spec-aware advice."""
from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from disttrain.api.types import DistTrainingJobSpec
from disttrain.children.names import JobRef
from disttrain.diagnosis.advice import apply_advice
from disttrain.diagnosis.diagnose import Policy, diagnose
from disttrain.diagnosis.findings import ProbeOutcome
from disttrain_probe.contract import vocabulary as V
from tests.support.fixtures import job, typed_report
from tests.support.scenario_reports import SCENARIOS

REF = JobRef("ddp-digits", "ns", "uid-1")


def specs():
    out = []
    for net in ({"hostNetwork": True, "portRange": "61000-62000"}, {"hostNetwork": False},
                {"hostNetwork": False, "subdomain": "workerz"}, {"hostNetwork": True}):
        body = job()
        body["spec"]["network"] = net
        out.append(DistTrainingJobSpec.model_validate(body["spec"]))
    body = job()
    body["spec"]["probe"] = {"maxLinkImbalance": 1.5}  # a policy that can fail a straggler
    out.append(DistTrainingJobSpec.model_validate(body["spec"]))
    return out


SPECS = specs()


def assert_bounded(d):
    for ctype, v in d.conditions.items():
        limit = 320 if ctype == V.VALIDATED else 400
        assert len(v.message) <= limit, (ctype, len(v.message), v.message)
        assert v.message.strip(), ctype
        assert V.get(v.reason) is not None, v.reason  # only vocabulary reasons reach a condition


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_like_reports_give_bounded_messages(name):
    outs, master = SCENARIOS[name]
    for spec in SPECS:
        d = diagnose(outs, master, Policy.of(spec))
        apply_advice(d, REF, spec)
        assert_bounded(d)


def test_scenario_like_fixtures_reach_the_verdicts_they_imitate():
    want = {"healthy": V.PASSED_WITH_WARNINGS, "decoy-bridges": V.PASSED_WITH_WARNINGS,
            "firewall-ephemeral": V.EPHEMERAL_PORTS_BLOCKED, "ifname-missing": V.INTERFACE_NOT_FOUND,
            "version-skew": V.NCCL_VERSION_MISMATCH, "firewall-master-drop": V.MASTER_PORT_TIMEOUT,
            "master-addr-loopback": V.MASTER_ADDR_LOOPBACK, "hostname-loopback": V.PASSED_WITH_WARNINGS}
    for name, reason in want.items():
        outs, master = SCENARIOS[name]
        assert diagnose(outs, master).conditions[V.VALIDATED].reason == reason, name


NODE = st.sampled_from([f"node-{c}" for c in string.ascii_lowercase] + ["n" * 63])
TEXT = st.text(alphabet=string.ascii_letters + " ;:,.()-/0123456789", max_size=3000)
FAILURE_REASONS = st.sampled_from(sorted(V.named(V.FAILURE, V.PROBE)) + ["SomethingNew"])
WARNING_REASONS = st.sampled_from(sorted(V.named(V.WARNING, V.PROBE)) + ["SomethingNew"])
REJECTIONS = st.sampled_from(sorted(V.named(V.REJECTION)))
IFNAME = st.sampled_from(["eth0", "eth1", "docker0", "cni0", "lo", "br-a1", "x" * 15])


@st.composite
def report(draw, rank):
    ok = draw(st.booleans())
    node = draw(NODE)
    return {
        "v": 1, "rank": rank, "node": node, "ok": ok,
        "failure": None if ok else draw(st.one_of(st.none(), st.fixed_dictionaries(
            {"reason": FAILURE_REASONS, "message": TEXT}))),
        "warnings": draw(st.lists(st.fixed_dictionaries({"reason": WARNING_REASONS, "message": TEXT}),
                                  max_size=8)),
        "versions": draw(st.fixed_dictionaries({"torch": st.sampled_from(["2.8.0", "2.7.1", None]),
                                                "nccl": st.sampled_from(["2.27.3", "2.28.9", None]),
                                                "ncclLib": st.one_of(st.none(), TEXT)})),
        "interfaces": draw(st.lists(st.fixed_dictionaries(
            {"name": IFNAME, "addrs": st.just(["10.0.0.1/24"]),
             "measuredMbps": st.one_of(st.none(), st.floats(0, 1e6))}), max_size=6)),
        "chosen": draw(st.one_of(st.none(), st.fixed_dictionaries({"ifname": IFNAME, "subnet": TEXT}))),
        "rejected": draw(st.lists(st.fixed_dictionaries({"ifname": IFNAME, "reason": REJECTIONS,
                                                         "message": TEXT}), max_size=10)),
        "allreduce": draw(st.one_of(st.none(), st.fixed_dictionaries(
            {"busbwGBps": st.floats(0, 100), "algbwGBps": st.floats(0, 100), "bytes": st.integers(0, 1 << 30)}))),
    }


@st.composite
def outcome_sets(draw):
    n = draw(st.integers(1, 6))
    outs = []
    for r in range(n):
        kind = draw(st.sampled_from(["report", "report", "error", "running"]))
        o = ProbeOutcome(rank=r, pod=f"j-probe-{r}", node=draw(st.one_of(st.none(), NODE)))
        if kind == "report":
            o.report = typed_report(draw(report(r)))
        elif kind == "error":
            o.error = draw(TEXT)
        else:
            o.running = True
        outs.append(o)
    return outs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outs=outcome_sets(), master=st.sampled_from(["10.0.0.1", "127.0.0.1", None]),
       spec=st.sampled_from(SPECS))
def test_generated_reports_give_bounded_messages(outs, master, spec):
    d = diagnose(outs, master, Policy.of(spec))
    decided = {t: (v.status, v.reason) for t, v in d.conditions.items()}
    apply_advice(d, REF, spec)
    assert_bounded(d)
    # one verdict: the advice appends text, it never turns a condition or its reason
    assert {t: (v.status, v.reason) for t, v in d.conditions.items()} == decided
