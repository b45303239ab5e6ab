"""Probe configuration from the environment, overridable by CLI flags (bare-node use)."""
from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import List, Mapping, Optional, Sequence, Tuple

from disttrain_probe.contract import probe_env
from disttrain_probe.contract.report_format import MAX_REPORT_BYTES, parse_budget
from disttrain_probe.contract.timing import default_resolve_seconds
from disttrain_probe.ground.launcher import LauncherError, resolve
from disttrain_probe.ground.roles import MAX_NPROC

DEFAULT_MESSAGE_SIZE = 4 * 1024 * 1024
DEFAULT_ITERATIONS = 10
DEFAULT_TIMEOUT = 60.0
DEFAULT_REPORT_PATH = "/dev/termination-log"
# With evidence that rank 0's probe started before this rank (DISTTRAIN_PROBE_MASTER_STARTED_AT),
# how long after this probe started a failing dial to the master is a verdict, in seconds.
DEFAULT_MASTER_GRACE = 5.0


class ConfigError(ValueError):
    """Bad or missing input; the message says which variable and what was seen."""


@dataclass
class Config:
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    node_name: str
    pod_name: Optional[str] = None
    host_ip: Optional[str] = None
    backend: str = "auto"            # auto | nccl | gloo (auto resolved in collective)
    socket_ifname: str = "auto"      # auto | NCCL_SOCKET_IFNAME-style spec
    message_size_bytes: int = DEFAULT_MESSAGE_SIZE
    iterations: int = DEFAULT_ITERATIONS
    timeout_seconds: float = DEFAULT_TIMEOUT
    min_busbw_gbps: float = 0.0
    port_range: Optional[Tuple[int, int]] = None
    report_path: str = DEFAULT_REPORT_PATH
    # the bytes of the termination message the kubelet keeps (DISTTRAIN_PROBE_REPORT_BYTES:
    # 12 KiB shared by the pod's containers, at most 4096; contract/report_format.py)
    report_bytes: int = MAX_REPORT_BYTES
    local_rank: int = 0
    # How long a name that does not resolve is retried (seconds): a headless Service's
    # record appears within a second or two of the pod getting its address.
    resolve_seconds: float = 10.0
    # RFC 3339 time rank 0's probe container started, set by the operator only when rank 0
    # was already running before this rank's pod was created (None: no such evidence).
    master_started_at: Optional[str] = None
    master_grace_seconds: float = DEFAULT_MASTER_GRACE
    # A second TCP port rank 0 listens on right after MASTER_PORT (DISTTRAIN_PROBE_BEACON_PORT,
    # set by the operator; with hostNetwork a hostPort of rank 0's probe): a rank refused on
    # MASTER_PORT that is answered there by this job's rank 0 knows rank 0 listens, so the
    # refusal is a rule.
    beacon_port: Optional[int] = None
    # Another DNS name of this job (DISTTRAIN_PROBE_PEER_DNS_NAME: this pod's own, rank 1's
    # for rank 0): when it resolves and MASTER_ADDR does not, the Service and the DNS path
    # work and rank 0's record is only late (its pod has no address yet): the rank keeps
    # resolving until the rendezvous deadline instead of resolve_seconds.
    peer_dns_name: Optional[str] = None
    # Echoed in the report so the operator can tell this run's report from another job's
    # (same name, deleted and re-applied) or an older attempt's: the job's UID and the
    # probe attempt (None when run outside the operator).
    job_uid: Optional[str] = None
    attempt: Optional[int] = None
    # The launcher that started the probe (launcher.py): torchrun's agent may already
    # host the store on MASTER_PORT (agent_store: every rank joins it as a client, keys
    # under store_prefix).
    launcher: str = "env"
    agent_store: bool = False
    store_prefix: str = ""
    # Processes per node (DISTTRAIN_PROBE_NPROC_PER_NODE, the job's numProcPerNode): local
    # rank 0 (this process) starts local ranks 1..n-1 for the collective phase
    # (localranks.py). RANK and WORLD_SIZE stay the node rank and the number of nodes.
    nproc_per_node: int = 1
    # In place (``python -m disttrain_probe [probe args] -- <command>``, run/inplace.py): the
    # training command runs in this process after a pass, only once every rank passed; the
    # report file is then replaced atomically (a relay container waits for it to appear).
    in_place: bool = False

    @property
    def spawns_local_ranks(self) -> bool:
        """This process is local rank 0 of several that the probe starts itself (not a
        launcher's: under torchrun or srun every process is already a rank)."""
        return self.nproc_per_node > 1

    @property
    def loopback_requested(self) -> bool:
        """The user asked for ``lo`` explicitly: single-host mode (tests, laptops)."""
        return self.socket_ifname.strip() in ("lo", "=lo")


