"""disttrain preflight probe: ``python -m disttrain_probe`` (standard library + torch, Python 3.9+).

See docs/probe-report.md for the phases and the report contract.
"""
