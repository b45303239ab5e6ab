"""The contract between the probe and the operator: the one part of the probe the operator
imports (``make lint`` enforces it).

Standard library only, like all of the probe (it runs inside any training image, Python
3.9+). What both sides must agree on lives here and nowhere else:

- :mod:`.vocabulary`: every condition type and reason, with its condition and kind;
- :mod:`.env`: the name of every ``DISTTRAIN_PROBE_*`` variable the operator sets on a
  probe pod and the probe reads;
- :mod:`.report_format`: the report's version and its size cap (bytes);
- :mod:`.paths`: the per-path dial outcomes a report carries;
- :mod:`.versions` and :mod:`.settings`: the comparisons of versions and NCCL settings
  across nodes (the probe runs them on its all-gathered inventories, the operator on the
  reports);
- :mod:`.progress`: a training rank's progress record (the stall watch);
- :mod:`.timing`: the probe's time budgets the operator plans around (seconds).
"""
