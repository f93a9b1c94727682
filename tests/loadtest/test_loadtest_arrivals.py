"""The open-loop schedule: arrivals due at start + k/rate, released late but never dropped."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from loadtest.arrivals import Arrival, Schedule, feed

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("rate", "duration", "count"),
    [
        pytest.param(10.0, 1.0, 10, id="10/s for 1s is 10"),
        pytest.param(3.0, 1.0, 3, id="3/s for 1s is 3"),
        pytest.param(40.0, 1.5, 60, id="40/s for 1.5s is 60"),
        pytest.param(2.5, 1.0, 3, id="2.5/s for 1s starts 3 (at 0, 0.4, 0.8)"),
        pytest.param(10.0, 0.0, 0, id="no time, no arrivals"),
    ],
)
def test_schedule_count(rate: float, duration: float, count: int) -> None:
    assert Schedule(rate, 0.0, duration).count == count


def test_due_counts_arrivals_up_to_now_and_is_capped() -> None:
    s = Schedule(10.0, 100.0, 1.0)
    assert s.due(99.0) == 0
    assert s.due(100.0) == 1
    assert s.due(100.25) == 3
    assert s.due(1000.0) == 10
    assert s.time_of(4) == pytest.approx(100.4)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_rate_must_be_a_positive_number(rate: float) -> None:
    with pytest.raises(ValueError):
        Schedule(rate, 0.0, 1.0)


def test_feed_keeps_the_rate_in_real_time() -> None:
    async def run() -> tuple[list[Arrival], list[float], float]:
        q: asyncio.Queue[Arrival | None] = asyncio.Queue()
        lags: list[float] = []
        start = time.monotonic() + 0.01
        n = await feed(
            q,
            Schedule(200.0, start, 0.5),
            first_index=7,
            clock=time.monotonic,
            on_release=lambda a, lag: lags.append(lag),
        )
        items = [q.get_nowait() for _ in range(n)]
        return [a for a in items if a is not None], lags, time.monotonic() - start

    arrivals, lags, took = asyncio.run(run())
    assert len(arrivals) == 100
    assert [a.index for a in arrivals] == list(range(7, 107))
    gaps = {round(b.scheduled - a.scheduled, 6) for a, b in itertools.pairwise(arrivals)}
    assert gaps == {0.005}
    assert 0.49 <= took < 1.0
    assert sorted(lags)[len(lags) // 2] < 0.02  # the median release is on time


def test_a_late_feeder_releases_everything_due_at_once_with_the_original_stamps() -> None:
    ticks = iter([100.3, 100.3, 101.0, 101.0, 101.0])

    async def run() -> tuple[list[Arrival], list[float]]:
        q: asyncio.Queue[Arrival | None] = asyncio.Queue()
        lags: list[float] = []
        n = await feed(
            q,
            Schedule(10.0, 100.0, 0.5),
            first_index=0,
            clock=lambda: next(ticks),
            on_release=lambda a, lag: lags.append(lag),
        )
        return [q.get_nowait() for _ in range(n)], lags  # type: ignore[misc]

    arrivals, lags = asyncio.run(run())
    assert [a.scheduled for a in arrivals] == pytest.approx([100.0, 100.1, 100.2, 100.3, 100.4])
    assert lags[:4] == pytest.approx([0.3, 0.2, 0.1, 0.0])
    assert lags[4] == pytest.approx(0.6)


def test_stop_ends_the_feed_early() -> None:
    async def run() -> int:
        q: asyncio.Queue[Arrival | None] = asyncio.Queue()
        stop = asyncio.Event()
        stop.set()
        return await feed(
            q,
            Schedule(100.0, time.monotonic(), 10.0),
            first_index=0,
            clock=time.monotonic,
            on_release=lambda a, lag: None,
            stop=stop,
        )

    assert asyncio.run(run()) == 0
