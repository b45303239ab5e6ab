"""Scenario-like probe reports for diagnosis tests, built with the probe's own pure code
(interface choice, version table, warnings) on inventories shaped like the scenarios in
``scenarios/`` (decoys, two NICs, firewalls, a missing NIC, skewed NCCL, many nodes), plus
the rendezvous messages as the probe writes them. Each entry: name -> (outcomes, master)."""
from __future__ import annotations

import copy
import string
from typing import Callable, Optional

from disttrain.diagnosis.findings import ProbeOutcome
from disttrain_probe.contract import paths, versions
from disttrain_probe.contract import vocabulary as V
from disttrain_probe.phases import interfaces

from .fixtures import typed_report

STARTED = "2026-11-30T11:59:50Z"


def node(i: int) -> str:
    return f"node-{string.ascii_lowercase[i]}" if i < 26 else f"node-{i:03d}"


def iface(name, *addrs, up=True, speed=10000, measured=None):
    d = {"name": name, "addrs": list(addrs), "up": up, "speedMbps": speed, "mtu": 1500,
         "loopback": name == "lo"}
    if measured is not None:
        d["measuredMbps"] = measured
    return d


def inventory(i: int, nics: list[dict], decoys=("docker0",)) -> dict:
    ifs = [iface("lo", "127.0.0.1/8", "::1/128", speed=None)]
    ifs += [iface(d, "172.17.0.1/16" if d == "docker0" else f"172.{19 + k}.0.1/16", speed=None)
            for k, d in enumerate(decoys)]
    ifs += nics
    return {"rank": i, "node": node(i), "interfaces": ifs, "hostIp": nics[0]["addrs"][0].split("/")[0],
            "masterRoute": {"iface": nics[0]["name"], "src": nics[0]["addrs"][0].split("/")[0]},
            "masterResolved": ["10.100.0.11"], "portRange": [32768, 60999],
            "versions": {"python": "3.11.7", "torch": "2.8.0+cu128", "cuda": "12.8", "nccl": "2.27.3",
                         "ncclBuild": "2.27.3", "ncclLib": "/venv/lib/python3.11/site-packages/nvidia/"
                                                      "nccl/lib/libnccl.so.2", "driver": None, "gpus": 0}}


def dial_mesh(peers: dict[int, dict], entry: Callable[[int, int, str], Optional[dict]]) -> dict:
    """The mesh results {rank: {peer rank: {IPv4 address: result}}} when every rank dials
    every other rank's every IPv4 address; ``entry(rank, peer rank, address)`` gives the
    result (``{"r": <code>, ...}``), or None to leave the address out."""
    out: dict = {}
    for i in peers:
        for j in peers:
            if i == j:
                continue
            for f in peers[j]["interfaces"]:
                for a in f["addrs"]:
                    ip = a.split("/")[0]
                    if ":" in ip:
                        continue
                    res = entry(i, j, ip)
                    if res is not None:
                        out.setdefault(i, {}).setdefault(j, {})[ip] = res
    return out


SAMPLED = [32768, 38414, 44060, 49707, 55353, 60999]  # six samples of 32768-60999, as probes sent before RANGE_SAMPLES 32


def sampled(res: dict, ports: Optional[list] = None) -> dict:
    """``res`` with the range samples a probe adds to every planned pair's entry
    (``range: [[port, result], ...]``), each answering as the mesh's own port did."""
    return {**res, "range": [[p, res.get("r")] for p in (SAMPLED if ports is None else ports)]}


def mesh(peers, result: Callable[[int, int, str], str], mbps: Optional[dict] = None):
    """:func:`dial_mesh` as the scenarios see it: loopback left out, the 172.x decoys
    refused, 0.4 ms each, ``mbps`` by /24 prefix ("10.0.0") on the ok entries."""
    def entry(i: int, j: int, ip: str) -> Optional[dict]:
        if ip.startswith("127."):
            return None
        res = sampled({"r": "refused" if ip.startswith("172.") else result(i, j, ip), "ms": 0.4})
        if mbps and ip.rsplit(".", 1)[0] in mbps and res["r"] == "ok":
            res["mbps"] = mbps[ip.rsplit(".", 1)[0]]
        return res
    return dial_mesh(peers, entry)


