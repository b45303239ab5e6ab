"""Several processes per node (``numProcPerNode`` > 1): local rank 0 starting, watching and
collecting local ranks 1..P-1 (``spawn``); their layout is ``ground.roles``, their own run
``run.worker``."""
