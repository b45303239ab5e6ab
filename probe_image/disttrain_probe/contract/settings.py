"""Settings that must agree across ranks, and settings known to break or slow training (pure).

NCCL reads its environment on every rank independently: a protocol, algorithm, transport
or buffer size set on one node only makes ranks disagree about how to talk, which hangs or
fails at the first collective (or quietly slows it). The probe compares the variables in
:data:`MUST_AGREE` across nodes (``SettingsMismatch``, a per-node table) and warns about
settings that override or hobble what the operator validated (``RiskySetting``).
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional

from . import vocabulary
from .versions import odd_nodes

MUST_AGREE = (
    "NCCL_PROTO", "NCCL_ALGO", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_NET_PLUGIN",
    "NCCL_SOCKET_FAMILY", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_BUFFSIZE",
    "NCCL_CROSS_NIC", "NCCL_IB_HCA", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS",
    "GLOO_DEVICE_TRANSPORT",
)  # not NCCL_IB_GID_INDEX: each pod's GID table is its own (gpu/rdmalimits.py checks it)
UNSET = "unset"


def of(env: Mapping[str, str]) -> Dict[str, str]:
    """The :data:`MUST_AGREE` variables set in ``env`` (value cut to 64 characters)."""
    return {k: str(env[k])[:64] for k in MUST_AGREE if k in env}


def rdma_devices(root: str = "/sys/class/infiniband") -> List[str]:
    """RDMA devices of this node (InfiniBand / RoCE: mlx5_0, ...), sorted; [] without."""
    try:
        return sorted(os.listdir(root))[:8]
    except OSError:
        return []


def mismatch(peers: Dict[int, Dict[str, Any]]) -> Optional[Dict[str, str]]:
    """The first :data:`MUST_AGREE` variable whose value differs between nodes, as
    {reason, message} with a per-node table naming the odd node(s); None when all agree.
    ``peers``: rank -> {node, settings}."""
    rows = {(p.get("node") or f"rank-{r}"): (p.get("settings") or {}) for r, p in peers.items()}
    for key in MUST_AGREE:
        values = {n: s.get(key, UNSET) for n, s in rows.items()}
        if len(set(values.values())) <= 1:
            continue
        odd = odd_nodes(values)
        if len(odd) == len(values) and UNSET in values.values():
            odd = sorted(n for n, v in values.items() if v != UNSET)  # no majority: unset is NCCL's default
        groups: Dict[str, List[str]] = {}
        for n in sorted(values):
            groups.setdefault(values[n], []).append(n)
        table = "; ".join(f"{_nodes(ns)}: {key}={v}" if v != UNSET else f"{_nodes(ns)}: {key} unset"
                          for v, ns in sorted(groups.items(), key=lambda kv: kv[1][0]))
        return {"reason": vocabulary.SETTINGS_MISMATCH, "message": (
            f"{key} differs between nodes ({table}): ranks that disagree on it hang or fail at "
            f"the first collective; set it the same on every node (check the env of "
            f"{', '.join(odd)}: the template, the image, the node)")}
    return None


def nccl_int(value: object) -> Optional[int]:
    """An integer variable as NCCL reads it (``strtoll(value, &end, 0)``: leading blanks, a
    sign, then decimal, ``0x`` hex or ``0`` octal, up to the first other character); None
    for no number at all (NCCL reads 0) or one out of int64 (NCCL keeps its default). Pure."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", str(value))
    if not m or len(m.group(2)) > 24:
        return None
    sign, digits = m.groups()
    v = int(digits, 16 if digits[:2] in ("0x", "0X") else 8 if digits[0] == "0" else 10)
    v = -v if sign == "-" else v
    return v if -(1 << 63) <= v < (1 << 63) else None


def _nodes(names: List[str], most: int = 4) -> str:
    return ", ".join(names) if len(names) <= most else f"{', '.join(names[:most - 1])} and {len(names) - most + 1} more"


def risky(node: str, env: Mapping[str, str], rdma: List[str],
          chosen_ifname: Optional[str]) -> List[Dict[str, str]]:
    """Warnings (RiskySetting) for settings known to break or slow training on this node."""
    out = []
    if nccl_int(env.get("NCCL_IB_DISABLE", "")) not in (None, 0) and rdma:
        out.append({"reason": vocabulary.RISKY_SETTING, "message": (
            f"{node}: NCCL_IB_DISABLE={str(env.get('NCCL_IB_DISABLE')).strip()[:16]} while it has RDMA devices ({', '.join(rdma[:3])}): NCCL "
            f"will use TCP sockets instead of InfiniBand/RoCE, far slower; unset it unless that "
            f"is intended")})
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        v = env.get(var)
        if v and chosen_ifname and v.lstrip("=") != chosen_ifname:
            out.append({"reason": vocabulary.RISKY_SETTING, "message": (
                f"{node}: the image or template sets {var}={v}, not the validated "
                f"{chosen_ifname}; the operator replaces it in the training pod's env, but a "
                f"launcher script that sets it again overrides the validated choice; remove it")})
    return out


__all__ = ["MUST_AGREE", "mismatch", "of", "rdma_devices", "risky"]
