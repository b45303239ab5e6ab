"""The diagnosis (pure): probe reports -> conditions. The entry is
:func:`disttrain.diagnosis.diagnose.diagnose`; the report contract (:mod:`.report`), which
reports are evidence (:mod:`.trust`) and the small steps it is built from live beside it.
Builds on :mod:`disttrain.children` and :mod:`disttrain.api`."""