def _int(name: str, raw: Optional[str], minimum: int = 0) -> int:
    try:
        v = int(str(raw).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={raw!r} is not an integer")
    if v < minimum:
        raise ConfigError(f"{name}={v} must be >= {minimum}")
    return v


def _optional_int(name: str, raw: Optional[str]) -> Optional[int]:
    """``raw`` as an integer >= 0, None when unset; ConfigError naming ``name`` otherwise."""
    return None if raw is None else _int(name, raw, 0)


def _beacon_port(raw: Optional[str], master_port: int) -> Optional[int]:
    """DISTTRAIN_PROBE_BEACON_PORT as a TCP port other than MASTER_PORT, None when unset or
    empty; ConfigError otherwise."""
    if raw is None or not str(raw).strip():
        return None
    v = _int(probe_env.BEACON_PORT, raw, 1)
    if v > 65535 or v == master_port:
        raise ConfigError(f"{probe_env.BEACON_PORT}={v} must be a TCP port other than "
                          f"MASTER_PORT={master_port}")
    return v


def _float(name: str, raw: Optional[str], minimum: float = 0.0) -> float:
    try:
        v = float(str(raw).strip())
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={raw!r} is not a number")
    if v < minimum:
        raise ConfigError(f"{name}={v} must be >= {minimum}")
    return v


def parse_started_at(raw: Optional[str]) -> Optional[datetime]:
    """``DISTTRAIN_PROBE_MASTER_STARTED_AT`` (RFC 3339, e.g. ``2026-11-30T12:00:00Z``, as
    Kubernetes writes ``state.running.startedAt``) -> an aware datetime in UTC; empty ->
    None. Raises :class:`ConfigError` for anything else (also a time without a zone)."""
    if raw is None or not str(raw).strip():
        return None
    text = str(raw).strip()
    try:  # Python < 3.11 does not take "Z"
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        t = None
    if t is None or t.tzinfo is None:
        raise ConfigError(f"{probe_env.MASTER_STARTED_AT}={raw!r} is not an RFC 3339 time "
                          f"with a zone (e.g. 2026-11-30T12:00:00Z)")
    return t.astimezone(timezone.utc)


def parse_port_range(raw: Optional[str]) -> Optional[Tuple[int, int]]:
    """``"lo-hi"`` -> (lo, hi); empty -> None."""
    if raw is None or not str(raw).strip():
        return None
    parts = str(raw).replace(" ", "").split("-")
    if len(parts) != 2:
        raise ConfigError(f"{probe_env.PORT_RANGE}={raw!r} is not 'lo-hi'")
    lo = _int(probe_env.PORT_RANGE, parts[0], 1)
    hi = _int(probe_env.PORT_RANGE, parts[1], 1)
    if lo > hi or hi > 65535:
        raise ConfigError(f"{probe_env.PORT_RANGE}={raw!r}: need 1 <= lo <= hi <= 65535")
    return (lo, hi)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m disttrain_probe",
        description="Preflight probe for multi-node PyTorch training. Every flag overrides "
                    "the environment variable named in its help.")
    a = p.add_argument
    a("--rank", help="RANK")
    a("--world-size", help="WORLD_SIZE")
    a("--master-addr", help="MASTER_ADDR")
    a("--master-port", help="MASTER_PORT")
    a("--node-name", help="NODE_NAME (default: hostname)")
    a("--pod-name", help="POD_NAME")
    a("--host-ip", help="HOST_IP")
    a("--backend", help=f"{probe_env.BACKEND}: auto|nccl|gloo")
    a("--socket-ifname", help=f"{probe_env.SOCKET_IFNAME}: auto or an NCCL_SOCKET_IFNAME value")
    a("--message-size-bytes", help=f"{probe_env.MESSAGE_SIZE_BYTES} (default 4194304)")
    a("--iterations", help=f"{probe_env.ITERATIONS} (default 10)")
    a("--timeout-seconds", help=f"{probe_env.TIMEOUT_SECONDS}: total budget (default 60)")
    a("--min-busbw-gbps", help=f"{probe_env.MIN_BUSBW_GBPS} (default 0: no threshold)")
    a("--port-range", help=f"{probe_env.PORT_RANGE}: 'lo-hi' the firewall admits")
    a("--report-path", help=f"{probe_env.REPORT_PATH} (default /dev/termination-log)")
    a("--master-started-at", help=f"{probe_env.MASTER_STARTED_AT}: when rank 0's probe started "
                                  "(RFC 3339); set it only if rank 0 ran before this rank started")
    a("--job-uid", help=f"{probe_env.JOB_UID}: echoed in the report (set by the operator)")
    a("--attempt", help=f"{probe_env.ATTEMPT}: probe attempt, echoed in the report")
    a("--nproc-per-node", help=f"{probe_env.NPROC_PER_NODE}: processes per node; local rank 0 "
                               "starts the others for the collective phase (default 1)")
    a("--master-grace-seconds", help=f"{probe_env.MASTER_GRACE_SECONDS}: with "
                                     "--master-started-at, stop dialling the master this many "
                                     "seconds after this probe started (default 5)")
    return p


