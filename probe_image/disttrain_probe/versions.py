"""Phase 5, versions: compare every rank's torch/CUDA/NCCL/driver before any init.

Mismatched NCCL versions make init hang or fail with "Message truncated"; the probe
fails fast instead. Pure: works on the all-gathered inventories.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from . import reasons as R

ORDER = (("nccl", R.NCCL_VERSION_MISMATCH, "NCCL"),
         ("torch", R.TORCH_VERSION_MISMATCH, "torch"),
         ("cuda", R.CUDA_VERSION_MISMATCH, "CUDA (torch build)"),
         ("driver", R.DRIVER_VERSION_MISMATCH, "NVIDIA driver"))


def check(peers: Dict[int, Dict[str, Any]]) -> Optional[Dict[str, str]]:
    """First mismatch as {reason, message}, or None when all ranks agree."""
    for key, reason, label in ORDER:
        groups: Dict[str, list] = {}
        for r in sorted(peers):
            v = (peers[r].get("versions") or {}).get(key)
            groups.setdefault(str(v) if v is not None else "none", []).append(
                peers[r].get("node") or f"rank-{r}")
        if len(groups) > 1:
            parts = "; ".join(f"{v} on {', '.join(sorted(set(ns)))}" for v, ns in
                              sorted(groups.items(), key=lambda kv: -len(kv[1])))
            fix = ("run the same training image on every node" if key != "driver"
                   else "upgrade the nodes to one driver version or pin the job to matching nodes")
            return {"reason": reason, "message": f"{label} versions differ: {parts}; {fix}"}
    return None
