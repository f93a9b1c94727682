"""The open-loop schedule: arrivals due at start + k/rate, released late but never dropped, and
split exactly over senders."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.arrivals import Arrival, Schedule, Shard, feed

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


@pytest.mark.timeout(120)  # a hang guard: 200 examples of up to 9,000 arrivals on a busy 2-core machine
@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=3000.0),
    duration=st.floats(min_value=0.0, max_value=3.0),
    pods=st.integers(min_value=1, max_value=5),
    processes=st.integers(min_value=1, max_value=4),
)
def test_shards_split_the_schedule_exactly(rate: float, duration: float, pods: int, processes: int) -> None:
    """Pods x processes, nested: every arrival of the global schedule is sent once, on time."""
    whole = Schedule(rate, 10.0, duration)
    times: dict[int, float] = {}
    for pod in Shard().split(pods):
        for proc in pod.split(processes):
            part = Schedule(rate, 10.0, duration, proc)
            for j in range(part.count):
                k = part.global_index(j)
                assert k not in times
                times[k] = part.time_of(j)
            # due() agrees with time_of() for this shard
            if part.count:
                assert part.due(part.time_of(part.count - 1)) == part.count
                assert part.due(part.time_of(0) - 1e-6) == 0
    assert sorted(times) == list(range(whole.count))
    assert all(times[k] == pytest.approx(whole.time_of(k)) for k in times)


@pytest.mark.parametrize(
    ("shard", "due_at_half_second", "count"),
    [
        pytest.param(Shard(0, 2), 3, 5, id="shard 0 of 2 at 10/s takes 0, 2, 4, 6, 8"),
        pytest.param(Shard(1, 2), 2, 5, id="shard 1 of 2 takes 1, 3, 5, 7, 9"),
        pytest.param(Shard(2, 3), 1, 3, id="shard 2 of 3 takes 2, 5, 8"),
    ],
)
def test_a_shard_counts_only_its_own_arrivals(shard: Shard, due_at_half_second: int, count: int) -> None:
    s = Schedule(10.0, 0.0, 1.0, shard)
    assert s.count == count
    assert s.due(0.45) == due_at_half_second


@pytest.mark.parametrize("shard", [(2, 2), (-1, 3), (0, 0)])
def test_a_shard_outside_its_stride_is_refused(shard: tuple[int, int]) -> None:
    with pytest.raises(ValueError):
        Shard(*shard)
