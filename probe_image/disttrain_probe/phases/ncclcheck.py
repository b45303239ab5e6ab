"""NCCL's own interface choice, asked of NCCL itself (no GPU needed).

``ncclGetUniqueId`` initializes NCCL's bootstrap network: NCCL picks the interface it
would use and, with ``NCCL_DEBUG=INFO``, logs ``NCCL INFO Bootstrap: Using <if>:<addr><0>``
(or ``NCCL WARN Bootstrap : no socket interface found``). The probe runs it in a child
process (NCCL reads its environment once per process), through ctypes on the libnccl
this process loaded, twice: without NCCL_SOCKET_IFNAME (what NCCL would do alone) and
with the operator's value (proof that NCCL takes it). Where no libnccl is loaded (a
CPU-only torch), the re-implemented rule (``interfaces.nccl_default``) is the fallback.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from typing import Dict, Mapping, Optional, Set, Tuple, TypedDict

from disttrain_probe.ground.shapes import NcclAnswer
from disttrain_probe.phases.inventory import _mapped_library


class NcclBootstrap(TypedDict):
    """The report's ``ncclBootstrap`` (:func:`summary`)."""
    default: Optional[NcclAnswer]
    chosen: Optional[NcclAnswer]
    rule: Optional[str]

# The child: load libnccl, ask for a unique id, exit with NCCL's result code.
_CHILD = (
    "import ctypes, sys\n"
    "lib = ctypes.CDLL(sys.argv[1])\n"
    "buf = ctypes.create_string_buffer(256)\n"
    "sys.stdout.flush()\n"
    "sys.exit(lib.ncclGetUniqueId(buf))\n"
)
_USING = re.compile(r"Bootstrap\s*:\s*Using\s+\[?(?P<if>[^\s:\]]+)\]?:(?P<addr>[^<\s]+)")
_WARN = re.compile(r"NCCL WARN\s+(?P<msg>.+)")


def parse(output: str) -> NcclAnswer:
    """NCCL's debug output -> {ifname, addr, error}: the interface of the ``Bootstrap: Using``
    line (NCCL >= 2.2 writes ``eth0:10.0.0.1<0>``, IPv6 ``eth0:[fe80::1]<0>``), else the
    first ``NCCL WARN`` text as ``error``."""
    m = _USING.search(output or "")
    if m:
        addr = m.group("addr").strip("[]")
        return {"ifname": m.group("if"), "addr": addr, "error": None}
    w = _WARN.search(output or "")
    return {"ifname": None, "addr": None,
            "error": (w.group("msg").strip()[:160] if w else "no Bootstrap line in NCCL's output")}


def child_env(base: Mapping[str, str], socket_ifname: Optional[str]) -> Dict[str, str]:
    """The child's environment: ``base`` with NCCL's debug output on (all subsystems, to
    stdout) and NCCL_SOCKET_IFNAME removed (NCCL alone) or set to ``socket_ifname``."""
    env = {k: v for k, v in base.items()
           if k not in ("NCCL_SOCKET_IFNAME", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_COMM_ID")}
    env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="ALL")
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
    return env


def bootstrap_interface(lib: str, socket_ifname: Optional[str] = None, timeout: float = 10.0,
                        env: Optional[Mapping[str, str]] = None) -> NcclAnswer:
    """Ask the libnccl at path ``lib`` which interface its bootstrap uses, with
    NCCL_SOCKET_IFNAME unset (``socket_ifname`` None) or set. Returns {ifname, addr, error};
    never raises (a child that cannot run is an ``error``)."""
    try:
        p, stdout, stderr = _ask(lib, max(0.5, timeout),
                                 child_env(os.environ if env is None else env, socket_ifname))
    except (OSError, subprocess.SubprocessError) as e:
        return {"ifname": None, "addr": None, "error": f"NCCL check did not run: {e}"[:160]}
    out = parse((stdout or "") + "\n" + (stderr or ""))
    # without an interface, parse() always gives the error text
    if out["ifname"] is None and p.returncode not in (0, None) and (out["error"] or "").startswith("no Bootstrap"):
        tail = (stderr or stdout or "").strip().splitlines()[-1:] or [""]
        out["error"] = f"ncclGetUniqueId exited {p.returncode}: {tail[0][:120]}"
    return out


_children: Set["subprocess.Popen[str]"] = set()  # the checks running now (stop_children)
_children_lock = threading.Lock()


def _ask(lib: str, timeout: float, env: Mapping[str, str]) -> Tuple["subprocess.Popen[str]", str, str]:
    """Run the child (as ``subprocess.run`` would: killed past ``timeout``, then
    ``TimeoutExpired``), known to :func:`stop_children` while it runs. Returns (process,
    stdout, stderr). Raises OSError or SubprocessError."""
    with _children_lock:  # started and known at once: stop_children misses none
        p = subprocess.Popen([sys.executable, "-c", _CHILD, lib], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(env))
        _children.add(p)
    try:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise subprocess.TimeoutExpired(p.args, timeout) from None
    finally:
        with _children_lock:
            _children.discard(p)
    return p, stdout, stderr


def stop_children(wait: float = 1.0) -> int:
    """Kill the NCCL checks still running (in place, before the training runs in this
    process: run/inplace.py) and reap them within ``wait`` seconds; how many there were."""
    with _children_lock:
        running = list(_children)
    for p in running:
        try:
            p.kill()
            p.wait(max(0.0, wait))
        except (OSError, subprocess.SubprocessError):
            pass
    return len(running)


def loaded_library() -> Optional[str]:
    """Path of the libnccl mapped into this process (after ``import torch``), or None."""
    return _mapped_library("libnccl.so")


def summary(default: Optional[NcclAnswer], chosen: Optional[NcclAnswer],
            rule: Optional[str]) -> NcclBootstrap:
    """The report's ``ncclBootstrap``: NCCL's own answer alone (``default``) and with the
    validated interface (``chosen``), each {ifname, addr, error} or None (not asked), and
    the re-implemented rule's prediction (``rule``)."""
    return {"default": default, "chosen": chosen, "rule": rule}


__all__ = ["bootstrap_interface", "child_env", "loaded_library", "parse", "stop_children", "summary"]
