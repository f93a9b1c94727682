"""Runs one step: a constant rate for warm-up plus a measurement window, then drains.

One process, one asyncio loop: a feeder (the pressure controller) fills a queue on schedule, a
fixed pool of worker coroutines takes from it and sends, and a few small loops sample the queue,
the event loop's own lag, the server's CPU and the target's liveness. The seeds spread the workers
over processes as well; that only pays when one process cannot send fast enough, so instead each
step *measures* whether the sender kept up (feeder lateness, event-loop lag, the sender's own CPU)
and says so in the result. One httpx process keeps up with a few hundred requests per second on
one core; beyond that, run several senders and add their results.

Every step is bounded: the schedule has a fixed count, requests have a timeout, and the drain
waits at most ``drain_timeout`` before cancelling what is still in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadtest.arrivals import Arrival, Schedule, feed
from loadtest.plugins import Request, Task
from loadtest.probe import ProcessProbe, self_cpu_seconds
from loadtest.progress import Progress
from loadtest.stats import HeldRule, LatencyHistogram, Outcome, StepResult, StepStats, Timeline
from loadtest.transport import Transport, TransportError

# After this many connection failures in a row with no answer in between, the target is gone.
DOWN_AFTER_CONNECT_ERRORS = 20


@dataclass(frozen=True)
class RunConfig:
    """How each step runs; the defaults suit services answering in tens of milliseconds."""

    concurrency: int = 64
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
        if self.timeout <= 0 or self.window <= 0 or self.warmup < 0:
            raise ValueError("timeout and window must be positive, warmup not negative")

    @property
    def step_seconds(self) -> float:
        """Upper bound of one step's wall time, drain included."""
        return self.warmup + self.window + self.drain_seconds

    @property
    def drain_seconds(self) -> float:
        return self.drain_timeout if self.drain_timeout is not None else self.timeout + 0.5


