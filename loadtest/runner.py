"""Runs one step across all senders: a constant rate for warm-up plus a measurement window.

The runner is the coordinator of :mod:`loadtest.senders`: it picks the step's start on the shared
clock, hands every sender its shard, and while they send it probes the server's CPU and memory,
checks the target's health and draws the live progress line from the senders' snapshots. When
the senders report, their records are merged exactly (:func:`loadtest.record.merge`) and judged
once, so a step's verdict is the verdict on the whole rate, never an average of verdicts.

Every step is bounded: the schedule has a fixed count, requests have a timeout, and the drain
waits at most ``drain_timeout`` before cancelling what is still in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadtest.arrivals import WHOLE, Schedule, Shard
from loadtest.messages import Request
from loadtest.probe import ServerProbe
from loadtest.progress import Progress
from loadtest.record import StepRecord, judge, merge
from loadtest.sender import StepPlan
from loadtest.senders import LocalSender, ProcessSenders
from loadtest.stats import HeldRule, LatencyHistogram, StepResult
from loadtest.transport import Transport, TransportError

# Time between choosing a step's start and the start itself, for the plan to reach every sender.
START_MARGIN = 0.25


@dataclass(frozen=True)
class RunConfig:
    """How each step runs; the defaults suit services answering in milliseconds to seconds.

    ``concurrency`` is the total of connections (and so of requests in flight) over all sender
    processes; ``processes`` 0 sends from the coordinator's own loop.
    """

    concurrency: int = 256
    processes: int = 1
    timeout: float = 5.0
    warmup: float = 1.0
    window: float = 4.0
    drain_timeout: float | None = None
    sample_interval: float = 0.05
    probe_interval: float = 0.5
    health_path: str | None = None
    rule: HeldRule = field(default_factory=HeldRule)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if self.processes < 0:
            raise ValueError("processes must not be negative")
        if self.timeout <= 0 or self.window <= 0 or self.warmup < 0:
            raise ValueError("timeout and window must be positive, warmup not negative")

    @property
    def step_seconds(self) -> float:
        """Upper bound of one step's wall time, drain and start included."""
        return START_MARGIN + self.warmup + self.window + self.drain_seconds + 0.5

    @property
    def drain_seconds(self) -> float:
        return self.drain_timeout if self.drain_timeout is not None else self.timeout + 0.5


Senders = ProcessSenders | LocalSender


