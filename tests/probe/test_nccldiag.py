"""NCCL's own diagnostics (NCCL >= 2.31) read from its ``NCCL DIAG`` lines.

Two kinds of input, each cited:

* example lines copied verbatim from the documentation:
  NVIDIA RAS diagnostics, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html
  (section "RAS Diagnostics", "Output Format"); NVIDIA active diagnostics,
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/diagnostics.html;
  RCCL's (inherited from NCCL 2.31) "Checking job configuration with RAS diagnostics",
  https://rocm.docs.amd.com/projects/rccl/en/develop/how-to/using-rccl-ras-diagnostics.html and
  "Verify GPU P2P paths with diagnostics in RCCL",
  https://rocm.docs.amd.com/projects/rccl/en/develop/how-to/using-rccl-diagnostics.html;
* lines rendered from the printf formats NCCL itself uses, copied verbatim from
  github.com/NVIDIA/nccl at commit 889806836097808572f87a2019eefd01f27aae68 (the 2.31
  sources), with the file and function of each. C's ``%lx`` becomes ``%x``, ``%llu``/``%u``
  ``%d``; nothing else is changed.

No GPU here: the pinned torch ships NCCL 2.27, which has no diagnostics, so the path is
proved through this parser and the version gate, not a live run.
"""
from __future__ import annotations

import pytest

from disttrain_probe.contract import vocabulary as V
from disttrain_probe.gpu import nccldiag

# src/include/diagnostics_log.h DIAG_PRINT: "%s:%d " fmt "\n" (host, pid); the RAS reporter
# src/ras/diagnostics.cc rasDiagnosticsDefaultEmit: DIAG_PRINT("NCCL DIAG %s", line), the line
# starting with its tag (src/ras/diagnostics_checks_common.cc rasDiagnosticsReport: "%s" tag).
PREFIX_FMT = "%s:%d "
DIAG_FMT = "NCCL DIAG %s"
TAG_OK, TAG_INFO = "[OK]   ", "[INFO] "  # as src/diagnostics/p2p.cc ncclDiagP2pReportSummary
# src/ras/diagnostics_checks_common.cc rasDiagnosticsFormatRankSet: "{" "%s%d"... ",...} (N=%d)"
# src/ras/diagnostics_gpu.cc rasDiagnosticsGpuModelSummarize
GPU_COUNT_FMT = ("GPU inventory: count mismatch across %d ranks in comm 0x%x, rank(s) %s differ "
                 "from rank %d (%d)")
GPU_MODEL_FMT = ("GPU inventory: model mismatch across %d ranks in comm 0x%x, rank(s) %s differ "
                 "from rank %d (%s)")
GPU_UNAVAILABLE_FMT = "GPU inventory: unavailable via NVML across %d ranks in comm 0x%x"
# src/ras/diagnostics_gpu.cc rasDiagnosticsCudaDriverVersionSummarize
DRIVER_FMT = ("CUDA driver version: mismatch across %d ranks in comm 0x%x, "
              "rank(s) %s differ from rank %d (%s)")
# src/ras/diagnostics_gpu.cc rasDiagnosticsEccSummarize
ECC_UNCORRECTED_FMT = ("ECC: uncorrected volatile errors on rank(s) %s (worst=%d) across %d ranks "
                       "in comm 0x%x")
ECC_CORRECTED_FMT = ("ECC: corrected volatile errors at or above threshold %d on rank(s) %s "
                     "(worst=%d) across %d ranks in comm 0x%x")
# src/ras/diagnostics_gpu.cc rasDiagnosticsNvLinkSummarize
NVL_COUNT_FMT = ("NVLink: link-count mismatch across %d ranks in comm 0x%x, rank(s) %s differ "
                 "from rank %d (%d)")
