"""The probe's roof: programs that only sequence the rooms (``phases``, ``gpu``,
``localranks``) on the ground. One probe run (``probe``) with local rank 0's view of the
other local ranks (``probelocal``), the report built from what it kept (``probereport``)
and capped and written (``report``), a local rank's own run (``worker``), the probe in
place as the training container's first step (``inplace``: the go rule and the release;
``handover``: the training command run in the same interpreter; ``relay``: the report
handed to the operator while training runs), and ``make gpu-check`` (``gpucheck``)."""
