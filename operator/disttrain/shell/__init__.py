"""The I/O shell: Kubernetes calls (:mod:`.kube`), running one reconcile step and applying
its plan (:mod:`.runner`), the kopf handlers and work queue (:mod:`.handlers`), Prometheus
metrics (:mod:`.metrics`), ``kubectl disttrain explain`` (:mod:`.explain`) and the
command line (:mod:`.main`). The only layer that talks to the API server."""
