"""Names shared by the whole operator: API group, labels, condition types and reasons.

Condition types follow the Kubernetes API conventions (KEP-1623): adjectives or past
participles with positive polarity, CamelCase reasons. Every reason the operator or the
probe can write is a constant here; ``REASON_CONDITION`` maps each failure reason to the
condition type that carries it.
"""

from __future__ import annotations

GROUP = "disttrain.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DistTrainingJob"
PLURAL = "disttrainingjobs"
SINGULAR = "disttrainingjob"
SHORT_NAMES = ["dtj"]

# Labels and annotations on children.
LABEL_JOB = f"{GROUP}/job-name"
LABEL_ROLE = f"{GROUP}/role"
LABEL_RANK = f"{GROUP}/node-rank"
LABEL_ATTEMPT = f"{GROUP}/attempt"
ROLE_PROBE = "probe"
ROLE_WORKER = "worker"

COMPONENT = "disttrain-operator"

# Where the probe program is copied when it runs inside the training image.
PROBE_INSTALL_DIR = "/opt/disttrain-probe"
PROBE_VOLUME = "disttrain-probe"
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
DEFAULT_PROBE_IMAGE = "ghcr.io/disttrain/disttrain-probe:0.1.0"

# Environment variables the operator owns in every pod it creates.
RESERVED_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
RESERVED_ENV_PREFIX = "PET_"

# ---- condition types -------------------------------------------------------------------
PROBES_SCHEDULED = "ProbesScheduled"
MASTER_REACHABLE = "MasterReachable"
NETWORK_VALIDATED = "NetworkValidated"
VERSIONS_CONSISTENT = "VersionsConsistent"
COLLECTIVE_VALIDATED = "CollectiveValidated"
VALIDATED = "Validated"
TRAINING_STARTED = "TrainingStarted"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
SUSPENDED = "Suspended"  # written only once a job was suspended (True), False after a resume
ADMITTED = "Admitted"  # written only for jobs queued in Kueue (label kueue.x-k8s.io/queue-name)

# Order matters: the probe checks run in this order, so the first failing one is the cause.
CHECK_CONDITIONS = (
    PROBES_SCHEDULED,
    MASTER_REACHABLE,
    NETWORK_VALIDATED,
    VERSIONS_CONSISTENT,
    COLLECTIVE_VALIDATED,
)
ALL_CONDITIONS = CHECK_CONDITIONS + (VALIDATED, TRAINING_STARTED, SUCCEEDED, FAILED)
# Written only when they apply (a queued job; a job that was suspended).
OPTIONAL_CONDITIONS = (ADMITTED, SUSPENDED)

# ---- phases (a summary of the conditions, for the printer column) ----------------------
PHASE_PENDING = "Pending"
PHASE_PROBING = "Probing"
PHASE_VALIDATED = "Validated"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_SUSPENDED = "Suspended"

# ---- reasons ---------------------------------------------------------------------------
# Unknown / in progress
REASON_NOT_CHECKED = "NotCheckedYet"
REASON_PROBING = "Probing"
REASON_PROBES_PENDING = "ProbesPending"
REASON_NOT_REACHED = "EarlierCheckFailed"
REASON_PROBE_DISABLED = "ProbeDisabled"

# ProbesScheduled
REASON_PROBES_SCHEDULED = "AllProbesScheduled"
REASON_PROBE_UNSCHEDULABLE = "ProbeUnschedulable"
REASON_PROBE_IMAGE_PULL_FAILED = "ProbeImagePullFailed"
REASON_NOT_ENOUGH_NODES = "NotEnoughNodes"
REASON_WAITING_FOR_RESOURCES = "WaitingForResources"  # Unknown: nodes only busy; it waits

# MasterReachable
REASON_MASTER_REACHABLE = "MasterPortOpen"
REASON_MASTER_ADDR_LOOPBACK = "MasterAddrLoopback"
REASON_MASTER_ADDR_UNRESOLVABLE = "MasterAddrUnresolvable"
REASON_MASTER_PORT_REFUSED = "MasterPortRefused"
REASON_MASTER_PORT_TIMEOUT = "MasterPortTimeout"
REASON_RENDEZVOUS_TIMEOUT = "RendezvousTimeout"

