"""Counting what happened in a step, and the rule that says whether the server "held" the rate.

Latencies go into HdrHistograms (microseconds, 3 significant digits for a step, 2 for the
per-second timeline), not into a list: percentiles of a list are exact but cost memory in
proportion to the requests, and averaging per-second percentiles - what a plain counter-based
reporter ends up doing - is not a percentile at all.

The held rule is the seeds': over a measurement window, the error rate stays at or under 1% and
the pressure queue does not grow. One refinement: "the queue" here is the *outstanding* work,
requests due but not yet answered (waiting for a worker plus in flight). With many coroutines per
worker the client-side queue stays empty for a while even when the server is drowning - the
backlog moves into the server's accept queue, where only the in-flight count can see it. Growth is
the least-squares slope of outstanding over the window, so one burst doesn't fail a step and a slow
steady climb does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped, unused-ignore]

_HIGHEST_US = 600_000_000  # ten minutes: longer than any request timeout we allow
PERCENTILES = (50.0, 90.0, 99.0)


class LatencyHistogram:
    """Seconds in, milliseconds out; values above the range are clamped, not dropped."""

    def __init__(self, significant_digits: int = 3) -> None:
        self._h = HdrHistogram(1, _HIGHEST_US, significant_digits)

    def record(self, seconds: float) -> None:
        us = min(max(1, round(seconds * 1e6)), _HIGHEST_US)
        self._h.record_value(us)

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def percentile_ms(self, p: float) -> float:
        if self.count == 0:
            return 0.0
        return float(self._h.get_value_at_percentile(p)) / 1000.0

    def summary_ms(self) -> dict[str, float]:
        """p50/p90/p99, mean and max in milliseconds (all 0 when empty)."""
        if self.count == 0:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0, "max": 0.0}
        out = {f"p{p:g}": round(self.percentile_ms(p), 3) for p in PERCENTILES}
        out["mean"] = round(float(self._h.get_mean_value()) / 1000.0, 3)
        out["max"] = round(float(self._h.get_max_value()) / 1000.0, 3)
        return out


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``y`` over ``x``; 0 for fewer than two distinct ``x``."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx <= 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / sxx


@dataclass(frozen=True)
class Outcome:
    """One finished request: when it was due, sent and answered, and the error kind if any."""

    scheduled: float
    sent: float
    done: float
    error: str | None = None
    message: str = ""


@dataclass(frozen=True)
class HeldRule:
    """When a step counts as held (see the module docstring).

    ``growth_tolerance`` is the outstanding work's allowed growth, as a fraction of the rate per
    second: 0.05 at 40/s allows +2 requests per second. A rate a few percent above the true knee
    grows that slowly, so this tolerance is also the resolution of the answer; the floor of two
    requests over the window keeps a single straggler at low rates from failing a step.
    """

    max_error_rate: float = 0.01
    growth_tolerance: float = 0.05
    max_p99_ms: float | None = None

    def growth_limit(self, rate: float, window_s: float) -> float:
        return max(self.growth_tolerance * rate, 2.0 / max(window_s, 1e-9))


@dataclass(frozen=True)
class StepResult:
    """Everything measured about one rate; ``to_dict`` is what lands in the JSON result."""

    index: int
    rate: float
    window_s: float
    scheduled: int
    completed: int
    ok: int
    errors: int
    error_rate: float
    errors_by_kind: Mapping[str, int]
    error_examples: Mapping[str, str]
    throughput: float
    latency_ms: Mapping[str, float]
    service_latency_ms: Mapping[str, float]
    queue_max: int
    queue_mean: float
    in_flight_max: int
    outstanding_slope: float
    growth_limit: float
    workers_saturated: float
    unsent_at_end: int
    held: bool
    reasons: Sequence[str]
    sender_kept_up: bool
    release_lag_p99_ms: float
    loop_lag_p99_ms: float
    client_cpu_cores: float | None = None
    server_cpu_cores: float | None = None
    server_rss_mib: float | None = None
    notes: Sequence[str] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["errors_by_kind"] = dict(self.errors_by_kind)
        d["error_examples"] = dict(self.error_examples)
        d["reasons"] = list(self.reasons)
        d["notes"] = list(self.notes)
        return d


class StepStats:
    """Collects outcomes and samples of one step; only the measurement window counts.

    Outcomes are attributed to the window by when they were *answered*, samples by when they were
    taken; warm-up (connections opening, the queue settling) and drain are left out.
    """

    def __init__(self, rate: float, window_start: float, window_end: float) -> None:
        self.rate = rate
        self.window_start = window_start
        self.window_end = window_end
        self.latency = LatencyHistogram()
        self.service_latency = LatencyHistogram()
        self.release_lag = LatencyHistogram()
        self.loop_lag = LatencyHistogram()
        self.completed = 0
        self.ok = 0
        self.errors: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}
        self.scheduled = 0
        self.samples: list[tuple[float, int, int]] = []
        self.unsent_at_end = 0

    def in_window(self, t: float) -> bool:
        return self.window_start <= t < self.window_end

    def record(self, outcome: Outcome) -> None:
        if not self.in_window(outcome.done):
            return
        self.completed += 1
        self.latency.record(outcome.done - outcome.scheduled)
        self.service_latency.record(outcome.done - outcome.sent)
        if outcome.error is None:
            self.ok += 1
        else:
            self.errors[outcome.error] += 1
            self.error_examples.setdefault(outcome.error, outcome.message[:200])

    def note_scheduled(self, scheduled: float) -> None:
        if self.in_window(scheduled):
            self.scheduled += 1

    def sample(self, t: float, queue: int, in_flight: int) -> None:
        if self.in_window(t):
            self.samples.append((t, queue, in_flight))

    def result(
        self,
        *,
        index: int,
        rule: HeldRule,
        concurrency: int,
        client_cpu_cores: float | None = None,
        server_cpu_cores: float | None = None,
        server_rss_mib: float | None = None,
        extra_reasons: Iterable[str] = (),
        notes: Iterable[str] = (),
    ) -> StepResult:
        window_s = self.window_end - self.window_start
        n_err = sum(self.errors.values())
        error_rate = n_err / self.completed if self.completed else 0.0
        outstanding = [(t, float(q + f)) for t, q, f in self.samples]
        growth = slope(outstanding)
        limit = rule.growth_limit(self.rate, window_s)
        queues = [q for _, q, _ in self.samples]
        in_flight = [f for _, _, f in self.samples]
        saturated = sum(1 for f in in_flight if f >= concurrency) / max(1, len(in_flight))
        lat = self.latency.summary_ms()

        reasons: list[str] = list(extra_reasons)
        held = not reasons
        if self.completed == 0:
            held = False
            reasons.append("no request was answered in the window")
        if error_rate > rule.max_error_rate:
            held = False
            reasons.append(f"error rate {error_rate:.1%} > {rule.max_error_rate:.0%}")
        if growth > limit:
            held = False
            reasons.append(f"outstanding grows {growth:+.1f}/s > {limit:.1f}/s")
        if rule.max_p99_ms is not None and lat["p99"] > rule.max_p99_ms:
            held = False
            reasons.append(f"p99 {lat['p99']:.0f} ms > {rule.max_p99_ms:.0f} ms")
        if held:
            reasons.append(
                f"error rate {error_rate:.1%} <= {rule.max_error_rate:.0%}, "
                f"outstanding {growth:+.1f}/s <= {limit:.1f}/s"
            )

        release_p99 = self.release_lag.percentile_ms(99)
        loop_p99 = self.loop_lag.percentile_ms(99)
        kept_up = release_p99 <= 50.0 and loop_p99 <= 50.0
        step_notes = list(notes)
        if client_cpu_cores is not None and client_cpu_cores > 0.9:
            kept_up = False
            step_notes.append(f"the sender used {client_cpu_cores:.2f} cores: it is CPU-bound")
        if not kept_up:
            step_notes.append(
                f"the sender fell behind (release lag p99 {release_p99:.0f} ms, event-loop lag "
                f"p99 {loop_p99:.0f} ms): this rate measures the client as much as the server"
            )
        if saturated > 0.5 and not held:
            step_notes.append(
                f"all {concurrency} workers were busy in {saturated:.0%} of samples: if the "
                "server's CPU is not saturated, raise --concurrency"
            )
        return StepResult(
            index=index,
            rate=self.rate,
            window_s=round(window_s, 3),
            scheduled=self.scheduled,
            completed=self.completed,
            ok=self.ok,
            errors=n_err,
            error_rate=round(error_rate, 5),
            errors_by_kind=dict(self.errors),
            error_examples=dict(self.error_examples),
            throughput=round(self.completed / window_s, 3) if window_s > 0 else 0.0,
            latency_ms=lat,
            service_latency_ms=self.service_latency.summary_ms(),
            queue_max=max(queues, default=0),
            queue_mean=round(sum(queues) / len(queues), 3) if queues else 0.0,
            in_flight_max=max(in_flight, default=0),
            outstanding_slope=round(growth, 3),
            growth_limit=round(limit, 3),
            workers_saturated=round(saturated, 3),
            unsent_at_end=self.unsent_at_end,
            held=held,
            reasons=tuple(reasons),
            sender_kept_up=kept_up,
            release_lag_p99_ms=round(release_p99, 3),
            loop_lag_p99_ms=round(loop_p99, 3),
            client_cpu_cores=_round(client_cpu_cores),
            server_cpu_cores=_round(server_cpu_cores),
            server_rss_mib=_round(server_rss_mib),
            notes=tuple(step_notes),
        )


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


@dataclass
class _Bucket:
    target_rate: float = 0.0
    scheduled: int = 0
    completed: int = 0
    errors: int = 0
    queue_max: int = 0
    outstanding_max: int = 0
    server_cpu_cores: float | None = None
    latency: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(2))


class Timeline:
    """Per-interval series over the whole run, for the JSON ``timeline`` and the plot."""

    def __init__(self, start: float, interval: float = 1.0) -> None:
        self.start = start
        self.interval = interval
        self._buckets: dict[int, _Bucket] = {}

    def _at(self, t: float) -> _Bucket:
        return self._buckets.setdefault(max(0, int((t - self.start) / self.interval)), _Bucket())

    def scheduled(self, t: float, rate: float) -> None:
        b = self._at(t)
        b.scheduled += 1
        b.target_rate = rate

    def outcome(self, o: Outcome) -> None:
        b = self._at(o.done)
        b.completed += 1
        b.errors += o.error is not None
        b.latency.record(o.done - o.scheduled)

    def sample(self, t: float, queue: int, in_flight: int) -> None:
        b = self._at(t)
        b.queue_max = max(b.queue_max, queue)
        b.outstanding_max = max(b.outstanding_max, queue + in_flight)

    def server_cpu(self, t: float, cores: float) -> None:
        self._at(t).server_cpu_cores = round(cores, 3)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for k in sorted(self._buckets):
            b = self._buckets[k]
            out.append(
                {
                    "t": round(k * self.interval, 3),
                    "target_rate": b.target_rate,
                    "offered": round(b.scheduled / self.interval, 3),
                    "throughput": round(b.completed / self.interval, 3),
                    "errors": b.errors,
                    "p50_ms": round(b.latency.percentile_ms(50), 3),
                    "p99_ms": round(b.latency.percentile_ms(99), 3),
                    "queue_max": b.queue_max,
                    "outstanding_max": b.outstanding_max,
                    "server_cpu_cores": b.server_cpu_cores,
                }
            )
        return out
