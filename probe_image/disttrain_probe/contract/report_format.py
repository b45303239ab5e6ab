"""The probe report's envelope: its version and size cap.

A report is one line of UTF-8 JSON written to the probe container's termination message,
which the kubelet caps at 4096 bytes; ``v`` in the report is :data:`REPORT_VERSION`.
"""
from __future__ import annotations

REPORT_VERSION = 1  # the report's ``v``; the operator refuses any other as ProbeReportInvalid
MAX_REPORT_BYTES = 4096  # the kubelet's cap on a termination message (bytes)
