"""The node agent's logger and API timestamps, shared by its modules."""
from __future__ import annotations

import datetime as _dt
import logging

log = logging.getLogger("nodeagent")


def now_rfc3339() -> str:
    """Current UTC time as metav1.Time (second precision)."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """Current UTC time as metav1.MicroTime."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
