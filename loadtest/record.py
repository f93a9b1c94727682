"""What one sender saw in one step, in a form that adds up exactly across senders.

Every sender process (and every pod of an Indexed Job) measures its shard of the schedule and
returns a :class:`StepRecord`. Records of the same step are combined with :func:`merge`:

* counts and error kinds are added;
* latency histograms are added bucket by bucket (HdrHistogram), so the merged p99 is the p99 of
  every request of the step;
* the backlog is sampled by every sender on the *same* grid (``interval_s`` apart from the step's
  start, which all senders share), so the merged backlog at grid point ``j`` is the sum of the
  senders' backlogs at ``j`` - the exact total, not an estimate - and its slope is the slope of
  the total;
* per-second timeline buckets are keyed by seconds since the run's first step, which shards of an
  Indexed Job also share (``--start-at``).

:func:`judge` turns a (merged) record into a :class:`~loadtest.stats.StepResult` with the held
verdict, and the record itself rides along in the JSON (histograms encoded), so results written by
separate pods can be merged later by ``gpuplan loadtest merge`` with the same code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtest.stats import HeldRule, LatencyHistogram, StepResult, slope

# A sender whose release of due requests or whose event loop lags this much at p99 is behind.
SENDER_LAG_MS = 50.0
# A sender process above this share of one core is CPU-bound.
SENDER_BUSY_CORES = 0.9


class RecordError(ValueError):
    """Records that cannot be merged (different steps, a shard twice); the message says which."""


@dataclass
class Bucket:
    """One second of the run: due, answered, failed, and the latency of what was answered."""

    scheduled: int = 0
    completed: int = 0
    errors: int = 0
    latency: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(2))

    def add(self, other: Bucket) -> None:
        self.scheduled += other.scheduled
        self.completed += other.completed
        self.errors += other.errors
        self.latency.add(other.latency)


@dataclass
class StepRecord:
    """One step's measurements from one or more senders (see the module docstring)."""

    rate: float
    warmup_s: float
    window_s: float
    interval_s: float
    offset_s: float
    shards: list[tuple[int, int]] = field(default_factory=list)
    concurrency: int = 0
    scheduled: int = 0
    completed: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    error_examples: dict[str, str] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    unsent_at_end: int = 0
    still_in_flight: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    service: LatencyHistogram = field(default_factory=LatencyHistogram)
    release_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    loop_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    queue: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    sender_cpu: list[float] = field(default_factory=list)
    timeline: dict[int, Bucket] = field(default_factory=dict)
    abort: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def window_start_index(self) -> int:
        return round(self.warmup_s / self.interval_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, histograms encoded; :func:`from_dict` reads it back unchanged."""
        return {
            "rate": self.rate,
            "warmup_s": self.warmup_s,
            "window_s": self.window_s,
            "interval_s": self.interval_s,
            "offset_s": self.offset_s,
            "shards": [list(s) for s in self.shards],
            "concurrency": self.concurrency,
            "scheduled": self.scheduled,
            "completed": self.completed,
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "statuses": dict(self.statuses),
            "unsent_at_end": self.unsent_at_end,
            "still_in_flight": self.still_in_flight,
            "histograms": {
                "latency": self.latency.encode(),
                "service": self.service.encode(),
                "release_lag": self.release_lag.encode(),
                "loop_lag": self.loop_lag.encode(),
            },
            "queue": list(self.queue),
            "in_flight": list(self.in_flight),
            "sender_cpu": [round(c, 4) for c in self.sender_cpu],
            "timeline": {
                str(k): [b.scheduled, b.completed, b.errors, b.latency.encode()]
                for k, b in sorted(self.timeline.items())
            },
            "abort": self.abort,
            "notes": list(self.notes),
        }


def from_dict(d: Mapping[str, Any]) -> StepRecord:
    """A record from its JSON form; :class:`RecordError` naming the field when it is not one."""
    try:
        hist = d["histograms"]
        return StepRecord(
            rate=float(d["rate"]),
            warmup_s=float(d["warmup_s"]),
            window_s=float(d["window_s"]),
            interval_s=float(d["interval_s"]),
            offset_s=float(d["offset_s"]),
            shards=[(int(a), int(b)) for a, b in d["shards"]],
            concurrency=int(d["concurrency"]),
            scheduled=int(d["scheduled"]),
            completed=int(d["completed"]),
            ok=int(d["ok"]),
            errors={str(k): int(v) for k, v in d["errors"].items()},
            error_examples={str(k): str(v) for k, v in d["error_examples"].items()},
            statuses={str(k): int(v) for k, v in d["statuses"].items()},
            unsent_at_end=int(d["unsent_at_end"]),
            still_in_flight=int(d.get("still_in_flight", 0)),
            latency=LatencyHistogram.decode(hist["latency"]),
            service=LatencyHistogram.decode(hist["service"]),
            release_lag=LatencyHistogram.decode(hist["release_lag"]),
            loop_lag=LatencyHistogram.decode(hist["loop_lag"]),
            queue=[int(x) for x in d["queue"]],
            in_flight=[int(x) for x in d["in_flight"]],
            sender_cpu=[float(x) for x in d["sender_cpu"]],
            timeline={
                int(k): Bucket(int(v[0]), int(v[1]), int(v[2]), LatencyHistogram.decode(v[3]))
                for k, v in d["timeline"].items()
            },
            abort=d.get("abort"),
            notes=[str(n) for n in d.get("notes", [])],
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise RecordError(f"not a step record ({type(exc).__name__}: {exc})") from None


def _add_grid(a: list[int], b: list[int]) -> list[int]:
    n = min(len(a), len(b)) if a and b else max(len(a), len(b))
    a = a + [a[-1]] * (n - len(a)) if a else [0] * n
    b = b + [b[-1]] * (n - len(b)) if b else [0] * n
    return [x + y for x, y in zip(a[:n], b[:n], strict=True)]


def merge(records: Iterable[StepRecord]) -> StepRecord:
    """The record of all senders of one step; the shards must not overlap."""
    items = list(records)
    if not items:
        raise RecordError("nothing to merge")
    first = items[0]
    out = StepRecord(first.rate, first.warmup_s, first.window_s, first.interval_s, first.offset_s)
    seen: set[tuple[int, int]] = set()
    for r in items:
        same = (r.rate, r.warmup_s, r.window_s, r.interval_s)
        if not all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(same, astuple4(first), strict=True)):
            raise RecordError(
                f"step at {r.rate}/s (window {r.window_s}s) cannot merge with {first.rate}/s "
                f"(window {first.window_s}s): the shards ran different steps"
            )
        for s in r.shards:
            if s in seen:
                raise RecordError(f"shard {s[0]}/{s[1]} appears twice")
            seen.add(s)
        out.shards.extend(r.shards)
        out.concurrency += r.concurrency
        out.scheduled += r.scheduled
        out.completed += r.completed
        out.ok += r.ok
        for kind, n in r.errors.items():
            out.errors[kind] = out.errors.get(kind, 0) + n
        for kind, msg in r.error_examples.items():
            out.error_examples.setdefault(kind, msg)
        for code, n in r.statuses.items():
            out.statuses[code] = out.statuses.get(code, 0) + n
        out.unsent_at_end += r.unsent_at_end
        out.still_in_flight += r.still_in_flight
        out.latency.add(r.latency)
        out.service.add(r.service)
        out.release_lag.add(r.release_lag)
        out.loop_lag.add(r.loop_lag)
        out.queue = _add_grid(out.queue, r.queue) if out.queue or r.queue else []
        out.in_flight = _add_grid(out.in_flight, r.in_flight) if out.in_flight or r.in_flight else []
        out.sender_cpu.extend(r.sender_cpu)
        for k, b in r.timeline.items():
            out.timeline.setdefault(k, Bucket()).add(b)
        out.abort = out.abort or r.abort
        out.notes.extend(n for n in r.notes if n not in out.notes)
    return out


def astuple4(r: StepRecord) -> tuple[float, float, float, float]:
    return (r.rate, r.warmup_s, r.window_s, r.interval_s)


def coverage(shards: Sequence[tuple[int, int]]) -> float:
    """Which share of the global schedule the shards cover (1.0 when all are present)."""
    return sum(1.0 / stride for _, stride in set(shards))


def judge(
    record: StepRecord,
    *,
    index: int,
    rule: HeldRule,
    server_cpu_cores: float | None = None,
    server_rss_mib: float | None = None,
    extra_reasons: Iterable[str] = (),
) -> StepResult:
    """The verdict on a step: held or not, why, and whether the sender kept up."""
    rate = record.rate * coverage(record.shards) if record.shards else record.rate
    window_s = record.window_s
    n_err = sum(record.errors.values())
    error_rate = n_err / record.completed if record.completed else 0.0
    w0 = record.window_start_index
    queue = record.queue[w0:]
    in_flight = record.in_flight[w0:]
    points = [
        (j * record.interval_s, float(q + f)) for j, (q, f) in enumerate(zip(queue, in_flight, strict=True))
    ]
    growth = slope(points)
    limit = rule.growth_limit(rate, window_s)
    saturated = sum(1 for f in in_flight if f >= record.concurrency) / max(1, len(in_flight))
    lat = record.latency.summary_ms()

    reasons: list[str] = list(extra_reasons)
    if record.abort:
        reasons.append(record.abort)
    held = not reasons
    if record.completed == 0:
        held = False
        reasons.append("no request was answered in the window")
    if error_rate > rule.max_error_rate:
        held = False
        reasons.append(f"error rate {error_rate:.1%} > {rule.max_error_rate:.0%}")
    due = max(record.scheduled, 1)
    if record.unsent_at_end > rule.max_error_rate * due:
        # A request that was due and never sent got no answer either: it counts like an error.
        held = False
        reasons.append(
            f"{record.unsent_at_end} requests due were never sent "
            f"({record.unsent_at_end / due:.1%} > {rule.max_error_rate:.0%})"
        )
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

    release_p99 = record.release_lag.percentile_ms(99)
    loop_p99 = record.loop_lag.percentile_ms(99)
    kept_up = release_p99 <= SENDER_LAG_MS and loop_p99 <= SENDER_LAG_MS
    notes = list(record.notes)
    busiest = max(record.sender_cpu, default=None)
    if busiest is not None and busiest > SENDER_BUSY_CORES:
        kept_up = False
        notes.append(f"a sender process used {busiest:.2f} cores: the sender is CPU-bound")
    if not kept_up:
        notes.append(
            f"the sender fell behind (release lag p99 {release_p99:.0f} ms, event-loop lag "
            f"p99 {loop_p99:.0f} ms): this rate measures the client as much as the server"
        )
    if saturated > 0.5 and not held:
        notes.append(
            f"all {record.concurrency} connections were busy in {saturated:.0%} of samples: if the "
            "server's CPU is not saturated, raise --concurrency"
        )
    if record.unsent_at_end:
        notes.append(f"{record.unsent_at_end} requests were due but never sent before the step ended")
    if record.still_in_flight:
        notes.append(f"{record.still_in_flight} requests were still in flight after the drain timeout")
    throughput = record.completed / window_s if window_s > 0 else 0.0
    return StepResult(
        index=index,
        rate=record.rate,
        window_s=round(window_s, 3),
        scheduled=record.scheduled,
        completed=record.completed,
        ok=record.ok,
        errors=n_err,
        error_rate=round(error_rate, 5),
        errors_by_kind=dict(record.errors),
        error_examples=dict(record.error_examples),
        throughput=round(throughput, 3),
        latency_ms=lat,
        service_latency_ms=record.service.summary_ms(),
        queue_max=max(queue, default=0),
        queue_mean=round(sum(queue) / len(queue), 3) if queue else 0.0,
        in_flight_max=max(in_flight, default=0),
        outstanding_slope=round(growth, 3),
        growth_limit=round(limit, 3),
        workers_saturated=round(saturated, 3),
        unsent_at_end=record.unsent_at_end,
        held=held,
        reasons=tuple(reasons),
        sender_kept_up=kept_up,
        release_lag_p99_ms=round(release_p99, 3),
        loop_lag_p99_ms=round(loop_p99, 3),
        client_cpu_cores=_round(busiest),
        server_cpu_cores=_round(server_cpu_cores),
        server_rss_mib=_round(server_rss_mib),
        notes=tuple(notes),
        senders=len(record.shards),
        sender_cpu_cores=tuple(round(c, 3) for c in record.sender_cpu),
        statuses=dict(sorted(record.statuses.items())),
        record=record.to_dict(),
    )


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, nd)


def timeline_rows(
    records: Sequence[StepRecord], server_cpu: Mapping[int, float] | None = None
) -> list[dict[str, Any]]:
    """Per-second rows over the whole run from the steps' (merged) records."""
    buckets: dict[int, Bucket] = {}
    target: dict[int, float] = {}
    queue_max: dict[int, int] = {}
    outstanding_max: dict[int, int] = {}
    for r in records:
        for k, b in r.timeline.items():
            buckets.setdefault(k, Bucket()).add(b)
            target[k] = r.rate
        for j, (q, f) in enumerate(zip(r.queue, r.in_flight, strict=False)):
            k = math.floor(r.offset_s + j * r.interval_s)
            queue_max[k] = max(queue_max.get(k, 0), q)
            outstanding_max[k] = max(outstanding_max.get(k, 0), q + f)
    rows = []
    for k in sorted(buckets):
        b = buckets[k]
        rows.append(
            {
                "t": float(k),
                "target_rate": target.get(k, 0.0),
                "offered": float(b.scheduled),
                "throughput": float(b.completed),
                "errors": b.errors,
                "p50_ms": round(b.latency.percentile_ms(50), 3),
                "p99_ms": round(b.latency.percentile_ms(99), 3),
                "max_ms": round(b.latency.max_us / 1000.0, 3),
                "queue_max": queue_max.get(k, 0),
                "outstanding_max": outstanding_max.get(k, 0),
                "server_cpu_cores": (server_cpu or {}).get(k),
                "latency_hist": b.latency.encode(),
            }
        )
    return rows
