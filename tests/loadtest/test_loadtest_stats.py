"""Histograms, the held rule, and records that merge exactly across senders, table-driven."""

from __future__ import annotations

import io

import pytest

from loadtest.progress import Progress
from loadtest.record import Bucket, RecordError, StepRecord, coverage, from_dict, judge, merge, timeline_rows
from loadtest.stats import HeldRule, LatencyHistogram, slope

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
    assert s["p99.9"] == pytest.approx(999, rel=2e-3)
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


def _record(
    *,
    rate: float = 40.0,
    errors: int = 0,
    growth_per_s: float = 0.0,
    latency: float = 0.05,
    answered: int = 80,
    shard: tuple[int, int] = (0, 1),
) -> StepRecord:
    """A two-second window at ``rate``: ``answered`` replies, a backlog growing ``growth_per_s``."""
    r = StepRecord(rate, 0.0, 2.0, 0.05, 0.0, shards=[shard], concurrency=16)
    for i in range(answered):
        r.completed += 1
        r.latency.record(latency)
        r.service.record(latency)
        if i < errors:
            r.errors["check"] = r.errors.get("check", 0) + 1
            r.error_examples.setdefault("check", "bad body")
        else:
            r.ok += 1
    r.queue = [int(growth_per_s * k * 0.05) for k in range(40)]
    r.in_flight = [2] * 40
    return r


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
    result = judge(_record(**kwargs), index=0, rule=rule)  # type: ignore[arg-type]
    assert result.held is held, result.reasons
    assert reason in " ".join(result.reasons)


def test_a_shards_growth_limit_is_its_share_of_the_rate() -> None:
    # Shard 0 of 4 sends 10/s of 40/s: its backlog may grow 5% of 10/s, not of 40/s.
    part = judge(_record(shard=(0, 4), growth_per_s=1.5), index=0, rule=HeldRule())
    assert part.growth_limit == pytest.approx(1.0) and not part.held


def test_errors_are_counted_by_kind_with_an_example() -> None:
    r = judge(_record(errors=2), index=0, rule=HeldRule())
    assert dict(r.errors_by_kind) == {"check": 2}
    assert r.error_examples["check"] == "bad body"
    assert r.to_dict()["errors_by_kind"] == {"check": 2}


def test_a_sender_that_falls_behind_is_reported() -> None:
    rec = _record()
    rec.release_lag.record(0.2)
    rec.sender_cpu = [0.5, 0.95]
    r = judge(rec, index=0, rule=HeldRule())
    assert r.sender_kept_up is False
    assert r.client_cpu_cores == 0.95 and list(r.sender_cpu_cores) == [0.5, 0.95]
    assert any("CPU-bound" in n for n in r.notes)


def test_histograms_merge_exactly_and_survive_encoding() -> None:
    whole = LatencyHistogram()
    a, b = LatencyHistogram(), LatencyHistogram()
    for i in range(1, 20001):
        v = (i % 997) / 1000.0 + (0.5 if i % 100 == 0 else 0.0)
        whole.record(v)
        (a if i % 3 else b).record(v)
    merged = LatencyHistogram.decode(a.encode())
    merged.add(LatencyHistogram.decode(b.encode()))
    assert merged.count == whole.count == 20000
    assert merged.summary_ms() == whole.summary_ms()  # every percentile, max and mean: equal


def test_records_of_two_shards_merge_into_the_whole() -> None:
    a = _record(shard=(0, 2), answered=40, latency=0.01)
    b = _record(shard=(1, 2), answered=40, errors=1, latency=0.03)
    a.sender_cpu, b.sender_cpu = [0.4], [0.5]
    a.timeline = {0: Bucket(20, 20, 0)}
    b.timeline = {0: Bucket(20, 19, 1), 1: Bucket(20, 20, 0)}
    m = merge([from_dict(a.to_dict()), from_dict(b.to_dict())])
    assert (m.completed, m.ok, m.errors) == (80, 79, {"check": 1})
    assert m.shards == [(0, 2), (1, 2)] and coverage(m.shards) == 1.0
    assert m.in_flight == [4] * 40 and m.sender_cpu == [0.4, 0.5]
    assert m.latency.percentile_ms(50) == pytest.approx(10, rel=0.01)
    assert m.latency.percentile_ms(99) == pytest.approx(30, rel=0.01)
    assert (m.timeline[0].scheduled, m.timeline[0].errors, m.timeline[1].completed) == (40, 1, 20)
    assert judge(m, index=0, rule=HeldRule()).rate == 40.0


@pytest.mark.parametrize(
    ("second", "message"),
    [
        pytest.param({"shard": (0, 2)}, "appears twice", id="the same shard twice"),
        pytest.param({"rate": 80.0, "shard": (1, 2)}, "different steps", id="shards of different steps"),
    ],
)
def test_records_that_are_not_one_step_do_not_merge(second: dict[str, object], message: str) -> None:
    with pytest.raises(RecordError, match=message):
        merge([_record(shard=(0, 2)), _record(**second)])  # type: ignore[arg-type]


def test_a_record_that_is_not_one_names_the_problem() -> None:
    with pytest.raises(RecordError, match="not a step record"):
        from_dict({"rate": 1})


def test_timeline_rows_per_second_with_the_backlog_from_the_grid() -> None:
    r = _record(growth_per_s=2.0)
    r.offset_s = 3.0
    r.timeline = {3: Bucket(40, 40, 1), 4: Bucket(40, 39, 0)}
    r.timeline[3].latency.record(0.2)
    rows = timeline_rows([r], {4: 0.5})
    assert [x["t"] for x in rows] == [3.0, 4.0]
    assert rows[0]["errors"] == 1 and rows[0]["p50_ms"] == pytest.approx(200, rel=0.02)
    assert rows[1]["queue_max"] == 3 and rows[1]["outstanding_max"] == 5
    assert rows[1]["server_cpu_cores"] == 0.5 and rows[0]["target_rate"] == 40.0


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
