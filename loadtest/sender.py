"""One sender: one event loop sending its shard of a step's schedule, open loop.

A sender runs in its own process (see :mod:`loadtest.senders`), or in the caller's loop for
``--processes 0``. Per step it runs

* a feeder that releases this shard's arrivals when they are due (:mod:`loadtest.arrivals`);
* ``concurrency`` worker coroutines, each holding at most one request in flight on its own
  keep-alive connection, taking due arrivals first come first served;
* a sampler that records the backlog (due but not sent, plus in flight) on the step's shared grid,
  a loop-lag probe, and a live snapshot for the progress line every quarter second.

The hot path only appends four numbers per request to arrays (due, sent, done, outcome); the
histograms, window counts and timeline are built from the arrays after the step, so the work of
measuring is not done while measuring. Latency is from the *due* time (what a user waiting since
then saw), service latency from the time the request was actually written.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtest.arrivals import Schedule, Shard
from loadtest.messages import Task
from loadtest.record import Bucket, StepRecord
from loadtest.stats import LatencyHistogram
from loadtest.transport import Transport, TransportError

# Outcome codes stored per request; index 0 is success.
KINDS = ("ok", "check", "connect", "timeout", "network", "task")
_CODE = {k: i for i, k in enumerate(KINDS)}
# After this many connection failures in a row with no answer in between, the target is gone.
DOWN_AFTER_CONNECT_ERRORS = 20
LIVE_INTERVAL = 0.25
# The feeder sleeps at least this long between releases. Event loops time in whole milliseconds
# (uvloop truncates a shorter sleep to zero and would spin the core away); an arrival released up
# to a tick late is still timed from its due time, and the lateness is recorded as release lag.
FEED_TICK = 0.001


@dataclass(frozen=True)
class StepPlan:
    """What a sender runs: its shard of ``rate`` from ``t0`` (the shared monotonic clock)."""

    rate: float
    t0: float
    warmup: float
    window: float
    shard: Shard = field(default_factory=Shard)
    first_index: int = 0
    offset_s: float = 0.0
    interval: float = 0.05
    drain: float = 5.5

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shard"] = [self.shard.offset, self.shard.stride]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepPlan:
        return cls(**{**d, "shard": Shard(*d["shard"])})


@dataclass
class Live:
    """A sender's running totals for the progress line, plus latencies since the last one."""

    sent: int = 0
    ok: int = 0
    err: int = 0
    queue: int = 0
    in_flight: int = 0
    recent: str = ""  # encoded 2-digit histogram of latencies answered since the last snapshot
    cpu: float = 0.0  # cores used since the last snapshot
    abort: str | None = None
    extra: dict[str, float] = field(default_factory=dict)


