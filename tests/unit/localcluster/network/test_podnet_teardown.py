"""A late sandbox teardown never removes the next pod's namespace (real network namespaces)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from localcluster.network import podnet
from localcluster.network.netns import delete_netns, list_netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="needs root and iproute2")

NODE = f"dtjtest{os.getpid()}"  # not a cluster's name: no node namespace needed for this
IP = "10.244.0.2"


def _add(name: str) -> None:
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)


def test_a_second_teardown_leaves_the_namespace_of_the_pod_that_got_the_address_next():
    ns = podnet.pod_netns(NODE, IP)
    try:
        _add(ns)
        first = podnet.netns_inode(NODE, IP)
        assert first is not None
        assert podnet.teardown_pod(NODE, IP, first) and ns not in list_netns()
        _add(ns)  # the next pod is given the same address: a new namespace, same name
        assert podnet.netns_inode(NODE, IP) not in (None, first)
        assert not podnet.teardown_pod(NODE, IP, first)  # the first pod's late teardown
        assert ns in list_netns()
        assert podnet.teardown_pod(NODE, IP, podnet.netns_inode(NODE, IP)) and ns not in list_netns()
    finally:
        delete_netns(ns)
