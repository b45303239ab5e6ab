"""The probe's report, as the operator reads it (contract version ``v`` = 1).

One report per rank, read from the probe pod's termination message (at most 4096 bytes;
Kubernetes truncates there). Probe reports are untrusted input (any process in the probe
pod can write that file): :func:`parse_report` caps the size and the nesting, refuses
what strict JSON and the status it is copied into cannot carry (NaN, Infinity, numbers
beyond float64, integers beyond int64, lone surrogates, duplicate keys), checks the version
and validates the shape strictly (``"ok": "true"`` or ``"rank": "1"`` are refused, not
coerced), raising :class:`ReportInvalid` with a readable reason. Unknown fields are
ignored, so the probe can add fields without breaking older operators. Units are in the
field names and docstrings: seconds, bytes, Mb/s (link speed), GB/s with GB = 1e9 bytes
(bandwidths).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from disttrain_probe.contract.report_format import MAX_REPORT_BYTES, REPORT_VERSION

# The deepest a real report goes is 3 (report.master.route.iface); unknown fields may add a
# little, but nothing needs more than this. Deeper input is refused before json.loads.
MAX_REPORT_DEPTH = 10
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ReportInvalid(ValueError):
    """The termination message is not a usable probe report (garbage, oversize, too deep,
    not strict JSON, wrong version, wrong shape); the message says which."""


class _Model(BaseModel):
    # strict: JSON types must match (no "true" -> True, 1 -> True, "1" -> 1 coercion);
    # an integer is still accepted where a float is expected.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore",
                              strict=True)


class Failure(_Model):
    """Why the probe failed: a CamelCase ``reason`` (disttrain_probe.contract.vocabulary), the phase it
    was in, and a message naming the node(s), what was seen and the fix."""

    reason: str
    phase: Optional[str] = None
    message: str = ""


class ProbeWarning(_Model):
    """A latent fault (the probe still passed), e.g. HostnameResolvesToLoopback,
    NCCLDefaultInterfaceDiffers, RouteViaOtherInterface."""

    reason: str
    message: str = ""


class Versions(_Model):
    """Software on the node. ``cuda`` is torch's CUDA build; ``nccl`` the libnccl loaded in
    the probe's process (no GPU needed), ``ncclLib`` its path, ``ncclBuild`` the NCCL torch
    was compiled against."""

    python: Optional[str] = None
    torch: Optional[str] = None
    cuda: Optional[str] = None
    nccl: Optional[str] = None
    nccl_build: Optional[str] = None
    nccl_lib: Optional[str] = None
    driver: Optional[str] = None
    gpus: Optional[int] = Field(default=None, description="visible CUDA devices")


class Route(_Model):
    """The kernel's route: outgoing interface and source address."""

    iface: Optional[str] = None
    src: Optional[str] = None


class HostCheck(_Model):
    """After a failed master dial: another port of MASTER_ADDR's host (``r``: refused or ok
    means the host answers) and the ARP entry (complete, incomplete). ``listening``: that
    port was rank 0's beacon and answered with this job's token (rank 0 listens on the
    master port: a refusal there is a rule). ``silentSeconds``: how long both ports were
    silent before the rank stopped dialling."""

    port: Optional[int] = None
    r: Optional[str] = None
    arp: Optional[str] = None
    listening: Optional[bool] = None
    silent_seconds: Optional[float] = None


class DnsPath(_Model):
    """When MASTER_ADDR did not resolve: the node's first DNS server (/etc/resolv.conf) and
    the kernel's route to it (outgoing interface, source address)."""

    server: Optional[str] = None
    iface: Optional[str] = None
    src: Optional[str] = None


class Master(_Model):
    """MASTER_ADDR/MASTER_PORT as this rank saw them."""

    addr: Optional[str] = None
    port: Optional[int] = None
    resolved: List[str] = Field(default_factory=list, description="getaddrinfo answers")
    route: Optional[Route] = None
    connected: Optional[str] = Field(default=None, description="address the TCP dial reached")
    joined: Optional[bool] = Field(
        default=None, description="whether this rank joined rank 0's store (rank 0: served it); "
        "False: it failed before, so no peer learns of its failure (None: an older probe)")
    host_check: Optional[HostCheck] = None
    dns: Optional[DnsPath] = None
    peer_name: Optional[str] = Field(
        default=None, description="another name of this job that resolved while MASTER_ADDR "
        "did not (the Service and this node's DNS path work: rank 0's record was late)")
    source: Optional[str] = Field(
        default=None, description="where the answer came from: hosts (this node's /etc/hosts) "
        "or dns (its first DNS server, ``server``)")
    server: Optional[str] = Field(default=None, description="the DNS server asked (source dns)")


