"""The capacity search against simulated servers: no network, so every case runs in milliseconds.

A simulated server with capacity ``cap`` holds any rate up to ``cap`` and, overloaded, answers at
``cap`` - the open-loop behaviour the bisector's hint relies on. Hypothesis checks the guarantee
the search documents: when it converges, the reported rate is one that held, and it lies within
``resolution`` of the knee.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest.search import Bisector, SearchConfig, SearchResult, knee_owner, search_capacity
from loadtest.stats import StepResult

pytestmark = pytest.mark.timeout(60)


def fake_step(index: int, rate: float, held: bool, throughput: float) -> StepResult:
    window = 2.0
    return StepResult(
        index=index,
        rate=rate,
        window_s=window,
        scheduled=int(rate * window),
        completed=int(throughput * window),
        ok=int(throughput * window),
        errors=0,
        error_rate=0.0,
        errors_by_kind={},
        error_examples={},
        throughput=throughput,
        latency_ms={"p50": 1.0, "p90": 1.0, "p99": 1.0, "mean": 1.0, "max": 1.0},
        service_latency_ms={"p50": 1.0, "p90": 1.0, "p99": 1.0, "mean": 1.0, "max": 1.0},
        queue_max=0,
        queue_mean=0.0,
        in_flight_max=1,
        outstanding_slope=0.0,
        growth_limit=1.0,
        workers_saturated=0.0,
        unsent_at_end=0,
        held=held,
        reasons=(),
        sender_kept_up=True,
        release_lag_p99_ms=0.0,
        loop_lag_p99_ms=0.0,
    )


def simulated(cap: float) -> Callable[[int, float], asyncio.Future[StepResult]]:
    async def run(index: int, rate: float) -> StepResult:
        return fake_step(index, rate, rate <= cap, min(rate, cap))

    return run  # type: ignore[return-value]


def search(cap: float, cfg: SearchConfig) -> SearchResult:
    return asyncio.run(search_capacity(simulated(cap), cfg, step_seconds=0.0))


@settings(max_examples=300, deadline=None)
@given(
    cap=st.floats(min_value=1.0, max_value=4000.0),
    start=st.floats(min_value=1.0, max_value=200.0),
    resolution=st.sampled_from([0.05, 0.1, 0.2]),
)
def test_bisect_reports_a_held_rate_within_resolution_of_the_knee(
    cap: float, start: float, resolution: float
) -> None:
    cfg = SearchConfig(start=start, resolution=resolution, max_steps=40, min_qps=0.5)
    out = search(cap, cfg)
    assert out.stopped == "converged", out
    assert out.capacity_qps is not None
    assert out.capacity_qps <= cap
    assert out.capacity_qps > cap * (1 - resolution) - 1e-6
    assert out.failed_qps is not None and out.failed_qps > cap
    held = {s.rate for s in out.steps if s.held}
    assert out.capacity_qps in held


@pytest.mark.parametrize(
    ("cap", "start", "most_steps"),
    [
        pytest.param(40.0, 12.0, 5, id="knee 40 from 12: 12-24-48, then just under and over"),
        pytest.param(1000.0, 10.0, 11, id="knee 1000 from 10: seven doublings then refine"),
        pytest.param(5.0, 50.0, 4, id="knee below the start: come down on the hint"),
    ],
)
def test_bisect_uses_few_steps(cap: float, start: float, most_steps: int) -> None:
    out = search(cap, SearchConfig(start=start))
    assert out.stopped == "converged"
    assert len(out.steps) <= most_steps, [s.rate for s in out.steps]


def test_bisect_stops_at_max_qps_and_says_the_knee_is_higher() -> None:
    out = search(1e9, SearchConfig(start=10, max_qps=100))
    assert out.stopped == "max_qps"
    assert out.capacity_qps == 100
    assert any("knee is higher" in n for n in out.notes)


def test_bisect_gives_up_below_min_qps() -> None:
    out = search(0.1, SearchConfig(start=10, min_qps=1.0))
    assert out.stopped == "below_min_qps"
    assert out.capacity_qps is None
    assert any("no rate was held" in n for n in out.notes)


def test_step_mode_climbs_by_step_until_the_first_failure() -> None:
    out = search(35.0, SearchConfig(mode="step", start=10, step=10))
    assert [s.rate for s in out.steps] == [10, 20, 30, 40]
    assert out.capacity_qps == 30
    assert out.failed_qps == 40
    assert out.stopped == "knee_found"


def test_fixed_mode_runs_one_step() -> None:
    held = search(35.0, SearchConfig(mode="fixed", start=20))
    assert [s.rate for s in held.steps] == [20]
    assert held.capacity_qps == 20
    failed = search(35.0, SearchConfig(mode="fixed", start=50))
    assert failed.capacity_qps is None and failed.failed_qps == 50


def test_max_steps_and_max_time_bound_the_run() -> None:
    out = search(1e9, SearchConfig(start=1, max_steps=3, max_qps=1e6))
    assert len(out.steps) == 3 and out.stopped == "max_steps"
    none = asyncio.run(search_capacity(simulated(10), SearchConfig(max_time=5), step_seconds=6.0))
    assert none.steps == [] and none.stopped == "max_time"


def test_an_abort_stops_the_search_with_its_reason() -> None:
    out = asyncio.run(
        search_capacity(simulated(100), SearchConfig(start=10), step_seconds=0, aborted=lambda: "target down")
    )
    assert len(out.steps) == 1
    assert out.stopped == "aborted" and "target down" in out.notes


def test_bisector_probes_just_under_the_overload_throughput() -> None:
    b = Bisector(SearchConfig(start=12))
    assert b.propose() == 12
    b.observe(12, True, 12)
    assert b.propose() == 24
    b.observe(24, True, 24)
    assert b.propose() == 48
    b.observe(48, False, 40)  # overloaded: answered at the knee
    assert b.propose() == pytest.approx(40 * 0.97)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"mode": "zigzag"}, id="unknown mode"),
        pytest.param({"start": 0}, id="zero start"),
        pytest.param({"start": 100, "max_qps": 10}, id="start above max"),
        pytest.param({"growth": 1.0}, id="growth of one never moves"),
        pytest.param({"resolution": 1.5}, id="resolution above one"),
        pytest.param({"max_steps": 0}, id="no steps"),
        pytest.param({"max_steps": 1000}, id="unbounded steps"),
        pytest.param({"max_time": 0}, id="no time"),
    ],
)
def test_invalid_search_settings_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SearchConfig(**kwargs)  # type: ignore[arg-type]


def test_a_narrow_failure_is_measured_again_before_it_counts() -> None:
    """One slow second on a busy machine must not move the knee: a failure by a hair is re-run."""
    calls: list[float] = []

    async def step(index: int, rate: float) -> StepResult:
        calls.append(rate)
        s = fake_step(index, rate, held=rate <= 40, throughput=min(rate, 40))
        if rate == 48 and calls.count(48) == 1:  # first try at 48: fails by a hair (noise)
            return dataclasses.replace(s, held=False, outstanding_slope=1.5, growth_limit=1.0)
        if rate > 40:  # a real failure: the backlog grows fast
            return dataclasses.replace(s, outstanding_slope=10.0)
        return s

    cfg = SearchConfig(start=24, max_steps=4, max_time=60, resolution=0.5)
    out = asyncio.run(search_capacity(step, cfg, step_seconds=1))
    assert calls[:3] == [24, 48, 48]
    assert any("measured again" in n for n in out.notes)


def _with(step: StepResult, p50: float, **kw: object) -> StepResult:
    lat = {**step.service_latency_ms, "p50": p50}
    return dataclasses.replace(step, service_latency_ms=lat, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("failed", "owner", "words"),
    [
        pytest.param(
            {"p50": 30.0, "workers_saturated": 1.0},
            "server",
            "the server did not",
            id="connections busy because the server slowed down: the server's knee",
        ),
        pytest.param(
            {"p50": 1.5, "workers_saturated": 1.0},
            "sender-connections",
            "raise --concurrency",
            id="connections busy while the server stayed fast: too few connections",
        ),
        pytest.param(
            {"p50": 1.0, "workers_saturated": 0.0, "sender_kept_up": False, "sender_cpu_cores": (0.95, 0.97)},
            "sender",
            "0.95/0.97",
            id="the sender fell behind: maybe the client's knee",
        ),
    ],
)
def test_the_knee_is_attributed_to_the_server_or_the_sender(
    failed: dict[str, object], owner: str, words: str
) -> None:
    light = _with(fake_step(0, 100, True, 100), 1.0)
    near = _with(fake_step(1, 200, True, 200), 25.0)  # held, but already queueing at the knee
    p50 = float(failed.pop("p50"))  # type: ignore[arg-type]
    over = _with(fake_step(2, 220, False, 200), p50, **failed)
    got, why = knee_owner([light, near, over], 200)
    assert got == owner and words in why, why


def test_no_failure_no_knee_owner() -> None:
    assert knee_owner([fake_step(0, 100, True, 100)], 100)[0] is None
