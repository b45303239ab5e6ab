"""``python -m disttrain explain <job>`` (also the kubectl plugin ``kubectl disttrain explain``):
the details behind a job's conditions, from its status, printed with rich.

Conditions carry one sentence each (at most 400 characters); the evidence lives in
``status``: per node the chosen interface, address, versions and measured throughput
(``status.nodes``), each node's row of the dial matrix per network
(``status.nodes[].paths``), every failure and warning in full and every interface not
chosen with why (``status.probe``); while training is watched, each rank's progress as the
last stall verdict saw it (``status.progress``). This command lays them out: the verdict, the
conditions, the per-node table and the connectivity matrix per network, failing cells
marked, and the per-rank progress table with the stall verdict's facts.

:func:`render` is pure (job dict -> rich renderables, tested without a cluster);
:func:`main` reads the job with the kubeconfig (or the in-cluster service account).
"""
from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any, Optional, Sequence, cast

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from disttrain.api import constants
from disttrain_probe.contract import vocabulary

# How a matrix cell is shown: (symbol, style). Upper case in a row (another source address)
# adds a trailing '*'.
CELLS = {
    "o": ("ok", "green"), "w": ("wrong", "bold red"), "c": ("closed", "bold red"),
    "r": ("refused", "bold red"),
    "t": ("timeout", "bold red"), "u": ("unreach", "bold red"), "e": ("error", "bold red"),
    "m": ("mixed", "bold yellow"), "-": ("·", "dim"), ".": ("—", "dim"),
}


def _cell(ch: str) -> Text:
    word, style = CELLS.get(ch.lower(), ("?", "yellow"))
    if ch.isupper():
        return Text(word + "*", style=style if style != "green" else "yellow")
    return Text(word, style=style)


def _status_style(cond: dict) -> str:
    bad = (cond.get("status") == constants.FALSE and cond.get("type") not in (constants.SUCCEEDED, constants.FAILED)) or (
        cond.get("type") == constants.FAILED and cond.get("status") == constants.TRUE)
    if bad:
        return "bold red"
    if cond.get("status") == constants.TRUE and cond.get("reason") not in set(constants.PASS_REASON.values()) | {
            vocabulary.ALL_CHECKS_PASSED, vocabulary.ALL_RANKS_RUNNING, vocabulary.ALL_RANKS_SUCCEEDED}:
        return "yellow"  # a warning
    return "green" if cond.get("status") == constants.TRUE else "dim"


def conditions_table(conds: Sequence[dict]) -> Table:
    t = Table(title="Conditions", show_lines=False, expand=True)
    for col, kw in (("condition", {"no_wrap": True}), ("status", {"no_wrap": True}),
                    ("reason", {"no_wrap": True}), ("message", {"ratio": 1})):
        t.add_column(col, **kw)
    order: dict[Any, int] = {ctype: i for i, ctype in enumerate(constants.ALL_CONDITIONS)}
    for cond in sorted(conds, key=lambda x: order.get(x.get("type"), 99)):
        style = _status_style(cond)
        t.add_row(cond.get("type", "?"), Text(cond.get("status", "?"), style=style),
                  Text(cond.get("reason", ""), style=style), cond.get("message", ""))
    return t


def nodes_table(nodes: Sequence[dict]) -> Table:
    """One row per node; with several processes per node also how many the probe ran
    (``local``) and their intra-node all-reduce busbw (``intra GB/s``)."""
    local = any(n.get("localRanks") for n in nodes)
    t = Table(title="Nodes", expand=False)
    cols = ("rank", "node", "interface", "address", "torch", "CUDA", "NCCL", "Mb/s")
    for col in cols + (("local", "intra GB/s") if local else ()):
        t.add_column(col, justify="left" if col in cols[1:7] else "right")
    for n in sorted(nodes, key=lambda x: x.get("rank", 0)):
        mbps, intra = n.get("throughputMbps"), n.get("intraNodeBusBandwidthGBps")
        extra = (str(n.get("localRanks") or "-"),
                 f"{intra:.3g}" if isinstance(intra, (int, float)) else "-") if local else ()
        t.add_row(str(n.get("rank", "?")), n.get("name") or "?", n.get("interface") or "-",
                  n.get("address") or "-", n.get("torch") or "-", n.get("cuda") or "-",
                  n.get("nccl") or "-", f"{mbps:.0f}" if isinstance(mbps, (int, float)) else "-",
                  *extra)
    return t


def matrices(nodes: Sequence[dict]) -> list[Table]:
    """One table per network: rows dial from, columns dial to (by rank), failing cells red."""
    nodes = sorted(nodes, key=lambda x: x.get("rank", 0))
    keys = sorted({k for n in nodes for k in (n.get("paths") or {})})
    out = []
    for key in keys:
        title = f"{key}" + ("  (chosen)" if _is_chosen(key, nodes) else "")
        t = Table(title=f"Connectivity on {title}", caption="row dials column; * sent from "
                  "another NIC's address", expand=False, min_width=len(title) + 20)
        t.add_column("from \\ to", no_wrap=True)
        for n in nodes:
            t.add_column(n.get("name") or str(n.get("rank")), justify="center")
        for n in nodes:
            row = (n.get("paths") or {}).get(key, "")
            cells = [_cell(row[i]) if i < len(row) else Text("?", style="dim")
                     for i in range(len(nodes))]
            t.add_row(n.get("name") or str(n.get("rank")), *cells)
        out.append(t)
    return out


