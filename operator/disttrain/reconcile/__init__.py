"""The reconcile loop (pure): one step over the observed job and its children -> a plan
(:mod:`.loop`, :mod:`.step`), the conditions, the status repair and one module per policy
(:mod:`.policies`). Builds on :mod:`disttrain.diagnosis`, :mod:`disttrain.children` and
:mod:`disttrain.api`; never does I/O."""