# NetworkValidated
REASON_INTERFACE_SELECTED = "InterfaceSelected"
REASON_INTERFACE_NOT_FOUND = "InterfaceNotFound"
REASON_INTERFACE_UNREACHABLE = "InterfaceUnreachable"
REASON_NO_COMMON_INTERFACE = "NoCommonInterface"
REASON_EPHEMERAL_PORTS_BLOCKED = "EphemeralPortsBlocked"
REASON_PORT_RANGE_OUTSIDE_ALLOWED = "PortRangeOutsideAllowed"  # a probe warning

# VersionsConsistent
REASON_VERSIONS_MATCH = "VersionsMatch"
REASON_NCCL_VERSION_MISMATCH = "NCCLVersionMismatch"
REASON_TORCH_VERSION_MISMATCH = "TorchVersionMismatch"
REASON_CUDA_VERSION_MISMATCH = "CUDAVersionMismatch"
REASON_DRIVER_VERSION_MISMATCH = "DriverVersionMismatch"

# CollectiveValidated
REASON_ALLREDUCE_PASSED = "AllReducePassed"
REASON_ALLREDUCE_TIMEOUT = "AllReduceTimeout"
REASON_ALLREDUCE_WRONG_RESULT = "AllReduceWrongResult"
REASON_BANDWIDTH_BELOW_THRESHOLD = "BandwidthBelowThreshold"
REASON_PROCESS_GROUP_INIT_FAILED = "ProcessGroupInitFailed"

# Validated (summary) and probe-level failures
REASON_ALL_CHECKS_PASSED = "AllChecksPassed"
REASON_PASSED_WITH_WARNINGS = "PassedWithWarnings"
REASON_PROBE_REPORT_INVALID = "ProbeReportInvalid"
REASON_PROBE_FAILED = "ProbeFailed"
REASON_PROBE_TIMEOUT = "ProbeTimeout"
REASON_PROBE_INTERNAL_ERROR = "ProbeInternalError"

# Training outcome
REASON_TRAINING_PENDING = "TrainingPodsPending"
REASON_ALL_RANKS_RUNNING = "AllRanksRunning"
REASON_TRAINING_RUNNING = "TrainingRunning"
REASON_ALL_RANKS_SUCCEEDED = "AllRanksSucceeded"
REASON_RANK_FAILED = "RankFailed"
REASON_BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
REASON_PREFLIGHT_FAILED = "PreflightFailed"
REASON_RESTARTING = "Restarting"

# The control loop itself (any condition; see docs/conditions.md)
REASON_INVALID_SPEC = "InvalidSpec"  # the spec (or the job's name) cannot be acted on
REASON_INVALID_POD_TEMPLATE = "InvalidPodTemplate"  # the apiserver refused a pod built from it
REASON_API_ERROR = "APIError"  # API calls keep failing; retried with backoff
REASON_NAME_CONFLICT = "NameConflict"  # a pod the job needs is held by one that is not its own
REASON_TTL_EXPIRED = "TTLExpired"  # Event only: the finished job is deleted
REASON_PROBE_POD_LOST = "ProbePodLost"  # a probe pod was evicted or deleted before it reported
REASON_JOB_SUSPENDED = "JobSuspended"  # Suspended=True, and the stage conditions it stopped
REASON_JOB_RESUMED = "JobResumed"  # Suspended=False after a resume
REASON_WORKLOAD_ADMITTED = "WorkloadAdmitted"  # Admitted=True: Kueue reserved the quota
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"  # Admitted=False: queued, with Kueue's message
REASON_WORKLOAD_EVICTED = "WorkloadEvicted"  # Admitted=False: preempted or its queue stopped
REASON_WORKLOAD_DEACTIVATED = "WorkloadDeactivated"  # Failed: Kueue deactivated the Workload
REASON_KUEUE_UNAVAILABLE = "KueueUnavailable"  # Admitted=False: Kueue's objects cannot be read
REASON_OPERATOR_ERROR = "OperatorError"  # a bug in the operator; retried with backoff
# Terminal reasons that are the spec's fault, not the cluster's (no "preflight failed").
SPEC_REASONS = frozenset({REASON_INVALID_SPEC, REASON_INVALID_POD_TEMPLATE})

