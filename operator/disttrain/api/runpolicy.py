"""``spec.runPolicy``: what happens when training fails, ends or stalls (Kubeflow's RunPolicy),
and how the job's pods are scheduled (``schedulingPolicy``)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from disttrain.api.common import CamelModel, CleanPodPolicy, GangScheduler, OnStall

# Seconds fields copied into Kubernetes' own int32 fields (PodGroup scheduleTimeoutSeconds,
# as batch/v1 Job's ttlSecondsAfterFinished) are at most this: 68 years.
MAX_INT32 = 2**31 - 1
# runPolicy.stallTimeoutSeconds: at least the 30 s a wait or a record's silence takes to
# count (disttrain.diagnosis.stallfacts.QUIET_S, STALE_S), at most a day.
MIN_STALL_TIMEOUT = 30
MAX_STALL_TIMEOUT = 86400
SUGGESTED_STALL_TIMEOUT = 300  # the value the docs suggest (s); unset, training is not watched


class SchedulingPolicy(CamelModel):
    """All-or-nothing scheduling of the probe pods and of the training pods (each a gang of
    numNodes pods), so a job never holds some nodes while it waits for the rest."""

    gang: GangScheduler = Field(
        GangScheduler.auto,
        description="auto: Kubernetes' workload scheduling API (Workload and PodGroup in "
        "scheduling.k8s.io/v1beta1, GenericWorkload feature gate) when the apiserver serves it, "
        "else none. workload: that API, required. coscheduling: a PodGroup of "
        "scheduler-plugins (scheduling.x-k8s.io/v1alpha1) and its scheduler. volcano: a "
        "Volcano PodGroup (scheduling.volcano.sh/v1beta1) and the volcano scheduler. none: "
        "pods are scheduled one by one (a job may hold some nodes while it waits for others).",
    )
    scheduler_name: Optional[str] = Field(
        None,
        max_length=253,
        description="schedulerName for the pods; default: scheduler-plugins-scheduler with "
        "coscheduling, volcano with volcano, the template's (or the default scheduler) else.",
    )
    schedule_timeout_seconds: Optional[int] = Field(
        None, strict=True, ge=1, le=MAX_INT32,
        description="How long, in seconds, the job's pods may wait for the scheduler (at most "
        "2147483647, the PodGroup field's int32). With any gang setting: when a pod requests "
        "a resource no node offers (none has it in status.allocatable, or none as much), the "
        "job fails this long after the pod became unschedulable (ResourceNotOffered; unset: "
        "300) unless a node autoscaler is adding a node for it. coscheduling: also the "
        "PodGroup's scheduleTimeoutSeconds (unset: the plugin's default)."
    )


class RunPolicy(CamelModel):
    """What happens when training fails or ends (Kubeflow's RunPolicy)."""

    scheduling_policy: SchedulingPolicy = Field(default_factory=SchedulingPolicy)

    backoff_limit: int = Field(
        0, strict=True, ge=0, le=100, description="Gang restarts of all ranks before the job is Failed."
    )
    active_deadline_seconds: Optional[int] = Field(
        None, strict=True, ge=1, le=MAX_INT32,
        description="Seconds from the start of training until the job is Failed (at most "
        "2147483647, 68 years)."
    )
    ttl_seconds_after_finished: Optional[int] = Field(
        None, strict=True, ge=0, le=MAX_INT32,
        description="Seconds after the job finished (Succeeded or Failed) until the "
        "operator deletes it, and with it its pods and Service (as batch/v1 Job and Kubeflow do; "
        "at most 2147483647, Job's int32). Unset: the job is kept."
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.Running,
        description="Pods deleted when the job finishes: Running (still running), All, None.",
    )
    reprobe_on_failure: bool = Field(
        False, strict=True,
        description="After a rank fails, probe again before restarting, to tell an "
        "infrastructure fault from a code fault.",
    )
    stall_timeout_seconds: Optional[int] = Field(
        None, strict=True, ge=MIN_STALL_TIMEOUT, le=MAX_STALL_TIMEOUT,
        description="Watch training for stalls: seconds a running job's collectives may stop "
        "advancing before it is a stall (30 to 86400; 300 is a good start: it decides before "
        "torch's NCCL watchdog, 10 minutes, ends every rank with a timeout that names none). "
        "Until then a long checkpoint or evaluation on one rank while the others wait is a "
        "wait, not a fault: Progressing is Unknown (RanksWaiting), naming who waits for whom; "
        "at this many seconds it turns False with the rank, the node and the cause, and "
        "onStall applies. Set, each training pod gets the progress recorder and a small native "
        "sidecar (10m CPU, 32Mi) whose readiness reports it; the trainer needs a command. "
        "Unset: not watched.",
    )
    on_stall: OnStall = Field(
        OnStall.Restart,
        description="What a stall (Progressing=False) does. Restart (default): it is handled "
        "as a failed rank is, the gang restarted while backoffLimit allows and then the job "
        "Failed, which is what Kubeflow's and JobSet's restart policies do with the crash "
        "torch's NCCL watchdog makes of a hung collective, only sooner and with the cause "
        "named; with the default backoffLimit 0 the job fails. Fail: Failed at once, whatever "
        "backoffLimit. Wait: only report it, keeping the pods for inspection "
        "(activeDeadlineSeconds still applies).",
    )