class Sender:
    """Sends one shard of each step through ``transport`` with ``task``; reusable across steps."""

    def __init__(
        self,
        transport: Transport,
        task: Task,
        *,
        concurrency: int,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.transport = transport
        self.task = task
        self.concurrency = concurrency
        self.timeout = timeout
        self.clock = clock
        self.task_errors: list[str] = []

    async def run_step(
        self,
        plan: StepPlan,
        *,
        on_live: Callable[[Live], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> StepRecord:
        """Run ``plan`` and return what this sender measured (see the module docstring)."""
        loop = asyncio.get_running_loop()
        clock = self.clock
        stop = stop or asyncio.Event()
        schedule = Schedule(plan.rate, plan.t0, plan.warmup + plan.window, plan.shard)
        window_start = plan.t0 + plan.warmup
        window_end = window_start + plan.window
        n_grid = max(1, math.ceil((plan.warmup + plan.window) / plan.interval - 1e-9))
        grid_queue = [0] * n_grid
        grid_flight = [0] * n_grid

        due_a = array("d")
        sent_a = array("d")
        done_a = array("d")
        code_a = array("b")
        status_a = array("i")
        release_lag = array("d")
        loop_lag = array("d")
        examples: dict[str, str] = {}
        pending: deque[tuple[int, float]] = deque()
        idle: list[asyncio.Future[tuple[int, float] | None]] = []
        state = {"in_flight": 0, "sent": 0, "ok": 0, "err": 0, "connect_run": 0}
        abort: list[str] = []
        build = self.task.build
        check = self.task.check
        send = self.transport.send
        timeout = self.timeout

        async def worker() -> None:
            while True:
                if pending:
                    item = pending.popleft()
                else:
                    fut: asyncio.Future[tuple[int, float] | None] = loop.create_future()
                    idle.append(fut)
                    got = await fut
                    if got is None:
                        return
                    item = got
                index, due = item
                state["in_flight"] += 1
                state["sent"] += 1
                sent = clock()
                code = 0
                status = -1
                message = ""
                try:
                    request = build(index)
                    async with asyncio.timeout(timeout):
                        response = await send(request)
                    status = response.status
                    if not check(response):
                        code = 1
                        message = f"status {response.status}: {response.body[:120]!r}"
                except TransportError as exc:
                    code, message = _CODE.get(exc.kind, 4), str(exc)
                except TimeoutError:
                    code, message = 3, f"no answer in {timeout:g}s"
                except Exception as exc:  # a task's own bug: count it, keep the first message
                    code, message = 5, f"{type(exc).__name__}: {exc}"
                    if len(self.task_errors) < 5:
                        self.task_errors.append(message)
                done = clock()
                state["in_flight"] -= 1
                due_a.append(due)
                sent_a.append(sent)
                done_a.append(done)
                code_a.append(code)
                status_a.append(status)
                if code:
                    state["err"] += 1
                    examples.setdefault(KINDS[code], message[:200])
                    if code == 2:
                        state["connect_run"] += 1
                        if state["connect_run"] >= DOWN_AFTER_CONNECT_ERRORS and not abort:
                            abort.append(f"target is down: {message}")
                            stop.set()
                    else:
                        state["connect_run"] = 0
                else:
                    state["ok"] += 1
                    state["connect_run"] = 0

        async def feeder() -> int:
            j = 0
            total = schedule.count
            base = plan.first_index
            while j < total and not stop.is_set():
                now = clock()
                due_n = schedule.due(now)
                while j < due_n:
                    due = schedule.time_of(j)
                    item = (base + schedule.global_index(j), due)
                    if window_start <= due < window_end:
                        release_lag.append(now - due if now > due else 0.0)
                    if idle:
                        idle.pop().set_result(item)
                    else:
                        pending.append(item)
                    j += 1
                if j >= total:
                    break
                await asyncio.sleep(max(FEED_TICK, schedule.time_of(j) - clock()))
            return j

        async def sampler() -> None:
            last = -1
            while True:
                now = clock()
                j = min(n_grid - 1, math.floor((now - plan.t0) / plan.interval))
                if j > last:
                    q, f = len(pending), state["in_flight"]
                    for k in range(max(0, last + 1), j + 1):
                        grid_queue[k] = q
                        grid_flight[k] = f
                    last = j
                if j >= n_grid - 1:
                    return
                await asyncio.sleep(max(0.0, plan.t0 + (j + 1) * plan.interval - clock()))

        async def lag_probe() -> None:
            tick = 0.02
            while True:
                before = clock()
                await asyncio.sleep(tick)
                after = clock()
                if window_start <= after < window_end:
                    loop_lag.append(max(0.0, after - before - tick))

        async def live() -> None:
            if on_live is None:
                return
            seen = 0
            cpu_prev, t_prev = time.process_time(), clock()
            while True:
                await asyncio.sleep(LIVE_INTERVAL)
                h = LatencyHistogram(2)
                n = len(done_a)
                for i in range(seen, n):
                    h.record(done_a[i] - due_a[i])
                seen = n
                cpu_now, t_now = time.process_time(), clock()
                cpu = (cpu_now - cpu_prev) / (t_now - t_prev) if t_now > t_prev else 0.0
                cpu_prev, t_prev = cpu_now, t_now
                on_live(
                    Live(
                        state["sent"],
                        state["ok"],
                        state["err"],
                        len(pending),
                        state["in_flight"],
                        h.encode(),
                        cpu,
                        abort[0] if abort else None,
                    )
                )

        workers = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
        helpers = [asyncio.create_task(c) for c in (sampler(), lag_probe(), live())]
        feed_task = asyncio.create_task(feeder())
        cpu_window: float | None = None
        still_in_flight = 0
        try:
            await _sleep_until(window_start, clock, stop)
            cpu0, t_cpu0 = time.process_time(), clock()
            await feed_task
            await _sleep_until(window_end, clock, stop)
            if clock() > t_cpu0:
                cpu_window = (time.process_time() - cpu0) / (clock() - t_cpu0)
            unsent = len(pending)
            pending.clear()
            for fut in idle:
                fut.set_result(None)
            idle.clear()
            # Busy workers may finish their request (it counts if answered in time); then they
            # find no work and wait, and are cancelled below.
            deadline = clock() + plan.drain
            while state["in_flight"] and clock() < deadline:
                await asyncio.sleep(0.01)
            still_in_flight = state["in_flight"]
        finally:
            for t in [feed_task, *workers, *helpers]:
                t.cancel()
            await asyncio.gather(feed_task, *workers, *helpers, return_exceptions=True)
        record = build_record(
            plan,
            self.concurrency,
            (due_a, sent_a, done_a, code_a, status_a),
            release_lag,
            loop_lag,
            grid_queue,
            grid_flight,
        )
        record.error_examples.update({k: v for k, v in examples.items() if k in record.errors})
        record.unsent_at_end = unsent
        record.still_in_flight = still_in_flight
        record.sender_cpu = [cpu_window] if cpu_window is not None else []
        record.abort = abort[0] if abort else None
        if self.task_errors:
            record.notes.append(f"the task raised: {self.task_errors[0]}")
        return record


def build_record(
    plan: StepPlan,
    concurrency: int,
    arrays: tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[int], Sequence[int]],
    release_lag: Sequence[float],
    loop_lag: Sequence[float],
    grid_queue: list[int],
    grid_flight: list[int],
) -> StepRecord:
    """The record of one step from per-request arrays (due, sent, done, outcome code, status).

    Outcomes count in the window by when they were answered; latency is from the due time.
    Public so that another sender's per-request log (vegeta's, in the benchmark) is judged by
    exactly the same code.
    """
    schedule = Schedule(plan.rate, plan.t0, plan.warmup + plan.window, plan.shard)
    due_a, sent_a, done_a, code_a, status_a = arrays
    ws = plan.t0 + plan.warmup
    we = ws + plan.window
    record = StepRecord(
        rate=plan.rate,
        warmup_s=plan.warmup,
        window_s=plan.window,
        interval_s=plan.interval,
        offset_s=plan.offset_s,
        shards=[(plan.shard.offset, plan.shard.stride)],
        concurrency=concurrency,
        scheduled=schedule.due(we - 1e-9) - schedule.due(ws - 1e-9),
        queue=grid_queue,
        in_flight=grid_flight,
    )
    lat: Counter[int] = Counter()
    svc: Counter[int] = Counter()
    per_second: dict[int, Counter[int]] = {}
    errors: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    t0, off = plan.t0, plan.offset_s
    for i in range(len(done_a)):
        done = done_a[i]
        code = code_a[i]
        k = math.floor(off + done - t0)
        bucket = record.timeline.get(k)
        if bucket is None:
            bucket = record.timeline[k] = Bucket()
            per_second[k] = Counter()
        bucket.completed += 1
        us = round((done - due_a[i]) * 1e6)
        per_second[k][us] += 1
        if code:
            bucket.errors += 1
        if not ws <= done < we:
            continue
        record.completed += 1
        lat[us] += 1
        svc[round((done - sent_a[i]) * 1e6)] += 1
        if code:
            errors[KINDS[code]] += 1
        else:
            record.ok += 1
        if status_a[i] >= 0:
            statuses[status_a[i]] += 1
    for us, n in lat.items():
        record.latency.record_us(us, n)
    for us, n in svc.items():
        record.service.record_us(us, n)
    for k, counts in per_second.items():
        for us, n in counts.items():
            record.timeline[k].latency.record_us(us, n)
    for x in release_lag:
        record.release_lag.record(x)
    for x in loop_lag:
        record.loop_lag.record(x)
    # Arrivals due per second of the run, from the schedule itself (sent or not).
    for k in range(math.floor(off), math.floor(off + plan.warmup + plan.window - 1e-9) + 1):
        a = max(plan.t0, plan.t0 + k - off)
        b = min(plan.t0 + plan.warmup + plan.window, plan.t0 + k + 1 - off)
        n = schedule.due(b - 1e-9) - schedule.due(a - 1e-9)
        if n:
            record.timeline.setdefault(k, Bucket()).scheduled += n
    record.errors = dict(errors)
    record.statuses = {str(s): n for s, n in sorted(statuses.items())}
    return record


async def _sleep_until(t: float, clock: Callable[[], float], stop: asyncio.Event) -> None:
    delay = t - clock()
    if delay > 0 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