NVL_INACTIVE_FMT = "NVLink: inactive link(s) on rank(s) %s across %d ranks in comm 0x%x"
# src/ras/diagnostics_env.cc rasDiagnosticsNcclEnvReportMismatch / ...ReportValue / ...MismatchSummary
ENV_MISMATCH_FMT = "NCCL environment: mismatch across %d ranks in comm 0x%x for %s"
ENV_VALUE_FMT = "NCCL environment: %s=%s on rank(s) %s"
ENV_SUMMARY_FMT = "NCCL environment: %d NCCL_* env var(s) differ across ranks in comm 0x%x"
# src/ras/diagnostics_checks_common.cc rasDiagnosticsReportIncomplete
INCOMPLETE_FMT = ("%s: diagnostics incomplete, gathered %d/%d ranks in comm 0x%x/0x%x/0x%x "
                  "(RAS overlay may not be ready)")
# src/diagnostics/p2p.cc ncclDiagP2pFormatPeerFields and ncclDiagP2pReport
EDGE_FMT = ("srcRank=%d srcCudaDev=%d srcNvmlDev=%d dstRank=%d dstCudaDev=%d dstNvmlDev=%d "
            "path=%s handle=%s")
WRITE_MISMATCH_FMT = ("NCCL DIAG [INFO] p2p: write mismatch %s expected=0x%016x got=0x%016x "
                      "verify=0x%016x; %s")
READ_MISMATCH_FMT = "NCCL DIAG [INFO] p2p: read mismatch %s expected=0x%016x got=0x%016x; %s"
IMPORT_FMT = "NCCL DIAG [INFO] p2p: peer-memory import failed %s reason=%s; %s"
NVL_ADVICE = ("check the single-node NVLink topology and peer-access state with 'nvidia-smi topo "
              "-m' and 'nvidia-smi topo -p2p n'")  # ncclDiagP2pEdgeAdvice, PATH_NVL
IPC_ADVICE = "check CUDA IPC support, GPU visibility, and process or container isolation"
# src/diagnostics/p2p.cc ncclDiagP2pReportSummary and the setup loop of the check
SUMMARY_FMT = "NCCL DIAG %sp2p: %s directed GPU P2P edges verified"
SETUP_FAILED_FMT = "NCCL DIAG [INFO] p2p: setup failed on rank %d result=%d"

# rank -> node as the probe's layout gives it: 8 ranks per node
NODES = {r: f"node-{'ab'[r // 8]}" for r in range(16)}


def ras(msg: str, tag: str = TAG_INFO, host: str = "node01", pid: int = 4242) -> str:
    return PREFIX_FMT % (host, pid) + DIAG_FMT % (tag + msg)


def raw(line: str, host: str = "node01", pid: int = 4242) -> str:
    return PREFIX_FMT % (host, pid) + line


def edge(src: int, dst: int, path: str = "NVL", handle: str = "LEGACY_CUDA_IPC") -> str:
    return EDGE_FMT % (src, src, src, dst, dst, dst, path, handle)


# ---- the documentation's own example lines ------------------------------------------------

# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/ras.html "Output Format"
NVIDIA_RAS_OK = """\
node042:12345 NCCL DIAG === RAS Diagnostics ===
node042:12345 NCCL DIAG [OK]   GPU inventory: 8x NVIDIA H100 per node consistent across 8 ranks in comm 0x1234
node042:12345 NCCL DIAG [OK]   CUDA driver version: 13000 consistent across 8 ranks in comm 0x1234
node042:12345 NCCL DIAG [OK]   ECC: no uncorrected volatile errors across 8 ranks in comm 0x1234
node042:12345 NCCL DIAG [OK]   NVLink: found 18 link(s) per device, all active across 8 ranks in comm 0x1234
node042:12345 NCCL DIAG [OK]   NCCL environment: NCCL_* env vars consistent across 8 ranks in comm 0x1234
node042:12345 NCCL DIAG RAS diagnostics completed in 12.3 ms across 8 RAS peers""".splitlines()
# the same page: "A check can use multiple lines to group ranks by value"
NVIDIA_RAS_ENV = """\
node042:12345 NCCL DIAG [INFO] NCCL environment: mismatch across 8 ranks in comm 0x1234 for NCCL_DEBUG
node042:12345 NCCL DIAG [INFO] NCCL environment: NCCL_DEBUG=INFO on rank(s) {0,1,2,3}
node042:12345 NCCL DIAG [INFO] NCCL environment: NCCL_DEBUG=WARN on rank(s) {4,5,6,7}
node042:12345 NCCL DIAG [INFO] NCCL environment: 1 NCCL_* env var(s) differ across ranks in comm 0x1234""".splitlines()
# https://rocm.docs.amd.com/projects/rccl/en/develop/how-to/using-rccl-ras-diagnostics.html
RCCL_RAS_BUFFSIZE = """\
node01:4242 NCCL DIAG [INFO] NCCL environment: mismatch across 16 ranks in comm 0x5fa31c27a9e0d1b4 for NCCL_BUFFSIZE
node01:4242 NCCL DIAG [INFO] NCCL environment: NCCL_BUFFSIZE=(unset) on rank(s) {0,1,2,3,4,5,6,7}
node01:4242 NCCL DIAG [INFO] NCCL environment: NCCL_BUFFSIZE=8388608 on rank(s) {8,9,10,11,12,13,14,15}
node01:4242 NCCL DIAG [INFO] NCCL environment: 1 NCCL_* env var(s) differ across ranks in comm 0x5fa31c27a9e0d1b4""".splitlines()
RCCL_RAS_UNAVAILABLE = """\
node01:4242 NCCL DIAG === RAS Diagnostics ===
node01:4242 NCCL DIAG [INFO] GPU inventory: unavailable via NVML across 8 ranks in comm 0x5fa31c27a9e0d1b4
node01:4242 NCCL DIAG [OK]   CUDA driver version: 71526333 consistent across 8 ranks in comm 0x5fa31c27a9e0d1b4
node01:4242 NCCL DIAG [INFO] ECC: unavailable via NVML across 8 ranks in comm 0x5fa31c27a9e0d1b4
node01:4242 NCCL DIAG [OK]   NCCL environment: NCCL_* env vars consistent across 8 ranks in comm 0x5fa31c27a9e0d1b4
node01:4242 NCCL DIAG RAS diagnostics completed in 38.4 ms across 8 ranks""".splitlines()
# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/diagnostics.html
# (printed without the host:pid prefix there)
NVIDIA_P2P_OK = """\
NCCL DIAG === NCCL Diagnostics ===
NCCL DIAG [OK]   p2p: verified P2P access in both directions between every GPU pair (56 peer accesses)
NCCL DIAG NCCL diagnostics completed in 245.3 ms across 8 ranks""".splitlines()
NVIDIA_P2P_PARTIAL = "NCCL DIAG [INFO] p2p: only 52/56 GPU-to-GPU peer accesses passed verification"
# https://rocm.docs.amd.com/projects/rccl/en/develop/how-to/using-rccl-diagnostics.html
RCCL_P2P_OK = "node01:15 NCCL DIAG [OK]   p2p: all 56 directed GPU P2P edges verified"
RCCL_P2P_EDGE = (
    "node01:4242 NCCL DIAG [INFO] p2p: destination buffer unavailable srcRank=0 srcCudaDev=0 "
    "srcNvmlDev=0 dstRank=1 dstCudaDev=1 dstNvmlDev=1 path=XGMI handle=LEGACY_CUDA_IPC "
    "reason=noDescriptor; inspect earlier allocation, export, or initialization errors on the "
    "destination rank, then check the XGMI link status and link type with 'amd-smi xgmi -l' and "
    "'amd-smi topology -t'")
RCCL_P2P_NOTICE = (
    "node01:4242 NCCL DIAG [INFO] p2p: temporarily enabled context-wide HIP peer access rank=3 "
    "cudaDev=3; avoid concurrent HIP use on this context until diagnostics completes")


