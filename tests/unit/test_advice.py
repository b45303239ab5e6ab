"""Spec-aware fixes (operator/disttrain/diagnosis/advice.py)."""
from disttrain.api import constants
from disttrain_probe.contract import vocabulary
from disttrain.diagnosis.advice import advice, apply_advice
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children.names import JobRef
from disttrain.diagnosis.diagnose import Diagnosis, Verdict

from ..support.fixtures import job

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