def report_path_hint(argv: Optional[Sequence[str]] = None, env: Optional[Mapping[str, str]] = None) -> str:
    """Best-effort report path, usable even when the rest of the config is invalid."""
    env = os.environ if env is None else env
    argv = list(argv or [])
    for i, tok in enumerate(argv):
        if tok == "--report-path" and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith("--report-path="):
            return tok.split("=", 1)[1]
    return env.get(probe_env.REPORT_PATH) or DEFAULT_REPORT_PATH


def report_bytes_hint(env: Optional[Mapping[str, str]] = None) -> int:
    """The termination message's budget (:func:`report_format.parse_budget` of
    DISTTRAIN_PROBE_REPORT_BYTES), usable even when the rest of the config is invalid."""
    env = os.environ if env is None else env
    return parse_budget(env.get(probe_env.REPORT_BYTES))


class _Inputs:
    """The parsed --flags over the (launcher-resolved) environment: a flag wins, then a
    non-empty variable, then the default."""

    def __init__(self, ns: argparse.Namespace, env: Mapping[str, str]):
        self.ns = ns
        self.env = env

    def get(self, flag: Optional[str], var: str, default: Optional[str] = None) -> Optional[str]:
        if flag is not None:
            return flag
        v = self.env.get(var)
        return v if v not in (None, "") else default


def load(argv: Optional[Sequence[str]] = None, env: Optional[dict] = None) -> Config:
    """Build the config; raises :class:`ConfigError` naming the bad input."""
    try:  # torchrun / Slurm fill RANK, WORLD_SIZE, MASTER_* where the user set nothing
        env, launch = resolve(dict(os.environ if env is None else env))
    except LauncherError as e:
        raise ConfigError(str(e))
    ns = _parser().parse_args(list(argv or []))
    inputs = _Inputs(ns, env)
    get = inputs.get
    rank, world, port = _identity(inputs)
    backend = (get(ns.backend, probe_env.BACKEND, "auto") or "auto").strip().lower()
    if backend not in ("auto", "nccl", "gloo"):
        raise ConfigError(f"{probe_env.BACKEND}={backend!r}: expected auto, nccl or gloo")
    ifname = (get(ns.socket_ifname, probe_env.SOCKET_IFNAME, "auto") or "auto").strip()
    started = parse_started_at(get(ns.master_started_at, probe_env.MASTER_STARTED_AT))
    nproc, local_rank = _local_ranks(inputs, launch.name)
    timeout = _float(probe_env.TIMEOUT_SECONDS,
                     get(ns.timeout_seconds, probe_env.TIMEOUT_SECONDS, str(DEFAULT_TIMEOUT)), 1.0)
    size = _int(probe_env.MESSAGE_SIZE_BYTES,
                get(ns.message_size_bytes, probe_env.MESSAGE_SIZE_BYTES,
                    str(DEFAULT_MESSAGE_SIZE)), 4)
    return Config(
        rank=rank,
        world_size=world,
        master_addr=str(get(ns.master_addr, "MASTER_ADDR")).strip(),
        master_port=port,
        node_name=get(ns.node_name, "NODE_NAME") or socket.gethostname(),
        pod_name=get(ns.pod_name, "POD_NAME"),
        host_ip=get(ns.host_ip, "HOST_IP"),
        backend=backend,
        socket_ifname=ifname or "auto",
        message_size_bytes=size - size % 4,
        iterations=_int(probe_env.ITERATIONS,
                        get(ns.iterations, probe_env.ITERATIONS, str(DEFAULT_ITERATIONS)), 1),
        timeout_seconds=timeout,
        min_busbw_gbps=_float(probe_env.MIN_BUSBW_GBPS,
                              get(ns.min_busbw_gbps, probe_env.MIN_BUSBW_GBPS, "0")),
        port_range=parse_port_range(get(ns.port_range, probe_env.PORT_RANGE)),
        report_path=get(ns.report_path, probe_env.REPORT_PATH, DEFAULT_REPORT_PATH)
        or DEFAULT_REPORT_PATH,
        report_bytes=report_bytes_hint(env),
        local_rank=local_rank,
        resolve_seconds=_float(probe_env.RESOLVE_SECONDS,
                               env.get(probe_env.RESOLVE_SECONDS)
                               or str(default_resolve_seconds(timeout)), 0.0),
        master_started_at=started.strftime("%Y-%m-%dT%H:%M:%SZ") if started else None,
        master_grace_seconds=_float(probe_env.MASTER_GRACE_SECONDS,
                                    get(ns.master_grace_seconds, probe_env.MASTER_GRACE_SECONDS,
                                        str(DEFAULT_MASTER_GRACE)), 0.0),
        beacon_port=_beacon_port(env.get(probe_env.BEACON_PORT), port),
        peer_dns_name=(env.get(probe_env.PEER_DNS_NAME) or "").strip() or None,
        job_uid=get(ns.job_uid, probe_env.JOB_UID),
        attempt=_optional_int(probe_env.ATTEMPT, get(ns.attempt, probe_env.ATTEMPT)),
        launcher=launch.name, agent_store=launch.agent_store, store_prefix=launch.store_prefix,
        nproc_per_node=nproc,
    )


