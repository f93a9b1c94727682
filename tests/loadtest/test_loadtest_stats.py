"""Histograms, the outstanding-growth slope, and the held rule, table-driven."""

from __future__ import annotations

import io

import pytest

from loadtest.progress import Progress
from loadtest.stats import HeldRule, LatencyHistogram, Outcome, StepStats, Timeline, slope

pytestmark = pytest.mark.timeout(10)


def test_histogram_percentiles_match_exact_ones_to_three_digits() -> None:
    h = LatencyHistogram()
    values = [i / 1000.0 for i in range(1, 1001)]  # 1 ms .. 1000 ms
    for v in values:
        h.record(v)
    s = h.summary_ms()
    assert s["p50"] == pytest.approx(500, rel=2e-3)
    assert s["p90"] == pytest.approx(900, rel=2e-3)
    assert s["p99"] == pytest.approx(990, rel=2e-3)
    assert s["max"] == pytest.approx(1000, rel=2e-3)
    assert s["mean"] == pytest.approx(500.5, rel=2e-3)
    assert h.count == 1000


def test_empty_histogram_reports_zeros_and_huge_values_are_clamped() -> None:
    assert LatencyHistogram().summary_ms()["p99"] == 0.0
    h = LatencyHistogram()
    h.record(10_000.0)
    assert h.count == 1 and h.summary_ms()["max"] > 500_000


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        pytest.param([(0, 1), (1, 3), (2, 5)], 2.0, id="a line of slope two"),
        pytest.param([(0, 4), (1, 4), (2, 4)], 0.0, id="flat"),
        pytest.param([(0, 1)], 0.0, id="one point has no slope"),
        pytest.param([(1, 1), (1, 5)], 0.0, id="no spread in x"),
    ],
)
def test_slope(points: list[tuple[float, float]], expected: float) -> None:
    assert slope(points) == pytest.approx(expected)


def _step(
    *,
    rate: float = 40.0,
    errors: int = 0,
    growth_per_s: float = 0.0,
    latency: float = 0.05,
    answered: int = 80,
) -> StepStats:
    stats = StepStats(rate, 10.0, 12.0)
    for i in range(answered):
        t = 10.0 + i * 2.0 / max(answered, 1)
        err = "check" if i < errors else None
        stats.record(Outcome(t - latency, t - latency, t, err, "bad body" if err else ""))
    for k in range(40):
        t = 10.0 + k * 0.05
        stats.sample(t, int(growth_per_s * (t - 10.0)), 2)
    return stats


@pytest.mark.parametrize(
    ("kwargs", "rule", "held", "reason"),
    [
        pytest.param({}, HeldRule(), True, "error rate 0.0%", id="clean step holds"),
        pytest.param({"errors": 1}, HeldRule(), False, "error rate 1.2%", id="1 error in 80 is over 1%"),
        pytest.param({"errors": 1}, HeldRule(max_error_rate=0.02), True, "", id="under 2% holds"),
        pytest.param(
            {"growth_per_s": 5.0},
            HeldRule(),
            False,
            "outstanding grows",
            id="backlog growing 5/s at 40/s fails",
        ),
        pytest.param({"growth_per_s": 1.5}, HeldRule(), True, "", id="1.5/s is within 5% of 40/s"),
        pytest.param(
            {"latency": 0.3},
            HeldRule(max_p99_ms=200),
            False,
            "p99",
            id="a latency objective fails slow answers",
        ),
        pytest.param(
            {"answered": 0}, HeldRule(), False, "no request was answered", id="silence is not capacity"
        ),
    ],
)
def test_held_rule(kwargs: dict[str, float], rule: HeldRule, held: bool, reason: str) -> None:
    result = _step(**kwargs).result(index=0, rule=rule, concurrency=16)  # type: ignore[arg-type]
    assert result.held is held, result.reasons
    assert reason in " ".join(result.reasons)


def test_only_the_window_counts() -> None:
    stats = StepStats(10.0, 10.0, 12.0)
    stats.record(Outcome(9.0, 9.0, 9.5))  # warm-up
    stats.record(Outcome(11.0, 11.0, 11.1))
    stats.record(Outcome(11.9, 11.9, 12.5))  # answered during the drain
    stats.note_scheduled(9.9)
    stats.note_scheduled(11.0)
    r = stats.result(index=3, rule=HeldRule(), concurrency=4)
    assert (r.completed, r.scheduled, r.index) == (1, 1, 3)
    assert r.throughput == pytest.approx(0.5)


def test_errors_are_counted_by_kind_with_an_example() -> None:
    stats = StepStats(10.0, 0.0, 1.0)
    stats.record(Outcome(0.1, 0.1, 0.2, "timeout", "no answer in 5s"))
    stats.record(Outcome(0.2, 0.2, 0.3, "connect", "refused"))
    stats.record(Outcome(0.3, 0.3, 0.4, "connect", "refused again"))
    r = stats.result(index=0, rule=HeldRule(), concurrency=4)
    assert dict(r.errors_by_kind) == {"timeout": 1, "connect": 2}
    assert r.error_examples["connect"] == "refused"
    assert r.to_dict()["errors_by_kind"] == {"timeout": 1, "connect": 2}


def test_a_sender_that_falls_behind_is_reported() -> None:
    stats = _step()
    stats.release_lag.record(0.2)
    r = stats.result(index=0, rule=HeldRule(), concurrency=16, client_cpu_cores=0.95)
    assert r.sender_kept_up is False
    assert any("CPU-bound" in n for n in r.notes)


def test_timeline_buckets_per_second() -> None:
    tl = Timeline(start=100.0)
    tl.scheduled(100.2, 10.0)
    tl.scheduled(101.5, 10.0)
    tl.outcome(Outcome(100.2, 100.2, 100.4))
    tl.outcome(Outcome(101.5, 101.5, 101.9, "check"))
    tl.sample(101.6, 3, 2)
    tl.server_cpu(101.7, 0.5)
    rows = tl.rows()
    assert [r["t"] for r in rows] == [0.0, 1.0]
    assert rows[1]["errors"] == 1 and rows[1]["queue_max"] == 3
    assert rows[1]["outstanding_max"] == 5
    assert rows[1]["server_cpu_cores"] == 0.5
    assert rows[0]["p50_ms"] == pytest.approx(200, rel=0.02)


def test_progress_redraws_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    p = Progress(out, tty=True, interval=0.0)
    p.update("a long first line")
    p.update("short")
    p.finish("done")
    text = out.getvalue()
    assert text.startswith("\ra long first line")
    assert "\rshort" + " " * 12 in text
    assert text.endswith("\rdone" + " " * 1 + "\n")


def test_progress_prints_plain_lines_in_a_log_at_most_once_per_interval() -> None:
    out = io.StringIO()
    p = Progress(out, tty=False, interval=60.0)
    p.update("one")
    p.update("two")  # too soon: dropped
    p.finish("step done")
    p.update("three")  # a step summary also restarts the interval
    assert out.getvalue() == "one\nstep done\n"
    quiet = io.StringIO()
    Progress(quiet, enabled=False).finish("x")
    assert quiet.getvalue() == ""
