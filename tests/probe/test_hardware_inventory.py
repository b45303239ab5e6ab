"""GPU/RDMA/shm/plugin inventory on recorded fixtures: fake sysfs trees, a fake NVML."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from disttrain_probe.gpu import hardware, nccllog, nvml, rdma


# -- RDMA (a fake /sys/class/infiniband) ---------------------------------------------------
def make_ib(root: Path, dev: str, ports: dict, netdev: str | None = None) -> None:
    """ports: port number -> (state, phys_state, rate, link_layer), as the kernel writes them."""
    d = root / dev
    (d / "ports").mkdir(parents=True)
    (d / "node_type").write_text("1: CA\n")
    (d / "fw_ver").write_text("28.39.1002\n")
    for n, (state, phys, rate, link) in ports.items():
        p = d / "ports" / str(n)
        p.mkdir()
        (p / "state").write_text(state + "\n")
        (p / "phys_state").write_text(phys + "\n")
        (p / "rate").write_text(rate + "\n")
        (p / "link_layer").write_text(link + "\n")
    if netdev:
        (d / "device" / "net" / netdev).mkdir(parents=True)


def test_rdma_devices_from_a_fake_sysfs(tmp_path):
    make_ib(tmp_path, "mlx5_1", {1: ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "Ethernet")},
            netdev="eth3")
    make_ib(tmp_path, "mlx5_0", {1: ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand")})
    devs = rdma.devices(str(tmp_path))
    assert [d["name"] for d in devs] == ["mlx5_0", "mlx5_1"]
    assert devs[0]["ports"] == [{"port": 1, "state": "ACTIVE", "physState": "LinkUp",
                                 "rate": "400 Gb/sec (4X NDR)", "rateGbps": 400.0,
                                 "linkLayer": "InfiniBand", "gids": [], "gidsTruncated": False}]
    assert devs[0]["nodeType"] == "CA" and devs[0]["fwVer"] == "28.39.1002"
    assert devs[1]["netdevs"] == ["eth3"] and devs[1]["ports"][0]["linkLayer"] == "Ethernet"
    [w] = rdma.port_warnings(devs, "node-a")
    assert w["reason"] == rdma.RDMA_PORT_DOWN and "mlx5_1:1 DOWN/Disabled" in w["message"]
    assert "mlx5_0" not in w["message"]


def test_rdma_absent_or_half_written_tree(tmp_path):
    assert rdma.devices(str(tmp_path / "nope")) == []
    (tmp_path / "mlx5_0" / "ports" / "1").mkdir(parents=True)  # files missing
    [d] = rdma.devices(str(tmp_path))
    assert d["ports"] == [{"port": 1, "state": None, "physState": None, "rate": None,
                           "rateGbps": None, "linkLayer": None, "gids": [],
                           "gidsTruncated": False}]


@pytest.mark.parametrize("text,gbps", [("400 Gb/sec (4X NDR)", 400.0), ("2.5 Gb/sec (1X SDR)", 2.5),
                                       ("", None), (None, None), ("fast", None)])
def test_rate_gbps(text, gbps):
    assert rdma.rate_gbps(text) == gbps


def test_peermem_module(tmp_path):
    assert rdma.peermem_module(str(tmp_path)) is None
    (tmp_path / "nvidia_peermem").mkdir()
    assert rdma.peermem_module(str(tmp_path)) == "nvidia_peermem"


# -- NVML (a fake with Nvml's methods) -----------------------------------------------------
class FakeNvml:
    """Two GPUs; GPU 1 has 3 uncorrectable volatile ECC errors; no remapped-rows support."""

    def __init__(self, n=2, p2p=0):
        self.n, self.p2p, self.closed = n, p2p, False

    def driver_version(self):
        return "550.54.15"

    def cuda_driver_version(self):
        return 12040

    def count(self):
        return self.n

    def handle(self, i):
        return i

    def name(self, h):
        return "NVIDIA H100 80GB HBM3"

    def uuid(self, h):
        return f"GPU-{h:04d}"

    def bus_id(self, h):
        return ["00000000:1B:00.0", "00000000:43:00.0"][h]

    def memory_total(self, h):
        return 80 * 2**30

    def ecc_enabled(self, h):
        return True

    def ecc_errors(self, h, kind, counter):
        return 3 if (h, kind, counter) == (1, nvml.MEMORY_ERROR_UNCORRECTED, nvml.VOLATILE_ECC) else 0

    def remapped_rows(self, h):
        raise nvml.NvmlError(nvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported")

    def p2p_status(self, a, b):
        return self.p2p

    def shutdown(self):
        self.closed = True


def test_inventory_from_a_fake_nvml():
    inv = nvml.inventory(FakeNvml(), requested=2)
    assert inv["present"] and inv["count"] == 2 and inv["countMatches"] is True
    assert inv["driver"] == "550.54.15" and inv["cudaDriverVersion"] == 12040
    d0, d1 = inv["devices"]
    assert d0["name"] == "NVIDIA H100 80GB HBM3" and d0["ncclBusId"] == "1b000"
    assert d0["memoryBytes"] == 80 * 2**30 and d0["remappedRows"] is None
    assert d1["ecc"] == {"enabled": True, "volatileCorrected": 0, "volatileUncorrected": 3,
                         "aggregateUncorrected": 0}
    assert inv["p2p"] == {"1b000,43000": True}
    [w] = nvml.gpu_warnings(inv, "node-a")
    assert w["reason"] == nvml.GPU_ECC_ERRORS and "GPU 1 (00000000:43:00.0: 3 uncorrectable" in w["message"]


def test_gpu_count_against_the_request_and_visible_devices():
    inv = nvml.inventory(FakeNvml(n=2), requested=4)
    assert inv["countMatches"] is False
    inv["devices"] = []  # the ECC finding is covered above
    [w] = nvml.gpu_warnings(inv, "node-b")
    assert w["reason"] == nvml.GPU_COUNT_MISMATCH and "sees 2 GPU(s) but requested 4" in w["message"]
    # the container is granted one GPU of the node's two (NVML still counts both)
    inv = nvml.inventory(FakeNvml(n=2), requested=1, visible="GPU-0001")
    assert inv["countMatches"] is True and inv["count"] == 2


@pytest.mark.parametrize("visible,n", [(None, None), ("all", None), ("", 0), ("void", 0),
                                       ("0,1,2", 3), ("GPU-aaa", 1)])
def test_visible_count(visible, n):
    assert nvml.visible_count(visible) == n


@pytest.mark.parametrize("bus,nccl", [("00000000:1B:00.0", "1b000"), ("0000:c1:00.1", "c1001"),
                                      ("00000001:01:02.0", "101020"), ("garbage", None), (None, None)])
def test_nccl_bus_id(bus, nccl):
    assert nvml.nccl_bus_id(bus) == nccl


def test_inventory_without_the_library_says_so():
    inv = nvml.inventory(requested=None)  # this machine has no NVIDIA driver
    if inv["present"]:
        pytest.skip("this machine has NVML")
    assert inv["count"] == 0 and inv["devices"] == [] and "libnvidia-ml" in inv["error"]


FAKE_NVML_C = r"""
#include <string.h>
typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId,
                 pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
