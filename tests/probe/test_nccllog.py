"""The NCCL log parser on lines in NCCL's exact formats.

Each line below is rendered from the printf format NCCL itself uses, copied verbatim from
github.com/NVIDIA/nccl at tag v2.27.3-1 (the NCCL torch 2.8 ships) unless another tag is
named; the location of every format string is given next to it. C's ``%lx``/``%llx``
become Python's ``%x`` and ``%p`` a pre-formatted ``%s``; nothing else is changed.
"""
from __future__ import annotations

import pytest

from disttrain_probe.gpu import nccllog

# src/debug.cc:352 (host:pid:tid) and :366 (INFO) / :363 (WARN): the line prefix.
PREFIX_FMT = "%s:%d:%d "
INFO_FMT = "[%d] NCCL INFO "
WARN_FMT = "[%d] %s:%d NCCL WARN "
# src/init.cc:538  #define VERSION_STRING "NCCL version " MAJOR "." MINOR "." PATCH SUFFIX "+cuda" ...
VERSION_FMT = "NCCL version %d.%d.%d%s+cuda%d.%d"
# src/misc/cudawrap.cc:260
CUDA_DRIVER_FMT = "cudaDriverVersion %d"
# src/bootstrap.cc:123 ("Bootstrap: Using%s"; v2.21.5-1 src/bootstrap.cc:56 had "Bootstrap : Using%s"),
# the argument built at :121-122 as " %s:" + ncclSocketToString, src/misc/socket.cc:100 "%s<%s>".
BOOTSTRAP_FMT = "Bootstrap: Using%s"
BOOTSTRAP_FMT_2_21 = "Bootstrap : Using%s"
SOCKADDR_FMT = "%s<%s>"
# src/transport/net_ib.cc:753 and the device list at :749-750 " [%d]%s:%d/%s" (NCCL_IB_LLSTR :108)
NET_IB_FMT = "NET/IB : Using%s %s; OOB %s:%s"
NET_IB_DEV_FMT = " [%d]%s:%d/%s"
NET_IB_NONE = "NET/IB : No device found."  # src/transport/net_ib.cc:739
# src/transport/net_socket.cc:67 and the device list at :63 " [%d]%s:%s"
NET_SOCKET_FMT = "NET/Socket : Using%s"
NET_SOCKET_DEV_FMT = " [%d]%s:%s"
# src/plugin/net/net_v10.cc:17
PLUGIN_FMT = "NET/Plugin: Loaded net plugin %s (v10)"
# src/init.cc:346
USING_NETWORK_FMT = "Using network %s"
# src/graph/topo.cc:1252
GDR_FMT = "NET/%s : GPU Direct RDMA %s for HCA %d '%s'"
# src/transport/p2p.cc:398 (legacy CUDA IPC), :393 (cuMem), :386 (same process)
P2P_IPC_FMT = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/IPC%s%s"
P2P_CUMEM_FMT = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s"
P2P_DIRECT_FMT = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/direct pointer%s"
# src/transport/shm.cc:128
SHM_FMT = "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s"
# src/transport/net.cc:218 (send), :222 (send through a proxy rank), :264 (receive)
NET_SEND_FMT = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"
NET_SEND_PROXY_FMT = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d(%d)%s%s%s"
NET_RECV_FMT = "Channel %02d/%d : %d[%d] -> %d[%d] [receive] via NET/%s/%d%s%s%s"
# src/init.cc:1469 (v2.18.3-1 src/init.cc:1375 had no leading function name)
INIT_FMT = ("%s comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x commId 0x%x - "
            "Init COMPLETE")
INIT_FMT_2_18 = "comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %x commId 0x%x - Init COMPLETE"


def info(host: str, dev: int, msg: str, pid: int = 4242) -> str:
    return PREFIX_FMT % (host, pid, pid + 7) + INFO_FMT % dev + msg


def warn(host: str, dev: int, msg: str) -> str:
    return PREFIX_FMT % (host, 4242, 4249) + WARN_FMT % (dev, "transport/net_ib.cc", 612) + msg


def init_complete(host: str, rank: int, nranks: int, dev: int, bus: int) -> str:
    return info(host, dev, INIT_FMT % ("ncclCommInitRankConfig", "0x55d4c8a0e7b0", rank, nranks,
                                       dev, dev, bus, 0x8e1f3a2b9c0d4e5f))