def test_a_clean_ras_report_is_no_evidence():
    p = nccldiag.parse(NVIDIA_RAS_OK)
    assert (p["lines"], p["reports"], p["completed"]) == (7, ["RAS Diagnostics"], 1)
    assert nccldiag.findings(p, "node-a", NODES) == ([], [])
    q = nccldiag.parse(RCCL_RAS_UNAVAILABLE)  # "unavailable via NVML": informational only
    assert q["completed"] == 1 and nccldiag.findings(q, "node-a", NODES) == ([], [])


def test_env_mismatch_is_grouped_by_value_and_a_per_process_variable_is_no_evidence():
    p = nccldiag.parse(NVIDIA_RAS_ENV)
    assert p["env"] == {"NCCL_DEBUG": {"INFO": [0, 1, 2, 3], "WARN": [4, 5, 6, 7]}}
    assert nccldiag.findings(p, "node-a", NODES) == ([], [])  # the probe sets NCCL_DEBUG itself


def test_a_must_agree_variable_that_differs_fails_naming_the_nodes():
    p = nccldiag.parse(RCCL_RAS_BUFFSIZE)
    assert p["env"]["NCCL_BUFFSIZE"] == {"(unset)": list(range(8)), "8388608": list(range(8, 16))}
    [f], warns = nccldiag.findings(p, "node-a", NODES)
    assert f["reason"] == V.SETTINGS_MISMATCH and not warns
    assert "node-a (rank 0" in f["message"] and "NCCL_BUFFSIZE=8388608 on node-b" in f["message"]


def test_other_nccl_variables_that_differ_warn():
    lines = [ras(ENV_MISMATCH_FMT % (16, 0x4000, "NCCL_IB_TIMEOUT")),
             ras(ENV_VALUE_FMT % ("NCCL_IB_TIMEOUT", "22", "{0,1,2,3,4,5,6,7}")),
             ras(ENV_VALUE_FMT % ("NCCL_IB_TIMEOUT", "(unset)", "{8,9,10,11,12,13,14,15}")),
             ras(ENV_SUMMARY_FMT % (1, 0x4000)),
             ras(ENV_MISMATCH_FMT % (16, 0x4000, "NCCL_DEBUG_FILE")),
             ras(ENV_VALUE_FMT % ("NCCL_DEBUG_FILE", "/tmp/disttrain-nccl-x.log", "{0}"))]
    fails, [w] = nccldiag.findings(nccldiag.parse(lines), "node-a", NODES)
    assert not fails and w["reason"] == V.RISKY_SETTING and "NCCL_IB_TIMEOUT=22 on node-a" in w["message"]


# What NCCL 2.32.6 printed for one rank on an H200 (driver 580.159.04, torch 2.11.0+cu130 with
# the libnccl preloaded), captured by the whole probe on 2026-12-04: the first live run.
H200_2_32_6 = """\
vm:622 NCCL DIAG === RAS Diagnostics ===
vm:622 NCCL DIAG === NCCL Diagnostics ===
vm:622 NCCL DIAG [OK] net bw: skipped (single host or no network transport)
vm:622 NCCL DIAG NCCL diagnostics completed in 0.5 ms across 1 ranks
vm:622 NCCL DIAG [OK]   GPU inventory: 1x NVIDIA H200 per node consistent across 1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [OK]   CUDA driver version: 13000 consistent across 1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [OK]   ECC: no uncorrected volatile errors across 1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [OK]   NCCL environment: NCCL_* env vars consistent across 1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [INFO] rdma_topo check: not usable on 1/1 ranks in comm 0xcd22cca137dd86c3 (unavailable)
vm:622 NCCL DIAG [INFO] IOMMU mode: unable to identify relevant GPU/NIC pairs on 1/1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [INFO] ATS state: unable to identify relevant NICs on 1/1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [OK]   Xid/SXid: no events requiring immediate attention across 1 host
vm:622 NCCL DIAG [OK]   NVIDIA graphics driver version: 580.159.04 consistent across 1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [OK]   Paths: self across 1 ranks in comm 0xcd22cca137dd86c3
vm:622 NCCL DIAG [INFO] Net device: skipped across 1 ranks in comm 0xcd22cca137dd86c3 (network plugin is not a recognized verbs-based InfiniBand/RoCE plugin)
vm:622 NCCL DIAG RAS diagnostics completed in 19.3 ms across 1 ranks""".splitlines()


