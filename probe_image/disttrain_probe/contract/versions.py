"""Phase 5, versions: compare every rank's torch/CUDA/NCCL/driver before any init.

Mismatched NCCL versions make init hang or fail with "Message truncated"; the probe
fails fast instead. Pure: works on the all-gathered inventories. The message carries a
per-node table (node: torch, CUDA, NCCL) and names the node(s) that differ.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from . import vocabulary

ORDER = (("nccl", vocabulary.NCCL_VERSION_MISMATCH, "NCCL"),
         ("torch", vocabulary.TORCH_VERSION_MISMATCH, "torch"),
         ("cuda", vocabulary.CUDA_VERSION_MISMATCH, "CUDA (torch build)"),
         ("driver", vocabulary.DRIVER_VERSION_MISMATCH, "NVIDIA driver"))


def odd_nodes(values: Dict[str, str], expected: Optional[Dict[str, str]] = None) -> List[str]:
    """The nodes whose value is the odd one out, sorted.

    ``values``: node -> version. ``expected``: node -> the version that node should have
    (for NCCL, the one torch was built with); nodes that differ from it are the odd ones
    when that singles out some but not all nodes. Else the nodes outside the single
    largest group; else (no majority) every node.
    """
    if expected:
        off = sorted(n for n, v in values.items() if expected.get(n) and expected[n] != v)
        if off and len(off) < len(values):
            return off
    groups: Dict[str, List[str]] = {}
    for n, v in values.items():
        groups.setdefault(v, []).append(n)
    sizes = sorted((len(ns) for ns in groups.values()), reverse=True)
    if len(sizes) > 1 and sizes[0] > sizes[1]:
        big = max(groups.values(), key=len)
        return sorted(n for n in values if n not in big)
    return sorted(values)


def table(rows: Dict[str, Dict[str, Any]], lib_for: Sequence[str] = ()) -> str:
    """``node: torch X, CUDA Y, NCCL Z`` per node, sorted by node, joined by "; ".
    Unknown values are left out; the driver is shown when known; nodes in ``lib_for``
    also show where their libnccl was loaded from."""
    out = []
    for node in sorted(rows):
        v = rows[node] or {}
        parts = []
        for k, label in (("torch", "torch"), ("cuda", "CUDA"), ("nccl", "NCCL"), ("driver", "driver")):
            if v.get(k):
                lib = f" from {v['ncclLib']}" if k == "nccl" and node in lib_for and v.get("ncclLib") else ""
                parts.append(f"{label} {v[k]}{lib}")
        out.append(f"{node}: {', '.join(parts) or 'versions unknown'}")
    return "; ".join(out)


def fix_for(key: str, nodes: List[str]) -> str:
    """What to do about a mismatch of ``key`` (nccl, torch, cuda, driver) on ``nodes``."""
    where = ", ".join(nodes)
    if key == "nccl":
        return (f"make every node load the same NCCL: check LD_LIBRARY_PATH/LD_PRELOAD on "
                f"{where} (or the image's NCCL)")
    if key == "driver":
        return (f"upgrade {where} to the other nodes' driver or pin the job to nodes with one "
                f"driver version")
    return f"run the same training image on every node: check the image and PYTHONPATH on {where}"


def check(peers: Dict[int, Dict[str, Any]]) -> Optional[Dict[str, str]]:
    """First mismatch as {reason, message}, or None when all ranks agree.

    ``peers``: rank -> published summary with ``node`` and ``versions`` (nccl, ncclBuild,
    ncclLib, torch, cuda, driver). A value missing on some ranks counts as "none".
    """
    rows = {(p.get("node") or f"rank-{r}"): (p.get("versions") or {}) for r, p in peers.items()}
    for key, reason, label in ORDER:
        values = {n: (str(v[key]) if v.get(key) is not None else "none") for n, v in rows.items()}
        if len(set(values.values())) > 1:
            expected = ({n: str(v["ncclBuild"]) for n, v in rows.items() if v.get("ncclBuild")}
                        if key == "nccl" else None)
            odd = odd_nodes(values, expected)
            return {"reason": reason, "message": (
                f"{label} differs between nodes: "
                f"{table(rows, odd if key == 'nccl' else [])}; {fix_for(key, odd)}")}
    return None
