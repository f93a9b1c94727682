"""follow.py: how long a failure waits before it is tried again."""

from __future__ import annotations

import pytest
from gpuplan_operator.follow import backoff


def no_jitter() -> float:
    return 0.5  # the middle of the ±20% band: exactly the base delay


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [
        pytest.param(0, 0.0, id="no failure waits nothing"),
        pytest.param(1, 1.0, id="the first retry comes after a second"),
        pytest.param(3, 4.0, id="each failure doubles the wait"),
        pytest.param(5, 10.0, id="the wait is capped at ten seconds"),
        pytest.param(500, 10.0, id="however many failures"),
    ],
)
def test_backoff_doubles_up_to_a_cap(failures: int, seconds: float) -> None:
    assert backoff(failures, no_jitter) == pytest.approx(seconds)


def test_backoff_jitter_stays_within_a_fifth() -> None:
    assert backoff(3, lambda: 0.0) == pytest.approx(3.2)
    assert backoff(3, lambda: 1.0) == pytest.approx(4.8)
