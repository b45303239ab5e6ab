"""The reason vocabulary of probe and operator: every condition type and every reason,
with the condition(s) it appears on and its kind, in one table.

Standard library only (the probe runs inside any training image, Python 3.9+); the
operator imports it too (``disttrain.api.constants`` re-exports the names), and so do the
docs drift test (``tests/unit/repo/test_docs_conditions.py``) and the scenario checker
(``localcluster/scenarios/scenario.py``), so the three cannot disagree.

Kinds:

- ``failure``: a check (or the run) failed; the condition that carries it is False
  (``Failed`` and ``Succeeded``: the outcome conditions, True/False as the outcome says);
- ``warning``: a latent fault a passing probe saw; its check stays True with this reason;
- ``rejection``: why an interface was not chosen (``rejected[].reason`` in the report,
  named in ``NetworkValidated``'s message), never a condition reason itself;
- ``pass``: the reason of a True condition;
- ``progress``: the reason of an Unknown condition (not decided yet, or not reached).

A reason may have a second kind (its ``kinds``; the first is its usual one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

# ---- condition types (positive polarity, KEP-1623) -------------------------------------
PROBES_SCHEDULED = "ProbesScheduled"
MASTER_REACHABLE = "MasterReachable"
NETWORK_VALIDATED = "NetworkValidated"
VERSIONS_CONSISTENT = "VersionsConsistent"
COLLECTIVE_VALIDATED = "CollectiveValidated"
VALIDATED = "Validated"
TRAINING_STARTED = "TrainingStarted"
SUCCEEDED = "Succeeded"
FAILED = "Failed"

# Order matters: the probe checks run in this order, so the first failing one is the cause.
CHECK_CONDITIONS = (PROBES_SCHEDULED, MASTER_REACHABLE, NETWORK_VALIDATED, VERSIONS_CONSISTENT,
                    COLLECTIVE_VALIDATED)
PROBE_CHECKS = CHECK_CONDITIONS[1:]  # the checks decided from probe reports
ALL_CONDITIONS = CHECK_CONDITIONS + (VALIDATED, TRAINING_STARTED, SUCCEEDED, FAILED)
# Written only when they apply: a job queued in Kueue; a job that was suspended; a job whose
# training runs (whether its collectives advance: the stall verdict, disttrain.diagnosis.stall).
ADMITTED = "Admitted"
SUSPENDED = "Suspended"
PROGRESSING = "Progressing"
OPTIONAL_CONDITIONS = (ADMITTED, SUSPENDED, PROGRESSING)

FAILURE = "failure"
WARNING = "warning"
REJECTION = "rejection"
PASS = "pass"
PROGRESS = "progress"
EVENT = "event"  # an Event reason only, never a condition's
KINDS = (FAILURE, WARNING, REJECTION, PASS, PROGRESS, EVENT)

PROBE = "probe"
OPERATOR = "operator"


@dataclass(frozen=True)
class Reason:
    """One CamelCase reason: ``conditions`` it appears on (the first is the one it belongs
    to: a failure there makes that check the cause), ``kinds`` (the first is its usual
    kind), who writes it (``probe`` or ``operator``), and ``generic``: usually the echo of
    another rank's specific failure (rank 0 timing out waiting for a peer that could not
    reach it), so any specific reason wins over it when the cause is chosen."""

    name: str
    conditions: Tuple[str, ...]
    kinds: Tuple[str, ...]
    source: str
    generic: bool = False

    @property
    def condition(self) -> str:
        return self.conditions[0]

    @property
    def kind(self) -> str:
        return self.kinds[0]


_T: List[Reason] = []


def _r(name: str, conditions: Iterable[str], kinds: Iterable[str], source: str,
       generic: bool = False) -> str:
    _T.append(Reason(name, tuple(conditions), tuple(kinds), source, generic))
    return name


_F, _W, _X, _P, _G = (FAILURE,), (WARNING,), (REJECTION,), (PASS,), (PROGRESS,)
_PROBE_CHECKS_AND_SUMMARY = PROBE_CHECKS + (VALIDATED,)

# ---- progress (Unknown) ----------------------------------------------------------------
NOT_CHECKED = _r("NotCheckedYet", CHECK_CONDITIONS + (VALIDATED,), _G, OPERATOR)
PROBING = _r("Probing", (VALIDATED,), _G, OPERATOR)
PROBES_PENDING = _r("ProbesPending", (PROBES_SCHEDULED,), _G, OPERATOR)
NOT_REACHED = _r("EarlierCheckFailed", PROBE_CHECKS, _G, OPERATOR)
PROBE_DISABLED = _r("ProbeDisabled", CHECK_CONDITIONS, _G, OPERATOR)
TRAINING_PENDING = _r("TrainingPodsPending", (TRAINING_STARTED, SUCCEEDED, FAILED), _G, OPERATOR)
TRAINING_RUNNING = _r("TrainingRunning", (SUCCEEDED, FAILED, TRAINING_STARTED), _G, OPERATOR)
RESTARTING = _r("Restarting", (TRAINING_STARTED,), _G, OPERATOR)

WAITING_FOR_RESOURCES = _r("WaitingForResources", (PROBES_SCHEDULED, TRAINING_STARTED), _G, OPERATOR)
# the scheduler finds a resource Insufficient that no node's allocatable has (or none as much
# as one pod requests): Unknown while the schedule timeout runs, then the job fails with it
RESOURCE_NOT_OFFERED = _r("ResourceNotOffered", (PROBES_SCHEDULED, TRAINING_STARTED, VALIDATED, SUCCEEDED,
                                                 FAILED), (PROGRESS, FAILURE), OPERATOR)
NAME_CONFLICT = _r("NameConflict", (PROBES_SCHEDULED, TRAINING_STARTED, VALIDATED, SUCCEEDED,
                                    FAILED), (PROGRESS, FAILURE), OPERATOR)
MASTER_ADDR_UNKNOWN = _r("MasterAddrUnknown", (VALIDATED,), (PROGRESS, FAILURE), OPERATOR)
# rank 0's own node resolves MASTER_ADDR to an address rank 0 does not hold, the others to
# rank 0's (the probe's MasterAddrNotLocal warning, made a failure by the others' evidence)
MASTER_ADDR_RESOLVES_ELSEWHERE = _r("MasterAddrResolvesElsewhere", (MASTER_REACHABLE,), _F, OPERATOR)
# a Kubernetes NetworkPolicy of the job's namespace drops traffic between the job's own pods
# (the operator evaluates the policies; the probes only saw timeouts)
NETWORK_POLICY_BLOCKS = _r("NetworkPolicyBlocks", (MASTER_REACHABLE, NETWORK_VALIDATED,
                                                   COLLECTIVE_VALIDATED), _F, OPERATOR)
API_ERROR = _r("APIError", (VALIDATED, TRAINING_STARTED, SUCCEEDED, FAILED), _G, OPERATOR)
OPERATOR_ERROR = _r("OperatorError", (VALIDATED, TRAINING_STARTED), _G, OPERATOR)

# ---- ProbesScheduled ---------------------------------------------------------------------
PROBES_SCHEDULED_OK = _r("AllProbesScheduled", (PROBES_SCHEDULED,), _P, OPERATOR)
PROBE_UNSCHEDULABLE = _r("ProbeUnschedulable", (PROBES_SCHEDULED,), _F, OPERATOR)
PROBE_IMAGE_PULL_FAILED = _r("ProbeImagePullFailed", (PROBES_SCHEDULED,), _F, OPERATOR)
NOT_ENOUGH_NODES = _r("NotEnoughNodes", (PROBES_SCHEDULED,), _F, OPERATOR)

# ---- MasterReachable -------------------------------------------------------------------
MASTER_PORT_OPEN = _r("MasterPortOpen", (MASTER_REACHABLE,), _P, OPERATOR)
MASTER_ADDR_LOOPBACK = _r("MasterAddrLoopback", (MASTER_REACHABLE,), _F, PROBE)
MASTER_ADDR_UNRESOLVABLE = _r("MasterAddrUnresolvable", (MASTER_REACHABLE,), _F, PROBE)
MASTER_PORT_REFUSED = _r("MasterPortRefused", (MASTER_REACHABLE,), _F, PROBE)
MASTER_PORT_TIMEOUT = _r("MasterPortTimeout", (MASTER_REACHABLE,), _F, PROBE)
RENDEZVOUS_TIMEOUT = _r("RendezvousTimeout", (MASTER_REACHABLE,), _F, PROBE, generic=True)
# connections between the job's pods are accepted and then closed before the peer's probe
# answers (a probe always answers at once): a proxy intercepts them, such as a service-mesh
# sidecar (the operator names the sidecar it finds on the pods: diagnosis/mesh.py)
CONNECTION_INTERCEPTED = _r("ConnectionIntercepted", (MASTER_REACHABLE, NETWORK_VALIDATED), _F, PROBE)
MASTER_ADDR_NOT_LOCAL = _r("MasterAddrNotLocal", (MASTER_REACHABLE,), _W, PROBE)

# ---- NetworkValidated ------------------------------------------------------------------
INTERFACE_SELECTED = _r("InterfaceSelected", (NETWORK_VALIDATED,), _P, OPERATOR)
INTERFACE_NOT_FOUND = _r("InterfaceNotFound", (NETWORK_VALIDATED,), _F, PROBE)
INTERFACE_UNREACHABLE = _r("InterfaceUnreachable", (NETWORK_VALIDATED,), _F, PROBE)
NO_COMMON_INTERFACE = _r("NoCommonInterface", (NETWORK_VALIDATED,), _F, PROBE)
EPHEMERAL_PORTS_BLOCKED = _r("EphemeralPortsBlocked", (NETWORK_VALIDATED,), _F, PROBE)
PATH_MTU_BLACK_HOLE = _r("PathMTUBlackHole", (NETWORK_VALIDATED,), _F, PROBE)
HOSTNAME_LOOPBACK = _r("HostnameResolvesToLoopback", (NETWORK_VALIDATED,), _W, PROBE)
NCCL_DEFAULT_DIFFERS = _r("NCCLDefaultInterfaceDiffers", (NETWORK_VALIDATED,), _W, PROBE)
ROUTE_VIA_OTHER_INTERFACE = _r("RouteViaOtherInterface", (NETWORK_VALIDATED,), _W, PROBE)
MIXED_ADDRESS_FAMILIES = _r("MixedAddressFamilies", (NETWORK_VALIDATED,), _W, PROBE)
NCCL_IGNORES_INTERFACE = _r("NCCLIgnoresInterface", (NETWORK_VALIDATED,), _W, PROBE)
LOOPBACK_ONLY = _r("LoopbackOnly", (NETWORK_VALIDATED,), _W, PROBE)
PORT_RANGE_OUTSIDE_ALLOWED = _r("PortRangeOutsideAllowed", (NETWORK_VALIDATED,), _W, PROBE)
SLOW_LINK = _r("SlowLink", (NETWORK_VALIDATED,), (WARNING, FAILURE), OPERATOR)

# ---- why an interface was not chosen (rejected[].reason) ---------------------------------
REJ_LOOPBACK = _r("Loopback", (NETWORK_VALIDATED,), _X, PROBE)
REJ_DUPLICATE_ADDRESS = _r("DuplicateAddress", (NETWORK_VALIDATED,), _X, PROBE)
REJ_UNREACHABLE = _r("Unreachable", (NETWORK_VALIDATED,), _X, PROBE)
REJ_DOWN = _r("Down", (NETWORK_VALIDATED,), _X, PROBE)
REJ_NO_IPV4 = _r("NoIPv4", (NETWORK_VALIDATED,), _X, PROBE)
REJ_NOT_REQUESTED = _r("NotRequested", (NETWORK_VALIDATED,), _X, PROBE)
REJ_NOT_ON_ALL_NODES = _r("NotOnAllNodes", (NETWORK_VALIDATED,), _X, PROBE)
REJ_MULTIPLE_ON_NODE = _r("MultipleOnNode", (NETWORK_VALIDATED,), _X, PROBE)
REJ_POD_NETWORK_DEVICE = _r("PodNetworkDevice", (NETWORK_VALIDATED,), _X, PROBE)
REJ_NOT_PREFERRED = _r("NotPreferred", (NETWORK_VALIDATED,), _X, PROBE)

# ---- VersionsConsistent ------------------------------------------------------------------
VERSIONS_MATCH = _r("VersionsMatch", (VERSIONS_CONSISTENT,), _P, OPERATOR)
NCCL_VERSION_MISMATCH = _r("NCCLVersionMismatch", (VERSIONS_CONSISTENT,), _F, PROBE)
TORCH_VERSION_MISMATCH = _r("TorchVersionMismatch", (VERSIONS_CONSISTENT,), _F, PROBE)
SETTINGS_MISMATCH = _r("SettingsMismatch", (VERSIONS_CONSISTENT,), _F, PROBE)
RISKY_SETTING = _r("RiskySetting", (VERSIONS_CONSISTENT,), _W, PROBE)
SLOW_TORCH_IMPORT = _r("SlowTorchImport", (VERSIONS_CONSISTENT,), _W, PROBE)
CUDA_VERSION_MISMATCH = _r("CUDAVersionMismatch", (VERSIONS_CONSISTENT,), _F, PROBE)
DRIVER_VERSION_MISMATCH = _r("DriverVersionMismatch", (VERSIONS_CONSISTENT,), _F, PROBE)

# ---- CollectiveValidated -----------------------------------------------------------------
ALLREDUCE_PASSED = _r("AllReducePassed", (COLLECTIVE_VALIDATED,), _P, OPERATOR)
ALL_REDUCE_TIMEOUT = _r("AllReduceTimeout", (COLLECTIVE_VALIDATED,), _F, PROBE)
ALL_REDUCE_WRONG_RESULT = _r("AllReduceWrongResult", (COLLECTIVE_VALIDATED,), _F, PROBE)
BANDWIDTH_BELOW_THRESHOLD = _r("BandwidthBelowThreshold", (COLLECTIVE_VALIDATED,), _F, PROBE)
PROCESS_GROUP_INIT_FAILED = _r("ProcessGroupInitFailed", (COLLECTIVE_VALIDATED,), _F, PROBE,
                               generic=True)
TEARDOWN_HUNG = _r("TeardownHung", (COLLECTIVE_VALIDATED,), _W, PROBE)

# ---- Validated (summary) and failures of the run itself -----------------------------------
ALL_CHECKS_PASSED = _r("AllChecksPassed", (VALIDATED,), _P, OPERATOR)
PASSED_WITH_WARNINGS = _r("PassedWithWarnings", (VALIDATED,), _P, OPERATOR)
PROBE_REPORT_INVALID = _r("ProbeReportInvalid", (VALIDATED,), _F, OPERATOR)
PROBE_FAILED = _r("ProbeFailed", (VALIDATED,), _F, OPERATOR)
PROBE_TIMEOUT = _r("ProbeTimeout", (VALIDATED,), _F, OPERATOR)
PROBE_INTERNAL_ERROR = _r("ProbeInternalError", (VALIDATED,), _F, PROBE, generic=True)
TORCH_IMPORT_TIMEOUT = _r("TorchImportTimeout", (VALIDATED,), _F, PROBE)
INVALID_SPEC = _r("InvalidSpec", (VALIDATED, FAILED), _F, OPERATOR)
INVALID_POD_TEMPLATE = _r("InvalidPodTemplate", (VALIDATED, FAILED), _F, OPERATOR)
PROBE_POD_LOST = _r("ProbePodLost", (VALIDATED,), _F, OPERATOR)
# the kubelet ended a probe (its container's state, read by disttrain.children.kubelet): out of
# memory; killed by a signal, exited without its final report, could not run (an init
# container's too); a ConfigMap, Secret or key its container refers to is missing
OOM_KILLED = _r("OOMKilled", (VALIDATED,), _F, OPERATOR)
PROBE_CONTAINER_FAILED = _r("ProbeContainerFailed", (VALIDATED,), _F, OPERATOR)
PROBE_CONFIG_ERROR = _r("ProbeContainerConfigError", (VALIDATED,), _F, OPERATOR)

# ---- training outcome --------------------------------------------------------------------
ALL_RANKS_RUNNING = _r("AllRanksRunning", (TRAINING_STARTED,), _P, OPERATOR)
ALL_RANKS_SUCCEEDED = _r("AllRanksSucceeded", (SUCCEEDED, FAILED), _P, OPERATOR)
PREFLIGHT_FAILED = _r("PreflightFailed", (FAILED, SUCCEEDED), _F, OPERATOR)
RANK_FAILED = _r("RankFailed", (FAILED, SUCCEEDED), _F, OPERATOR)
BACKOFF_LIMIT_EXCEEDED = _r("BackoffLimitExceeded", (FAILED, SUCCEEDED), _F, OPERATOR)
DEADLINE_EXCEEDED = _r("DeadlineExceeded", (FAILED, SUCCEEDED), _F, OPERATOR)
TTL_EXPIRED = _r("TTLExpired", (SUCCEEDED, FAILED), (EVENT,), OPERATOR)
PROBE_DETAIL = _r("ProbeDetail", (VALIDATED,), (EVENT,), OPERATOR)

# ---- GPUs, RDMA and what NCCL used (the probe's hardware evidence) ------------------------
GPU_COUNT_MISMATCH = _r("GPUCountMismatch", (COLLECTIVE_VALIDATED,), _W, PROBE)
GPU_ECC_ERRORS = _r("GPUECCErrors", (COLLECTIVE_VALIDATED,), _W, PROBE)
RDMA_PORT_DOWN = _r("RDMAPortDown", (COLLECTIVE_VALIDATED,), _W, PROBE)
DEV_SHM_TOO_SMALL = _r("DevShmTooSmall", (COLLECTIVE_VALIDATED,), _W, PROBE)
NCCL_SOCKETS_DESPITE_RDMA = _r("NCCLSocketsDespiteRDMA", (COLLECTIVE_VALIDATED,), _W, PROBE)
NCCL_SHM_INSTEAD_OF_P2P = _r("NCCLShmInsteadOfP2P", (COLLECTIVE_VALIDATED,), _W, PROBE)
GPUDIRECT_RDMA_OFF = _r("GPUDirectRDMAOff", (COLLECTIVE_VALIDATED,), _W, PROBE)
MEMLOCK_TOO_LOW = _r("MemlockTooLow", (COLLECTIVE_VALIDATED,), (FAILURE, WARNING), PROBE)
GID_INDEX_INVALID = _r("GIDIndexInvalid", (COLLECTIVE_VALIDATED,), _F, PROBE)
# from NCCL's own diagnostics (NCCL >= 2.31, gpu/nccldiag.py): a GPU pair whose P2P data came
# back wrong fails; one NCCL could not use, or a partial check, warns
P2P_CHECK_FAILED = _r("P2PCheckFailed", (COLLECTIVE_VALIDATED,), (FAILURE, WARNING), PROBE)
GPU_MODEL_MISMATCH = _r("GPUModelMismatch", (COLLECTIVE_VALIDATED,), _W, PROBE)
NVLINK_INACTIVE = _r("NVLinkInactive", (COLLECTIVE_VALIDATED,), _W, PROBE)

# ---- Suspended and Admitted (written only when they apply) -------------------------------
JOB_SUSPENDED = _r("JobSuspended", (SUSPENDED,) + CHECK_CONDITIONS + (VALIDATED, TRAINING_STARTED,
                                                                      SUCCEEDED, FAILED),
                   (PASS, PROGRESS), OPERATOR)
JOB_RESUMED = _r("JobResumed", (SUSPENDED,), _P, OPERATOR)
WORKLOAD_ADMITTED = _r("WorkloadAdmitted", (ADMITTED,), _P, OPERATOR)
WAITING_FOR_QUOTA = _r("WaitingForQuota", (ADMITTED,) + CHECK_CONDITIONS + (VALIDATED, TRAINING_STARTED,
                                                                        SUCCEEDED, FAILED),
                       _G, OPERATOR)
WORKLOAD_EVICTED = _r("WorkloadEvicted", (ADMITTED,) + CHECK_CONDITIONS + (VALIDATED, TRAINING_STARTED,
                                                                       SUCCEEDED, FAILED),
                      _G, OPERATOR)
WORKLOAD_DEACTIVATED = _r("WorkloadDeactivated", (FAILED, ADMITTED, SUCCEEDED), _F, OPERATOR)
KUEUE_UNAVAILABLE = _r("KueueUnavailable", (ADMITTED,), _G, OPERATOR)

# ---- Progressing (written while training runs: disttrain.diagnosis.stall) ---------------
COLLECTIVES_ADVANCING = _r("CollectivesAdvancing", (PROGRESSING,), _P, OPERATOR)
# a rank far slower than the others (they wait for it in every step): True, naming its node
STRAGGLER = _r("Straggler", (PROGRESSING,), _W, OPERATOR)
# no rank's progress record heard yet (or none for long: the operator cannot tell)
PROGRESS_NOT_REPORTED = _r("ProgressNotReported", (PROGRESSING,), _G, OPERATOR)
# some ranks wait for others, within runPolicy.stallTimeoutSeconds: a wait, not a fault yet
RANKS_WAITING = _r("RanksWaiting", (PROGRESSING,), _G, OPERATOR)
RANK_STUCK_IN_PYTHON = _r("RankStuckInPython", (PROGRESSING,), _F, OPERATOR)
RANK_UNRESPONSIVE = _r("RankUnresponsive", (PROGRESSING,), _F, OPERATOR)
# every rank waits in the same collective: the link, NCCL or a GPU (the evidence decides)
COLLECTIVE_STALLED = _r("CollectiveStalled", (PROGRESSING,), _F, OPERATOR)
# the ranks wait in different collectives: a code path some ranks took and others did not
COLLECTIVES_MISMATCHED = _r("CollectivesMismatched", (PROGRESSING,), _F, OPERATOR)
STALL_NOT_ATTRIBUTED = _r("StallNotAttributed", (PROGRESSING,), _F, OPERATOR)
# the job ended by runPolicy.onStall: Fail (or Restart past backoffLimit): Progressing says why
TRAINING_STALLED = _r("TrainingStalled", (FAILED, SUCCEEDED), _F, OPERATOR)

REASONS: Dict[str, Reason] = {}
for _x in _T:
    if _x.name in REASONS:  # pragma: no cover - a typo in the table above
        raise RuntimeError(f"reason {_x.name} defined twice")
    REASONS[_x.name] = _x
del _x


def get(name: str) -> Optional[Reason]:
    """The reason named ``name``, or None for a name nobody writes."""
    return REASONS.get(name)


def named(kind: str, source: Optional[str] = None) -> Tuple[str, ...]:
    """Names of the reasons of ``kind`` (any of their kinds), optionally only ``source``'s,
    in table order."""
    return tuple(r.name for r in _T if kind in r.kinds and (source is None or r.source == source))


def condition_of(name: str) -> Optional[str]:
    """The condition type ``name`` belongs to (None for an unknown name)."""
    r = REASONS.get(name)
    return r.condition if r else None


# The check a probe phase decides: a reason a probe reports from more than one phase
# (``ConnectionIntercepted``: the rendezvous or the connectivity mesh) is the cause of the
# check of the phase it came from.
PHASE_CHECK: Dict[str, str] = {
    "rendezvous": MASTER_REACHABLE, "connectivity": NETWORK_VALIDATED, "choice": NETWORK_VALIDATED,
    "versions": VERSIONS_CONSISTENT, "collective": COLLECTIVE_VALIDATED,
}


def check_of(name: str, phase: Optional[str] = None) -> Optional[str]:
    """The check condition a failure or warning ``name`` makes the cause of (None when it
    belongs to the summary or to no check: the checks then stay Unknown). A reason of
    several checks is its ``phase``'s check when that is one of them, else its first."""
    r = REASONS.get(name)
    if r and phase and len(r.conditions) > 1 and PHASE_CHECK.get(phase) in r.conditions:
        return PHASE_CHECK[phase]
    return r.condition if r and r.condition in CHECK_CONDITIONS else None


def is_generic(name: str) -> bool:
    r = REASONS.get(name)
    return bool(r and r.generic)


# The True reason of each check condition.
PASS_REASON: Dict[str, str] = {
    PROBES_SCHEDULED: PROBES_SCHEDULED_OK,
    MASTER_REACHABLE: MASTER_PORT_OPEN,
    NETWORK_VALIDATED: INTERFACE_SELECTED,
    VERSIONS_CONSISTENT: VERSIONS_MATCH,
    COLLECTIVE_VALIDATED: ALLREDUCE_PASSED,
}

# Phases of the probe, in order.
PHASES = ("config", "inventory", "rendezvous", "connectivity", "choice", "versions",
          "collective", "report")

# The probe's part of the table: the reasons a probe report can carry, by kind.
PROBE_FAILURES = named(FAILURE, PROBE)  # end the probe: ``ok`` false, exit code 1
PROBE_WARNINGS = named(WARNING, PROBE)  # a latent fault; the probe still passes
PROBE_REJECTIONS = named(REJECTION, PROBE)  # why an interface was not chosen
# The condition type each probe failure reason falsifies.
PROBE_CONDITION_OF: Dict[str, str] = {n: REASONS[n].condition for n in PROBE_FAILURES}
