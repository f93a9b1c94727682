"""Pure: how long to wait before trying again after a failure.

Notes
-----
Failures back off exponentially (:func:`backoff`), with jitter so many plans failing together do
not retry in lockstep, and capped well inside the 30 s in which a plan must converge again after
an API fault clears. The cycle (a failed plan) and the clean-up of a deleted plan use it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

RETRY_FIRST = 1.0  # seconds before the first retry of a failed reconcile or read
RETRY_MAX = 10.0  # the longest wait between retries


def backoff(failures: int, jitter: Callable[[], float] = random.random) -> float:
    """Seconds before retry number ``failures`` (1, 2, 4, 8, 10, 10, ...), each ±20%."""
    if failures <= 0:
        return 0.0
    base = min(RETRY_MAX, RETRY_FIRST * 2.0 ** min(failures - 1, 30))
    return base * (0.8 + 0.4 * jitter())