class Interface(_Model):
    """A network interface of the node: addresses as ``addr/prefix``; speed in Mb/s."""

    name: str
    addrs: List[str] = Field(default_factory=list)
    up: Optional[bool] = None
    speed_mbps: Optional[int] = Field(default=None, description="link speed, Mb/s (/sys)")
    mtu: Optional[int] = Field(default=None, description="bytes")
    measured_mbps: Optional[float] = Field(
        default=None, description="throughput measured on this interface's network, Mb/s "
        "(slowest measured pair; only for usable networks when there was a choice)")


# A Linux interface name as NCCL_SOCKET_IFNAME can carry it: 1 to 15 characters (IFNAMSIZ
# is 16 with the NUL), no '/', whitespace or NUL (the kernel's dev_valid_name), no ',' '^'
# '=' (NCCL's list syntax), ASCII letters, digits, '_', '.', '-' and ':' (an alias label
# such as eth0:1, as getifaddrs names it); not "." or "..".
IFNAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,15}")


def ifname_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot be a network interface the training pods are told to use
    (NCCL_SOCKET_IFNAME), or None. Pure; never raises."""
    if IFNAME_RE.fullmatch(name) and name not in (".", ".."):
        return None
    return (f"{name[:40]!r} is not a Linux interface name (1 to 15 characters of letters, "
            "digits, '_', '.', '-', ':')")


class Chosen(_Model):
    """The interface this rank should use (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME):
    ``ifname`` must be a Linux interface name (:func:`ifname_problem`)."""

    ifname: str
    addr: Optional[str] = None
    subnet: Optional[str] = None

    @field_validator("ifname")
    @classmethod
    def _an_interface(cls, v: str) -> str:
        problem = ifname_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class Rejected(_Model):
    """An interface not chosen, with a sub-reason: Loopback, DuplicateAddress, Unreachable,
    Down, NoIPv4, NotRequested, NotOnAllNodes, MultipleOnNode, NotPreferred."""

    ifname: str
    reason: str
    message: str = ""


class AllReduce(_Model):
    """Timed all-reduce (sum) of a float32 tensor; bandwidths per nccl-tests, GB = 1e9 bytes.
    Sizes, counts, times and bandwidths are measurements: never negative."""

    bytes: Optional[int] = Field(default=None, ge=0, description="message size, bytes")
    iterations: Optional[int] = Field(default=None, ge=0)
    seconds: Optional[float] = Field(default=None, ge=0, description="total over the timed iterations")
    algbw_gbps: Optional[float] = Field(default=None, alias="algbwGBps", ge=0,
                                        description="bytes / seconds-per-iteration, GB/s")
    busbw_gbps: Optional[float] = Field(default=None, alias="busbwGBps", ge=0,
                                        description="algbw * 2(n-1)/n, GB/s")
    correct: Optional[bool] = None


class LocalRank(_Model):
    """One local rank's outcome when the probe pod ran several processes (numProcPerNode
    > 1): its verdict, the phase it reached, its GPU (``cuda:<k>`` with NCCL), its own
    timing of the intra-node and the world all-reduce (busbw, GB/s), and its failure (the
    message names the node and the local rank). ``stopped``: it only stopped because local
    rank 0 failed first."""

    local_rank: int
    ok: bool
    phase: Optional[str] = None
    device: Optional[str] = None
    intra_busbw_gbps: Optional[float] = Field(default=None, alias="intraBusbwGBps", ge=0)
    busbw_gbps: Optional[float] = Field(default=None, alias="busbwGBps", ge=0)
    failure: Optional[Failure] = None
    stopped: Optional[bool] = None


class MeshResult(_Model):
    """One dial from this rank to a peer's listener (``r``: ok|wrong|refused|timeout|...)."""

    peer: int
    addr: str
    r: str
    ms: Optional[float] = Field(default=None, description="milliseconds")
    src: Optional[str] = None


