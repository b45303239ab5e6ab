"""Failure and warning reasons of the probe (CamelCase, shared with the operator).

A failure reason ends the probe (``ok`` false, exit code 1); a warning reason
reports a latent fault while the probe still passes. The operator maps failure
reasons onto condition types; :data:`CONDITION_OF` is that mapping, kept here so
both sides agree.
"""
from __future__ import annotations

# --- failures: MasterReachable -------------------------------------------------
MASTER_ADDR_LOOPBACK = "MasterAddrLoopback"
MASTER_ADDR_UNRESOLVABLE = "MasterAddrUnresolvable"
MASTER_PORT_REFUSED = "MasterPortRefused"
MASTER_PORT_TIMEOUT = "MasterPortTimeout"
RENDEZVOUS_TIMEOUT = "RendezvousTimeout"  # the master answered, peers never arrived

# --- failures: NetworkValidated ------------------------------------------------
INTERFACE_NOT_FOUND = "InterfaceNotFound"
INTERFACE_UNREACHABLE = "InterfaceUnreachable"
NO_COMMON_INTERFACE = "NoCommonInterface"
EPHEMERAL_PORTS_BLOCKED = "EphemeralPortsBlocked"

# --- failures: VersionsConsistent ----------------------------------------------
NCCL_VERSION_MISMATCH = "NCCLVersionMismatch"
TORCH_VERSION_MISMATCH = "TorchVersionMismatch"
CUDA_VERSION_MISMATCH = "CUDAVersionMismatch"
DRIVER_VERSION_MISMATCH = "DriverVersionMismatch"

# --- failures: CollectiveValidated ---------------------------------------------
ALL_REDUCE_TIMEOUT = "AllReduceTimeout"
ALL_REDUCE_WRONG_RESULT = "AllReduceWrongResult"
BANDWIDTH_BELOW_THRESHOLD = "BandwidthBelowThreshold"
PROCESS_GROUP_INIT_FAILED = "ProcessGroupInitFailed"

# --- failures: anything else (bad input, bug, a phase that overran) -------------
PROBE_INTERNAL_ERROR = "ProbeInternalError"

FAILURES = (
    MASTER_ADDR_LOOPBACK, MASTER_ADDR_UNRESOLVABLE, MASTER_PORT_REFUSED, MASTER_PORT_TIMEOUT,
    RENDEZVOUS_TIMEOUT,
    INTERFACE_NOT_FOUND, INTERFACE_UNREACHABLE, NO_COMMON_INTERFACE, EPHEMERAL_PORTS_BLOCKED,
    NCCL_VERSION_MISMATCH, TORCH_VERSION_MISMATCH, CUDA_VERSION_MISMATCH, DRIVER_VERSION_MISMATCH,
    ALL_REDUCE_TIMEOUT, ALL_REDUCE_WRONG_RESULT, BANDWIDTH_BELOW_THRESHOLD, PROCESS_GROUP_INIT_FAILED,
    PROBE_INTERNAL_ERROR,
)

# Condition type (operator side, docs/conditions.md) that each failure reason falsifies.
CONDITION_OF = {
    MASTER_ADDR_LOOPBACK: "MasterReachable",
    MASTER_ADDR_UNRESOLVABLE: "MasterReachable",
    MASTER_PORT_REFUSED: "MasterReachable",
    MASTER_PORT_TIMEOUT: "MasterReachable",
    RENDEZVOUS_TIMEOUT: "MasterReachable",
    INTERFACE_NOT_FOUND: "NetworkValidated",
    INTERFACE_UNREACHABLE: "NetworkValidated",
    NO_COMMON_INTERFACE: "NetworkValidated",
    EPHEMERAL_PORTS_BLOCKED: "NetworkValidated",
    NCCL_VERSION_MISMATCH: "VersionsConsistent",
    TORCH_VERSION_MISMATCH: "VersionsConsistent",
    CUDA_VERSION_MISMATCH: "VersionsConsistent",
    DRIVER_VERSION_MISMATCH: "VersionsConsistent",
    ALL_REDUCE_TIMEOUT: "CollectiveValidated",
    ALL_REDUCE_WRONG_RESULT: "CollectiveValidated",
    BANDWIDTH_BELOW_THRESHOLD: "CollectiveValidated",
    PROCESS_GROUP_INIT_FAILED: "CollectiveValidated",
    PROBE_INTERNAL_ERROR: "Validated",
}

# --- warnings (latent faults; the probe still passes) ---------------------------
# (names shared with disttrain.diagnosis.WARNING_CONDITION)
HOSTNAME_LOOPBACK = "HostnameResolvesToLoopback"   # hostname resolves to 127.x / ::1
NCCL_DEFAULT_DIFFERS = "NCCLDefaultInterfaceDiffers"  # NCCL alone would pick another interface
MIXED_ADDRESS_FAMILIES = "MixedAddressFamilies"   # IPv4 and IPv6 mixed across nodes / master
ROUTE_VIA_OTHER_INTERFACE = "RouteViaOtherInterface"  # kernel reaches master/peer via another NIC
MASTER_ROUTE_DIFFERS = ROUTE_VIA_OTHER_INTERFACE  # ... to the master
PEER_ROUTE_DIFFERS = ROUTE_VIA_OTHER_INTERFACE    # ... to a peer (two NICs on one subnet)
LOOPBACK_ONLY = "LoopbackOnly"                    # validated on lo only (single host)
PORT_RANGE_OUTSIDE_ALLOWED = "PortRangeOutsideAllowed"  # ip_local_port_range not inside portRange
MASTER_ADDR_NOT_LOCAL = "MasterAddrNotLocal"      # rank 0 does not own MASTER_ADDR
TEARDOWN_HUNG = "TeardownHung"                    # destroy_process_group overran (result kept)

WARNINGS = (
    HOSTNAME_LOOPBACK, NCCL_DEFAULT_DIFFERS, MIXED_ADDRESS_FAMILIES, ROUTE_VIA_OTHER_INTERFACE,
    LOOPBACK_ONLY, PORT_RANGE_OUTSIDE_ALLOWED, MASTER_ADDR_NOT_LOCAL,
    TEARDOWN_HUNG,
)

# --- why an interface / network was not chosen (``rejected[].reason``) ----------
REJ_LOOPBACK = "Loopback"
REJ_DUPLICATE_ADDRESS = "DuplicateAddress"
REJ_UNREACHABLE = "Unreachable"
REJ_DOWN = "Down"
REJ_NO_IPV4 = "NoIPv4"
REJ_NOT_REQUESTED = "NotRequested"
REJ_NOT_ON_ALL_NODES = "NotOnAllNodes"      # the network is missing on some node
REJ_MULTIPLE_ON_NODE = "MultipleOnNode"     # a node has two interfaces on this subnet
REJ_NOT_PREFERRED = "NotPreferred"          # usable, but another network ranked higher

REJECTIONS = (
    REJ_LOOPBACK, REJ_DUPLICATE_ADDRESS, REJ_UNREACHABLE, REJ_DOWN, REJ_NO_IPV4,
    REJ_NOT_REQUESTED, REJ_NOT_ON_ALL_NODES, REJ_MULTIPLE_ON_NODE, REJ_NOT_PREFERRED,
)

# --- phases, in order ------------------------------------------------------------
PHASES = ("config", "inventory", "rendezvous", "connectivity", "choice", "versions",
          "collective", "report")
