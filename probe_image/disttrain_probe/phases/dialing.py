"""A rank >= 1 dialling rank 0's master port: how long it dials (:func:`dial_give_up_at`),
the plain dial loop, the loop that decides early from a host check or rank 0's beacon
(:func:`dial_until_decided`), and the host check that says why a dial failed.

It dials until the phase deadline, unless it has evidence that rank 0's probe was already
running when this rank started (``DISTTRAIN_PROBE_MASTER_STARTED_AT``, set by the
operator): then a port that still refuses or drops its connections once this probe has
run for ``DISTTRAIN_PROBE_MASTER_GRACE_SECONDS`` (and has dialled for at least
:data:`MIN_DIAL_SECONDS`) is blocked, not "not open yet".
"""
from __future__ import annotations

import errno
import socket
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from disttrain_probe.ground.deadline import Deadline
from disttrain_probe.ground.shapes import HostCheck
from disttrain_probe.phases.masterstore import BEACON_SECONDS, beacon_answers

# With evidence that rank 0 listens, dial at least this long (seconds) before giving up:
# two connection attempts, i.e. a SYN and its retransmission, or several refusals.
MIN_DIAL_SECONDS = 2.0


def order(addrs: List[str]) -> List[str]:
    return [a for a in addrs if ":" not in a] + [a for a in addrs if ":" in a]


def dial_give_up_at(deadline_at: float, probe_start: float, dial_start: float,
                    evidence: bool, grace: float, min_dial: float = MIN_DIAL_SECONDS) -> float:
    """When (monotonic seconds) a rank >= 1 stops dialling the master.

    Without ``evidence`` that rank 0's probe was running before this rank started, at
    ``deadline_at`` (the phase deadline): a refusal may just mean rank 0 is not up yet.
    With it, once this probe has run ``grace`` seconds (``probe_start`` + ``grace``; rank 0
    started earlier, so it has run longer and listens within moments of starting) and has
    dialled at least ``min_dial`` seconds, never after ``deadline_at``. The bound uses
    only this machine's clock, so clock skew between nodes cannot cause a false alarm."""
    if not evidence:
        return deadline_at
    return min(deadline_at, max(probe_start + grace, dial_start + min_dial))


def _dial(addrs: List[str], port: int, deadline: Deadline) -> Tuple[Optional[str], str, float]:
    """TCP-connect until one succeeds or the deadline. Returns (addr, last_error, seconds)."""
    t0 = time.monotonic()
    last = "timeout"
    while True:
        for a in order(addrs):
            rem = deadline.remaining()
            if rem <= 0:
                return None, last, time.monotonic() - t0
            try:
                s = socket.create_connection((a, port), timeout=min(2.0, max(0.05, rem)))
                s.close()
                return a, "", time.monotonic() - t0
            except ConnectionRefusedError:
                last = "refused"
            except socket.timeout:
                last = "timeout"
            except OSError as e:
                if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
                    last = "unreachable"
                elif e.errno == errno.ECONNREFUSED:
                    last = "refused"
                else:
                    last = f"error: {e}"
        if deadline.remaining() <= 0:
            return None, last, time.monotonic() - t0
        time.sleep(min(0.25, deadline.remaining()))


# Seconds of silence (no SYN-ACK, no reset, on the master port and on another port) after
# which a rank stops dialling without evidence of rank 0's start: a host that is up resets a
# closed port whether or not rank 0 listens yet, and a name that resolves (the pod has its
# address) or a node address is live, so silence is a filter or a broken path, never "rank 0
# not started". The window only covers transient drops (routes being programmed for a new
# pod, a SYN queue overflowing at rank 0: a closed port still resets then).
SILENCE_DECIDES_SECONDS = 6.0


@dataclass(frozen=True)
class Patience:
    """How :func:`dial_until_decided` waits: ``probe_quiet`` seconds of one dial before a
    host check, and ``silence_decides`` seconds of silence in a row that decide."""
    probe_quiet: float = 2.0
    silence_decides: float = SILENCE_DECIDES_SECONDS