def reports_from(peers, m, spec="auto", failure=None, extra_warnings=None, world=None):
    """One report per rank as the probe would write it after the choice phase."""
    ch = interfaces.choose(peers, m, spec, 29500)
    fail = failure or ch["failure"]
    v = versions.check(peers) if fail is None else None
    fail = fail or v
    out = []
    for r, p in peers.items():
        measured = ch["measured"].get(r, {})
        ifs = [dict(i, **({"measuredMbps": measured[i["name"]]} if i["name"] in measured else {}))
               for i in p["interfaces"]]
        warnings = list(ch["warnings"].get(r, [])) + list((extra_warnings or {}).get(r, []))
        ok = fail is None
        listeners = {q: {"l": [[i["name"], a.split("/")[0], int(a.split("/")[1]), 1]
                               for i in peers[q]["interfaces"] for a in i["addrs"]
                               if ":" not in a and not a.startswith("127.")]} for q in peers}
        mine = {str(q): v for q, v in m.get(r, {}).items()}
        out.append({
            "v": 1, "rank": r, "worldSize": world or len(peers), "node": p["node"], "ok": ok,
            "phase": "report" if ok else "choice",
            "failure": None if ok else dict(fail, phase="choice"),
            "warnings": warnings, "versions": p["versions"],
            "master": {"addr": "10.100.0.11", "port": 29500, "resolved": ["10.100.0.11"],
                       "route": p["masterRoute"], "connected": "10.100.0.11"},
            "interfaces": ifs, "chosen": ch["chosen"].get(r) if ok else None,
            "network": ch["network"], "rejected": ch["rejected"].get(r, []),
            "ncclDefaultIfname": ch["ncclDefault"].get(r), "backend": "gloo",
            "allreduce": {"bytes": 4194304, "iterations": 10, "seconds": 0.2, "algbwGBps": 0.21,
                          "busbwGBps": 0.21, "correct": True} if ok else None,
            "timings": {"inventory": 2.1, "rendezvous": 0.3, "total": 4.0}, "truncated": False,
            "paths": paths.rows(r, len(peers), listeners, mine)})
    return out


def outcomes(reports):
    return [ProbeOutcome(rank=r["rank"], pod=f"ddp-digits-probe-{r['rank']}", node=r["node"],
                         report=typed_report(r)) for r in reports]


def two_nics(n, rate=None):
    return {i: inventory(i, [iface("eth0", f"10.100.0.{11 + i}/24"),
                             iface("eth1", f"10.101.0.{11 + i}/24")]) for i in range(n)}


def ok(i, j, a):
    return "ok"


def rendezvous_failure(reason, rank, n, text):
    return {"reason": reason, "phase": "rendezvous", "message": text}


