"""Latency histograms, the rule that says whether the server "held" a rate, and a step's result.

Latencies go into HdrHistograms (microseconds, 3 significant digits for a step, 2 for the
per-second timeline), not into a list: percentiles of a list are exact but cost memory in
proportion to the requests, and averaging per-second (or per-sender) percentiles - what a plain
counter-based reporter ends up doing - is not a percentile at all.

The held rule is the original framework's: over a measurement window, the error rate stays at or under 1% and
the pressure queue does not grow. One refinement: "the queue" here is the *outstanding* work,
requests due but not yet answered (waiting for a worker plus in flight). With many coroutines per
worker the client-side queue stays empty for a while even when the server is drowning - the
backlog moves into the server's accept queue, where only the in-flight count can see it. Growth is
the least-squares slope of outstanding over the window, so one burst doesn't fail a step and a slow
steady climb does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped, unused-ignore]

_HIGHEST_US = 600_000_000  # ten minutes: longer than any request timeout we allow
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


class LatencyHistogram:
    """Seconds in, milliseconds out; values above the range are clamped, not dropped.

    Histograms from several senders (processes, pods) are combined with :meth:`add` or from their
    :meth:`encode`-d form (HdrHistogram's compressed base64, the format every HdrHistogram
    library reads), so a merged percentile is the percentile of all requests - never an average
    of per-sender percentiles, which is not a percentile at all.
    """

    def __init__(self, significant_digits: int = 3) -> None:
        self._h = HdrHistogram(1, _HIGHEST_US, significant_digits)

    def record(self, seconds: float) -> None:
        us = min(max(1, round(seconds * 1e6)), _HIGHEST_US)
        self._h.record_value(us)

    def record_us(self, us: int, count: int = 1) -> None:
        """Record a value already in whole microseconds (``count`` times)."""
        self._h.record_value(min(max(1, us), _HIGHEST_US), count)

    def add(self, other: LatencyHistogram) -> None:
        """Add every value of ``other`` (exact: the counts are added bucket by bucket)."""
        self._h.add(other._h)

    def encode(self) -> str:
        return str(self._h.encode().decode("ascii"))

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        h = cls.__new__(cls)
        h._h = HdrHistogram.decode(text.encode("ascii"))
        return h

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    @property
    def max_us(self) -> int:
        return int(self._h.get_max_value()) if self.count else 0

    def percentile_ms(self, p: float) -> float:
        if self.count == 0:
            return 0.0
        return float(self._h.get_value_at_percentile(p)) / 1000.0

    def summary_ms(self) -> dict[str, float]:
        """p50/p90/p99/p99.9, mean and max in milliseconds (all 0 when empty)."""
        if self.count == 0:
            return {**{f"p{p:g}": 0.0 for p in PERCENTILES}, "mean": 0.0, "max": 0.0}
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
    senders: int = 1
    sender_cpu_cores: Sequence[float] = field(default_factory=tuple)
    statuses: Mapping[str, int] = field(default_factory=dict)
    limited_by: str | None = None
    record: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "record"}
        d["errors_by_kind"] = dict(self.errors_by_kind)
        d["error_examples"] = dict(self.error_examples)
        d["reasons"] = list(self.reasons)
        d["notes"] = list(self.notes)
        d["sender_cpu_cores"] = list(self.sender_cpu_cores)
        d["statuses"] = dict(self.statuses)
        d["record"] = dict(self.record) if self.record is not None else None
        return d