def dial_until_decided(addrs: List[str], port: int, deadline: Deadline, check: Any = None,
                       beacon: Optional[Tuple[int, bytes]] = None, patience: Patience = Patience(),
                       ) -> Tuple[Optional[str], str, float, Optional[HostCheck]]:
    """Dial like :func:`_dial`, but when a dial times out (the SYN got no answer at all) ask
    whether the host answers on another port (:func:`host_check`): a live host resets a
    closed port, so silence on the master port while another port answers is a filter on
    that port whatever rank 0 is doing: decided at once, without waiting for evidence of
    rank 0's start (gang-scheduled probes start together and carry none). Silence on both
    for ``patience.silence_decides`` seconds in a row decides too (dropped on the way or at the
    host: :data:`SILENCE_DECIDES_SECONDS`). A refused master port is not decided here
    (rank 0 may not listen yet) unless ``beacon`` (rank 0's beacon port and token) is
    given and rank 0 answers there (:func:`beacon_answers`): it listened on the master
    port first, so the refusal is a rule, decided at once. Returns (addr, last error,
    seconds, the deciding host check or None); a silence verdict's host check carries
    ``silentSeconds``, a beacon verdict's ``listening: true`` and the beacon ``port``."""
    check = check or host_check
    probe_quiet, silence_decides = patience.probe_quiet, patience.silence_decides
    t0 = time.monotonic()
    last = "timeout"
    silent_since: Optional[float] = None
    while deadline.remaining() > 0:
        addr, last, _ = _dial(addrs, port, Deadline(min(deadline.at, time.monotonic() + probe_quiet)))
        if addr is not None:
            return addr, "", time.monotonic() - t0, None
        if last == "refused" and beacon and deadline.remaining() > 0:
            target = order(addrs)[0]
            if beacon_answers(target, beacon[0], beacon[1], min(BEACON_SECONDS, deadline.remaining())):
                # rank 0 listens: one more dial of the master port, now that it surely does
                addr, last, _ = _dial([target], port, Deadline(time.monotonic() + 0.5))
                if addr is not None:
                    return addr, "", time.monotonic() - t0, None
                if last == "refused":
                    return None, last, time.monotonic() - t0, HostCheck(
                        port=beacon[0], r="ok", arp=arp_state(target) if ":" not in target
                        else None, listening=True)
        if last != "timeout" or deadline.remaining() <= 0:
            silent_since = None  # refused or unreachable: not silence
            continue
        began = time.monotonic() - probe_quiet  # this dial was silent throughout
        h = check(order(addrs)[0], port, min(1.0, deadline.remaining()))
        if h.get("r") in ("refused", "ok"):
            return None, last, time.monotonic() - t0, h
        if h.get("r") != "timeout":
            silent_since = None
            continue
        silent_since = began if silent_since is None else silent_since
        now = time.monotonic()
        if now - silent_since >= silence_decides:
            decided = HostCheck(**h)
            decided["silentSeconds"] = round(now - silent_since, 1)
            return None, last, now - t0, decided
    return None, last, time.monotonic() - t0, None


def arp_state(addr: str, table: str = "/proc/net/arp") -> Optional[str]:
    """The kernel's neighbour entry for IPv4 ``addr``: ``complete`` (a host answered ARP),
    ``incomplete`` (asked, nobody answered), or None (no entry, or not readable)."""
    try:
        with open(table) as f:
            for line in f.readlines()[1:]:
                p = line.split()
                if len(p) >= 3 and p[0] == addr:
                    return "complete" if int(p[2], 16) & 0x2 else "incomplete"
    except (OSError, ValueError):
        pass
    return None


HOST_CHECK_SECONDS = 1.5  # the dial of another port after the master port failed



def host_check(addr: str, master_port: int, timeout: float = HOST_CHECK_SECONDS) -> HostCheck:
    """After the master port failed: does MASTER_ADDR's host answer at all? A TCP dial to
    another port (1, normally closed: a live host resets it) and the ARP entry tell a
    filter on the master port alone (the host answers elsewhere) from a host whose replies
    never come back (ARP answered, no port answers: replies leave by another NIC, or
    everything from here is dropped) or one nobody answers for (no ARP reply).
    Returns {port, r (refused|ok|timeout|unreachable|error), arp}."""
    port = 1 if master_port != 1 else 2
    _, last, _ = _dial([addr], port, Deadline(time.monotonic() + timeout))
    r = "ok" if last == "" else ("error" if last.startswith("error") else last)
    return {"port": port, "r": r, "arp": arp_state(addr) if ":" not in addr else None}


def host_words(h: Optional[HostCheck], node: str) -> str:
    """What :func:`host_check` says about the master's host, as a clause."""
    if not h:
        return ""
    if h["r"] in ("refused", "ok"):
        return f"the host answers on other ports (TCP {h['port']}: {h['r']}): the master port alone is filtered"
    if h.get("arp") == "complete":
        return (f"the host answered ARP but no TCP port answers (TCP {h['port']}: {h['r']}): its replies "
                f"to {node} are lost (a route out another NIC, two NICs on one subnet, or a firewall "
                f"dropping everything from {node})")
    if h.get("arp") == "incomplete" or h["r"] == "unreachable":
        return "no host answers ARP for it: the address is on a NIC this node's network does not reach"
    return ""
