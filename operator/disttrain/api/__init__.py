"""The job's API (pure, no I/O): the pydantic models of DistTrainingJob (:mod:`.types`), the
pod template's typed fields (:mod:`.podtemplate`), a user's own torchrun command
(:mod:`.torchrun`), the names of conditions, reasons and labels (:mod:`.constants`) and the
CRD generated from the models (:mod:`.crdgen`). Imports nothing else of ``disttrain``."""
