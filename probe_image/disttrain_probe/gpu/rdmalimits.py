"""What stops NCCL's RDMA transport at its first connection although the ports are up: the
locked-memory limit and the RoCE GID index (standard library only, pure).

NCCL over InfiniBand or RoCE registers its buffers with ``ibv_reg_mr``, which pins them;
above ``RLIMIT_MEMLOCK`` (unless the process holds ``CAP_IPC_LOCK``) the kernel refuses and
NCCL fails with "Call to ibv_reg_mr failed with error Cannot allocate memory"
(NVIDIA/nccl-tests#206: ``ulimit -l`` was 8192 KiB). A container inherits the runtime's
limit and Kubernetes has no field for it, so the fixes are ``IPC_LOCK`` in the container's
``securityContext.capabilities.add`` or the runtime's own limit (``LimitMEMLOCK=infinity``
in containerd's unit).

On RoCE, ``NCCL_IB_GID_INDEX`` picks an entry of each port's GID table. In Kubernetes the
table is per pod (macvlan or SR-IOV interfaces: a pod may hold entries 4-7 while its
neighbour holds 6-7, NVIDIA/nccl#718, k8snetworkplumbingwg/multus-cni#1100,
NVIDIA/nccl#1573), so an index that differs between pods is legitimate and one that
selects an empty entry fails ("Call to ibv_modify_qp failed with error No such device").

:func:`check` returns the failure (``MemlockTooLow``, ``GIDIndexInvalid``) and the
warnings for one node, given its inventory (``hardware.collect``), its environment and
the collective's backend.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from disttrain_probe.contract.settings import nccl_int
from disttrain_probe.contract.vocabulary import GID_INDEX_INVALID, MEMLOCK_TOO_LOW, RISKY_SETTING
from disttrain_probe.gpu import rdma
from disttrain_probe.gpu.hardware import Hardware

MEMLOCK_MIN_BYTES = 64 << 20  # below this NCCL's buffers for a few channels do not fit
Port = Tuple[str, rdma.Port]  # (device name, port entry of rdma.devices)


@dataclass(frozen=True)
class Limits:
    """:func:`check`'s answer: at most one ``failure`` ``{"reason", "message"}`` and any
    number of ``warnings`` of the same shape; messages at most 400 characters."""
    failure: Optional[Dict[str, str]] = None
    warnings: List[Dict[str, str]] = field(default_factory=list)


def hca_selected(spec: Optional[str], dev: str, port: int) -> bool:
    """Whether ``NCCL_IB_HCA`` = ``spec`` lets NCCL use ``dev``:``port``. NCCL's syntax: a
    comma-separated list of ``name[:port]``; each name is a prefix (``mlx5`` matches
    ``mlx5_0``) unless the list starts with ``=`` (exact names); a leading ``^`` (before
    any ``=``) excludes the listed ones instead. An entry without a name (``:1``) is
    skipped, and a list with no entry (unset, empty, ``=``, ``,,``) matches every device,
    so ``^`` alone excludes them all (NCCL's ``parseStringList`` and ``matchIfList``). Pure."""
    text = (spec or "").strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    items = [i.partition(":") for i in (t.strip() for t in text.split(","))
             if i.partition(":")[0].strip()]
    if not items:
        return not exclude
    hit = False
    for name, _, want_port in items:
        name = name.strip()
        if not (dev == name if exact else dev.startswith(name)):
            continue
        if want_port.strip() and want_port.strip().split(":")[0] != str(port):
            continue
        hit = True
        break
    return not hit if exclude else hit


def ports_in_use(hw: Hardware, env: Mapping[str, str], backend: Optional[str]) -> List[Port]:
    """The RDMA ports NCCL will open on this node: none unless ``backend`` is nccl, NCCL
    may use its IB transport (``NCCL_IB_DISABLE`` is not 1, ``NCCL_NET`` is not Socket,
    ``libibverbs`` is in the image) and the port is ACTIVE and selected by
    ``NCCL_IB_HCA``. Pure."""
    if backend != "nccl" or nccl_int(env.get("NCCL_IB_DISABLE", "")) not in (None, 0):
        return []
    if str(env.get("NCCL_NET", "")).strip().lower() == "socket" or not hw.get("ibverbs"):
        return []
    return [(d.get("name") or "?", p) for d in hw.get("rdma") or [] for p in d.get("ports") or []
            if (p.get("state") or "").upper() == "ACTIVE"
            and hca_selected(env.get("NCCL_IB_HCA"), d.get("name") or "", p.get("port") or 0)]


def size_text(n: int) -> str:
    """Bytes as the ``ulimit -l`` user reads them: "64 KiB", "8 MiB", "1.5 GiB". Pure."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) or v >= 10 else f"{v:.1f} {unit}"
    return f"{n} bytes"


def _names(ports: List[Port], most: int = 3) -> str:
    names = [f"{d}:{p.get('port')}" for d, p in ports]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def memlock_finding(hw: Hardware, ports: List[Port], node: str) -> Limits:
    """``MemlockTooLow`` as a failure when the soft limit is below
    :data:`MEMLOCK_MIN_BYTES` and as a warning when it is finite above it, for a process
    without ``CAP_IPC_LOCK`` that will register memory on ``ports``; nothing otherwise
    (no ports in use, unlimited, or the capability held). Pure."""
    lim = hw.get("memlock") or {}
    soft = lim.get("softBytes")
    if not ports or soft is None or lim.get("ipcLock") or not isinstance(soft, int):
        return Limits()
    head = (f"{node}: the locked-memory limit (ulimit -l) is {size_text(soft)} and the container "
            f"lacks CAP_IPC_LOCK, while NCCL will register its buffers on RDMA port(s) "
            f"{_names(ports)}")
    fix = ("add IPC_LOCK to the training container's securityContext.capabilities.add, or "
           "make the container runtime's memlock limit unlimited (LimitMEMLOCK=infinity in "
           "containerd's systemd unit)")
    if soft < MEMLOCK_MIN_BYTES:
        return Limits(failure={"reason": MEMLOCK_TOO_LOW, "message": (
            f"{head}: ibv_reg_mr fails with 'Cannot allocate memory' at the first "
            f"collective; {fix}")[:400]})
    return Limits(warnings=[{"reason": MEMLOCK_TOO_LOW, "message": (
        f"{head}: it fits this probe, but more channels, peers or registered user buffers "
        f"fail with 'Cannot allocate memory' past it; {fix}")[:400]}])


def _best_gid(gids: List[rdma.Gid]) -> Optional[rdma.Gid]:
    """The entry NCCL's own selection prefers: RoCE v2 with an IPv4 address, else RoCE v2
    with a global IPv6 one."""
    for family in ("IPv4", "IPv6"):
        for g in gids:
            if g.get("type") == "RoCE v2" and g.get("family") == family:
                return g
    return None


def gid_finding(ports: List[Port], env: Mapping[str, str], node: str) -> Limits:
    """From ``NCCL_IB_GID_INDEX`` (unset, negative or not a number: NCCL selects the GID
    itself, nothing to check) on the RoCE ports in use: ``GIDIndexInvalid`` when the
    index selects an empty entry of a port's table (when the table was read whole), a
    ``RiskySetting`` warning when it selects a link-local or RoCE v1 GID. Pure."""
    index = nccl_int(env.get("NCCL_IB_GID_INDEX", ""))
    if index is None or not 0 <= index < 10 ** 9:
        return Limits()
    roce = [(d, p) for d, p in ports if (p.get("linkLayer") or "").lower() == "ethernet"]
    empty: List[str] = []
    weak: List[str] = []
    hint = ""
    for dev, port in roce:
        gids = port.get("gids") or []
        hit = next((g for g in gids if g.get("index") == index), None)
        if hit is None and not port.get("gidsTruncated"):
            empty.append(f"{dev}:{port.get('port')}")
            best = _best_gid(gids)
            have = ",".join(str(g.get("index")) for g in gids[:8]) or "none"
            hint = hint or (f" ({dev}:{port.get('port')} holds GIDs {have}"
                            + (f"; {best['index']} is RoCE v2 {best.get('address')}" if best else "")
                            + ")")
        elif hit is not None and (hit.get("family") == "link-local" or hit.get("type") != "RoCE v2"):
            weak.append(f"{dev}:{port.get('port')} ({hit.get('type') or '?'} "
                        f"{hit.get('address') or hit.get('family') or '?'})")
    if empty:
        return Limits(failure={"reason": GID_INDEX_INVALID, "message": (
            f"{node}: NCCL_IB_GID_INDEX={index} selects an empty GID on {', '.join(empty[:3])}"
            f"{hint}; NCCL fails with 'ibv_modify_qp failed with error No such device'. GID "
            f"tables differ per pod; unset NCCL_IB_GID_INDEX (NCCL >= 2.21 picks a RoCE v2 GID "
            f"itself) or set it per pod to an index its own table holds")[:400]})
    if weak:
        return Limits(warnings=[{"reason": RISKY_SETTING, "message": (
            f"{node}: NCCL_IB_GID_INDEX={index} selects {', '.join(weak[:3])}: a link-local or "
            f"RoCE v1 GID is not routed between subnets, so peers behind a router time out; "
            f"unset it (NCCL >= 2.21 picks a RoCE v2 GID) or pick the RoCE v2 IPv4 entry")[:400]}])
    return Limits()


def check(hw: Hardware, env: Mapping[str, str], node: str, backend: Optional[str]) -> Limits:
    """Both checks for this node, before NCCL opens its RDMA ports: the failure that comes
    first (``MemlockTooLow``, then ``GIDIndexInvalid``) and every warning. ``hw``:
    ``hardware.collect``'s inventory; ``env``: the process environment NCCL will read;
    ``backend``: the collective's ("nccl", "gloo"). Pure."""
    ports = ports_in_use(hw, env, backend)
    found = [memlock_finding(hw, ports, node), gid_finding(ports, env, node)]
    failure = next((f.failure for f in found if f.failure), None)
    return Limits(failure=failure, warnings=[w for f in found for w in f.warnings])


__all__ = ["Limits", "MEMLOCK_MIN_BYTES", "check", "gid_finding", "hca_selected",
           "memlock_finding", "nccl_int", "ports_in_use", "size_text"]
