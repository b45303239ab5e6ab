"""The evidence of every rank's report, arranged per path (pure).

- :func:`matrices`: per network, the outcome of each rank's dial to each peer (from the
  reports' compact ``paths``: ``cells[i][j]`` = what rank i's dial to rank j did);
- :func:`master_results`: per dialling rank, whether it reached the master port;
- :func:`multi_nic`: a node's NICs that share one IPv4 subnet (the kernel may send from
  either).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, Sequence

from disttrain.diagnosis.findings import RankInput
from disttrain_probe.contract import paths, vocabulary

MASTER_FAILURES = (vocabulary.MASTER_PORT_TIMEOUT, vocabulary.MASTER_PORT_REFUSED)


@dataclass(frozen=True)
class Matrix:
    """One network's dial outcomes: ``cells[i][j]`` for rank i dialling rank j, one of
    ok, wrong, refused, timeout, unreachable, error, mixed, or None (self, not dialled, or
    no report from rank i). ``ifnames[i]``: rank i's interface on it (None: none);
    ``subnets[i]``: the IPv4 subnet of rank i's address on that interface (``10.101.0.0/24``;
    empty when unknown), which tells apart networks that share an interface name; for a
    rank with no address there that dialled on it, its subnet on the interface the others
    use (an island of its own). ``down[i]``: rank i reported that interface down (no
    carrier; empty when none did)."""

    key: str
    nodes: tuple[str, ...]
    ifnames: tuple[Optional[str], ...]
    cells: tuple[tuple[Optional[str], ...], ...]
    subnets: tuple[Optional[str], ...] = ()
    down: tuple[bool, ...] = ()

    def is_down(self, i: int) -> bool:
        return i < len(self.down) and self.down[i]

    @property
    def label(self) -> str:
        """``eth1 on 10.101.0.0/24``, ``cni0 (routed)``."""
        names = "/".join(dict.fromkeys(n for n in self.ifnames if n)) or "?"
        if self.key.startswith("ifname:"):
            return f"{self.key.split(':', 1)[1]} (routed)"
        return f"{names} on {self.key}"

    def failed(self, i: int, j: int) -> bool:
        c = self.cells[i][j]
        return c is not None and c != "ok"

    def ok(self, i: int, j: int) -> bool:
        return self.cells[i][j] == "ok"

    def pair_failed(self, i: int, j: int) -> bool:
        """A dial between i and j, either way, failed."""
        return self.failed(i, j) or self.failed(j, i)

    def pair_ok(self, i: int, j: int) -> bool:
        """A dial between i and j worked and none failed."""
        return (self.ok(i, j) or self.ok(j, i)) and not self.pair_failed(i, j)

    def failures(self) -> list[tuple[int, int]]:
        """Every failed dial (i dialled j), row by row."""
        n = len(self.nodes)
        return [(i, j) for i in range(n) for j in range(n) if i != j and self.failed(i, j)]


def _ifname_on(r: RankInput, key: str) -> Optional[str]:
    if r.report is None:
        return None
    if key.startswith("ifname:"):
        name = key.split(":", 1)[1]
        return name if any(i.name == name for i in r.report.interfaces) else None
    try:
        net = ipaddress.ip_network(key, strict=False)
    except ValueError:
        return None
    for i in r.report.interfaces:
        for a in i.addrs:
            try:
                if ipaddress.ip_interface(a).ip in net:
                    return i.name
            except ValueError:
                continue
    return None


def _ipv4(addrs: Sequence[str]) -> list[ipaddress.IPv4Interface]:
    """The IPv4 entries of ``addrs`` (``addr/prefix``), unparsable ones skipped."""
    out = []
    for a in addrs:
        try:
            itf = ipaddress.ip_interface(a)
        except ValueError:
            continue
        if isinstance(itf, ipaddress.IPv4Interface):
            out.append(itf)
    return out


def _subnet_on(r: RankInput, ifname: Optional[str], key: str) -> Optional[str]:
    """The IPv4 subnet of rank ``r``'s first address on ``ifname`` that lies in ``key``
    (any of its addresses for an ``ifname:`` key), None when it has none."""
    if r.report is None or ifname is None:
        return None
    try:
        net = None if key.startswith("ifname:") else ipaddress.ip_network(key, strict=False)
    except ValueError:
        net = None
    for i in r.report.interfaces:
        for itf in _ipv4(i.addrs) if i.name == ifname else []:
            if net is None or itf.ip in net:
                return str(itf.network)
    return None


def _same_address_everywhere(r_list: Sequence[RankInput], key: str) -> bool:
    """A node-local bridge (docker0): every rank has the same address on that subnet."""
    if key.startswith("ifname:"):
        return False
    try:
        net = ipaddress.ip_network(key, strict=False)
    except ValueError:
        return False
    seen = set()
    for r in r_list:
        for i in (r.report.interfaces if r.report else []):
            for a in i.addrs:
                try:
                    ip = ipaddress.ip_interface(a).ip
                except ValueError:
                    continue
                if ip in net:
                    seen.add(str(ip))
    return len(seen) == 1


def matrices(ranks: Sequence[RankInput]) -> list[Matrix]:
    """One :class:`Matrix` per network any report has a row for, in key order; node-local
    bridges (the same address on every node) and loopback are left out: they say nothing
    about paths between nodes."""
    n = len(ranks)
    keys = sorted({k for r in ranks if r.report for k in r.report.paths})
    out = []
    for key in keys:
        if paths.is_loopback(key.split("/")[0]) or _same_address_everywhere(ranks, key):
            continue
        rows = []
        for r in ranks:
            row = (r.report.paths.get(key) if r.report else None) or ""
            rows.append(tuple(paths.outcome(row[j]) if j < len(row) else None for j in range(n)))
        ifnames = tuple(_ifname_on(r, key) for r in ranks)
        subnets = tuple(_subnet_on(r, ifn, key) for r, ifn in zip(ranks, ifnames))
        subnets = _off_subnet(ranks, rows, ifnames, subnets)
        down = tuple(_is_down(r, ifn) for r, ifn in zip(ranks, ifnames))
        out.append(Matrix(key, tuple(r.node for r in ranks), ifnames, tuple(rows), subnets,
                          down if any(down) else ()))
    return out


def _is_down(r: RankInput, ifname: Optional[str]) -> bool:
    """Rank ``r`` reported ``ifname`` down (``up`` false; unknown is not down)."""
    return bool(r.report and ifname and any(i.name == ifname and i.up is False for i in r.report.interfaces))


def _off_subnet(ranks: Sequence[RankInput], rows: list, ifnames: tuple, subnets: tuple) -> tuple:
    """Fill in the subnet of a rank that dialled on this network's subnet but has no
    address in it, when every other rank there uses one interface name and this rank has
    it (its eth1 on 10.102.0.0/24 where the others' eth1 is on 10.101.0.0/24): an island
    on a subnet of its own, seen from its own dials. Its ``ifnames`` entry stays None (it
    has no home on this subnet); others are left as they are."""
    names = {n for n in ifnames if n}
    if len(names) != 1:
        return subnets
    (name,) = names
    filled = list(subnets)
    for k, r in enumerate(ranks):
        if ifnames[k] or r.report is None or not any(c is not None for c in rows[k]):
            continue
        own = [itf for i in r.report.interfaces if i.name == name for itf in _ipv4(i.addrs)]
        if own:
            filled[k] = str(own[0].network)
    return tuple(filled)


def master_results(ranks: Sequence[RankInput]) -> dict[int, str]:
    """Rank index -> ``ok`` (its dial reached MASTER_ADDR's port), ``timeout``/``refused``
    (it failed there), ``running`` (still running when the verdict came: it got past the
    dial, since a blocked dial ends within the master grace), for ranks >= 1 only; ranks
    without evidence are absent."""
    out: dict[int, str] = {}
    for i, r in enumerate(ranks):
        if r.rank == 0:
            continue
        rep = r.report
        if r.running:
            out[i] = "running"
        elif rep is None:
            continue
        elif rep.master and rep.master.connected:
            out[i] = "ok"
        elif rep.failure and rep.failure.reason in MASTER_FAILURES:
            out[i] = "refused" if rep.failure.reason == vocabulary.MASTER_PORT_REFUSED else "timeout"
    return out


def multi_nic(r: RankInput) -> dict[str, list[tuple[str, str]]]:
    """IPv4 subnet -> [(ifname, address)] for the subnets on which this node has two or
    more NICs (up, not loopback)."""
    by: dict[str, list[tuple[str, str]]] = {}
    for i in (r.report.interfaces if r.report else []):
        if i.up is False:
            continue
        for itf in _ipv4(i.addrs):
            if itf.ip.is_loopback:
                continue
            by.setdefault(str(itf.network), []).append((i.name, str(itf.ip)))
    return {k: v for k, v in by.items() if len({n for n, _ in v}) >= 2}


def subnet_of(addr: Optional[str], subnets: Sequence[str]) -> Optional[str]:
    """The first of ``subnets`` that holds ``addr``."""
    try:
        ip = ipaddress.ip_address(addr or "")
    except ValueError:
        return None
    for s in subnets:
        if ip in ipaddress.ip_network(s):
            return s
    return None


__all__ = ["Matrix", "master_results", "matrices", "multi_nic", "subnet_of"]