class Runner:
    """Sends load through one transport with one task; keeps run-wide state between steps."""

    def __init__(
        self,
        transport: Transport,
        task: Task,
        config: RunConfig,
        *,
        probe: ProcessProbe | None = None,
        progress: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.task = task
        self.config = config
        self.probe = probe
        self.progress = progress or Progress(enabled=False)
        self.clock = clock
        self.run_start = clock()
        self.timeline = Timeline(self.run_start)
        self.next_index = 0
        self.abort_reason: str | None = None
        self.task_errors: list[str] = []
        self._in_flight = 0
        self._connect_errors = 0

    async def run_step(self, index: int, rate: float, *, label: str = "") -> StepResult:
        """Offer ``rate`` requests/s for warm-up + window and return what the window showed."""
        cfg = self.config
        clock = self.clock
        t0 = clock() + 0.01
        window_start = t0 + cfg.warmup
        window_end = window_start + cfg.window
        schedule = Schedule(rate, t0, cfg.warmup + cfg.window)
        stats = StepStats(rate, window_start, window_end)
        live = LatencyHistogram(2)
        queue: asyncio.Queue[Arrival | None] = asyncio.Queue()
        stop = asyncio.Event()
        counts = {"sent": 0, "ok": 0, "err": 0}
        server: dict[str, float | None] = {"cpu": None, "rss": None}

        def on_release(arrival: Arrival, lag: float) -> None:
            stats.note_scheduled(arrival.scheduled)
            self.timeline.scheduled(arrival.scheduled, rate)
            if stats.in_window(arrival.scheduled):
                stats.release_lag.record(lag)

        async def worker() -> None:
            while True:
                arrival = await queue.get()
                if arrival is None:
                    return
                await self._send_one(arrival, stats, live, counts, stop)

        async def sampler() -> None:
            while True:
                now = clock()
                stats.sample(now, queue.qsize(), self._in_flight)
                self.timeline.sample(now, queue.qsize(), self._in_flight)
                await asyncio.sleep(cfg.sample_interval)

        async def loop_lag() -> None:
            tick = 0.02
            while True:
                before = clock()
                await asyncio.sleep(tick)
                after = clock()
                if stats.in_window(after):
                    stats.loop_lag.record(max(0.0, after - before - tick))

        async def probe_server() -> None:
            if self.probe is None:
                return
            await asyncio.sleep(max(0.0, window_start - clock()))
            first = await asyncio.to_thread(self.probe.read)
            t_first = clock()
            rss_max = first.rss_bytes
            prev, t_prev = first, t_first
            while clock() < window_end:
                await asyncio.sleep(min(cfg.probe_interval, max(0.0, window_end - clock())))
                cur = await asyncio.to_thread(self.probe.read)
                t_cur = clock()
                rss_max = max(rss_max, cur.rss_bytes)
                if t_cur > t_prev:
                    cores = (cur.cpu_seconds - prev.cpu_seconds) / (t_cur - t_prev)
                    self.timeline.server_cpu(t_cur, cores)
                    server["live"] = cores
                prev, t_prev = cur, t_cur
                if t_prev > t_first:
                    server["cpu"] = (prev.cpu_seconds - first.cpu_seconds) / (t_prev - t_first)
                server["rss"] = rss_max / 2**20

        async def health() -> None:
            if not cfg.health_path:
                return
            failures = 0
            while True:
                try:
                    resp = await self.transport.send(Request("GET", cfg.health_path))
                    failures = 0 if 200 <= resp.status < 300 else failures + 1
                except TransportError:
                    failures += 1
                if failures >= 3:
                    self.abort_reason = f"health check {cfg.health_path} failed 3 times in a row"
                    stop.set()
                    return
                await asyncio.sleep(1.0)

        async def show() -> None:
            total = cfg.warmup + cfg.window
            while True:
                elapsed = min(total, max(0.0, clock() - t0))
                phase = "warm-up" if clock() < window_start else "measure"
                cpu = server.get("live")
                cpu_s = f" | server cpu {cpu:.2f}" if cpu is not None else ""
                self.progress.update(
                    f"[step {index} {label}{rate:.1f}/s {phase} {elapsed:4.1f}/{total:.1f}s] "
                    f"sent {counts['sent']} ok {counts['ok']} err {counts['err']} | "
                    f"queue {queue.qsize()} in-flight {self._in_flight} | "
                    f"p50 {live.percentile_ms(50):.0f}ms p99 {live.percentile_ms(99):.0f}ms{cpu_s}"
                )
                await asyncio.sleep(0.1)

        workers = [asyncio.create_task(worker()) for _ in range(cfg.concurrency)]
        helpers = [
            asyncio.create_task(coro) for coro in (sampler(), loop_lag(), probe_server(), health(), show())
        ]
        cpu_client: float | None = None
        pending: set[asyncio.Task[None]] = set()
        feeder = asyncio.create_task(
            feed(
                queue,
                schedule,
                first_index=self.next_index,
                clock=clock,
                on_release=on_release,
                stop=stop,
            )
        )
        try:
            await asyncio.sleep(max(0.0, window_start - clock()))
            cpu_client_start, t_client_start = self_cpu_seconds(), clock()
            put = await feeder
            self.next_index += put
            if not stop.is_set():
                await asyncio.sleep(max(0.0, window_end - clock()))
            if clock() > t_client_start:
                cpu_client = (self_cpu_seconds() - cpu_client_start) / (clock() - t_client_start)
            # Drain: what was never sent is dropped (counted), what is in flight may finish.
            while not queue.empty():
                if queue.get_nowait() is not None:
                    stats.unsent_at_end += 1
            for _ in workers:
                queue.put_nowait(None)
            _, pending = await asyncio.wait(workers, timeout=cfg.drain_seconds)
            probe_task = helpers[2]
            if not probe_task.done():
                await asyncio.wait([probe_task], timeout=cfg.probe_interval * 2 + 1.0)
        finally:
            for t in [feeder, *workers, *helpers]:
                t.cancel()
            await asyncio.gather(feeder, *workers, *helpers, return_exceptions=True)

        failures = [self.abort_reason] if self.abort_reason else []
        notes = []
        if pending:
            notes.append(f"{len(pending)} requests were still in flight after the drain timeout")
        result = stats.result(
            index=index,
            rule=cfg.rule,
            concurrency=cfg.concurrency,
            client_cpu_cores=cpu_client,
            server_cpu_cores=server["cpu"],
            server_rss_mib=server["rss"],
            extra_reasons=failures,
            notes=notes,
        )
        verdict = "HELD" if result.held else "not held"
        cpu_note = (
            f", server cpu {result.server_cpu_cores:.2f} cores" if result.server_cpu_cores is not None else ""
        )
        self.progress.finish(
            f"[step {index} {label}{rate:.1f}/s] {verdict}: throughput {result.throughput:.1f}/s, "
            f"errors {result.error_rate:.1%}, p50 {result.latency_ms['p50']:.0f}ms "
            f"p99 {result.latency_ms['p99']:.0f}ms, outstanding {result.outstanding_slope:+.1f}/s"
            f"{cpu_note}"
        )
        return result

    async def _send_one(
        self,
        arrival: Arrival,
        stats: StepStats,
        live: LatencyHistogram,
        counts: dict[str, int],
        stop: asyncio.Event,
    ) -> None:
        clock = self.clock
        self._in_flight += 1
        counts["sent"] += 1
        sent = clock()
        error: str | None = None
        message = ""
        try:
            request = self.task.build(arrival.index)
            async with asyncio.timeout(self.config.timeout + 0.5):
                response = await self.transport.send(request)
            if not self.task.check(response):
                error = "check"
                message = f"status {response.status}: {response.body[:120]!r}"
        except TransportError as exc:
            error, message = exc.kind, str(exc)
        except TimeoutError:
            error, message = "timeout", f"no answer in {self.config.timeout + 0.5:.1f}s"
        except Exception as exc:  # a task's own bug: count it, keep the first message, go on
            error, message = "task", f"{type(exc).__name__}: {exc}"
            if len(self.task_errors) < 5:
                self.task_errors.append(message)
        finally:
            self._in_flight -= 1
        done = clock()
        if error == "connect":
            self._connect_errors += 1
            if self._connect_errors >= DOWN_AFTER_CONNECT_ERRORS and not stop.is_set():
                self.abort_reason = f"target is down: {message}"
                stop.set()
        else:
            self._connect_errors = 0
        outcome = Outcome(arrival.scheduled, sent, done, error, message)
        stats.record(outcome)
        self.timeline.outcome(outcome)
        live.record(done - arrival.scheduled)
        counts["ok" if error is None else "err"] += 1