class NcclAnswer(_Model):
    """What NCCL's bootstrap reported: the interface and address it uses, or its error."""

    ifname: Optional[str] = None
    addr: Optional[str] = None
    error: Optional[str] = None


class NcclBootstrap(_Model):
    """NCCL's own interface choice, asked of the node's libnccl (no GPU): alone
    (``default``), with NCCL_SOCKET_IFNAME set to the chosen interface (``chosen``), and
    the probe's re-implementation of NCCL's rule (``rule``)."""

    default: Optional[NcclAnswer] = None
    chosen: Optional[NcclAnswer] = None
    rule: Optional[str] = None


class ProbeReport(_Model):
    """One rank's probe report (the termination message of a probe pod)."""

    v: int = Field(description="report contract version")
    rank: Optional[int] = None
    world_size: Optional[int] = None
    job_uid: Optional[str] = Field(default=None, description="the job's UID, echoed")
    attempt: Optional[int] = Field(default=None, description="probe attempt, echoed")
    node: Optional[str] = None
    pod: Optional[str] = None
    hostname: Optional[str] = None
    host_ip: Optional[str] = None
    ok: bool = Field(description="true only when every check passed")
    phase: Optional[str] = Field(default=None, description="last phase reached")
    failure: Optional[Failure] = None
    warnings: List[ProbeWarning] = Field(default_factory=list)
    versions: Optional[Versions] = None
    master: Optional[Master] = None
    port_range: Optional[List[int]] = Field(default=None,
                                            description="net.ipv4.ip_local_port_range [lo, hi]")
    port_range_allowed: Optional[List[int]] = None
    interfaces: List[Interface] = Field(default_factory=list)
    chosen: Optional[Chosen] = None
    network: Optional[str] = Field(default=None, description="the chosen network (subnet)")
    rejected: List[Rejected] = Field(default_factory=list)
    nccl_default_ifname: Optional[str] = Field(
        default=None, description="what NCCL would pick with NCCL_SOCKET_IFNAME unset")
    socket_ifname: Optional[str] = None
    backend: Optional[str] = Field(default=None, description="nccl | gloo")
    allreduce: Optional[AllReduce] = None
    timings: Dict[str, float] = Field(default_factory=dict, description="seconds per phase")
    mesh: List[MeshResult] = Field(default_factory=list)
    truncated: bool = False
    final: Optional[bool] = Field(
        default=None, description="False: the pessimistic report the probe writes before each "
        "phase, so the rank ended without its final one (killed, out of memory) and told its "
        "peers nothing; absent in a final report")
    # -- evidence added by the diagnosis work (additive; older probes leave them empty) --
    paths: Dict[str, str] = Field(
        default_factory=dict, description="network -> one character per peer rank: what this "
        "rank's dial did (disttrain_probe/contract/paths.py: o ok, w wrong host, c closed (an intercepting proxy), r refused, t timeout, "
        "u unreachable, e error, m mixed, - not dialled, . self; upper case: another source)")
    path_mbps: Dict[str, Dict[str, float]] = Field(
        default_factory=dict, alias="pathMbps",
        description="network -> peer rank -> Mb/s this rank measured downloading from it "
        "(its best round)")
    path_mbps_low: Dict[str, Dict[str, float]] = Field(
        default_factory=dict, alias="pathMbpsLow", description="the same pairs' typical round (the middle of three)")
    nccl_bootstrap: Optional[NcclBootstrap] = None
    settings: Dict[str, str] = Field(
        default_factory=dict, description="the NCCL/gloo variables that must agree across "
        "ranks, as set on this node (disttrain_probe/contract/settings.py MUST_AGREE)")
    # -- several processes per node (additive; absent with one process per node) --
    local_world_size: Optional[int] = Field(
        default=None, description="processes the probe ran on this node (numProcPerNode); "
        "rank and worldSize still count nodes, the process world is worldSize x this")
    intra_node: Optional[AllReduce] = Field(
        default=None, description="local rank 0's timed all-reduce among this node's local "
        "ranks (the intra-node path), busbw with n = localWorldSize")
    local_ranks: List[LocalRank] = Field(
        default_factory=list, description="one outcome per local rank (only those that did "
        "not pass when the report was cut to fit)")

    @property
    def failure_reason(self) -> Optional[str]:
        return self.failure.reason if self.failure else None