# Failure reason -> the condition type that reports it. Reasons absent here are summary-only.
REASON_CONDITION: dict[str, str] = {
    REASON_PROBE_UNSCHEDULABLE: PROBES_SCHEDULED,
    REASON_PROBE_IMAGE_PULL_FAILED: PROBES_SCHEDULED,
    REASON_NOT_ENOUGH_NODES: PROBES_SCHEDULED,
    REASON_MASTER_ADDR_LOOPBACK: MASTER_REACHABLE,
    REASON_MASTER_ADDR_UNRESOLVABLE: MASTER_REACHABLE,
    REASON_MASTER_PORT_REFUSED: MASTER_REACHABLE,
    REASON_MASTER_PORT_TIMEOUT: MASTER_REACHABLE,
    REASON_RENDEZVOUS_TIMEOUT: MASTER_REACHABLE,
    REASON_INTERFACE_NOT_FOUND: NETWORK_VALIDATED,
    REASON_INTERFACE_UNREACHABLE: NETWORK_VALIDATED,
    REASON_NO_COMMON_INTERFACE: NETWORK_VALIDATED,
    REASON_EPHEMERAL_PORTS_BLOCKED: NETWORK_VALIDATED,
    REASON_NCCL_VERSION_MISMATCH: VERSIONS_CONSISTENT,
    REASON_TORCH_VERSION_MISMATCH: VERSIONS_CONSISTENT,
    REASON_CUDA_VERSION_MISMATCH: VERSIONS_CONSISTENT,
    REASON_DRIVER_VERSION_MISMATCH: VERSIONS_CONSISTENT,
    REASON_ALLREDUCE_TIMEOUT: COLLECTIVE_VALIDATED,
    REASON_ALLREDUCE_WRONG_RESULT: COLLECTIVE_VALIDATED,
    REASON_BANDWIDTH_BELOW_THRESHOLD: COLLECTIVE_VALIDATED,
    REASON_PROCESS_GROUP_INIT_FAILED: COLLECTIVE_VALIDATED,
}

# Generic reasons that are usually a consequence of another rank's specific failure
# (rank 0 times out waiting for a peer that could not resolve the master): a specific
# reason from any rank wins over these when choosing the cause.
GENERIC_REASONS = frozenset(
    {REASON_RENDEZVOUS_TIMEOUT, REASON_PROBE_INTERNAL_ERROR, REASON_PROCESS_GROUP_INIT_FAILED}
)

# Successful reason per check condition.
PASS_REASON = {
    PROBES_SCHEDULED: REASON_PROBES_SCHEDULED,
    MASTER_REACHABLE: REASON_MASTER_REACHABLE,
    NETWORK_VALIDATED: REASON_INTERFACE_SELECTED,
    VERSIONS_CONSISTENT: REASON_VERSIONS_MATCH,
    COLLECTIVE_VALIDATED: REASON_ALLREDUCE_PASSED,
}

# Reasons of progress or success: their Events are Normal (all others are Warnings).
QUIET_REASONS = frozenset(PASS_REASON.values()) | {
    REASON_ALL_CHECKS_PASSED, REASON_ALL_RANKS_RUNNING, REASON_ALL_RANKS_SUCCEEDED,
    REASON_NOT_CHECKED, REASON_PROBING, REASON_PROBES_PENDING, REASON_NOT_REACHED,
    REASON_PROBE_DISABLED, REASON_TRAINING_PENDING, REASON_TRAINING_RUNNING, REASON_RESTARTING,
    REASON_JOB_SUSPENDED, REASON_JOB_RESUMED, REASON_WORKLOAD_ADMITTED, REASON_WAITING_FOR_QUOTA,
}

# Reasons of a job that waits (not a verdict): the condition can still turn either way.
WAITING_REASONS = frozenset({
    REASON_WAITING_FOR_QUOTA, REASON_WAITING_FOR_RESOURCES, REASON_NAME_CONFLICT, REASON_API_ERROR,
    REASON_KUEUE_UNAVAILABLE, REASON_WORKLOAD_EVICTED,
})
