"""The headless Service that names a job's pods (pure builder)."""

from __future__ import annotations

from typing import Any

from disttrain.api import constants
from disttrain.api.types import DistTrainingJobSpec
from disttrain.children.names import JobRef, service_name


def build_headless_service(job: JobRef, spec: DistTrainingJobSpec) -> dict[str, Any]:
    """The headless Service that gives the job's pods their DNS names: clusterIP None,
    selecting every pod of the job, publishNotReadyAddresses (ranks resolve each other
    before any is Ready), owned by the job. Port: the rendezvous port (TCP)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(job, spec),
            "namespace": job.namespace,
            "labels": {constants.LABEL_JOB: job.name},
            "ownerReferences": [job.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            # by name only: a Service orphaned by kubectl delete --cascade=orphan, which the
            # job then leaves in place, still names the new job's pods
            "selector": {constants.LABEL_JOB: job.name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": spec.rendezvous.port, "protocol": "TCP"}],
        },
    }
