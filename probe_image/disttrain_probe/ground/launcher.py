"""Which launcher started the probe, and what it tells a rank (standard library only).

The probe runs as a Kubernetes pod (the operator sets RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT) and on bare nodes under the launchers people train with:

- ``torchrun --nnodes N --nproc-per-node P -m disttrain_probe``: torchrun's agent
  (torch/distributed/elastic/agent/server/local_elastic_agent.py) gives every worker
  RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT and
  TORCHELASTIC_USE_AGENT_STORE. With ``TORCHELASTIC_USE_AGENT_STORE=True`` (the static
  and c10d rendezvous both say so) the agent of node 0 already hosts a TCPStore on
  MASTER_ADDR:MASTER_PORT and every worker, rank 0 included, must join it as a client
  (torch/distributed/rendezvous.py, ``_create_c10d_store``): binding the port again
  fails with "Address already in use". The probe keeps its keys under
  ``disttrain/<run id>/<restart count>/`` there, so a restarted worker group never reads
  a previous attempt's keys.
- Slurm ``srun``: SLURM_PROCID (rank), SLURM_NTASKS (world size), SLURM_LOCALID (local
  rank), SLURMD_NODENAME, and the allocation's hosts in SLURM_JOB_NODELIST
  (SLURM_NODELIST, SLURM_STEP_NODELIST) in Slurm's compressed form
  (``gpu[01-04,07],login1``); MASTER_ADDR is the first host (:func:`first_host`) unless
  set, MASTER_PORT defaults to :func:`slurm_port` of the job id.

:func:`resolve` fills what the launcher gives into the environment the probe's config
reads, never overriding a variable the user set. Pure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from disttrain_probe.contract import probe_env

TORCHRUN = "torchrun"
SLURM = "slurm"
ENV = "env"
SLURM_NODELIST_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST")
SLURM_PORT_BASE = 20000  # MASTER_PORT under Slurm: SLURM_PORT_BASE + job id % SLURM_PORT_SPAN
SLURM_PORT_SPAN = 20000


class LauncherError(ValueError):
    """A launcher's variables are inconsistent or malformed; the message names them."""


@dataclass(frozen=True)
class Launch:
    """What the launcher decided.

    ``name``: torchrun | slurm | env. ``agent_store``: join the launcher's TCPStore at
    MASTER_ADDR:MASTER_PORT as a client on every rank (torchrun), instead of rank 0
    hosting one. ``store_prefix``: the key prefix to use in that shared store ("" when
    the probe owns its store). ``local_world_size``: ranks on this node (None: unknown).
    ``single_node``: every rank runs on this node."""

    name: str = ENV
    agent_store: bool = False
    store_prefix: str = ""
    local_world_size: Optional[int] = None
    single_node: bool = False


