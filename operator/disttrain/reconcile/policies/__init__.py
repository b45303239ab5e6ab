"""One module per policy of the reconcile loop (pure functions of a :class:`~disttrain.reconcile.step.Step`).

- :mod:`.probing`: the probe run: scheduling verdict, when to stop waiting, the probe budget;
- :mod:`.probelaunch`: an attempt's probe pods, rank 0 first;
- :mod:`.stranded`: a rank that failed before joining the store: the verdict need not wait;
- :mod:`.verdict`: the probes' reports, read and checked (:mod:`disttrain.diagnosis.trust`), one
  outcome per rank -> conditions;
- :mod:`.nodeloss`: a probe that outlives its peers on a node that stopped reporting: the node is lost;
- :mod:`.training`: training pods pinned to validated nodes; their outcome;
- :mod:`.restart`: gang restart and re-probe after a rank fails (runPolicy.backoffLimit);
- :mod:`.deadline`: the probe budget and runPolicy.activeDeadlineSeconds;
- :mod:`.cleanup`: pods deleted when the job ends, and runPolicy.ttlSecondsAfterFinished;
- :mod:`.suspend`: spec.suspend: pods deleted while suspended, probes again on resume;
- :mod:`.apierrors`: API calls that keep failing become a condition, never a silent loop.
"""
