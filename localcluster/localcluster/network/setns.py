"""Running a function inside a named network namespace (``/run/netns/<name>``) from Python.

setns(2) switches the calling thread only (Python 3.11 has no ``os.setns``; ctypes calls
libc), so :func:`run_in` runs the function in a thread of its own that enters the
namespace and leaves it again; the caller's thread never moves. A socket keeps the
namespace it was made in: one made by the function can be bound, connected and used from
any thread afterwards (the service relay, the egress proxy, DNS queries from a node).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Callable, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def run_in(netns: str, fn: Callable[[], T]) -> T:
    """``fn()`` run in a thread that entered ``/run/netns/<netns>``; its result, or what it
    raised. Raises OSError when the namespace cannot be entered (no such namespace)."""
    result: dict = {}

    def work() -> None:
        try:
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        except BaseException as e:  # handed to the caller
            result["error"] = e
            return
        try:
            target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                _setns(target)
                try:
                    result["value"] = fn()
                finally:
                    _setns(own)
            finally:
                os.close(target)
        except BaseException as e:  # handed to the caller
            result["error"] = e
        finally:
            os.close(own)

    t = threading.Thread(target=work, name=f"setns-{netns}")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