class Runner:
    """Runs steps on ``senders``; keeps run-wide state (records, arrival index) between steps.

    ``shard`` is this run's share of every step (an Indexed Job pod's; the whole by default).
    ``start_at`` (on this process's monotonic clock) pins step ``k`` to ``start_at + k·period``
    so that separate pods run the same steps at the same time; without it each step starts as
    soon as the previous one is done.
    """

    def __init__(
        self,
        senders: Senders,
        config: RunConfig,
        *,
        url: str = "",
        health: Transport | None = None,
        probe: ServerProbe | None = None,
        progress: Progress | None = None,
        shard: Shard = WHOLE,
        start_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.senders = senders
        self.config = config
        self.url = url
        self.health_transport = health
        self.probe = probe
        self.progress = progress or Progress(enabled=False)
        self.shard = shard
        self.start_at = start_at
        self.clock = clock
        self.run_t0: float | None = None
        self.next_index = 0
        self.abort_reason: str | None = None
        self.records: list[StepRecord] = []
        self.server_cpu: dict[int, float] = {}
        self.late_starts = 0

    @property
    def period(self) -> float:
        """Seconds between step starts when they are pinned (``start_at``)."""
        return float(int(self.config.step_seconds) + 1)

    def _t0(self) -> float:
        if self.start_at is not None:
            t0 = self.start_at + len(self.records) * self.period
            if t0 < self.clock() + 0.05:
                self.late_starts += 1
                return self.clock() + START_MARGIN
            return t0
        return self.clock() + START_MARGIN

    async def run_step(self, index: int, rate: float, *, label: str = "") -> StepResult:
        """Offer ``rate`` requests/s (over all shards) for warm-up + window; judge the window."""
        cfg = self.config
        clock = self.clock
        t0 = self._t0()
        if self.run_t0 is None:
            self.run_t0 = t0 if self.start_at is None else self.start_at
        window_start = t0 + cfg.warmup
        window_end = window_start + cfg.window
        offset = t0 - self.run_t0
        plans = [
            StepPlan(
                rate=rate,
                t0=t0,
                warmup=cfg.warmup,
                window=cfg.window,
                shard=s,
                first_index=self.next_index,
                offset_s=round(offset, 6),
                interval=cfg.sample_interval,
                drain=cfg.drain_seconds,
            )
            for s in self.shard.split(self.senders.count)
        ]
        self.next_index += Schedule(rate, 0.0, cfg.warmup + cfg.window).total
        server: dict[str, float | None] = {"cpu": None, "rss": None, "live": None}
        done = asyncio.Event()

        async def probe_server() -> None:
            if self.probe is None:
                return
            await asyncio.sleep(max(0.0, window_start - clock()))
            first = await asyncio.to_thread(self.probe.read)
            t_first = clock()
            rss_max = first.rss_bytes
            prev, t_prev = first, t_first
            while clock() < window_end and not done.is_set():
                await asyncio.sleep(min(cfg.probe_interval, max(0.0, window_end - clock())))
                cur = await asyncio.to_thread(self.probe.read)
                t_cur = clock()
                rss_max = max(rss_max, cur.rss_bytes)
                if t_cur > t_prev:
                    cores = (cur.cpu_seconds - prev.cpu_seconds) / (t_cur - t_prev)
                    assert self.run_t0 is not None
                    self.server_cpu[int(t_cur - self.run_t0)] = round(cores, 3)
                    server["live"] = cores
                prev, t_prev = cur, t_cur
                if t_prev > t_first:
                    server["cpu"] = (prev.cpu_seconds - first.cpu_seconds) / (t_prev - t_first)
                server["rss"] = rss_max / 2**20

        async def health() -> None:
            if not cfg.health_path or self.health_transport is None:
                return
            failures = 0
            while True:
                try:
                    resp = await self.health_transport.send(Request("GET", cfg.health_path))
                    failures = 0 if 200 <= resp.status < 300 else failures + 1
                except TransportError:
                    failures += 1
                if failures >= 3:
                    self.abort_reason = f"health check {cfg.health_path} failed 3 times in a row"
                    self.senders.stop()
                    return
                await asyncio.sleep(1.0)

        async def show() -> None:
            total = cfg.warmup + cfg.window
            while True:
                await asyncio.sleep(0.1)
                lives = [x for x in self.senders.live if x is not None]
                if not lives:
                    continue
                now = clock()
                elapsed = min(total, max(0.0, now - t0))
                phase = "warm-up" if now < window_start else "measure" if now < window_end else "drain"
                recent = LatencyHistogram(2)
                for x in lives:
                    if x.recent:
                        recent.add(LatencyHistogram.decode(x.recent))
                cpu = server.get("live")
                cpu_s = f" | server cpu {cpu:.2f}" if cpu is not None else ""
                senders = "/".join(f"{x.cpu:.2f}" for x in lives)
                self.progress.update(
                    f"[step {index} {label}{rate:g}/s {phase} {elapsed:4.1f}/{total:.1f}s] "
                    f"sent {sum(x.sent for x in lives)} ok {sum(x.ok for x in lives)} "
                    f"err {sum(x.err for x in lives)} | queue {sum(x.queue for x in lives)} "
                    f"in-flight {sum(x.in_flight for x in lives)} | p50 {recent.percentile_ms(50):.1f}ms "
                    f"p99 {recent.percentile_ms(99):.1f}ms | sender cpu {senders}{cpu_s}"
                )

        helpers = [asyncio.create_task(c) for c in (probe_server(), health(), show())]
        try:
            records = await self.senders.run_step(plans)
            done.set()
            probe_task = helpers[0]
            if not probe_task.done():
                await asyncio.wait([probe_task], timeout=cfg.probe_interval * 2 + 1.0)
        finally:
            for t in helpers:
                t.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)

        merged = merge(records)
        if merged.abort and not self.abort_reason:
            self.abort_reason = merged.abort
        self.records.append(merged)
        extra = [self.abort_reason] if self.abort_reason and not merged.abort else []
        result = judge(
            merged,
            index=index,
            rule=cfg.rule,
            server_cpu_cores=server["cpu"],
            server_rss_mib=server["rss"],
            extra_reasons=extra,
        )
        verdict = "HELD" if result.held else "not held"
        cpu_note = (
            f", server cpu {result.server_cpu_cores:.2f} cores" if result.server_cpu_cores is not None else ""
        )
        lat = result.latency_ms
        self.progress.finish(
            f"[step {index} {label}{rate:g}/s] {verdict}: throughput {result.throughput:.1f}/s, "
            f"errors {result.error_rate:.1%}, p50 {lat['p50']:.1f}ms p99 {lat['p99']:.1f}ms "
            f"p99.9 {lat['p99.9']:.1f}ms max {lat['max']:.1f}ms, outstanding "
            f"{result.outstanding_slope:+.1f}/s, sender cpu "
            f"{'/'.join(f'{c:.2f}' for c in result.sender_cpu_cores) or '-'}{cpu_note}"
        )
        return result