def _is_chosen(key: str, nodes: Sequence[dict]) -> bool:
    """Whether network ``key`` carries the nodes' chosen interfaces."""
    if key.startswith("ifname:"):
        return key.split(":", 1)[1] in {n.get("interface") for n in nodes}
    try:
        net = ipaddress.ip_network(key, strict=False)
        return any(n.get("address") and ipaddress.ip_address(n["address"]) in net for n in nodes)
    except ValueError:
        return False


MOST_PROGRESS_ROWS = 64  # rows of the progress table (the status keeps at most 64)
_CELL_CHARS = 80  # a progress cell longer than this (a hand edit) is clipped


def _clip(value: Any, limit: int = _CELL_CHARS) -> str:
    """``value`` as one line of at most ``limit`` characters ('' for None)."""
    if value is None:
        return ""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def progress_section(st: Any) -> list[RenderableType]:
    """The training progress of status ``st`` (untrusted: any shape): the Progress column's
    summary and the ``Progressing`` condition, then one row per rank of
    ``status.progress.rankDetails`` (node, where, last collective, idle seconds, frame,
    stale), the ranks the verdict names marked; when Progressing is False, the verdict's
    decisive facts (ranks, nodes, since when). Empty when there is no ``status.progress``.
    Never raises; at most :data:`MOST_PROGRESS_ROWS` rows, cells clipped."""
    st = st if isinstance(st, dict) else {}
    pr = st.get("progress")
    if not isinstance(pr, dict):
        return []
    conds = _list(st.get("conditions"))
    pc = next((c for c in conds if isinstance(c, dict) and c.get("type") == constants.PROGRESSING), {})
    named = {r for r in _list(pr.get("ranks")) if _int(r) is not None}
    head = Text("Training progress ", style="bold")
    head.append(_clip(pr.get("summary")) or f"#{_clip(pr.get('seq')) or '-'}")
    if pc:
        head.append(f"  Progressing={_clip(pc.get('status'), 10) or '?'} ({_clip(pc.get('reason'), 40) or '?'})",
                    style=_status_style(pc))
    if pr.get("since"):
        head.append(f"  waiting since {_clip(pr.get('since'), 40)}")
    out: list[RenderableType] = [head]
    rows = [d for d in _list(pr.get("rankDetails")) if isinstance(d, dict)]
    if rows:
        t = Table(title="Ranks (as the last verdict saw them; ! the ranks it names)", expand=False)
        for col in ("rank", "node", "where", "seq", "collective", "idle s", "at", "stale"):
            t.add_column(col, justify="right" if col in ("rank", "seq", "idle s") else "left")
        for d in rows[:MOST_PROGRESS_ROWS]:
            rank, stale = _int(d.get("rank")), d.get("stale") is True
            style = "bold red" if rank in named else "yellow" if stale else ""
            op, wseq = _clip(d.get("op"), 40), _int(d.get("waitingSeq"))
            t.add_row(Text(("!" if rank in named else "") + (str(rank) if rank is not None else "?"), style=style),
                      Text(_clip(d.get("node"), 63) or "?"), Text(_clip(d.get("where"), 20) or "?"),
                      Text(str(_int(d.get("seq")) if _int(d.get("seq")) is not None else "-")),
                      Text((op or "-") + (f" #{wseq}" if wseq is not None else "")),
                      Text(str(_int(d.get("idleSeconds")) if _int(d.get("idleSeconds")) is not None else "-")),
                      Text(_clip(d.get("frame")) or "-"), Text("stale" if stale else "", style="yellow"))
        out.append(t)
        if len(rows) > MOST_PROGRESS_ROWS:
            out.append(Text(f"  (+{len(rows) - MOST_PROGRESS_ROWS} more ranks not shown)", style="dim"))
    else:
        out.append(Text("  no per-rank detail in the status (only the summary above)", style="dim"))
    if pc.get("status") == constants.FALSE:
        nodes = [_clip(n, 63) for n in _list(pr.get("nodes"))[:16]]
        facts = Text("Stall verdict: ", style="bold red")
        facts.append(f"{_clip(pc.get('reason'), 40) or '?'}; ranks {', '.join(str(r) for r in sorted(named)[:16]) or 'none named'}"
                     f"; nodes {', '.join(nodes) or 'none named'}"
                     f"; waiting since {_clip(pr.get('since'), 40) or '?'}")
        out.append(facts)
        out.append(Text(f"  {_clip(pc.get('message'), 400)}"))
    return out


