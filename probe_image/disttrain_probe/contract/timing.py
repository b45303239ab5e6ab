"""The probe's time budgets that the operator plans its own deadlines around (seconds)."""
from __future__ import annotations

SIBLING_SECONDS = 2.0  # the one lookup of another name of the job (env.PEER_DNS_NAME)


def default_resolve_seconds(timeout: float) -> float:
    """How long a MASTER_ADDR that does not resolve is retried when
    ``env.RESOLVE_SECONDS`` is unset: 10 s, or a sixth of the probe's budget (``timeout``,
    seconds) when that is longer. A larger budget is given where pods start slowly (many
    ranks on few cores, slow nodes), and rank 0's DNS record appears only once its pod has
    an address: at 32 simulated nodes on 2 cores that took more than 11 s after the other
    ranks had started resolving it."""
    return max(10.0, round(timeout / 6.0, 1))