def test_a_clean_live_report_from_nccl_2_32_is_no_evidence():
    p = nccldiag.parse(H200_2_32_6)
    assert p["lines"] == 16 and p["completed"] == 2
    assert p["reports"] == ["RAS Diagnostics", "NCCL Diagnostics"]
    assert (p["differ"], p["ecc"], p["env"], p["edges"], p["incomplete"], p["p2p"]) == (
        [], [], {}, [], [], None)
    assert nccldiag.findings(p, "h200") == ([], [])


def test_active_p2p_summaries_from_the_docs():
    p = nccldiag.parse(NVIDIA_P2P_OK)
    assert p["p2p"] == {"passed": 56, "tested": 56, "skipped": 0} and p["reports"] == ["NCCL Diagnostics"]
    assert nccldiag.findings(p, "node-a", NODES) == ([], [])
    assert nccldiag.parse([RCCL_P2P_OK])["p2p"] == {"passed": 56, "tested": 56, "skipped": 0}
    q = nccldiag.parse([NVIDIA_P2P_PARTIAL])
    assert q["p2p"] == {"passed": 52, "tested": 56, "skipped": 0}
    fails, [w] = nccldiag.findings(q, "node-a", NODES)
    assert not fails and w["reason"] == V.P2P_CHECK_FAILED and "52/56" in w["message"]
    assert nccldiag.parse([RCCL_P2P_NOTICE])["edges"] == []  # a notice, not a failed edge


def test_a_p2p_pair_nccl_could_not_use_warns_naming_the_pair():
    p = nccldiag.parse([RCCL_P2P_EDGE])
    [e] = p["edges"]
    assert (e["kind"], e["srcRank"], e["dstRank"], e["path"], e["handle"], e["reason"], e["host"]) == (
        "destination buffer unavailable", 0, 1, "XGMI", "LEGACY_CUDA_IPC", "noDescriptor", "node01")
    fails, [w] = nccldiag.findings(p, "node-a", NODES)
    assert not fails and w["reason"] == V.P2P_CHECK_FAILED
    assert w["message"].startswith("node-a: ") and "rank 0 GPU 0 -> rank 1 GPU 1 over XGMI" in w["message"]
    imp = raw(IMPORT_FMT % (edge(9, 10), "import", IPC_ADVICE))
    [w2] = nccldiag.findings(nccldiag.parse([imp]), "node-a", NODES)[1]
    assert w2["message"].startswith("node-b: ") and "peer-memory import failed" in w2["message"]


def test_wrong_data_between_two_gpus_fails():
    lines = [raw(SUMMARY_FMT % (TAG_INFO, "54/56")),
             raw(WRITE_MISMATCH_FMT % (edge(2, 3), 0x1122334455667788, 0, 0, NVL_ADVICE)),
             raw(READ_MISMATCH_FMT % (edge(3, 2), 0x8877665544332211, 0xdead, NVL_ADVICE))]
    p = nccldiag.parse(lines)
    assert p["p2p"] == {"passed": 54, "tested": 56, "skipped": 0}
    assert [(e["kind"], e["srcRank"], e["dstRank"], e["path"]) for e in p["edges"]] == [
        ("write mismatch", 2, 3, "NVL"), ("read mismatch", 3, 2, "NVL")]
    [f], warns = nccldiag.findings(p, "node-a", NODES)
    assert f["reason"] == V.P2P_CHECK_FAILED and not warns  # the edges explain the summary
    assert "rank 2 GPU 2 -> rank 3 GPU 3 over NVL: write mismatch" in f["message"]
    assert "silent corruption" in f["message"]