def render(job: dict[str, Any]) -> list[RenderableType]:
    """What ``explain`` prints for ``job`` (the object as the API returns it)."""
    meta = job.get("metadata") or {}
    st = job.get("status") or {}
    conds = st.get("conditions") or []
    validated: dict[str, Any] = next((x for x in conds if x.get("type") == constants.VALIDATED), {})
    head = Text()
    head.append(f"{meta.get('namespace', '?')}/{meta.get('name', '?')}", style="bold")
    head.append(f"  phase {st.get('phase') or '?'}  ")
    head.append(f"Validated={validated.get('status', '?')} ({validated.get('reason', '?')})",
                style=_status_style(validated) if validated else "dim")
    out: list[RenderableType] = [head]
    rdzv = st.get("rendezvous") or {}
    probe = st.get("probe") or {}
    if rdzv or probe:
        out.append(Text(
            f"MASTER_ADDR={rdzv.get('masterAddr') or '?'}:{rdzv.get('masterPort') or '?'}  "
            f"NCCL_SOCKET_IFNAME={rdzv.get('socketIfname') or '?'}  backend {probe.get('backend') or '?'}  "
            f"busbw {probe.get('busBandwidthGBps', '?')} GB/s at {probe.get('messageSizeBytes', '?')} bytes"))
    out.append(conditions_table(conds))
    nodes = st.get("nodes") or []
    if nodes:
        out.append(nodes_table(nodes))
        out.extend(matrices(nodes))
    out.extend(progress_section(st))
    for key, title, style in (("failures", "Failures (one per rank, in full)", "red"),
                              ("warnings", "Warnings (in full)", "yellow"),
                              ("interfacesNotChosen", "Interfaces not chosen, and why", "dim")):
        items = probe.get(key) or []
        if items:
            out.append(Text(title, style=f"bold {style}"))
            out.extend(Text(f"  - {x}") for x in items)
    return out


class ExplainError(Exception):
    """The job could not be read: no kubeconfig, the apiserver unreachable or refusing."""


def load_job(name: str, namespace: str) -> Optional[dict]:
    """The job as the API returns it (camelCase), or None when it does not exist.
    Raises :class:`ExplainError` with one sentence when it cannot be read."""
    from kubernetes import client  # loaded only to read a job: the renderers above stay pure
    from kubernetes import config as kconfig  # with the client
    from kubernetes.client.rest import ApiException  # with the client above

    try:
        kconfig.load_kube_config()
    except (kconfig.ConfigException, OSError):
        try:
            kconfig.load_incluster_config()
        except kconfig.ConfigException:
            raise ExplainError("no kubeconfig found (set KUBECONFIG or ~/.kube/config, as for "
                               "kubectl) and not running in a pod") from None
    try:
        return cast(dict, client.CustomObjectsApi().get_namespaced_custom_object(  # the JSON object
            constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise ExplainError(f"reading DistTrainingJob {namespace}/{name}: HTTP {e.status} "
                           f"{e.reason}") from None
    except Exception as e:  # connection refused, TLS, DNS: say which, no traceback
        raise ExplainError(f"reading DistTrainingJob {namespace}/{name}: {type(e).__name__}: "
                           f"{str(e)[:200]}") from None


def _namespace_default() -> str:
    try:
        from kubernetes import config as kconfig  # only when no namespace was given
        _, active = kconfig.list_kube_config_contexts()
        return (active or {}).get("context", {}).get("namespace") or "default"
    except Exception:
        return "default"


def main(argv: Optional[list[str]] = None, console: Optional[Console] = None) -> int:
    """``explain <job> [-n NAMESPACE]``: exit 0 when shown, 1 when the job does not exist,
    2 when it cannot be read (no kubeconfig, apiserver unreachable: one line, no traceback)."""
    ap = argparse.ArgumentParser(prog="python -m disttrain explain",
                                 description="Show the evidence behind a DistTrainingJob's conditions.")
    ap.add_argument("job", help="the DistTrainingJob's name")
    ap.add_argument("-n", "--namespace", default=None, help="its namespace (default: the context's)")
    a = ap.parse_args(argv)
    console = console or Console()
    ns = a.namespace or _namespace_default()
    try:
        job = load_job(a.job, ns)
    except ExplainError as e:
        console.print(f"error: {e}", style="red", markup=False)
        return 2
    if job is None:
        console.print(f"no DistTrainingJob {a.job} in namespace {ns}", style="red")
        return 1
    console.print(Group(*render(job)))
    return 0


def kubectl_main() -> int:
    """The kubectl plugin ``kubectl-disttrain``: ``kubectl disttrain explain <job> [-n NS]``."""
    args = sys.argv[1:]
    if not args or args[0] != "explain":
        print("usage: kubectl disttrain explain <job> [-n NAMESPACE]", file=sys.stderr)
        return 2
    return main(args[1:])


__all__ = ["conditions_table", "kubectl_main", "load_job", "main", "matrices", "nodes_table", "progress_section",
           "render"]