def _identity(inputs: _Inputs) -> Tuple[int, int, int]:
    """(RANK, WORLD_SIZE, MASTER_PORT), each present and in range (MASTER_ADDR present
    too). Raises :class:`ConfigError`."""
    ns, get = inputs.ns, inputs.get
    missing = [v for f, v in ((ns.rank, "RANK"), (ns.world_size, "WORLD_SIZE"),
                              (ns.master_addr, "MASTER_ADDR"), (ns.master_port, "MASTER_PORT"))
               if get(f, v) is None]
    if missing:
        raise ConfigError("missing required input: " + ", ".join(missing)
                          + " (set the environment variables or --flags)")
    world = _int("WORLD_SIZE", get(ns.world_size, "WORLD_SIZE"), 1)
    rank = _int("RANK", get(ns.rank, "RANK"), 0)
    if rank >= world:
        raise ConfigError(f"RANK={rank} must be < WORLD_SIZE={world}")
    port = _int("MASTER_PORT", get(ns.master_port, "MASTER_PORT"), 1)
    if port > 65535:
        raise ConfigError(f"MASTER_PORT={port} is not a TCP port")
    return rank, world, port


def _local_ranks(inputs: _Inputs, launcher: str) -> Tuple[int, int]:
    """(processes per node, LOCAL_RANK). Raises :class:`ConfigError` above
    :data:`MAX_NPROC`, for several under a launcher that starts one probe per process, or
    for a LOCAL_RANK out of range."""
    env = inputs.env
    nproc = _int(probe_env.NPROC_PER_NODE,
                 inputs.get(inputs.ns.nproc_per_node, probe_env.NPROC_PER_NODE, "1"), 1)
    if nproc > MAX_NPROC:
        raise ConfigError(f"{probe_env.NPROC_PER_NODE}={nproc}: at most {MAX_NPROC}")
    local_rank = _int("LOCAL_RANK", env.get("LOCAL_RANK") or "0", 0)
    if nproc > 1 and launcher != "env":
        raise ConfigError(f"{probe_env.NPROC_PER_NODE}={nproc} under {launcher}: the "
                          f"launcher already starts one probe per process (torchrun "
                          f"--nproc-per-node, srun --ntasks-per-node); leave it unset")
    if nproc > 1 and local_rank >= nproc:
        raise ConfigError(f"LOCAL_RANK={local_rank} must be < {probe_env.NPROC_PER_NODE}={nproc}")
    return nproc, local_rank


def parse_ifname_spec(spec: str) -> Tuple[str, List[Tuple[str, bool]]]:
    """Parse an NCCL_SOCKET_IFNAME-style value.

    Returns (mode, patterns) with mode ``auto`` | ``include`` | ``exclude`` and
    patterns as (text, exact): NCCL matches by prefix unless the list starts with ``=``.
    """
    s = (spec or "").strip()
    if not s or s.lower() == "auto":
        return "auto", []
    mode = "include"
    if s.startswith("^"):
        mode, s = "exclude", s[1:]
    exact = False
    if s.startswith("="):
        exact, s = True, s[1:]
    pats = [(p.strip(), exact) for p in s.split(",") if p.strip()]
    return mode, pats


def ifname_matches(name: str, patterns: Sequence[Tuple[str, bool]]) -> bool:
    for text, exact in patterns:
        if (name == text) if exact else name.startswith(text):
            return True
    return False
