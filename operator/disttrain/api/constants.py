"""Names shared by the whole operator: API group, labels, condition types and reasons.

Condition types follow the Kubernetes API conventions (KEP-1623): adjectives or past
participles with positive polarity, CamelCase reasons. The condition types and reasons are
re-exported from the one vocabulary of probe and operator (``disttrain_probe.vocabulary``,
each reason with its condition and kind); ``REASON_CONDITION`` maps each failure reason to
the check condition that carries it.
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
# The owning job's metadata.uid: a deleted job's pods that still terminate under the same
# job name are never selected by the new job's anti-affinity or Service (JobSet: jobset-uid).
LABEL_JOB_UID = f"{GROUP}/job-uid"
ROLE_PROBE = "probe"
ROLE_WORKER = "worker"

COMPONENT = "disttrain-operator"

# Where the probe program is copied when it runs inside the training image.
PROBE_INSTALL_DIR = "/opt/disttrain-probe"
PROBE_LAUNCHER = PROBE_INSTALL_DIR + "/run_probe.py"  # disttrain_probe.install.LAUNCHER
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

# ---- condition types and reasons: one table, disttrain_probe.vocabulary ----------------
# (the probe is standard library only and ships into the training image; the operator
# imports the same table, so both sides, the docs test and the scenario checker agree)
from disttrain_probe import vocabulary  # noqa: E402

PROBES_SCHEDULED = vocabulary.PROBES_SCHEDULED
MASTER_REACHABLE = vocabulary.MASTER_REACHABLE
NETWORK_VALIDATED = vocabulary.NETWORK_VALIDATED
VERSIONS_CONSISTENT = vocabulary.VERSIONS_CONSISTENT
COLLECTIVE_VALIDATED = vocabulary.COLLECTIVE_VALIDATED
VALIDATED = vocabulary.VALIDATED
TRAINING_STARTED = vocabulary.TRAINING_STARTED
SUCCEEDED = vocabulary.SUCCEEDED
FAILED = vocabulary.FAILED

# Order matters: the probe checks run in this order, so the first failing one is the cause.
CHECK_CONDITIONS = vocabulary.CHECK_CONDITIONS
ALL_CONDITIONS = vocabulary.ALL_CONDITIONS
SUSPENDED = vocabulary.SUSPENDED  # written only once a job was suspended (True), False after a resume
ADMITTED = vocabulary.ADMITTED  # written only for jobs queued in Kueue (label kueue.x-k8s.io/queue-name)
OPTIONAL_CONDITIONS = vocabulary.OPTIONAL_CONDITIONS

# ---- phases (a summary of the conditions, for the printer column) ----------------------
PHASE_PENDING = "Pending"
PHASE_PROBING = "Probing"
PHASE_VALIDATED = "Validated"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_SUSPENDED = "Suspended"

# ---- reasons (REASON_<name> = V.<name>; kinds and conditions live in the vocabulary) ----
# Unknown / in progress
REASON_NOT_CHECKED = vocabulary.NOT_CHECKED
REASON_PROBING = vocabulary.PROBING
REASON_PROBES_PENDING = vocabulary.PROBES_PENDING
REASON_NOT_REACHED = vocabulary.NOT_REACHED
REASON_PROBE_DISABLED = vocabulary.PROBE_DISABLED

# ProbesScheduled
REASON_PROBES_SCHEDULED = vocabulary.PROBES_SCHEDULED_OK
REASON_PROBE_UNSCHEDULABLE = vocabulary.PROBE_UNSCHEDULABLE
REASON_PROBE_IMAGE_PULL_FAILED = vocabulary.PROBE_IMAGE_PULL_FAILED
REASON_NOT_ENOUGH_NODES = vocabulary.NOT_ENOUGH_NODES
REASON_WAITING_FOR_RESOURCES = vocabulary.WAITING_FOR_RESOURCES  # Unknown: nodes only busy; it waits

# MasterReachable
REASON_MASTER_REACHABLE = vocabulary.MASTER_PORT_OPEN
REASON_MASTER_ADDR_LOOPBACK = vocabulary.MASTER_ADDR_LOOPBACK
REASON_MASTER_ADDR_UNRESOLVABLE = vocabulary.MASTER_ADDR_UNRESOLVABLE
REASON_MASTER_PORT_REFUSED = vocabulary.MASTER_PORT_REFUSED
REASON_MASTER_PORT_TIMEOUT = vocabulary.MASTER_PORT_TIMEOUT
REASON_RENDEZVOUS_TIMEOUT = vocabulary.RENDEZVOUS_TIMEOUT

# NetworkValidated
REASON_INTERFACE_SELECTED = vocabulary.INTERFACE_SELECTED
REASON_INTERFACE_NOT_FOUND = vocabulary.INTERFACE_NOT_FOUND
REASON_INTERFACE_UNREACHABLE = vocabulary.INTERFACE_UNREACHABLE
REASON_NO_COMMON_INTERFACE = vocabulary.NO_COMMON_INTERFACE
REASON_EPHEMERAL_PORTS_BLOCKED = vocabulary.EPHEMERAL_PORTS_BLOCKED
REASON_PORT_RANGE_OUTSIDE_ALLOWED = vocabulary.PORT_RANGE_OUTSIDE_ALLOWED  # a probe warning
REASON_SLOW_LINK = vocabulary.SLOW_LINK  # a warning; a failure with probe.maxLinkImbalance

# VersionsConsistent
REASON_VERSIONS_MATCH = vocabulary.VERSIONS_MATCH
REASON_NCCL_VERSION_MISMATCH = vocabulary.NCCL_VERSION_MISMATCH
REASON_TORCH_VERSION_MISMATCH = vocabulary.TORCH_VERSION_MISMATCH
REASON_CUDA_VERSION_MISMATCH = vocabulary.CUDA_VERSION_MISMATCH
REASON_DRIVER_VERSION_MISMATCH = vocabulary.DRIVER_VERSION_MISMATCH
REASON_SETTINGS_MISMATCH = vocabulary.SETTINGS_MISMATCH

# CollectiveValidated
REASON_ALLREDUCE_PASSED = vocabulary.ALLREDUCE_PASSED
REASON_ALLREDUCE_TIMEOUT = vocabulary.ALL_REDUCE_TIMEOUT
REASON_ALLREDUCE_WRONG_RESULT = vocabulary.ALL_REDUCE_WRONG_RESULT
REASON_BANDWIDTH_BELOW_THRESHOLD = vocabulary.BANDWIDTH_BELOW_THRESHOLD
REASON_PROCESS_GROUP_INIT_FAILED = vocabulary.PROCESS_GROUP_INIT_FAILED

# Validated (summary) and probe-level failures
REASON_ALL_CHECKS_PASSED = vocabulary.ALL_CHECKS_PASSED
REASON_PASSED_WITH_WARNINGS = vocabulary.PASSED_WITH_WARNINGS
REASON_PROBE_REPORT_INVALID = vocabulary.PROBE_REPORT_INVALID
REASON_PROBE_FAILED = vocabulary.PROBE_FAILED
REASON_PROBE_TIMEOUT = vocabulary.PROBE_TIMEOUT
REASON_PROBE_INTERNAL_ERROR = vocabulary.PROBE_INTERNAL_ERROR
REASON_TORCH_IMPORT_TIMEOUT = vocabulary.TORCH_IMPORT_TIMEOUT
REASON_INVALID_SPEC = vocabulary.INVALID_SPEC

# Training outcome
REASON_TRAINING_PENDING = vocabulary.TRAINING_PENDING
REASON_ALL_RANKS_RUNNING = vocabulary.ALL_RANKS_RUNNING
REASON_TRAINING_RUNNING = vocabulary.TRAINING_RUNNING
REASON_ALL_RANKS_SUCCEEDED = vocabulary.ALL_RANKS_SUCCEEDED
REASON_RANK_FAILED = vocabulary.RANK_FAILED
REASON_BACKOFF_LIMIT_EXCEEDED = vocabulary.BACKOFF_LIMIT_EXCEEDED
REASON_DEADLINE_EXCEEDED = vocabulary.DEADLINE_EXCEEDED
REASON_PREFLIGHT_FAILED = vocabulary.PREFLIGHT_FAILED
REASON_RESTARTING = vocabulary.RESTARTING

# The control loop itself (see docs/conditions.md)
REASON_INVALID_POD_TEMPLATE = vocabulary.INVALID_POD_TEMPLATE  # the apiserver refused a pod built from it
REASON_API_ERROR = vocabulary.API_ERROR  # API calls keep failing; retried with backoff
REASON_NAME_CONFLICT = vocabulary.NAME_CONFLICT  # a pod the job needs is held by one that is not its own
REASON_MASTER_ADDR_UNKNOWN = vocabulary.MASTER_ADDR_UNKNOWN  # the probes ended, rank 0's pod shows no address
REASON_TTL_EXPIRED = vocabulary.TTL_EXPIRED  # Event only: the finished job is deleted
REASON_PROBE_DETAIL = vocabulary.PROBE_DETAIL  # Event only: one probe finding in full
REASON_PROBE_POD_LOST = vocabulary.PROBE_POD_LOST  # a probe pod evicted, deleted or its node lost
REASON_OPERATOR_ERROR = vocabulary.OPERATOR_ERROR  # a bug in the operator; retried with backoff
REASON_JOB_SUSPENDED = vocabulary.JOB_SUSPENDED  # Suspended=True, and the stage conditions it stopped
REASON_JOB_RESUMED = vocabulary.JOB_RESUMED  # Suspended=False after a resume
REASON_WORKLOAD_ADMITTED = vocabulary.WORKLOAD_ADMITTED  # Admitted=True: Kueue reserved the quota
REASON_WAITING_FOR_QUOTA = vocabulary.WAITING_FOR_QUOTA  # Admitted=False: queued, with Kueue's message
REASON_WORKLOAD_EVICTED = vocabulary.WORKLOAD_EVICTED  # Admitted=False: preempted or its queue stopped
REASON_WORKLOAD_DEACTIVATED = vocabulary.WORKLOAD_DEACTIVATED  # Failed: Kueue deactivated the Workload
REASON_KUEUE_UNAVAILABLE = vocabulary.KUEUE_UNAVAILABLE  # Admitted=False: Kueue's objects cannot be read

# Failure reason -> the check condition that reports it. Reasons absent here are
# summary-only (Validated) or training outcomes.
REASON_CONDITION: dict[str, str] = {
    name: vocabulary.REASONS[name].condition for name in vocabulary.named(vocabulary.FAILURE)
    if vocabulary.REASONS[name].condition in CHECK_CONDITIONS
}

# Generic reasons that are usually a consequence of another rank's specific failure
# (rank 0 times out waiting for a peer that could not resolve the master): a specific
# reason from any rank wins over these when choosing the cause.
GENERIC_REASONS = frozenset(name for name, r in vocabulary.REASONS.items() if r.generic)

# Successful reason per check condition.
PASS_REASON = dict(vocabulary.PASS_REASON)

# Terminal reasons that are the spec's fault, not the cluster's (no "preflight failed").
SPEC_REASONS = frozenset({REASON_INVALID_SPEC, REASON_INVALID_POD_TEMPLATE})

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
