"""Scenarios: the YAML model of a simulated cluster and its job (parsing, checks, the
topology it yields) and the alternate libraries a scenario loads on some nodes. The run of
a scenario is ``localcluster.scenariorun``."""
