"""A real node's configuration files under ``<state>/realnodes/<node>/``: containerd's
config, the CNI conflist, the kubelet's config and kubeconfig, the node's hosts file,
resolv.conf and containerd's base runtime spec."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from localcluster.common import pki
from localcluster.common.config import (
    CLUSTER_DOMAIN,
    DNS_SERVICE_IP,
    KUBERNETES_SERVICE_IP,
    KUBERNETES_SERVICE_PORT,
    NodeSpec,
    pod_cidr,
)
from localcluster.common.kubeconfig import write_kubeconfig
from localcluster.network import nodedns, podnet
from localcluster.nodes.realnode.base import (
    BASE_SPEC,
    CNI_BIN_DIR,
    EVICTION_DISK_FLOOR,
    KUBELET_PORT,
    SANDBOX_IMAGE,
    SYSCTL_FILES,
    containerd_root,
    node_dir,
)
from localcluster.nodes.realnode.sitetree import default_oci_spec, site_env_and_mounts, site_spec, torch_tree


# -- configuration files ---------------------------------------------------------------------
def containerd_config(d: Path, root: Path) -> str:
    """containerd 1.6's config (version 2) for the node whose files are under ``d``."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}/root"
state = "{d}/containerd-state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[{cri}]
  sandbox_image = "{SANDBOX_IMAGE}"
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE here: the pause container's -998 would fail runc
  restrict_oom_score_adj = true
  enable_unprivileged_ports = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  # the node's own software and settings, in every container (site_spec)
  base_runtime_spec = "{d}/{BASE_SPEC}"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d}/runc"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{d}/cni"
"""


def cni_conflist(d: Path, index: int) -> dict:
    """The pod network: bridge ``cni0`` (the node is the gateway, no NAT), host-local
    addresses from the node's pod CIDR, portmap for ``hostPort``."""
    cidr = pod_cidr(index)
    return {
        "cniVersion": "1.0.0", "name": "disttrain-pods",
        "plugins": [
            {"type": "bridge", "bridge": podnet.BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(d / "ipam"),
                      "ranges": [[{"subnet": cidr, "gateway": podnet.gateway(cidr)}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(d: Path, spec: NodeSpec, ca: Path, certs: dict,
                   cluster_dns: str = DNS_SERVICE_IP) -> dict:
    """The KubeletConfiguration (v1beta1) of one node; ``cluster_dns``: the nameserver of
    its pods (a node-local DNS, ``nodedns.py``, or cluster DNS)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # 1.37 refuses cgroup v1 by default; this machine has v1
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{spec.netns}", "cgroupsPerQOS": True,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{d}/containerd.sock",
        "podLogsDir": str(d / "pod-logs"),
        "address": "0.0.0.0", "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(certs["serving_crt"]), "tlsPrivateKeyFile": str(certs["serving_key"]),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDNS": [cluster_dns], "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(d / "resolv.conf"),
        # images are imported, never pulled: never garbage-collect them
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        # absolute floors, not percentages: the nodes share one large disk with the
        # machine, where 2% was 5 GB; under disk pressure the kubelet deletes every image
        # no pod runs, and images here are imported, never pulled back
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": EVICTION_DISK_FLOOR,
                         "imagefs.available": EVICTION_DISK_FLOOR},
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s", "fileCheckFrequency": "10s",
        "protectKernelDefaults": False, "makeIPTablesUtilChains": False,
        "localStorageCapacityIsolation": True,
        "shutdownGracePeriod": "0s",
    }


def write_files(state: Path, spec: NodeSpec, internal_ip: str, hosts_lines: list[str],
                topo=None) -> Path:
    """Write every configuration file of node ``spec`` (``topo``, a
    ``topology.NodeTopology``, gives its site env; see :func:`site_spec`); returns its
    directory. Raises RealNodeError (no torch tree, no ``ctr``)."""
    d = node_dir(state, spec.name)
    for sub in ("cni", "ipam", "runc", "kubelet", "pod-logs", "opt", "private/run-containerd",
                "private/var-lib-cni", "private/var-log", "sysctl"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    root = containerd_root(spec)
    root.mkdir(parents=True, exist_ok=True)
    p = state / "pki"
    certs = pki.ensure_node_pki(p, spec.name, internal_ip)
    write_kubeconfig(d / "kubelet.kubeconfig", f"system:node:{spec.name}", p / "ca.crt",
                     certs["client_crt"], certs["client_key"],
                     server=f"https://{KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT}")
    (d / "containerd.toml").write_text(containerd_config(d, root))
    env, mounts = site_env_and_mounts(topo, torch_tree())
    (d / BASE_SPEC).write_text(json.dumps(site_spec(default_oci_spec(), env, mounts), indent=1))
    (d / "cni" / "10-disttrain.conflist").write_text(json.dumps(cni_conflist(d, spec.index), indent=1))
    dns = nodedns.server_for(topo.dns_records if topo is not None else {})
    (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(d, spec, p / "ca.crt", certs, dns)))
    (d / "hosts").write_text("".join(f"{ln}\n" for ln in hosts_lines))
    (d / "resolv.conf").write_text(f"nameserver {DNS_SERVICE_IP}\n")
    for rel, value in SYSCTL_FILES.items():
        (d / "sysctl" / rel.replace("/", ".")).write_text(value)
    return d