def ib_line(host: str) -> str:
    devs = NET_IB_DEV_FMT % (0, "mlx5_0", 1, "IB") + NET_IB_DEV_FMT % (1, "mlx5_1", 1, "RoCE")
    return info(host, 0, NET_IB_FMT % (devs, "[RO]", "eth0", SOCKADDR_FMT % ("10.0.0.11", "0")))


def two_nodes_ib(gdr: bool = True) -> list[str]:
    """Ranks 0,1 on node-a (GPU 0,1), ranks 2,3 on node-b: P2P inside, IB between."""
    g = "/GDRDMA" if gdr else ""
    lines = [info("node-a", 0, VERSION_FMT % (2, 27, 3, "", 12, 9)),
             info("node-a", 0, CUDA_DRIVER_FMT % 12090),
             info("node-a", 0, BOOTSTRAP_FMT % (" eth0:" + SOCKADDR_FMT % ("10.0.0.11", "0"))),
             ib_line("node-a"), ib_line("node-b"),
             info("node-a", 0, USING_NETWORK_FMT % "IB"),
             info("node-a", 0, GDR_FMT % ("IB", "Enabled" if gdr else "Disabled", 0, "mlx5_0")),
             info("node-a", 0, P2P_IPC_FMT % (0, 0, 0, 0, 1, 1, "/read", "")),
             info("node-a", 1, P2P_IPC_FMT % (0, 0, 1, 1, 0, 0, "/read", "")),
             info("node-b", 0, P2P_CUMEM_FMT % (0, 0, 2, 0, 3, 1, "CUMEM", "/read", "")),
             info("node-a", 1, NET_SEND_FMT % (0, 0, 1, 1, 2, 0, "IB", 0, g, "", "")),
             info("node-b", 0, NET_RECV_FMT % (0, 0, 1, 1, 2, 0, "IB", 0, g, "", "")),
             info("node-b", 1, NET_SEND_PROXY_FMT % (1, 0, 3, 1, 0, 0, "IB", 1, 2, g, "", "/Shared"))]
    for r, (host, dev, bus) in enumerate([("node-a", 0, 0x1B000), ("node-a", 1, 0x43000),
                                          ("node-b", 0, 0x1B000), ("node-b", 1, 0x43000)]):
        lines.append(init_complete(host, r, 4, dev, bus))
    return lines


ACTIVE_RDMA = [{"name": "mlx5_0", "ports": [{"port": 1, "state": "ACTIVE"}]}]


def test_split_line_reads_info_and_warn_prefixes_and_ignores_other_output():
    d = nccllog.split_line(info("gpu-7", 3, "Using network IB") + "\n")
    assert d["host"] == "gpu-7" and d["dev"] == "3" and d["level"] == "INFO"
    assert d["msg"] == "Using network IB"
    w = nccllog.split_line(warn("gpu-7", 0, "NET/IB : Got completion with error 12"))
    assert w["level"] == "WARN" and w["where"] == "transport/net_ib.cc:612"
    # NCCL_DEBUG_TIMESTAMP_FORMAT puts a "[%F %T] " timestamp first (src/debug.cc:344).
    t = nccllog.split_line("[2026-01-12 10:00:01] " + info("gpu-7", 0, "Using network Socket"))
    assert t["msg"] == "Using network Socket"
    for other in ("", "epoch 1 loss 0.3", "NCCL INFO missing prefix", "host:1:2 [x] NCCL INFO a"):
        assert nccllog.split_line(other) is None