def build() -> dict[str, tuple[list[ProbeOutcome], str]]:
    out: dict[str, tuple[list[ProbeOutcome], str]] = {}
    p = two_nics(2)
    out["healthy"] = (outcomes(reports_from(p, mesh(p, ok, {"10.100.0": 950.0, "10.101.0": 13000.0}))),
                      "10.100.0.11")
    p = {i: inventory(i, [iface("eth0", f"10.100.0.{11 + i}/24")],
                      decoys=("br-a1", "virbr0", "docker0")) for i in range(2)}
    out["decoy-bridges"] = (outcomes(reports_from(p, mesh(p, ok))), "10.100.0.11")
    hl = {r: [{"reason": V.HOSTNAME_LOOPBACK, "message": (
        f"{node(r)}: hostname {node(r)} resolves to 127.0.1.1 (loopback): gloo without "
        f"GLOO_SOCKET_IFNAME binds there and a hostname-derived MASTER_ADDR points peers at "
        f"themselves; fix /etc/hosts, keep GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME set (the "
        f"operator sets them)")}] for r in range(2)}
    p = two_nics(2)
    out["hostname-loopback"] = (outcomes(reports_from(p, mesh(p, ok), extra_warnings=hl)), "10.100.0.11")
    p = two_nics(2)
    blocked = mesh(p, lambda i, j, a: "timeout" if j == 0 else "ok")
    out["firewall-ephemeral"] = (outcomes(reports_from(p, blocked)), "10.100.0.11")
    p = two_nics(16)
    out["firewall-ephemeral-16"] = (outcomes(reports_from(p, mesh(p, lambda i, j, a: "timeout" if j == 3 else "ok"))),
                                    "10.100.0.11")
    out["ifname-missing"] = (outcomes(reports_from(two_nics(2), mesh(two_nics(2), ok), spec="eth2")),
                             "10.100.0.11")
    p = two_nics(3)
    out["partition-a-c"] = (outcomes(reports_from(p, mesh(p, lambda i, j, a: "timeout" if {i, j} == {0, 2} else "ok"))),
                            "10.100.0.12")
    p = two_nics(64)
    out["no-network-64"] = (outcomes(reports_from(p, mesh(p, lambda i, j, a: "timeout" if (i + j) % 7 == 0 else "ok"))),
                            "10.100.0.11")
    p = two_nics(2)
    p[1]["versions"] = dict(p[1]["versions"], nccl="2.28.9",
                            ncclLib="/root/.cache/disttrain/nccl-2.28.9/nvidia/nccl/lib/libnccl.so.2")
    out["version-skew"] = (outcomes(reports_from(p, mesh(p, ok))), "10.100.0.11")
    # rendezvous failures, in the probe's words
    base = reports_from(two_nics(3), mesh(two_nics(3), ok))
    for name, reason, text in (
        ("firewall-master-drop", V.MASTER_PORT_TIMEOUT,
         "{n} (rank {r}): connection to MASTER_ADDR 10.100.0.11:29500 timeout for 5.1s although "
         f"rank 0's probe has been running since {STARTED}: a firewall drops TCP 29500 or the "
         "address is not routable from this node; open TCP 29500 between nodes or fix MASTER_ADDR"),
        ("firewall-master-reject", V.MASTER_PORT_REFUSED,
         "{n} (rank {r}): connection to MASTER_ADDR 10.100.0.11:29500 refused for 5.0s although "
         f"rank 0's probe has been running since {STARTED} (it listens on that port as it starts): "
         "a firewall on rank 0's node rejects TCP 29500, or MASTER_ADDR names another host; open "
         "TCP 29500 to rank 0's node or fix MASTER_ADDR"),
        ("master-addr-loopback", V.MASTER_ADDR_LOOPBACK,
         "{n} (rank {r}): MASTER_ADDR=node-a resolves to 127.0.0.1 (loopback), so this rank would "
         "dial itself instead of rank 0; set MASTER_ADDR to rank 0's node address, not localhost "
         "or a hostname mapped to 127.0.0.1 in /etc/hosts"),
        ("headless-dns-wrong-name", V.MASTER_ADDR_UNRESOLVABLE,
         "{n} (rank {r}): MASTER_ADDR=ddp-digits-0.ddp-digits-workerz does not resolve ([Errno -2] "
         "Name or service not known) after 10s of retries; use rank 0's node IP or a headless "
         "Service name that exists before the probe starts"),
    ):
        reps = copy.deepcopy(base)
        reps[0].update(ok=False, chosen=None, allreduce=None, phase="rendezvous", failure={
            "reason": V.RENDEZVOUS_TIMEOUT, "phase": "rendezvous", "message": (
                "node-a: rank(s) 1, 2 never arrived at the rendezvous 10.100.0.11:29500 within "
                "the deadline; present: 0 (node-a); check that their pods were scheduled and "
                "started, and that they can reach MASTER_ADDR")})
        for r in (1, 2):
            reps[r].update(ok=False, chosen=None, allreduce=None, phase="rendezvous", paths={},
                           failure=rendezvous_failure(reason, r, 3, text.format(n=node(r), r=r)))
            reps[r]["master"].pop("connected")
        reps[0]["paths"] = {}
        out[name] = (outcomes(reps), "10.100.0.11")
    return out


SCENARIOS = build()
