"""The preflight as a Kueue admission check (issue 35), its pure core: a Workload read into a
typed plan (`.workload`, the topology assignment `.topology`), the plan as the probe's input
(`.probespec`: DistTrainingJobSpecs, so the probe pods, report, trust checks and diagnosis
are DistTrainingJob's own), a verdict as the check's answer (`.answer`) and the answer
where Kueue reads it (`.status`). No I/O; the controller that reads Workloads and writes
their status is not written yet (docs/admission-check.md)."""
