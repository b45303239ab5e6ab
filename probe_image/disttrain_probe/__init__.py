"""The disttrain preflight probe, ``python -m disttrain_probe`` on every node before training
(standard library + torch, Python 3.9+), in folders by concern: ``contract`` (what probe and
operator agree on), ``runtime`` (one run: configuration, deadlines, the report), ``phases``
(the checks), ``localranks`` (several processes per node) and ``gpu`` (what a GPU node offers NCCL).

See docs/probe-report.md for the phases and the report contract.
"""
