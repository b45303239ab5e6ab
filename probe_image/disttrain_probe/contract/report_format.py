"""The probe report's envelope: its version and size cap.

A report is one line of UTF-8 JSON written to the probe container's termination message,
which the kubelet caps at 4096 bytes, less in a pod of more than 3 containers
(:func:`report_budget`; the operator passes the pod's budget as
``DISTTRAIN_PROBE_REPORT_BYTES``); ``v`` in the report is :data:`REPORT_VERSION`.
"""
from __future__ import annotations

REPORT_VERSION = 1  # the report's ``v``; the operator refuses any other as ProbeReportInvalid
MAX_REPORT_BYTES = 4096  # the kubelet's cap on a termination message (bytes)
# The kubelet keeps 12 KiB of termination messages per pod, shared evenly by every
# container of its spec (init, regular and ephemeral: status_manager.go normalizeStatus,
# Kubernetes 1.37), and cuts each to its share: a pod of 4 containers keeps 3072 bytes.
POD_MESSAGE_BYTES = 12 * 1024
MIN_REPORT_BYTES = 256  # a smaller budget is not honoured (the verdict alone needs about 60)


def report_budget(containers: int) -> int:
    """The bytes of its termination message the kubelet keeps for one container of a pod
    that has ``containers`` containers (init, regular and ephemeral, counted from its
    spec): 12 KiB shared evenly, at most :data:`MAX_REPORT_BYTES`. Never raises."""
    return min(MAX_REPORT_BYTES, POD_MESSAGE_BYTES // max(1, containers))


def parse_budget(raw: object) -> int:
    """``DISTTRAIN_PROBE_REPORT_BYTES`` as the probe honours it: an integer clamped to
    [:data:`MIN_REPORT_BYTES`, :data:`MAX_REPORT_BYTES`]; anything else (absent, not a
    number) :data:`MAX_REPORT_BYTES`. Never raises."""
    try:
        n = int(str(raw).strip())
    except ValueError:
        return MAX_REPORT_BYTES
    return max(MIN_REPORT_BYTES, min(MAX_REPORT_BYTES, n))