def test_driver_version_mismatch_fails_and_names_the_odd_nodes():
    line = ras(DRIVER_FMT % (16, 0x5fa31c27a9e0d1b4, "{8,9,10,11,12,13,14,15}", 0, "13000"))
    p = nccldiag.parse([line])
    assert p["differ"] == [{"check": "CUDA driver version", "ranks": list(range(8, 16)), "total": 8,
                            "ref": 0, "value": "13000", "n": 16}]
    [f], _ = nccldiag.findings(p, "node-a", NODES)
    assert f["reason"] == V.DRIVER_VERSION_MISMATCH
    assert f["message"].startswith("node-b (rank 8, 9, 10, 11, ...)") and "node-a (rank 0)'s 13000" in f["message"]


def test_gpu_inventory_ecc_and_nvlink_warn():
    lines = [ras(GPU_COUNT_FMT % (16, 0x42, "{8,9,10,11,12,13,14,15}", 0, 8)),
             ras(GPU_MODEL_FMT % (16, 0x42, "{12,13,14,15}", 0, "NVIDIA H100 80GB HBM3")),
             ras(ECC_UNCORRECTED_FMT % ("{3}", 2, 16, 0x42)),
             ras(ECC_CORRECTED_FMT % (100, "{4,5}", 250, 16, 0x42)),
             ras(NVL_COUNT_FMT % (16, 0x42, "{9}", 0, 18)),
             ras(NVL_INACTIVE_FMT % ("{9}", 16, 0x42))]
    p = nccldiag.parse(lines)
    assert [d["check"] for d in p["differ"]] == ["GPU inventory count", "GPU inventory model",
                                                 "NVLink link-count"]
    assert p["differ"][1]["value"] == "NVIDIA H100 80GB HBM3"
    assert p["ecc"] == [{"kind": "uncorrected", "ranks": [3], "total": 1, "worst": 2, "threshold": None},
                        {"kind": "corrected", "ranks": [4, 5], "total": 2, "worst": 250, "threshold": 100}]
    assert p["nvlinkInactive"] == [{"ranks": [9], "total": 1}]
    fails, warns = nccldiag.findings(p, "node-a", NODES)
    assert not fails
    assert [w["reason"] for w in warns] == [V.GPU_COUNT_MISMATCH, V.GPU_MODEL_MISMATCH, V.NVLINK_INACTIVE,
                                            V.GPU_ECC_ERRORS, V.GPU_ECC_ERRORS, V.NVLINK_INACTIVE]
    assert warns[3]["message"].startswith("node-a (rank 3): ") and "worst 2" in warns[3]["message"]


def test_a_cut_rank_set_keeps_its_total():
    line = ras(ECC_UNCORRECTED_FMT % ("{0,1,2,3,4,5,6,7,...} (N=12)", 7, 16, 0x42))
    [e] = nccldiag.parse([line])["ecc"]
    assert (e["ranks"], e["total"]) == (list(range(8)), 12)
    [w] = nccldiag.findings(nccldiag.parse([line]), "node-a", NODES)[1]
    assert "and 4 more rank(s)" in w["message"]


def test_incomplete_results_and_the_checks_own_errors_are_no_evidence():
    lines = [ras(INCOMPLETE_FMT % ("ECC", 6, 8, 0x42, 0x1, 0x2)),
             ras(GPU_UNAVAILABLE_FMT % (8, 0x42)),
             raw(SETUP_FAILED_FMT % (2, 1)),
             "[2026-05-05 06:16:47] node-01:1:1 [0] NCCL INFO Init COMPLETE",  # not a DIAG line
             "random text"]
    p = nccldiag.parse(lines)
    assert p["incomplete"] == ["ECC"] and p["checkErrors"] == ["p2p: setup failed on rank 2 result=1"]
    assert p["lines"] == 3 and nccldiag.findings(p, "node-a") == ([], [])