def test_two_nodes_over_ib_with_gdr():
    p = nccllog.parse(two_nodes_ib(gdr=True) + ["some training output"])
    assert p["version"] == "2.27.3" and p["cuda"] == "12.9" and p["cudaDriverVersion"] == 12090
    assert p["network"] == "IB" and nccllog.net_used(p) == "IB"
    assert p["bootstrap"] == {"ifname": "eth0", "addr": "10.0.0.11"}
    assert p["ib"]["devices"] == [{"index": 0, "name": "mlx5_0", "port": 1, "link": "IB"},
                                  {"index": 1, "name": "mlx5_1", "port": 1, "link": "RoCE"}]
    assert p["ib"]["relaxedOrdering"] is True and p["ib"]["oob"]["ifname"] == "eth0"
    assert p["gdr"] == {"mlx5_0": True}
    assert p["peers"]["0->1"]["kinds"] == ["P2P"] and p["peers"]["0->1"]["via"] == ["P2P/IPC/read"]
    assert p["peers"]["2->3"]["kinds"] == ["P2P"]  # P2P/CUMEM
    assert p["peers"]["1->2"]["kinds"] == ["NET"] and p["peers"]["1->2"]["gdr"] is True
    assert p["peers"]["1->2"]["channels"] == 2  # the send and the receive line
    assert p["peers"]["3->0"]["net"] == "IB" and p["peers"]["3->0"]["gdr"] is True  # via a proxy
    assert p["initComplete"] == 4
    assert p["ranks"]["2"] == {"host": "node-b", "nranks": 4, "cudaDev": 0, "nvmlDev": 0,
                               "busId": "1b000"}
    assert nccllog.warnings(p, "node-a", ACTIVE_RDMA) == []


def test_sockets_although_rdma_ports_are_active():
    devs = NET_SOCKET_DEV_FMT % (0, "eth0", SOCKADDR_FMT % ("10.0.0.11", "0")) + \
        NET_SOCKET_DEV_FMT % (1, "eth1", SOCKADDR_FMT % ("fe80::1%eth1", "0"))
    lines = [info("node-a", 0, NET_IB_NONE), info("node-a", 0, NET_SOCKET_FMT % devs),
             info("node-a", 0, USING_NETWORK_FMT % "Socket"),
             info("node-a", 0, NET_SEND_FMT % (0, 0, 0, 0, 1, 0, "Socket", 0, "", "", ""))]
    p = nccllog.parse(lines)
    assert p["ibNoDevice"] is True
    assert p["socket"]["devices"] == [{"index": 0, "ifname": "eth0", "addr": "10.0.0.11"},
                                      {"index": 1, "ifname": "eth1", "addr": "fe80::1%eth1"}]
    assert nccllog.net_used(p) == "Socket"
    [w] = nccllog.warnings(p, "node-a", ACTIVE_RDMA)
    assert w["reason"] == nccllog.NCCL_SOCKETS_DESPITE_RDMA
    assert "node-a" in w["message"] and "mlx5_0:1" in w["message"] and "libibverbs" in w["message"]
    assert len(w["message"]) <= 400
    # no RDMA device on the node: sockets are the only choice, nothing to say
    assert nccllog.warnings(p, "node-a", []) == []
    # a port that is down does not count as usable RDMA
    assert nccllog.warnings(p, "node-a", [{"name": "mlx5_0", "ports": [
        {"port": 1, "state": "DOWN"}]}]) == []


def test_shm_between_gpus_of_one_node():
    lines = [info("node-a", 0, SHM_FMT % (0, 0, 0, 1, 1, "direct", "direct")),
             info("node-a", 1, SHM_FMT % (0, 1, 1, 0, 0, "direct", "direct")),
             init_complete("node-a", 0, 2, 0, 0x1B000), init_complete("node-a", 1, 2, 1, 0x43000)]
    p = nccllog.parse(lines)
    assert p["peers"]["0->1"]["kinds"] == ["SHM"]
    # NVML says P2P works between these two GPUs: SHM is a fallback
    [w] = nccllog.warnings(p, "node-a", [], {"1b000,43000": True})
    assert w["reason"] == nccllog.NCCL_SHM_INSTEAD_OF_P2P
    assert "NVML reports P2P supported" in w["message"] and "0->1" in w["message"]
    # NVML says no P2P (e.g. across CPU sockets): SHM is right
    assert nccllog.warnings(p, "node-a", [], {"43000,1b000": False}) == []
    # NVML could not say: still a warning, naming what decides
    [w] = nccllog.warnings(p, "node-a", [], None)
    assert "nvidia-smi topo -p2p r" in w["message"]


def test_shm_between_ranks_of_different_hosts_is_not_this_warning():
    lines = [info("node-a", 0, SHM_FMT % (0, 0, 0, 1, 0, "CE", "direct")),
             init_complete("node-a", 0, 2, 0, 0x1B000), init_complete("node-b", 1, 2, 0, 0x1B000)]
    assert nccllog.warnings(nccllog.parse(lines), "node-a", [], {}) == []


