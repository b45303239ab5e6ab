"""The probe's roof: programs that only sequence the rooms (``phases``, ``gpu``,
``localranks``) on the ground. One probe run (``probe``) with local rank 0's view of the
other local ranks (``probelocal``), the report built from what it kept (``probereport``)
and capped and written (``report``), a local rank's own run (``worker``), the training
command run after the probe in place (``handover``: in the same interpreter, or exec'd),
the report handed to the operator while training runs (``relay``), and ``make gpu-check``
(``gpucheck``)."""