class _Refused(ValueError):
    """Raised by the json hooks below; parse_report turns it into ReportInvalid."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"report contains {name}, which is not JSON (NaN, Infinity and -Infinity "
                   "cannot be written into the job's status)")


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):
        raise _Refused(f"report number {text[:40]} is not a finite float64")
    return x


def _int64(text: str) -> int:
    if len(text) > 20:  # longer than any int64, and int() of huge strings is slow
        raise _Refused(f"report integer {text[:24]}... is outside int64")
    x = int(text)
    if not INT64_MIN <= x <= INT64_MAX:
        raise _Refused(f"report integer {text} is outside int64")
    return x


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Refused(f"report has the duplicate key {k!r} (which one counts is ambiguous)")
        out[k] = v
    return out


def _depth(text: str) -> int:
    """Deepest nesting of [ and { outside strings (the text need not be valid JSON)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _unencodable(obj: Any, path: str = "$") -> Optional[str]:
    """The path of the first key or string that UTF-8 cannot encode (a lone surrogate such
    as "\\ud800", valid as a JSON escape but not as text), else None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return path
    elif isinstance(obj, list):
        for i, x in enumerate(obj):
            bad = _unencodable(x, f"{path}[{i}]")
            if bad:
                return bad
    elif isinstance(obj, dict):
        for k, x in obj.items():
            bad = _unencodable(k, f"{path} (a key)") or _unencodable(x, f"{path}.{k}")
            if bad:
                return bad
    return None


def parse_report(raw: Union[str, bytes, None]) -> ProbeReport:
    """Parse and validate one termination message (at most :data:`MAX_REPORT_BYTES` bytes
    of UTF-8 JSON, nested at most :data:`MAX_REPORT_DEPTH` deep). Returns the report, whose
    ``model_dump(mode="json")`` is always strict JSON (finite floats, int64 integers, valid
    UTF-8). Raises :class:`ReportInvalid`, and nothing else, for anything else."""
    try:
        return _parse(raw)
    except ReportInvalid:
        raise
    except (ValueError, TypeError, RecursionError, MemoryError) as e:  # pragma: no cover - belt
        raise ReportInvalid(f"report could not be read: {type(e).__name__}: {e}"[:300]) from None


def _parse(raw: Union[str, bytes, None]) -> ProbeReport:
    if raw is None:
        raise ReportInvalid("empty report")
    if isinstance(raw, str):
        data = raw.encode("utf-8", "surrogatepass")
    elif isinstance(raw, (bytes, bytearray)):
        data = bytes(raw)
    else:
        raise ReportInvalid(f"report is a {type(raw).__name__}, not text")
    if len(data) > MAX_REPORT_BYTES:
        raise ReportInvalid(f"report is {len(data)} bytes, over the {MAX_REPORT_BYTES}-byte cap")
    if not data.strip():
        raise ReportInvalid("empty report")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ReportInvalid(f"report is not JSON: not UTF-8 text ({e})") from None
    depth = _depth(text)
    if depth > MAX_REPORT_DEPTH:
        raise ReportInvalid(f"report is nested {depth} deep, over the limit of {MAX_REPORT_DEPTH}")
    try:
        obj = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                         parse_int=_int64, object_pairs_hook=_unique_keys)
    except _Refused as e:
        raise ReportInvalid(str(e)) from None
    except ValueError as e:
        raise ReportInvalid(f"report is not JSON: {e}") from None
    bad = _unencodable(obj)
    if bad:
        raise ReportInvalid(f"report text at {bad} is not valid UTF-8 (a lone surrogate escape "
                            "such as \\ud800)")
    if not isinstance(obj, dict):
        raise ReportInvalid(f"report is a JSON {type(obj).__name__}, not an object")
    v = obj.get("v")
    if type(v) is not int or v != REPORT_VERSION:
        raise ReportInvalid(f"report version {v!r} is not supported (want {REPORT_VERSION})"[:300])
    try:
        return ProbeReport.model_validate(obj)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        msg = str(first.get("msg", "")).removeprefix("Value error, ")
        rank = f" of rank {obj['rank']}" if type(obj.get("rank")) is int else ""
        raise ReportInvalid(f"report{rank} does not match the schema: {loc}: {msg} "
                            f"({e.error_count()} error(s))"[:400]) from None