static int inited = 0;
int nvmlInit_v2(void) { inited = 1; return 0; }
int nvmlShutdown(void) { inited = 0; return 0; }
const char *nvmlErrorString(int r) { return r == 3 ? "Not Supported" : "Unknown Error"; }
int nvmlSystemGetDriverVersion(char *b, unsigned int n) { strncpy(b, "535.129.03", n); return 0; }
int nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12020; return 0; }
int nvmlDeviceGetCount_v2(unsigned int *n) { *n = inited ? 2 : 0; return inited ? 0 : 1; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) { *h = (void *)(long)(i + 1); return 0; }
int nvmlDeviceGetName(void *h, char *b, unsigned int n) { strncpy(b, "Fake A100", n); return 0; }
int nvmlDeviceGetUUID(void *h, char *b, unsigned int n) { strncpy(b, (long)h == 1 ? "GPU-1" : "GPU-2", n); return 0; }
int nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) {
  memset(p, 0, sizeof *p); strcpy(p->busId, (long)h == 1 ? "00000000:07:00.0" : "00000000:0F:00.0");
  return 0; }
int nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) { m->total = 42ULL << 30; m->free = 1; m->used = 2; return 0; }
int nvmlDeviceGetEccMode(void *h, int *cur, int *pend) { *cur = (long)h == 1; *pend = 0; return 0; }
int nvmlDeviceGetTotalEccErrors(void *h, int type, int counter, unsigned long long *c) {
  *c = (type == 1 && counter == 0) ? 5 : 0; return 0; }
