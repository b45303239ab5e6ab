"""NCCL's own diagnostics (NCCL >= 2.31), read from its ``NCCL DIAG`` lines (standard library only).

NCCL 2.31 compares what every rank of a communicator sees (RAS diagnostics,
``NCCL_RUN_RAS_DIAGNOSTICS=1``: GPU inventory, CUDA driver version, volatile ECC counters,
NVLink state, every ``NCCL_*`` variable) and exchanges data over every GPU pair it means
to use P2P between (active diagnostics, ``NCCL_RUN_DIAGNOSTICS=1``). Both print
``<host>:<pid> NCCL DIAG <line>`` to the standard output of the process holding the
communicator's rank 0 (src/include/diagnostics_log.h ``DIAG_PRINT``; a failed P2P edge is
printed by the first rank of its node), not to ``NCCL_DEBUG_FILE``. Result lines are
``[OK]   <check>: ...`` or ``[INFO] <check>: ...``; a report starts with
``=== RAS Diagnostics ===`` / ``=== NCCL Diagnostics ===`` and ends with ``... completed in
<ms> ms across <n> ranks``. The formats read here (NVIDIA/nccl 8898068, the 2.31 sources;
tests/probe/test_nccldiag.py cites each):

=====================================================================  ===========================
``GPU inventory: count|model mismatch across N ranks in comm 0x.., rank(s) {..} differ from rank R (V)``  src/ras/diagnostics_gpu.cc
``CUDA driver version: mismatch across N ranks in comm 0x.., rank(s) {..} differ from rank R (V)``        src/ras/diagnostics_gpu.cc
``ECC: uncorrected volatile errors on rank(s) {..} (worst=W) across N ranks in comm 0x..``                src/ras/diagnostics_gpu.cc
``ECC: corrected volatile errors at or above threshold T on rank(s) {..} (worst=W) across ...``           src/ras/diagnostics_gpu.cc
``NVLink: link-count mismatch across N ranks in comm 0x.., rank(s) {..} differ from rank R (V)``        src/ras/diagnostics_gpu.cc
``NVLink: inactive link(s) on rank(s) {..} across N ranks in comm 0x..``                                 src/ras/diagnostics_gpu.cc
``NCCL environment: mismatch across N ranks in comm 0x.. for VAR`` then ``VAR=value on rank(s) {..}``    src/ras/diagnostics_env.cc
``<check>: diagnostics incomplete, gathered n/N ranks in comm ...``     src/ras/diagnostics_checks_common.cc
``p2p: all N directed GPU P2P edges verified`` / ``p2p: P/T ...``      src/diagnostics/p2p.cc (the docs: ``p2p: only P/T GPU-to-GPU peer accesses passed verification``)
``p2p: write mismatch srcRank=.. srcCudaDev=.. srcNvmlDev=.. dstRank=.. ... path=NVL handle=... ; <advice>``  src/diagnostics/p2p.cc
=====================================================================  ===========================

A rank set is ``{0,1,2}``, or ``{0,1,...} (N=9)`` when NCCL cut it short.

Seen live (NCCL 2.32.6 on an H200, 2026-12-04; tests/probe/test_nccldiag.py ``H200_2_32_6``):
the ``[OK]`` lines above and checks this module does not read yet, whose failing formats
nobody here has seen: ``net bw``, ``rdma_topo check``, ``IOMMU mode``, ``ATS state``,
``Xid/SXid``, ``NVIDIA graphics driver version``, ``Paths``, ``Net device``. Each process
group prints one pair of reports.

NCCL calls all of this informational: a reported issue never fails its init. The preflight
decides from the evidence (:func:`findings`):

* failures (the job would corrupt data or disagree with itself): a P2P edge whose data came
  back wrong (``write mismatch`` / ``read mismatch``: silent corruption between two GPUs;
  the probe's all-reduce passing does not clear it, a ring uses only some pairs) is
  ``P2PCheckFailed``; ranks whose CUDA driver differs is ``DriverVersionMismatch``; a
  ``NCCL_*`` variable of ``settings.MUST_AGREE`` that differs between ranks is
  ``SettingsMismatch`` (NCCL sees every process's environment, the probe's versions phase
  only each node's first);
* warnings (a latent fault; NCCL routes around it or it costs speed): other failed P2P edges
  (the memory could not be shared: container/IPC isolation) and a partial P2P summary
  (``P2PCheckFailed``), volatile ECC errors (``GPUECCErrors``), a GPU count (``GPUCountMismatch``)
  or model (``GPUModelMismatch``) that differs, NVLinks inactive or fewer on some ranks
  (``NVLinkInactive``), other ``NCCL_*`` variables that differ (``RiskySetting``).

Not evidence, so ignored: ``unavailable`` and ``incomplete`` results (no NVML, a RAS overlay
not ready), the P2P check's own setup errors, and variables that legitimately differ per
process (:data:`PER_PROCESS`, among them the ones the probe sets itself). Pure functions.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, cast

from disttrain_probe.contract.settings import MUST_AGREE
from disttrain_probe.contract.vocabulary import (  # reasons this module reports
    DRIVER_VERSION_MISMATCH,
    GPU_COUNT_MISMATCH,
    GPU_ECC_ERRORS,
    GPU_MODEL_MISMATCH,
    NVLINK_INACTIVE,
    P2P_CHECK_FAILED,
    RISKY_SETTING,
    SETTINGS_MISMATCH,
)
from disttrain_probe.gpu.ncclshapes import Differ, Edge, NcclDiag

MIN_VERSION = (2, 31)  # the first NCCL with NCCL_RUN_RAS_DIAGNOSTICS / NCCL_RUN_DIAGNOSTICS
RUN_VARS = ("NCCL_RUN_RAS_DIAGNOSTICS", "NCCL_RUN_DIAGNOSTICS")
# Differ per process by design (or are set by the probe on its own process only).
PER_PROCESS = frozenset(RUN_VARS + (
    "NCCL_DEBUG_FILE", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME",
    "NCCL_IB_GID_INDEX", "NCCL_HOSTID", "NCCL_RAS_ADDR"))
DATA_KINDS = ("write mismatch", "read mismatch")
MAX_ITEMS = 32  # per list in the summary, whatever the input

LINE = re.compile(r"(?:(?P<host>[^\s:]+):(?P<pid>\d+) )?NCCL DIAG (?P<body>.*?)\s*$")
TAGGED = re.compile(r"^\[(?P<tag>OK|INFO)\]\s*(?P<msg>.*)$")
HEADER = re.compile(r"^=== (?P<name>.+?) ===$")
DONE = re.compile(r"^(?P<name>.+?) completed in (?P<ms>[\d.]+) ms across (?P<n>\d+) ")
RANKS = r"\{(?P<ranks>[\d,]*?)(?P<cut>,?\.\.\.)?\}(?: \(N=(?P<total>\d+)\))?"
COMM = r"across (?P<n>\d+) ranks in comm (?P<comm>0x[0-9a-fA-F]+)"
DIFFER = re.compile(r"^(?P<check>GPU inventory|CUDA driver version|NVLink): (?P<what>count |model "
                    r"|link-count )?mismatch " + COMM + r", rank\(s\) " + RANKS
                    + r" differ from rank (?P<ref>\d+) \((?P<value>.*)\)$")
ECC = re.compile(r"^ECC: (?P<kind>uncorrected|corrected) volatile errors (?:at or above threshold "
                 r"(?P<threshold>\d+) )?on rank\(s\) " + RANKS + r" \(worst=(?P<worst>\d+)\) "
                 + COMM + "$")
NVL_INACTIVE = re.compile(r"^NVLink: inactive link\(s\) on rank\(s\) " + RANKS + " " + COMM + "$")
ENV_MISMATCH = re.compile(r"^NCCL environment: mismatch " + COMM + r" for (?P<var>\S+)$")
ENV_VALUE = re.compile(r"^NCCL environment: (?P<var>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*) on "
                       r"rank\(s\) " + RANKS + "$")
INCOMPLETE = re.compile(r"^(?P<check>[^:]+): diagnostics incomplete, gathered (?P<got>\d+)/"
                        r"(?P<n>\d+) ranks")
P2P_SUMMARY = re.compile(r"^p2p: (?:only )?(?:all (?P<all>\d+)|(?P<passed>\d+)/(?P<tested>\d+)) "
                         r"(?:directed GPU P2P edges verified|GPU-to-GPU peer accesses passed)"
                         r"(?: \(skipped indirect=(?P<skipped>\d+)\))?")
P2P_ALL_DOCS = re.compile(r"^p2p: verified P2P access .*\((?P<n>\d+) peer accesses\)$")
P2P_EDGE = re.compile(r"^p2p: (?P<kind>destination buffer unavailable|local (?:CUDA|HIP) setup "
                      r"failed|peer-memory import failed|write mismatch|read mismatch|topology "
                      r"check failed|launch/check failed) (?P<fields>[^;]*)(?:; (?P<advice>.*))?$")
P2P_ERROR = re.compile(r"^(?:p2p: (?:setup failed on rank|resource cleanup failed|active check "
                       r"returned|check returned)|transport detect returned)")
FIELD = re.compile(r"(?P<k>[A-Za-z]+)=(?P<v>\S+)")
INT_FIELDS = ("srcRank", "srcCudaDev", "srcNvmlDev", "dstRank", "dstCudaDev", "dstNvmlDev")


def wanted(backend: str, nccl_version: Optional[str]) -> bool:
    """Whether the probe turns NCCL's diagnostics on: ``backend`` nccl and the libnccl this
    process loaded (``nccl_version``, "2.31.2", from the inventory) at least
    :data:`MIN_VERSION`. False for an unknown or unparsable version. Pure."""
    if backend != "nccl" or not nccl_version:
        return False
    m = re.match(r"^\s*(\d+)\.(\d+)", str(nccl_version))
    return m is not None and (int(m.group(1)), int(m.group(2))) >= MIN_VERSION


def env_to_set(env: Mapping[str, str], backend: str, nccl_version: Optional[str]
               ) -> Dict[str, str]:
    """The variables to add to ``env`` so NCCL runs its diagnostics: each of :data:`RUN_VARS`
    as "1" unless ``env`` already has it (a user's own value, "0" included, wins); {} when
    :func:`wanted` is False. Pure."""
    if not wanted(backend, nccl_version):
        return {}
    return {k: "1" for k in RUN_VARS if k not in env}


def run_vars(given: Any) -> Dict[str, str]:
    """Of ``given`` (what local rank 0 sent a local rank), only :data:`RUN_VARS`, as strings;
    {} for anything but a mapping. Pure."""
    if not isinstance(given, Mapping):
        return {}
    return {k: str(v) for k, v in given.items() if k in RUN_VARS}


def split_line(line: str) -> Optional[Dict[str, Optional[str]]]:
    """One line -> ``{"host", "pid", "tag" (OK|INFO|None), "msg"}`` for an ``NCCL DIAG`` line
    (the host:pid prefix optional; other output may precede it), else None. Pure."""
    m = LINE.search(str(line))
    if not m:
        return None
    body = m.group("body")
    t = TAGGED.match(body)
    return {"host": m.group("host"), "pid": m.group("pid"), "tag": t.group("tag") if t else None,
            "msg": (t.group("msg") if t else body).strip()}


def _int(text: Optional[str]) -> Optional[int]:
    """A plain number ("-"? then at most 18 ASCII digits) -> int; anything else (a
    superscript digit, thousands of digits int() refuses) -> None."""
    t = text or ""
    digits = t[1:] if t.startswith("-") else t
    if not (0 < len(digits) <= 18 and digits.isascii() and digits.isdigit()):
        return None
    return int(t)


def rank_set(g: Mapping[str, Optional[str]]) -> Tuple[List[int], int]:
    """A matched :data:`RANKS` group -> (the ranks listed, how many there are in all)."""
    ranks = [r for r in (_int(x) for x in (g.get("ranks") or "").split(",")) if r is not None
             and r >= 0][:MAX_ITEMS]
    total = _int(g.get("total"))
    return ranks, total if total is not None else len(ranks)



def empty() -> NcclDiag:
    """What :func:`parse` returns for no DIAG line."""
    return {"lines": 0, "reports": [], "completed": 0, "differ": [], "ecc": [],
            "nvlinkInactive": [], "env": {}, "incomplete": [], "p2p": None, "edges": [],
            "checkErrors": []}


def parse(lines: Iterable[str]) -> NcclDiag:
    """Summarize ``NCCL DIAG`` lines (any other lines are skipped) into a JSON-able
    :class:`NcclDiag`, e.g. ``{"lines": 12, "reports": ["RAS Diagnostics", "NCCL
    Diagnostics"], "completed": 2, "differ": [...], ..., "env": {"NCCL_BUFFSIZE": {"(unset)":
    [0, 1], "8388608": [2, 3]}}, "incomplete": ["ECC"], "p2p": {"passed": 52, "tested": 56,
    "skipped": 0} | None, "edges": [...], "checkErrors": ["p2p: setup failed on rank 2
    result=1"]}``. Ranks are the communicator's (the probe's global ranks); counts are plain numbers
    (``worst``: ECC errors of the worst rank). Each list keeps at most :data:`MAX_ITEMS`.
    Never raises on odd input."""
    out = empty()
    current_env: Optional[str] = None
    for raw in lines:
        d = split_line(raw)
        if d is None:
            continue
        out["lines"] += 1
        msg = str(d["msg"])
        m = HEADER.match(msg)
        if m:
            _keep(out["reports"], m.group("name"))
            continue
        if d["tag"] is None:
            out["completed"] += 1 if DONE.match(msg) else 0
            continue
        m = ENV_MISMATCH.match(msg)
        if m:
            current_env = m.group("var")
            continue
        m = ENV_VALUE.match(msg)
        if m and current_env is not None and m.group("var") == current_env and len(out["env"]) < MAX_ITEMS:
            ranks, _ = rank_set(m.groupdict())
            values = out["env"].setdefault(current_env, {})
            if len(values) < MAX_ITEMS:
                values[m.group("value")[:80]] = ranks
            continue
        _result_line(out, msg, d.get("host"))
    return out


def _keep(items: List[Any], item: Any) -> None:
    if len(items) < MAX_ITEMS:
        items.append(item)


def _result_line(out: NcclDiag, msg: str, host: Optional[str]) -> None:
    """Record one tagged RAS or P2P result into ``out`` (others are ignored)."""
    m = DIFFER.match(msg)
    if m:
        ranks, total = rank_set(m.groupdict())
        check = f"{m.group('check')} {(m.group('what') or '').strip()}".strip()
        ref, n = _int(m.group("ref")), _int(m.group("n"))
        if ref is not None and n is not None:
            _keep(out["differ"], {"check": check, "ranks": ranks, "total": total, "ref": ref,
                                  "value": m.group("value")[:80], "n": n})
        return
    m = ECC.match(msg)
    if m:
        ranks, total = rank_set(m.groupdict())
        th, worst = m.group("threshold"), _int(m.group("worst"))
        if worst is not None and (th is None or _int(th) is not None):
            _keep(out["ecc"], {"kind": m.group("kind"), "ranks": ranks, "total": total,
                               "worst": worst, "threshold": _int(th)})
        return
    m = NVL_INACTIVE.match(msg)
    if m:
        ranks, total = rank_set(m.groupdict())
        _keep(out["nvlinkInactive"], {"ranks": ranks, "total": total})
        return
    m = INCOMPLETE.match(msg)
    if m:
        _keep(out["incomplete"], m.group("check")[:40])
        return
    _p2p_line(out, msg, host)


def _p2p_line(out: NcclDiag, msg: str, host: Optional[str]) -> None:
    m = P2P_SUMMARY.match(msg)
    if m:
        tested = _int(m.group("all") or m.group("tested"))
        passed = _int(m.group("all") or m.group("passed"))
        skipped = _int(m.group("skipped") or "0")
        if tested is not None and passed is not None and skipped is not None:
            out["p2p"] = {"passed": passed, "tested": tested, "skipped": skipped}
        return
    m = P2P_ALL_DOCS.match(msg)
    if m:
        n = _int(m.group("n"))
        if n is not None:
            out["p2p"] = {"passed": n, "tested": n, "skipped": 0}
        return
    m = P2P_EDGE.match(msg)
    if m:
        fields = {f.group("k"): f.group("v") for f in FIELD.finditer(m.group("fields"))}
        edge: Dict[str, object] = {"kind": m.group("kind"), "host": host}  # Edge's keys, in order
        for k in INT_FIELDS:
            v = fields.get(k, "")
            edge[k] = _int(v)
        for k in ("path", "handle", "reason"):
            edge[k] = fields.get(k, "")[:40] or None
        _keep(out["edges"], cast(Edge, edge))
        return
    if P2P_ERROR.match(msg):
        _keep(out["checkErrors"], msg[:160])


Finding = Dict[str, str]


def findings(parsed: NcclDiag, node: str, rank_nodes: Optional[Mapping[int, str]] = None
             ) -> Tuple[List[Finding], List[Finding]]:
    """(failures, warnings) from :func:`parse`'s summary, each ``{"reason", "message"}``
    (at most 400 characters, naming the node(s), NCCL's evidence and the fix); see the
    module doc for which is which and why.

    ``node``: the node whose probe read the lines (rank 0's); ``rank_nodes``: global rank ->
    node name (the probe's layout), so messages name nodes, not only ranks. Pure."""
    names = dict(rank_nodes or {})
    fails: List[Finding] = []
    warns: List[Finding] = []
    _edge_findings(parsed, node, names, fails, warns)
    for d in parsed.get("differ") or []:
        _differ_finding(d, names, fails, warns)
    for e in parsed.get("ecc") or []:
        what = ("uncorrected" if e["kind"] == "uncorrected"
                else f"corrected (at or above {e.get('threshold')})")
        warns.append(_f(GPU_ECC_ERRORS, (
            f"{where(e['ranks'], e['total'], names)}: NCCL's diagnostics found {what} volatile ECC "
            f"errors on the GPU (worst {e['worst']}); drain the node and check 'nvidia-smi -q -d "
            f"ECC', then reset or replace the GPU")))
    for nv in parsed.get("nvlinkInactive") or []:
        warns.append(_f(NVLINK_INACTIVE, (
            f"{where(nv['ranks'], nv['total'], names)}: NCCL's diagnostics found inactive NVLink(s) "
            f"on the GPU; NCCL routes around them at lower bandwidth; check 'nvidia-smi nvlink "
            f"-s' and the fabric manager, then reset the GPU or drain the node")))
    _env_findings(parsed.get("env") or {}, names, fails, warns)
    return fails, warns


def _edge_findings(parsed: NcclDiag, node: str, names: Dict[int, str],
                   fails: List[Finding], warns: List[Finding]) -> None:
    edges = parsed.get("edges") or []
    bad = [e for e in edges if e.get("kind") in DATA_KINDS]
    other = [e for e in edges if e.get("kind") not in DATA_KINDS]
    if bad:
        fails.append(_f(P2P_CHECK_FAILED, (
            f"{_edge_node(bad[0], node, names)}: NCCL's P2P check read back wrong data between "
            f"GPUs ({'; '.join(_edge(e) for e in bad[:3])}): silent corruption on that link; "
            f"drain the node, check 'nvidia-smi topo -p2p n' and 'nvidia-smi nvlink -s', reset "
            f"or replace the GPUs")))
    if other:
        warns.append(_f(P2P_CHECK_FAILED, (
            f"{_edge_node(other[0], node, names)}: NCCL's P2P check could not exchange data between "
            f"GPUs ({'; '.join(_edge(e) for e in other[:3])}); usually GPUs or IPC not shared between "
            f"the node's processes (one container per node, hostIPC, CUDA IPC), else ACS/IOMMU")))
    p2p = parsed.get("p2p")
    if p2p and p2p["passed"] < p2p["tested"] and not edges:
        warns.append(_f(P2P_CHECK_FAILED, (
            f"{node}: NCCL's P2P check verified only {p2p['passed']}/{p2p['tested']} directed GPU "
            f"pairs; the failed pairs are in that node's probe log (NCCL DIAG lines); check "
            f"'nvidia-smi topo -p2p n', ACS/IOMMU and that local ranks share IPC")))


def _differ_finding(d: Differ, names: Dict[int, str], fails: List[Finding],
                    warns: List[Finding]) -> None:
    odd = where(d["ranks"], d["total"], names)
    ref = f"{names[d['ref']]} (rank {d['ref']})" if d["ref"] in names else f"rank {d['ref']}"
    check = d["check"]
    if check == "CUDA driver version":
        fails.append(_f(DRIVER_VERSION_MISMATCH, (
            f"{odd}: NCCL reports a CUDA driver version other than {ref}'s {d['value']}; upgrade "
            f"the odd nodes' driver or pin the job to nodes with one driver version")))
    elif check == "GPU inventory count":
        warns.append(_f(GPU_COUNT_MISMATCH, (
            f"{odd}: NCCL counts a different number of GPUs per node than {ref} ({d['value']}); "
            f"check the nodes' GPUs (nvidia-smi -L) and the pod's nvidia.com/gpu request")))
    elif check == "GPU inventory model":
        warns.append(_f(GPU_MODEL_MISMATCH, (
            f"{odd}: NCCL sees a GPU model other than {ref}'s {d['value']}; the slowest GPU paces "
            f"every step; pin the job to one GPU model (nodeSelector on the GPU product label)")))
    elif check == "NVLink link-count":
        warns.append(_f(NVLINK_INACTIVE, (
            f"{odd}: NCCL finds a different number of NVLinks per GPU than {ref} ({d['value']}); "
            f"links are down or the GPUs differ; check 'nvidia-smi nvlink -s' and the fabric "
            f"manager on those nodes")))


def _env_findings(env: Dict[str, Dict[str, List[int]]], names: Dict[int, str],
                  fails: List[Finding], warns: List[Finding]) -> None:
    for var in sorted(env):
        if var in PER_PROCESS:
            continue
        groups = "; ".join(f"{var}={val} on {where(r, len(r), names)}"
                           for val, r in sorted(env[var].items())[:3])
        if var in MUST_AGREE:
            fails.append(_f(SETTINGS_MISMATCH, (
                f"{groups}: NCCL's diagnostics see {var} differ between ranks; ranks then "
                f"disagree on how to talk (hang or wrong transport); set it the same in every "
                f"pod (image, template, launcher)")))
        else:
            warns.append(_f(RISKY_SETTING, (
                f"{groups}: NCCL's diagnostics see {var} differ between ranks; set it the same in "
                f"every pod unless it is meant to differ")))


def where(ranks: List[int], total: int, names: Mapping[int, str]) -> str:
    """``node-b (rank 2, 3)``-style text for ``ranks`` (``total`` counts ranks NCCL cut from
    its list); ranks without a known node stay ``rank 4``. Pure."""
    by_node: Dict[str, List[int]] = {}
    for r in ranks:
        by_node.setdefault(names.get(r, ""), []).append(r)
    parts = [f"{n} (rank {', '.join(map(str, rs[:4]))}{', ...' if len(rs) > 4 else ''})" if n
             else f"rank {', '.join(map(str, rs[:4]))}" for n, rs in list(by_node.items())[:4]]
    more = f" and {total - len(ranks)} more rank(s)" if total > len(ranks) else ""
    return (", ".join(parts) or "some ranks") + more


def _edge(e: Edge) -> str:
    """``rank 0 GPU 0 -> rank 1 GPU 1 over NVL: write mismatch`` (GPU: the NVML index)."""
    return (f"rank {e.get('srcRank')} GPU {e.get('srcNvmlDev')} -> rank {e.get('dstRank')} GPU "
            f"{e.get('dstNvmlDev')} over {e.get('path')}: {e.get('kind')}"
            + (f", handle {e['handle']}" if e.get("handle") else ""))


def _edge_node(e: Edge, node: str, names: Mapping[int, str]) -> str:
    src = e.get("srcRank")
    return names.get(src, e.get("host") or node) if isinstance(src, int) else (e.get("host") or node)


def _f(reason: str, text: str) -> Finding:
    return {"reason": reason, "message": text if len(text) <= 400 else text[:397] + "..."}
