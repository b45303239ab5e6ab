"""Hypothesis profiles for the generated suites (tests/fuzz and any @given test).

- ``ci`` (the default): derandomized (the same examples every run, so CI is reproducible),
  a modest number of examples per test, no deadline (the machine is shared and its load
  varies), no example database. `make test` uses it.
- ``fuzz``: random seeds and many examples (at least 10,000 per suite for reports and
  manifests); `make fuzz` selects it with HYPOTHESIS_PROFILE=fuzz. Failing examples are
  kept in .hypothesis/ so a rerun replays them first.

``HYPOTHESIS_MAX_EXAMPLES=N`` runs the selected profile with N examples per test (a bounded
fuzz run: ``HYPOTHESIS_PROFILE=fuzz HYPOTHESIS_MAX_EXAMPLES=3000``).
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    max_examples=10_000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
if os.environ.get("HYPOTHESIS_MAX_EXAMPLES"):  # a bounded run of a profile: fuzz, 3000 examples
    settings.register_profile("bounded", settings(max_examples=int(os.environ["HYPOTHESIS_MAX_EXAMPLES"])))
    settings.load_profile("bounded")
