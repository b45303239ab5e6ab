"""A training rank's progress (issue 33): ``recorder`` (a daemon thread in every training
process, started by ``sitehook`` installed as ``sitecustomize``) writes the rank's record
(``contract.progress``); ``ready`` (a native sidecar's readiness probe) prints the pod's
one-line summary and says whether every rank still advances. Standard library only."""