def test_gpudirect_rdma_off():
    p = nccllog.parse(two_nodes_ib(gdr=False))
    assert p["peers"]["1->2"]["gdr"] is False and p["gdr"] == {"mlx5_0": False}
    [w] = nccllog.warnings(p, "node-a", ACTIVE_RDMA)
    assert w["reason"] == nccllog.GPUDIRECT_RDMA_OFF
    assert "mlx5_0" in w["message"] and "nvidia-peermem" in w["message"]


def test_the_socket_nets_gdr_line_is_not_gpudirect_evidence():
    """NCCL 2.28.9 on one H200 (``make gpu-check``, 2026-12-04) logged this for its own
    sockets; it used to read as 'GPUDirect RDMA off over IB'."""
    lines = [info("vm", 0, GDR_FMT % ("Socket", "Disabled", 0, "eth0")),
             info("vm", 0, USING_NETWORK_FMT % "Socket"), init_complete("vm", 0, 1, 0, 0x1B000)]
    p = nccllog.parse(lines)
    assert p["gdr"] == {} and p["network"] == "Socket"
    assert nccllog.warnings(p, "vm", []) == []
    p = nccllog.parse([info("vm", 0, GDR_FMT % ("AWS Libfabric", "Disabled", 0, "rdmap0"))])
    assert p["gdr"] == {"rdmap0": False}  # a plugin's RDMA net is


def test_older_formats_and_plugins_and_warn_lines():
    lines = [info("n", 0, BOOTSTRAP_FMT_2_21 % (" ib0:" + SOCKADDR_FMT % ("192.168.1.5", "0"))),
             info("n", 0, INIT_FMT_2_18 % ("0x1", 0, 1, 0, 0, 0x1B000, 0x12)),
             info("n", 0, PLUGIN_FMT % "AWS Libfabric"),
             info("n", 0, USING_NETWORK_FMT % "AWS Libfabric"),
             info("n", 0, P2P_DIRECT_FMT % (3, 1, 0, 0, 1, 1, "/read")),
             warn("n", 0, "Call to ibv_create_qp failed")]
    p = nccllog.parse(lines)
    assert p["bootstrap"] == {"ifname": "ib0", "addr": "192.168.1.5"}
    assert p["initComplete"] == 1 and p["ranks"]["0"]["busId"] == "1b000"
    assert p["netPlugin"] == "AWS Libfabric" and p["network"] == "AWS Libfabric"
    assert p["peers"]["0->1"]["kinds"] == ["P2P"]
    assert p["warnLines"] == ["n: Call to ibv_create_qp failed"]
    assert p["lines"] == len(lines)


@pytest.mark.parametrize("via,kind,net,gdr", [
    ("P2P/IPC/read", "P2P", None, False),
    ("P2P/indirect/2[2]", "P2P", None, False),
    ("SHM/direct/direct", "SHM", None, False),
    ("NET/IB/0/GDRDMA(PCI)/Shared", "NET", "IB", True),
    ("NET/IB/1(3)/GDRDMA", "NET", "IB", True),
    ("NET/Socket/0", "NET", "Socket", False),
    ("COLLNET/x", "other", None, False),
])
def test_classify(via, kind, net, gdr):
    c = nccllog.classify(via)
    assert (c["kind"], c["net"], c["gdr"]) == (kind, net, gdr)


def test_parse_never_raises_on_arbitrary_lines():
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    fragments = st.sampled_from(["Channel 00/0 : ", "0[0] -> 1[1] ", "via ", "NET/", "IB/", "x",
                                 "[send] ", "P2P/", "SHM/", "- Init COMPLETE", "comm 0x1 rank ",
                                 "Using network ", "NET/IB : Using", " [0]", "; OOB ", "<0>", ":"])
    line = st.one_of(st.text(max_size=120),
                     st.lists(fragments, max_size=12).map(lambda xs: info("h", 0, "".join(xs))))

    @hyp.settings(max_examples=300, deadline=None, derandomize=True)
    @hyp.given(st.lists(line, max_size=20))
    def check(lines):
        p = nccllog.parse(lines)
        assert p["lines"] <= len(lines)
        for w in nccllog.warnings(p, "n", ACTIVE_RDMA, {}):
            assert len(w["message"]) <= 400

    check()