int nvmlDeviceGetRemappedRows(void *h, unsigned int *c, unsigned int *u, unsigned int *p, unsigned int *f) {
  return 3; }
int nvmlDeviceGetP2PStatus(void *a, void *b, int idx, int *s) { *s = 4; return 0; }
"""


def test_ctypes_binding_against_a_compiled_fake_libnvidia_ml(tmp_path):
    """The real ctypes calls (buffers, out-pointers, the PCI struct) against a C library
    with NVML's signatures."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src, lib = tmp_path / "fake.c", tmp_path / "libfakenvml.so"
    src.write_text(FAKE_NVML_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    api = nvml.Nvml.open(str(lib))
    inv = nvml.inventory(api, requested=2, visible=None)
    assert inv["driver"] == "535.129.03" and inv["cudaDriverVersion"] == 12020
    assert [d["busId"] for d in inv["devices"]] == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert [d["uuid"] for d in inv["devices"]] == ["GPU-1", "GPU-2"]
    assert inv["devices"][0]["memoryBytes"] == 42 * 2**30
    assert inv["devices"][0]["ecc"]["volatileUncorrected"] == 5
    assert inv["devices"][1]["ecc"] == {"enabled": False, "volatileCorrected": None,
                                        "volatileUncorrected": None, "aggregateUncorrected": None}
    assert inv["devices"][0]["remappedRows"] is None  # NVML_ERROR_NOT_SUPPORTED
    assert inv["p2p"] == {"7000,f000": False}  # status 4: disabled by regkey
    with pytest.raises(nvml.NvmlError, match="Not Supported"):
        api.remapped_rows(api.handle(0))


# -- /dev/shm, plugins, the whole inventory and its findings -------------------------------
def test_net_plugin_and_ibverbs_search(tmp_path):
    a, b, conf = tmp_path / "a", tmp_path / "b", tmp_path / "ld.so.conf.d"
    for d in (a, b, conf):
        d.mkdir()
    (b / "libnccl-net-ofi.so").write_text("")
    (a / "libibverbs.so.1").write_text("")
    (conf / "x.conf").write_text(f"# comment\n{b}\n")
    dirs = hardware.library_dirs({"LD_LIBRARY_PATH": f"{a}:{a}"}, str(conf))
    assert dirs[:2] == [str(a), str(b)]
    assert hardware.net_plugin({"NCCL_NET_PLUGIN": "ofi"}, dirs) == {
        "requested": "ofi", "found": [str(b / "libnccl-net-ofi.so")]}
    assert hardware.find_libraries("libibverbs.so*", dirs) == [str(a / "libibverbs.so.1")]


def test_collect_and_findings_on_fixtures(tmp_path):
    ib = tmp_path / "ib"
    make_ib(ib, "mlx5_0", {1: ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand")})
    hw = hardware.collect(requested_gpus=2, env={"CUDA_VISIBLE_DEVICES": "0,1"},
                          sources=hardware.Sources(
                              nvml_api=FakeNvml(), ib_root=str(ib), module_root=str(tmp_path / "mod"),
                              shm_path=str(tmp_path), lib_dirs=[str(tmp_path / "nolibs")]))
    assert hw["gpus"]["countMatches"] is True and hw["rdma"][0]["name"] == "mlx5_0"
    assert hw["peermem"] is None and hw["ibverbs"] == [] and hw["netPlugin"]["found"] == []
    assert hw["shm"]["totalBytes"] > 0
    reasons = [w["reason"] for w in hardware.findings(hw, "node-a")]
    # ECC on GPU 1, RDMA devices but no libibverbs in the image
    assert reasons == [nvml.GPU_ECC_ERRORS, nccllog.NCCL_SOCKETS_DESPITE_RDMA]
    hw["shm"]["totalBytes"] = 64 * 2**20  # a container's default /dev/shm
    found = {w["reason"]: w["message"] for w in hardware.findings(hw, "node-a")}
    assert "64 MiB" in found[hardware.DEV_SHM_TOO_SMALL]
    # with NCCL's log: the same reason is not reported twice
    parsed = nccllog.parse([])
    parsed["network"] = "Socket"
    reasons = [w["reason"] for w in hardware.findings(hw, "node-a", parsed)]
    assert reasons.count(nccllog.NCCL_SOCKETS_DESPITE_RDMA) == 1


def test_collect_on_this_machine_never_raises():
    hw = hardware.collect()
    assert set(hw) == {"gpus", "rdma", "peermem", "shm", "ibverbs", "netPlugin", "memlock"}
    assert set(hw["memlock"]) == {"softBytes", "hardBytes", "ipcLock"}
    assert hw["shm"]["path"] == "/dev/shm"


def test_nccl_capture_routes_nccls_log_and_reads_its_fallbacks(tmp_path):
    import io

    from test_nccllog import NET_SEND_FMT, USING_NETWORK_FMT, info

    assert hardware.start_nccl_capture("gloo", {}) is None
    assert hardware.start_nccl_capture("nccl", {"NCCL_DEBUG_FILE": "/mine"}) is None
    env = {"NCCL_DEBUG": "WARN"}
    path = hardware.start_nccl_capture("nccl", env)
    assert env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": path,
                   "NCCL_DEBUG_SUBSYS": hardware.NCCL_SUBSYS}
    with open(path, "w") as f:  # what NCCL writes there during init
        f.write("\n".join([info("node-a", 0, USING_NETWORK_FMT % "Socket"),
                           info("node-a", 0, NET_SEND_FMT % (0, 0, 0, 0, 1, 0, "Socket", 0, "", "",
                                                              ""))]) + "\n")
    hw = {"rdma": [{"name": "mlx5_0", "ports": [{"port": 1, "state": "ACTIVE"}]}], "gpus": {}}
    echo = io.StringIO()
    [w] = hardware.finish_nccl_capture(path, hw, "node-a", echo)
    assert w["reason"] == nccllog.NCCL_SOCKETS_DESPITE_RDMA
    assert "Using network Socket" in echo.getvalue()
    assert not Path(path).exists()
    assert hardware.finish_nccl_capture(None, hw, "node-a") == []
    assert hardware.requested_gpus({"DISTTRAIN_PROBE_GPUS": "8"}) == 8
    assert hardware.requested_gpus({}) is None


def test_nccl_diagnostics_only_from_nccl_2_31_with_nccl():
    for backend, version in (("nccl", "2.27.3"), ("nccl", "2.30.7"), ("nccl", None),
                             ("gloo", "2.31.2")):
        env: dict = {}
        assert hardware.start_diag_capture(backend, version, env) is None and env == {}
    assert hardware.stop_diag_capture(None) == []


def test_diag_capture_keeps_what_nccl_prints_on_stdout(tmp_path):
    """NCCL >= 2.31 prints its NCCL DIAG lines to standard output, not to NCCL_DEBUG_FILE:
    the capture redirects the descriptor, waits for the RAS report's completed line (NCCL's
    RAS thread prints it after init returns), gives the descriptor back and echoes it all."""
    import io
    import threading

    from test_nccldiag import DRIVER_FMT, ras

    from disttrain_probe.contract import vocabulary
    from disttrain_probe.gpu import nccldiag

    real = tmp_path / "stdout"
    fd = os.open(real, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        env = {"NCCL_RUN_DIAGNOSTICS": "0"}  # the user's own choice stays
        cap = hardware.start_diag_capture("nccl", "2.31.2", env, fd=fd)
        assert cap is not None and cap.env == {"NCCL_RUN_RAS_DIAGNOSTICS": "1"}
        assert env == {"NCCL_RUN_DIAGNOSTICS": "0", "NCCL_RUN_RAS_DIAGNOSTICS": "1"}
        os.write(fd, ("node01:4242 NCCL DIAG === RAS Diagnostics ===\n"
                      + ras(DRIVER_FMT % (2, 0x42, "{1}", 0, "13000")) + "\n").encode())
        done = "node01:4242 NCCL DIAG RAS diagnostics completed in 2.0 ms across 2 ranks\n"
        t = threading.Timer(0.2, os.write, (fd, done.encode()))
        t.start()
        echo = io.StringIO()
        lines = hardware.stop_diag_capture(cap, wait=5.0, echo=echo, poll=0.02)
        t.join()
        os.write(fd, b"after\n")  # the descriptor is the real one again
    finally:
        os.close(fd)
    assert lines[-1] == done.strip() and len(lines) == 3 and echo.getvalue().endswith(done)
    assert real.read_text() == "after\n" and not Path(cap.path or "").exists()
    [f], _ = nccldiag.findings(nccldiag.parse(lines), "node-a", {0: "node-a", 1: "node-b"})
    assert f["reason"] == vocabulary.DRIVER_VERSION_MISMATCH and f["message"].startswith("node-b")
