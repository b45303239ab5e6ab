"""Phase 4, interface choice: warnings about a chosen network.

Per rank: validated on loopback only, NCCL's own default differs from the chosen interface,
the kernel's route to the master or to a peer leaves by another interface; for all ranks:
an IPv4/IPv6 mix that may make NCCL pick different address families. Each warning is
``{"reason": vocabulary.*, "message": str}``. Pure apart from the ``warnings`` it fills.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from disttrain_probe.contract import vocabulary
from disttrain_probe.ground.shapes import Chosen
from disttrain_probe.phases.networks import ChoiceInputs, nodes_text


def warn(inputs: ChoiceInputs, chosen: Dict[int, Chosen], defaults: Dict[int, Optional[str]],
         rejected: Dict[int, List[Dict[str, str]]], warnings: Dict[int, List[Dict[str, str]]]) -> None:
    """Append to ``warnings`` (rank -> list) what the chosen interfaces (rank -> {ifname,
    addr, subnet}) leave to watch; ``defaults``: rank -> NCCL's own pick; ``rejected``:
    rank -> rejections (their reasons explain a differing default)."""
    peers, mesh, loopback_ok = inputs.peers, inputs.mesh, inputs.loopback_ok
    ranks = sorted(peers)
    for r in ranks:
        node = peers[r].get("node")
        c = chosen[r]
        d = defaults.get(r)
        if loopback_ok and c["ifname"] == "lo":
            warnings[r].append({"reason": vocabulary.LOOPBACK_ONLY, "message": (
                f"{node}: validated on loopback ({c['ifname']}) only; this proves nothing about "
                f"traffic between nodes")})
        elif d != c["ifname"]:
            why = next((x["reason"] for x in rejected[r] if x["ifname"] == d), "")
            warnings[r].append({"reason": vocabulary.NCCL_DEFAULT_DIFFERS, "message": (
                f"{node}: NCCL left alone would use {d or 'no interface'}"
                + (f" ({why})" if why else "")
                + f", not the validated {c['ifname']}; keep NCCL_SOCKET_IFNAME={c['ifname']} "
                f"(the operator sets it)")})
        mr = peers[r].get("masterRoute") or {}
        if r != 0 and not loopback_ok and mr.get("iface") and mr.get("iface") != c["ifname"]:
            warnings[r].append({"reason": vocabulary.ROUTE_VIA_OTHER_INTERFACE, "message": (
                f"{node}: the kernel reaches the master via {mr.get('iface')} (src "
                f"{mr.get('src')}), not the validated {c['ifname']}; rendezvous and collective "
                f"traffic take different interfaces")})
        if not loopback_ok:
            for p in ranks:
                if p == r:
                    continue
                res = (mesh.get(r) or {}).get(p, {}).get(chosen[p]["addr"]) or {}
                src = res.get("src") if isinstance(res, dict) else None
                if src and src != c["addr"]:
                    warnings[r].append({"reason": vocabulary.ROUTE_VIA_OTHER_INTERFACE, "message": (
                        f"{node}: connections to {peers[p].get('node')} ({chosen[p]['addr']}) "
                        f"leave from {src}, not {c['ifname']}'s {c['addr']}: two interfaces on one "
                        f"subnet, or a route that sends traffic out another NIC")})
                    break
    _warn_address_families(inputs, chosen, warnings)


def _warn_address_families(inputs: ChoiceInputs, chosen: Dict[int, Chosen],
                           warnings: Dict[int, List[Dict[str, str]]]) -> None:
    """MixedAddressFamilies on every rank when some nodes have a global IPv6 on the chosen
    interface and others not, or the master name resolves to IPv6 somewhere."""
    peers = inputs.peers
    ranks = sorted(peers)
    # IPv4/IPv6 mix: some nodes have a global IPv6 on the chosen interface, others not,
    # or the master name resolves to IPv6 somewhere.
    has6: Dict[int, bool] = {}
    for r in ranks:
        ifs = {i["name"]: i for i in peers[r].get("interfaces") or []}
        i = ifs.get(chosen[r]["ifname"]) or {}
        has6[r] = any(":" in a.partition("/")[0] and not a.startswith("fe80")
                      for a in i.get("addrs") or [])
    master6 = [r for r in ranks if any(":" in a for a in peers[r].get("masterResolved") or [])]
    if len(set(has6.values())) > 1 or master6:
        with6 = [r for r in ranks if has6[r]]
        msg = (f"IPv4/IPv6 mix: global IPv6 on the chosen interface on "
               f"{nodes_text(peers, with6) or 'no node'}"
               + (f"; MASTER_ADDR resolves to IPv6 on {nodes_text(peers, master6)}" if master6 else "")
               + "; NCCL may pick different families per node: set NCCL_SOCKET_FAMILY=AF_INET")
        for r in ranks:
            warnings[r].append({"reason": vocabulary.MIXED_ADDRESS_FAMILIES, "message": msg})
