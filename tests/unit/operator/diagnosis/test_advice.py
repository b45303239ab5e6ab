"""Spec-aware fixes (operator/disttrain/diagnosis/advice.py)."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children.names import JobRef
from disttrain.diagnosis.advice import advice, apply_advice, dns_policy_cause
from disttrain.diagnosis.checkconditions import Verdict
from disttrain.diagnosis.diagnose import Diagnosis
from disttrain_probe.contract import vocabulary
from tests.support.fixtures import job

REF = JobRef("j", "ns", "uid-1")


def spec(**network):
    body = job()
    body["spec"]["network"] = network
    return DistTrainingJobSpec.model_validate(body["spec"])


def test_host_network_port_range_recommends_pod_network_or_node_sysctl():
    a = advice(vocabulary.EPHEMERAL_PORTS_BLOCKED, REF, spec(hostNetwork=True, portRange="60000-61000"))
    assert "hostNetwork: false" in a and 'ip_local_port_range="60000 61000"' in a


def test_no_port_range_asks_for_one_and_pod_network_says_the_operator_sets_it():
    a = advice(vocabulary.EPHEMERAL_PORTS_BLOCKED, REF, spec(hostNetwork=False))
    assert "network.portRange" in a and "operator then sets" in a
    assert "operator then sets" not in advice(vocabulary.EPHEMERAL_PORTS_BLOCKED, REF, spec(hostNetwork=True))
    # a pod-network job that declared its range: the probe's message is the whole story
    assert advice(vocabulary.EPHEMERAL_PORTS_BLOCKED, REF, spec(hostNetwork=False, portRange="1-2")) is None


def test_a_probe_message_that_already_asks_for_network_port_range_is_kept_whole():
    """The partial-range verdict names the ports and says to set network.portRange: the
    generic advice would push the message over 400 characters and cut its evidence."""
    msg = ("node-a: part of its ephemeral port range is blocked: node-b reached ports 32768 and "
           "44060 but not ports 49707 and 60999 on 10.101.0.11; ... or set network.portRange to a "
           "range it admits")
    d = Diagnosis(conditions={constants.NETWORK_VALIDATED: Verdict(
        constants.FALSE, vocabulary.EPHEMERAL_PORTS_BLOCKED, msg)})
    apply_advice(d, REF, spec(hostNetwork=True))
    assert d.conditions[constants.NETWORK_VALIDATED].message == msg
    d.conditions[constants.NETWORK_VALIDATED].message = "node-a: inbound TCP blocked"  # no fix yet
    apply_advice(d, REF, spec(hostNetwork=True))
    assert "declare the ephemeral range" in d.conditions[constants.NETWORK_VALIDATED].message


def test_unresolvable_names_the_service_only_with_dns_hostnames():
    a = advice(vocabulary.MASTER_ADDR_UNRESOLVABLE, REF, spec(hostNetwork=False, subdomain="workerz"))
    assert "Service workerz" in a and "namespace ns" in a and "you manage" in a
    assert advice(vocabulary.MASTER_ADDR_UNRESOLVABLE, REF, spec(hostNetwork=True)) is None


def test_apply_advice_touches_only_false_conditions_once():
    d = Diagnosis(conditions={
        constants.NETWORK_VALIDATED: Verdict("False", vocabulary.EPHEMERAL_PORTS_BLOCKED, "node-a drops."),
        constants.MASTER_REACHABLE: Verdict("True", vocabulary.EPHEMERAL_PORTS_BLOCKED, "fine"),
    })
    s = spec(hostNetwork=True, portRange="60000-61000")
    apply_advice(d, REF, s)
    apply_advice(d, REF, s)
    msg = d.conditions[constants.NETWORK_VALIDATED].message
    assert msg.startswith("node-a drops; with hostNetwork") and msg.count("hostNetwork: false") == 1
    assert d.conditions[constants.MASTER_REACHABLE].message == "fine"


def dns_spec(pod: dict, **network) -> DistTrainingJobSpec:
    body = job()
    body["spec"]["network"] = network
    body["spec"]["template"]["spec"].update(pod)
    return DistTrainingJobSpec.model_validate(body["spec"])


POINTER = ("MasterReachable=False (MasterAddrUnresolvable) on node-b: see the MasterReachable "
           "condition for the cause and the fix")
EVIDENCE = "node-b could not resolve MASTER_ADDR j-0.j: the record exists, node-b's path to its DNS server fails"

DNS_ROWS = [  # (name, template additions, network, the cause names this policy (None: no cause))
    ("Default on the pod network", {"dnsPolicy": "Default"}, {"hostNetwork": False}, "dnsPolicy: Default"),
    ("None without a nameserver", {"dnsPolicy": "None", "dnsConfig": {"searches": ["x"]}},
     {"hostNetwork": False}, "dnsPolicy: None"),
    ("None with a nameserver: the user chose it", {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.96.0.10"]}},
     {"hostNetwork": False}, None),
    ("ClusterFirst", {"dnsPolicy": "ClusterFirst"}, {"hostNetwork": False}, None),
    ("hostNetwork: the operator sets ClusterFirstWithHostNet", {"dnsPolicy": "Default"},
     {"hostNetwork": True, "enableDNSHostnames": True}, None),
    ("no DNS hostnames: MASTER_ADDR is an address", {"dnsPolicy": "Default"},
     {"hostNetwork": False, "enableDNSHostnames": False}, None),
    ("a dnsConfig of the wrong shape", {"dnsPolicy": "None", "dnsConfig": ["x"]}, {"hostNetwork": False}, "dnsPolicy: None"),
]


@pytest.mark.parametrize("name,pod,network,names", DNS_ROWS, ids=[r[0] for r in DNS_ROWS])
def test_a_template_dns_policy_off_the_cluster_dns_is_the_cause_on_the_check_and_validated(name, pod, network, names):
    d = Diagnosis(conditions={
        constants.MASTER_REACHABLE: Verdict(constants.FALSE, vocabulary.MASTER_ADDR_UNRESOLVABLE, EVIDENCE),
        constants.VALIDATED: Verdict(constants.FALSE, vocabulary.MASTER_ADDR_UNRESOLVABLE, POINTER),
    })
    apply_advice(d, REF, dns_spec(pod, **network))
    check, summary = d.conditions[constants.MASTER_REACHABLE].message, d.conditions[constants.VALIDATED].message
    if names is None:
        assert "dnsPolicy" not in check and summary == POINTER
        return
    for text in (check, summary):
        assert f"spec.template.spec.{names}" in text and "ClusterFirst" in text
    assert check.startswith("spec.template.spec.dnsPolicy") and "node-b could not resolve" in check
    assert summary.startswith("MasterReachable=False (MasterAddrUnresolvable) on node-b: spec.template")
    assert len(check) <= 400 and len(summary) <= 320
    assert "headless Service" not in check and "path to" not in check  # the template, not a node or the Service
    apply_advice(d, REF, dns_spec(pod, **network))  # once
    assert d.conditions[constants.MASTER_REACHABLE].message == check and d.conditions[constants.VALIDATED].message == summary


@given(st.dictionaries(st.sampled_from(["dnsPolicy", "dnsConfig", "hostname"]),
                       st.one_of(st.none(), st.text(max_size=10), st.sampled_from(["Default", "None"]),
                                 st.lists(st.text(max_size=5), max_size=2),
                                 st.dictionaries(st.sampled_from(["nameservers", "searches"]),
                                                 st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=2))))))
def test_dns_policy_cause_never_raises_on_any_template(pod):
    try:
        s = dns_spec(pod, hostNetwork=False)
    except ValueError:
        return  # the model refused it: the admission's business
    cause = dns_policy_cause(s)
    assert cause is None or (pod.get("dnsPolicy") in ("Default", "None") and len(cause) < 250)
