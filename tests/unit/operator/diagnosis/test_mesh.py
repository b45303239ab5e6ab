"""Service-mesh sidecars (:mod:`disttrain.diagnosis.mesh`): which mesh the job's pods carry,
from the pods as the API returns them after injection, and any pod object read safely."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disttrain.diagnosis import mesh


def pod(name="j-probe-0", containers=("probe",), inits=(), annotations=None) -> dict:
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"containers": [{"name": c} for c in containers],
                     "initContainers": [{"name": c} for c in inits]}}


@pytest.mark.parametrize("pods,want", [
    ([pod()], None),
    ([pod(containers=("probe", "istio-proxy"), inits=("istio-init",))], ("Istio", "container istio-proxy")),
    ([pod(inits=("istio-init", "istio-proxy"))], ("Istio", "container istio-proxy")),  # a native sidecar
    ([pod(inits=("istio-validation",))], ("Istio", "init container istio-validation")),  # istio-cni
    ([pod(annotations={"sidecar.istio.io/status": "{}"})], ("Istio", "annotation sidecar.istio.io/status")),
    ([pod(containers=("probe", "linkerd-proxy"))], ("Linkerd", "container linkerd-proxy")),
    ([pod(annotations={"linkerd.io/proxy-version": "stable-2.14"})], ("Linkerd", "annotation linkerd.io/proxy-version")),
    # an annotation asking for injection is not injection
    ([pod(annotations={"sidecar.istio.io/inject": "true"})], None),
])
def test_injected(pods, want):
    got = mesh.injected(pods)
    assert (got and (got.mesh.name, got.evidence)) == want or (got is None and want is None)


def test_the_message_names_the_sidecar_the_pods_and_the_fix():
    found = mesh.injected([pod(f"j-probe-{r}", containers=("probe", "istio-proxy")) for r in range(4)])
    text = mesh.message(found, "node-b (rank 1): connections to 10.244.1.5 ... " + "x" * 500)
    assert len(text) <= 400
    assert text.startswith("the Istio sidecar (container istio-proxy) injected into the job's pods "
                           "(j-probe-0, j-probe-1 and 2 more) intercepts their connections")
    assert 'sidecar.istio.io/inject: "false"' in text and "firewall" not in text
    # the other fix keeps the sidecar: excluding ports cannot name NCCL's ephemeral ones
    assert text.endswith("or exclude the job's traffic from its capture "
                         "(traffic.sidecar.istio.io/excludeOutboundIPRanges: the pod CIDR)")
    assert "(node-b (rank 1): connections to 10.244.1.5 ... xx" in text  # the evidence, cut to fit
    linkerd = mesh.injected([pod("j-probe-0", containers=("probe", "linkerd-proxy"))])
    text = mesh.message(linkerd, "node-b (rank 1): ...")
    assert "linkerd.io/inject: disabled" in text and "skip-outbound-ports" in text and len(text) <= 400


JUNK = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(
                        st.sampled_from(["metadata", "spec", "name", "containers", "initContainers",
                                         "annotations", "istio-proxy"]), c, max_size=4), max_leaves=16)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(JUNK, max_size=4))
def test_any_pod_object_is_read_without_raising(pods):
    got = mesh.injected(pods)
    assert got is None or got.pods
