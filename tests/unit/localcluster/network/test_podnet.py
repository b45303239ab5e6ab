"""Pure parts of the proving ground's pod network (localcluster/network/podnet.py)."""
from __future__ import annotations

import pytest

from localcluster.common.config import pod_cidr
from localcluster.network import podnet


def test_pod_cidr_gateway_and_names():
    assert pod_cidr(0) == "10.244.0.0/24" and pod_cidr(3) == "10.244.3.0/24"
    assert podnet.gateway(pod_cidr(1)) == "10.244.1.1"
    assert podnet.pod_netns("dtj-node-b", "10.244.1.17") == "dtj-node-b-p17"
    assert len(podnet.host_veth("10.244.1.254")) <= 15  # IFNAMSIZ


def test_safe_sysctls_pass_and_kernel_ones_are_not_applied():
    got = podnet.check_sysctls([{"name": "net.ipv4.ip_local_port_range", "value": "60000 61000"},
                                {"name": "net/ipv4/tcp_syncookies", "value": "1"},
                                {"name": "kernel.shm_rmid_forced", "value": "1"}], False)
    assert got == [("net.ipv4.ip_local_port_range", "60000 61000"),
                   ("net.ipv4.tcp_syncookies", "1")]


@pytest.mark.parametrize("sysctls,host_network,needle", [
    ([{"name": "net.core.somaxconn", "value": "1"}], False, "net.core.somaxconn"),
    ([{"name": "net.ipv4.ip_local_port_range", "value": "1 2"}], True, "host net"),
])
def test_forbidden_sysctls_name_the_sysctl(sysctls, host_network, needle):
    with pytest.raises(podnet.SysctlForbidden, match=needle):
        podnet.check_sysctls(sysctls, host_network)
