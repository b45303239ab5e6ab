"""A job's children (pure): their names (:mod:`.names`), the pods (:mod:`.pods`), the headless
Service (:mod:`.service`), the gang objects (:mod:`.gang`, :mod:`.kueue`) and what the
observed children say (:mod:`.observe`). Builds on :mod:`disttrain.api` only."""
