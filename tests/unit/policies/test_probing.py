"""The probe run (:mod:`disttrain.reconcile.policies.probing`): one attempt from its pods to
the verdict's inputs, and when to stop waiting."""

from disttrain.api import constants
from disttrain.children import observe
from disttrain.reconcile.policies import probing

from ...support.fixtures import pod

# containerd 1.6's message for an image no registry serves, as the kubelet of a real node
# put it in the probe's init container status (make demo with spec.probe.image changed)
REAL_PULL_ERROR = (
    'failed to pull and unpack image "disttrain.dev/test/missing:0": failed to resolve reference '
    '"disttrain.dev/test/missing:0": failed to do request: Head '
    '"https://disttrain.dev/v2/test/missing/manifests/0": dial tcp: lookup disttrain.dev on '
    '10.96.0.10:53: no such host')


def test_image_pull_failure_names_rank_node_and_the_cause_at_the_end():
    def pulling(name, node):
        p = pod(name, constants.ROLE_PROBE, int(name[-1]), node=node)
        p["status"] = {"initContainerStatuses": [{
            "name": "install-probe", "image": "disttrain.dev/test/missing:0",
            "state": {"waiting": {"reason": "ErrImagePull", "message": REAL_PULL_ERROR}}}]}
        return p

    pods = [pulling("j-probe-0", "node-a"), pulling("j-probe-1", "node-b")]
    pull = [(r, p, observe.image_pull_error(p)) for r, p in enumerate(pods)]
    msg = probing._pull_summary(pull)
    assert msg.startswith("rank 0 on node-a, rank 1 on node-b: disttrain.dev/test/missing:0: ErrImagePull: ")
    assert msg.endswith("lookup disttrain.dev on 10.96.0.10:53: no such host")
    assert "failed to pull and unpack" not in msg and msg.count("disttrain.dev/test/missing:0") == 1
    assert len(msg) < 300
    assert observe.pull_cause("x" * 500).startswith("...") and len(observe.pull_cause("x" * 500)) == 160