def test_without_a_layout_messages_name_ranks():
    line = ras(DRIVER_FMT % (2, 0x42, "{1}", 0, "12090"))
    [f], _ = nccldiag.findings(nccldiag.parse([line]), "node-a")
    assert f["message"].startswith("rank 1: ") and "other than rank 0's 12090" in f["message"]


# ---- the version gate ---------------------------------------------------------------------

@pytest.mark.parametrize("backend,version,on", [
    ("nccl", "2.31.2", True), ("nccl", "2.31.0", True), ("nccl", "2.32.1", True),
    ("nccl", "3.0.0", True), ("nccl", "2.30.7", False), ("nccl", "2.27.3", False),
    ("nccl", "2.9.9", False), ("nccl", None, False), ("nccl", "", False), ("nccl", "x.y", False),
    ("gloo", "2.31.2", False),
])
def test_diagnostics_only_from_nccl_2_31(backend, version, on):
    assert nccldiag.wanted(backend, version) is on
    env = nccldiag.env_to_set({}, backend, version)
    assert env == ({"NCCL_RUN_RAS_DIAGNOSTICS": "1", "NCCL_RUN_DIAGNOSTICS": "1"} if on else {})


def test_a_users_own_setting_wins():
    assert nccldiag.env_to_set({"NCCL_RUN_DIAGNOSTICS": "0"}, "nccl", "2.31.2") == {
        "NCCL_RUN_RAS_DIAGNOSTICS": "1"}
    assert nccldiag.env_to_set({"NCCL_RUN_DIAGNOSTICS": "1", "NCCL_RUN_RAS_DIAGNOSTICS": "0"},
                               "nccl", "2.31.2") == {}


# ---- garbled input ------------------------------------------------------------------------

def test_parse_and_findings_never_raise_and_stay_short():
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    fragments = st.sampled_from([
        "[INFO] ", "[OK]   ", "GPU inventory: ", "CUDA driver version: ", "ECC: ", "NVLink: ",
        "NCCL environment: ", "mismatch across 9 ranks in comm 0x1", ", rank(s) ", "{1,2", ",...}",
        " (N=99)", "}", " differ from rank 0 (", ")", "uncorrected volatile errors on rank(s) ",
        " (worst=7) ", "for NCCL_ALGO", "NCCL_ALGO=", " on rank(s) ", "p2p: ", "write mismatch ",
        "srcRank=1 ", "dstRank=x ", "path=NVL ", "; ", "all 5 directed GPU P2P edges verified",
        "3/5 ", "=== ", "x" * 300, "\u00e9", "-1", "9" * 30])
    line = st.one_of(st.text(max_size=200),
                     st.lists(fragments, max_size=14).map(lambda xs: "h:1 NCCL DIAG " + "".join(xs)))
    failure_reasons, warning_reasons = set(V.PROBE_FAILURES), set(V.PROBE_WARNINGS)

    @hyp.settings(max_examples=400, deadline=None, derandomize=True)
    @hyp.given(st.lists(line, max_size=24), st.dictionaries(st.integers(0, 40), st.text(max_size=30)))
    def check(lines, names):
        p = nccldiag.parse(lines)
        assert p["lines"] <= len(lines)
        fails, warns = nccldiag.findings(p, "node-a", names)
        for f in fails:
            assert f["reason"] in failure_reasons and len(f["message"]) <= 400
        for w in warns:
            assert w["reason"] in warning_reasons and len(w["message"]) <= 400

    check()



@pytest.mark.parametrize("msg", [
    "p2p: write mismatch srcRank=\u00b2 dstRank=1 path=NVL",  # isdigit() but not int()
    "p2p: write mismatch srcRank=" + "9" * 5000 + " dstRank=1",  # past int()'s 4300 digits
    "CUDA driver version: mismatch across 2 ranks in comm 0x1, rank(s) {1} differ from rank "
    + "9" * 5000 + " (1)",
    "NVLink: inactive link(s) on rank(s) {" + "9" * 5000 + "} across 2 ranks in comm 0x1",
    "NVLink: inactive link(s) on rank(s) {1,...} (N=" + "9" * 5000 + ") across 2 ranks in comm 0x1",
    "p2p: " + "9" * 5000 + "/1 directed GPU P2P edges verified",
])
def test_odd_numbers_in_a_line_do_not_raise(msg):
    p = nccldiag.parse([f"h:1 NCCL DIAG [INFO] {msg}"])
    for f in sum(nccldiag.findings(p, "node-a"), []):
        assert len(f["message"]) <= 400


