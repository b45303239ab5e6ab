"""The name of every ``DISTTRAIN_PROBE_*`` environment variable, once.

The operator sets them on each probe pod (``disttrain.children.pods``); the probe reads
them (``disttrain_probe.ground.config`` and the phases), each overridable by the flag its help
names. Units are in the names (``_SECONDS``, ``_BYTES``, ``_GBPS``). Neither side spells a
name again: both use these constants (``tests/unit/repo/test_lint_contracts.py`` fails on a
second spelling in code).
"""
from __future__ import annotations

# -- set by the operator on every probe pod (docs/probe-report.md lists the values) -----
BACKEND = "DISTTRAIN_PROBE_BACKEND"  # auto | nccl | gloo
SOCKET_IFNAME = "DISTTRAIN_PROBE_SOCKET_IFNAME"  # auto, or an NCCL_SOCKET_IFNAME value
GPUS = "DISTTRAIN_PROBE_GPUS"  # GPUs the pod requested (the inventory compares)
MESSAGE_SIZE_BYTES = "DISTTRAIN_PROBE_MESSAGE_SIZE_BYTES"  # the all-reduce's size
ITERATIONS = "DISTTRAIN_PROBE_ITERATIONS"  # timed all-reduces
TIMEOUT_SECONDS = "DISTTRAIN_PROBE_TIMEOUT_SECONDS"  # the probe's whole budget
MIN_BUSBW_GBPS = "DISTTRAIN_PROBE_MIN_BUSBW_GBPS"  # 0: no threshold
REPORT_PATH = "DISTTRAIN_PROBE_REPORT_PATH"  # the termination message file
REPORT_BYTES = "DISTTRAIN_PROBE_REPORT_BYTES"  # the kubelet's share of it (report_format.report_budget)
JOB_UID = "DISTTRAIN_PROBE_JOB_UID"  # echoed in the report
ATTEMPT = "DISTTRAIN_PROBE_ATTEMPT"  # echoed in the report
PORT_RANGE = "DISTTRAIN_PROBE_PORT_RANGE"  # 'lo-hi' the firewall admits
MASTER_STARTED_AT = "DISTTRAIN_PROBE_MASTER_STARTED_AT"  # RFC 3339, when rank 0 ran first
BEACON_PORT = "DISTTRAIN_PROBE_BEACON_PORT"  # rank 0's second listener
PEER_DNS_NAME = "DISTTRAIN_PROBE_PEER_DNS_NAME"  # another name of the job, looked up once
NPROC_PER_NODE = "DISTTRAIN_PROBE_NPROC_PER_NODE"  # processes per node

# -- tuning the probe reads, defaults in the probe -----------------------------------------
MASTER_GRACE_SECONDS = "DISTTRAIN_PROBE_MASTER_GRACE_SECONDS"
RESOLVE_SECONDS = "DISTTRAIN_PROBE_RESOLVE_SECONDS"  # default: timing.default_resolve_seconds
SLOW_IMPORT_SECONDS = "DISTTRAIN_PROBE_SLOW_IMPORT_SECONDS"
BULK_BYTES = "DISTTRAIN_PROBE_BULK_BYTES"  # the bulk transfer per path
FULL_MESH_MAX = "DISTTRAIN_PROBE_FULL_MESH_MAX"  # ranks up to which every pair is dialled

# -- between the probe's own processes ------------------------------------------------------
LOCAL_WORKER = "DISTTRAIN_PROBE_LOCAL_WORKER"  # set on the local ranks local rank 0 starts
PARENT_PID = "DISTTRAIN_PROBE_PARENT_PID"

# -- the operator's own setting (its Deployment's env); the probe never reads it ------------
IMAGE = "DISTTRAIN_PROBE_IMAGE"  # the default probe image

# -- test hooks: faults the tests inject into a real probe ----------------------------------
TEST_STALL_PHASE = "DISTTRAIN_PROBE_TEST_STALL_PHASE"
TEST_STALL_LOCAL = "DISTTRAIN_PROBE_TEST_STALL_LOCAL"
TEST_CRASH_LOCAL = "DISTTRAIN_PROBE_TEST_CRASH_LOCAL"
TEST_TORCH_DELAY = "DISTTRAIN_PROBE_TEST_TORCH_DELAY"

NAMES = tuple(v for k, v in dict(globals()).items() if k.isupper() and isinstance(v, str))
