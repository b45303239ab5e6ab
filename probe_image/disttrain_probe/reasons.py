"""The probe's reasons (CamelCase, shared with the operator), by their short names.

A failure reason ends the probe (``ok`` false, exit code 1); a warning reason reports a
latent fault while the probe still passes; a rejection says why an interface was not
chosen. The table itself, with each reason's condition type and kind, is
:mod:`disttrain_probe.vocabulary`; this module only names the probe's part of it.
"""
from __future__ import annotations

from . import vocabulary as V
from .vocabulary import (  # noqa: F401  (re-exported names used by the probe's phases)
    ALL_REDUCE_TIMEOUT, ALL_REDUCE_WRONG_RESULT, BANDWIDTH_BELOW_THRESHOLD, CUDA_VERSION_MISMATCH,
    DRIVER_VERSION_MISMATCH, EPHEMERAL_PORTS_BLOCKED, HOSTNAME_LOOPBACK, INTERFACE_NOT_FOUND,
    INTERFACE_UNREACHABLE, LOOPBACK_ONLY, MASTER_ADDR_LOOPBACK, MASTER_ADDR_NOT_LOCAL,
    MASTER_ADDR_UNRESOLVABLE, MASTER_PORT_REFUSED, MASTER_PORT_TIMEOUT, MIXED_ADDRESS_FAMILIES,
    NCCL_DEFAULT_DIFFERS, NCCL_IGNORES_INTERFACE, NCCL_VERSION_MISMATCH, NO_COMMON_INTERFACE, PHASES,
    PORT_RANGE_OUTSIDE_ALLOWED, PROBE_INTERNAL_ERROR, PROCESS_GROUP_INIT_FAILED, REJ_DOWN,
    REJ_DUPLICATE_ADDRESS, REJ_LOOPBACK, REJ_MULTIPLE_ON_NODE, REJ_NO_IPV4, REJ_NOT_ON_ALL_NODES,
    REJ_NOT_PREFERRED, REJ_NOT_REQUESTED, REJ_POD_NETWORK_DEVICE, REJ_UNREACHABLE, RENDEZVOUS_TIMEOUT,
    RISKY_SETTING, ROUTE_VIA_OTHER_INTERFACE, SETTINGS_MISMATCH, SLOW_TORCH_IMPORT, TEARDOWN_HUNG, TORCH_IMPORT_TIMEOUT,
    TORCH_VERSION_MISMATCH,
)

MASTER_ROUTE_DIFFERS = ROUTE_VIA_OTHER_INTERFACE  # ... to the master
PEER_ROUTE_DIFFERS = ROUTE_VIA_OTHER_INTERFACE    # ... to a peer (two NICs on one subnet)

FAILURES = V.named(V.FAILURE, V.PROBE)
WARNINGS = V.named(V.WARNING, V.PROBE)
REJECTIONS = V.named(V.REJECTION, V.PROBE)

# Condition type (operator side) that each probe failure reason falsifies.
CONDITION_OF = {name: V.REASONS[name].condition for name in FAILURES}