def split_nodelist(nodelist: str) -> List[str]:
    """Slurm's compressed list split at the commas outside brackets:
    ``"gpu[01-02,05],cpu3"`` -> ``["gpu[01-02,05]", "cpu3"]``. Raises LauncherError for
    unbalanced brackets. Pure."""
    out, depth, cur = [], 0, ""
    for ch in nodelist.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise LauncherError(f"node list {nodelist!r}: ']' without '['")
        if ch == "," and depth == 0:
            if cur:
                out.append(cur)
            cur = ""
            continue
        cur += ch
    if depth != 0:
        raise LauncherError(f"node list {nodelist!r}: '[' without ']'")
    if cur:
        out.append(cur)
    return out


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list, as Slurm orders it (``scontrol show hostnames``
    prints it first): ``"gpu[07-09,01]"`` -> ``"gpu07"``, ``"rack[2-3]-n[001-004]"`` ->
    ``"rack2-n001"``, ``"login1,gpu[1-2]"`` -> ``"login1"``. A range's zero padding is
    that of its first bound. Raises LauncherError for an empty or malformed list. Pure."""
    items = split_nodelist(nodelist)
    if not items:
        raise LauncherError("empty Slurm node list")
    host = items[0]
    out = ""
    pos = 0
    for m in re.finditer(r"\[([^\[\]]*)\]", host):
        out += host[pos:m.start()]
        first = m.group(1).split(",")[0].strip()
        lo = first.split("-")[0].strip()
        if not lo or not lo.isdigit():
            raise LauncherError(f"node list {nodelist!r}: bad range {m.group(0)!r}")
        out += lo
        pos = m.end()
    out += host[pos:]
    if not out or "[" in out or "]" in out or not re.match(r"^[A-Za-z0-9._-]+$", out):
        raise LauncherError(f"node list {nodelist!r}: cannot read a host name")
    return out


def slurm_port(job_id: Optional[str]) -> int:
    """A MASTER_PORT for Slurm job ``job_id`` (every task of a job computes the same one;
    two jobs on a node rarely collide): SLURM_PORT_BASE + id % SLURM_PORT_SPAN; 29500
    without a numeric id. Pure."""
    if job_id and job_id.strip().isdigit():
        return SLURM_PORT_BASE + int(job_id.strip()) % SLURM_PORT_SPAN
    return 29500


def _int(env: Dict[str, str], var: str) -> Optional[int]:
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise LauncherError(f"{var}={raw!r} is not a non-negative integer")
    return int(raw)


def detect(env: Dict[str, str]) -> str:
    """torchrun when TORCHELASTIC_RUN_ID is set (torchrun inside srun is torchrun), slurm
    when SLURM_PROCID is, else env. Pure."""
    if env.get("TORCHELASTIC_RUN_ID") is not None:
        return TORCHRUN
    if env.get("SLURM_PROCID") is not None:
        return SLURM
    return ENV


def resolve(env: Dict[str, str]) -> Tuple[Dict[str, str], Launch]:
    """``env`` with the launcher's answers filled in where the user set nothing (RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, NODE_NAME; on a single node also
    DISTTRAIN_PROBE_SOCKET_IFNAME=lo, since every rank is local and MASTER_ADDR is
    loopback), and the :class:`Launch`. Raises LauncherError for malformed launcher
    variables. Pure (returns a new dict)."""
    out = dict(env)
    kind = detect(env)

    def fill(var: str, value: Optional[object]) -> None:
        if value is not None and not out.get(var):
            out[var] = str(value)

    if kind == TORCHRUN:
        local = _int(env, "LOCAL_WORLD_SIZE")
        world = _int(env, "WORLD_SIZE")
        groups = _int(env, "GROUP_WORLD_SIZE")
        single = groups == 1 or (local is not None and local == world)
        agent = (env.get("TORCHELASTIC_USE_AGENT_STORE") or "").strip() == "True"
        run_id = (env.get("TORCHELASTIC_RUN_ID") or "none").strip() or "none"
        restart = (env.get("TORCHELASTIC_RESTART_COUNT") or "0").strip() or "0"
        if single:
            fill(probe_env.SOCKET_IFNAME, "lo")
        return out, Launch(TORCHRUN, agent, f"disttrain/{run_id}/{restart}/" if agent else "",
                           local, single)
    if kind == SLURM:
        rank = _int(env, "SLURM_PROCID")
        ntasks = _int(env, "SLURM_NTASKS")
        if ntasks is not None and rank is not None and rank >= ntasks:
            raise LauncherError(f"SLURM_PROCID={rank} must be < SLURM_NTASKS={ntasks}")
        nodelist = next((env[v] for v in SLURM_NODELIST_VARS if env.get(v)), None)
        fill("RANK", rank)
        fill("WORLD_SIZE", ntasks)
        fill("LOCAL_RANK", _int(env, "SLURM_LOCALID"))
        fill("NODE_NAME", env.get("SLURMD_NODENAME") or None)
        if nodelist:
            fill("MASTER_ADDR", first_host(nodelist))
        fill("MASTER_PORT", slurm_port(env.get("SLURM_JOB_ID")))
        nnodes = _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES")
        local = None
        per_node = (env.get("SLURM_TASKS_PER_NODE") or "").split("(")[0].split(",")[0]
        if per_node.isdigit():
            local = int(per_node)
        return out, Launch(SLURM, False, "", local, nnodes == 1)
    return out, Launch()