def test_values_of_one_variable_are_bounded_too():
    lines = ["h:1 NCCL DIAG [INFO] NCCL environment: mismatch across 2 ranks in comm 0x1 for NCCL_ALGO"]
    lines += [f"h:1 NCCL DIAG [INFO] NCCL environment: NCCL_ALGO=v{i} on rank(s) {{0}}"
              for i in range(200)]
    assert len(nccldiag.parse(lines)["env"]["NCCL_ALGO"]) == nccldiag.MAX_ITEMS

def test_the_probe_adds_the_warnings_and_fails_on_the_first_failure():
    """run/probe.py ``_nccl_diagnostics``: NCCL's global ranks are node rank x P + local
    rank; the rendezvous's ``bus.nodes`` (node rank -> node) names them."""
    from types import SimpleNamespace

    from disttrain_probe.ground.deadline import ProbeFailure
    from disttrain_probe.ground.roles import Layout
    from disttrain_probe.run.probe import Probe

    p = Probe.__new__(Probe)
    p.layout = Layout(0, 2, 0, 2)  # 2 nodes x 2 processes: ranks 2, 3 on node-b
    p.bus = SimpleNamespace(nodes={0: "node-a", 1: "node-b"})
    p.cfg = SimpleNamespace(node_name="node-a")
    p.state = {"warnings": []}
    p._nccl_diagnostics([ras(ECC_UNCORRECTED_FMT % ("{3}", 1, 4, 0x42))])
    [w] = p.state["warnings"]
    assert w["reason"] == V.GPU_ECC_ERRORS and w["message"].startswith("node-b (rank 3): ")
    with pytest.raises(ProbeFailure) as e:
        p._nccl_diagnostics([raw(WRITE_MISMATCH_FMT % (edge(2, 3), 1, 0, 0, NVL_ADVICE))])
    assert e.value.reason == V.P2P_CHECK_FAILED and e.value.message.startswith("node-b: ")
    p._nccl_diagnostics([])  # NCCL < 2.31, or nothing printed: nothing changes
    assert len(p.state["warnings"]) == 1


def test_local_ranks_are_told_the_diagnostics_variables():
    """Every rank of the communicator must run NCCL's P2P check (it synchronises them); the
    local ranks were started before local rank 0 set the variables, so the go message
    carries them (localranks/spawn.py ``go``; worker.py applies only :data:`RUN_VARS`)."""
    from disttrain_probe.localranks.spawn import LocalRanks

    class Child:
        def __init__(self) -> None:
            self.sent: list = []

        def send(self, msg: dict) -> bool:
            self.sent.append(msg)
            return True

    kids = [Child(), Child()]
    lr = LocalRanks(kids, "node-a", 3)  # type: ignore[arg-type]
    lr.go("10.0.0.1", "eth0", "nccl", 10.0, nccldiag.env_to_set({}, "nccl", "2.31.2"))
    lr.go("10.0.0.1", "eth0", "nccl", 10.0)
    assert [m["env"] for m in kids[0].sent] == [
        {"NCCL_RUN_RAS_DIAGNOSTICS": "1", "NCCL_RUN_DIAGNOSTICS": "1"}, {}]
    assert nccldiag.run_vars({"NCCL_RUN_DIAGNOSTICS": 1, "LD_PRELOAD": "/x.so"}) == {
        "NCCL_RUN_DIAGNOSTICS": "1"}
    assert nccldiag.run_vars(["NCCL_RUN_DIAGNOSTICS"]) == {} and nccldiag.run_vars(None) == {}
