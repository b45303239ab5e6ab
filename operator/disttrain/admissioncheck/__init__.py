"""The preflight as a Kueue admission check (issue 35), its pure core: a Workload read into a
typed plan (`.workload`, the topology assignment `.topology`), the plan as the probe's input
(`.probespec`: DistTrainingJobSpecs, so the probe pods, report, trust checks and diagnosis
are DistTrainingJob's own), the preflight-only DistTrainingJob that probes it (`.shadow`),
a verdict as the check's answer (`.answer`), the answer where Kueue reads it (`.status`),
and the controller's decisions over a Workload's life (`.decide`). No I/O: the controller
that reads Workloads and writes their status is `disttrain.shell.admission`
(docs/admission-check.md)."""
