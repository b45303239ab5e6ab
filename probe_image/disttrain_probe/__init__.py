"""The disttrain preflight probe, ``python -m disttrain_probe`` on every node before training
(standard library + torch, Python 3.9+), in floors: ``contract`` (what probe and operator
agree on) and ``ground`` (configuration, deadlines, typed results, the torch import, the rank
layout) at the bottom; on them the rooms, which never import one another: ``phases`` (the
checks), ``gpu`` (what a GPU node offers NCCL), ``localranks`` (starting local ranks) and
``progress`` (the training ranks' progress recorder and its readiness command);
``run`` on top only sequences them (one probe run, its report, a local rank's run,
``make gpu-check``). ``make lint`` holds the floors (import-linter, ``pyproject.toml``).

See docs/probe-report.md for the phases and the report contract.
"""
