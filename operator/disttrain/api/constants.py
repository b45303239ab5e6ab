"""Names shared by the whole operator: API group, labels, condition types and reasons.

Condition types follow the Kubernetes API conventions (KEP-1623): adjectives or past
participles with positive polarity, CamelCase reasons. The condition types are
re-exported from the one vocabulary of probe and operator
(``disttrain_probe.contract.vocabulary``, each reason with its condition and kind); reasons
are used from there by their one name (``vocabulary.RANK_FAILED``), never aliased here.
``REASON_CONDITION`` maps each failure reason to the check condition that carries it.
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
# A DistTrainingJob that only probes (the Kueue admission check's, issue 35): it stops at
# the verdict and never creates training pods (docs/admission-check.md).
LABEL_PREFLIGHT_ONLY = f"{GROUP}/preflight-only"
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

# ---- condition types and reasons: one table, disttrain_probe.contract.vocabulary ----------------
# (the probe is standard library only and ships into the training image; the operator
# imports the same table, so both sides, the docs test and the scenario checker agree)
from disttrain_probe.contract import vocabulary  # noqa: E402

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
PROGRESSING = vocabulary.PROGRESSING  # written only while training runs (the stall verdict)
OPTIONAL_CONDITIONS = vocabulary.OPTIONAL_CONDITIONS

# ---- condition statuses (metav1.ConditionStatus): no module spells them again ----------
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"

# ---- phases (a summary of the conditions, for the printer column) ----------------------
PHASE_PENDING = "Pending"
PHASE_PROBING = "Probing"
PHASE_VALIDATED = "Validated"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
PHASE_SUSPENDED = "Suspended"

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
SPEC_REASONS = frozenset({vocabulary.INVALID_SPEC, vocabulary.INVALID_POD_TEMPLATE})

# Reasons of progress or success: their Events are Normal (all others are Warnings).
QUIET_REASONS = frozenset(PASS_REASON.values()) | {
    vocabulary.ALL_CHECKS_PASSED, vocabulary.ALL_RANKS_RUNNING, vocabulary.ALL_RANKS_SUCCEEDED,
    vocabulary.NOT_CHECKED, vocabulary.PROBING, vocabulary.PROBES_PENDING, vocabulary.NOT_REACHED,
    vocabulary.PROBE_DISABLED, vocabulary.TRAINING_PENDING, vocabulary.TRAINING_RUNNING, vocabulary.RESTARTING,
    vocabulary.JOB_SUSPENDED, vocabulary.JOB_RESUMED, vocabulary.WORKLOAD_ADMITTED, vocabulary.WAITING_FOR_QUOTA,
    vocabulary.COLLECTIVES_ADVANCING, vocabulary.PROGRESS_NOT_REPORTED, vocabulary.RANKS_WAITING,
}

# Reasons of a job that waits (not a verdict): the condition can still turn either way.
WAITING_REASONS = frozenset({
    vocabulary.WAITING_FOR_QUOTA, vocabulary.WAITING_FOR_RESOURCES, vocabulary.NAME_CONFLICT, vocabulary.API_ERROR,
    vocabulary.KUEUE_UNAVAILABLE, vocabulary.WORKLOAD_EVICTED, vocabulary.RESOURCE_NOT_OFFERED,
})
