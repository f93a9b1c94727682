"""One sender against an in-memory server whose service time is set: open loop, counted exactly.

The transport here is the seam a real HTTP or gRPC transport plugs into; the server behind it
is a sleep of a known length with a known number of slots, so the numbers a step must produce
are known in advance: what was due, what was answered, from when latency counts.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from loadtest.arrivals import WHOLE, Shard
from loadtest.plugins import HttpGet, Request, Response, Task
from loadtest.record import StepRecord, judge, merge
from loadtest.search import knee_owner
from loadtest.sender import Sender, StepPlan
from loadtest.stats import HeldRule
from loadtest.transport import TransportError

pytestmark = pytest.mark.timeout(20)


class SlowServer:
    """Answers 200 after ``delay`` seconds; or fails every request with ``fail`` (a kind)."""

    target = "memory://"

    def __init__(self, delay: float, fail: str | None = None) -> None:
        self.delay = delay
        self.fail = fail
        self.paths: list[str] = []

    async def send(self, request: Request) -> Response:
        self.paths.append(request.path)
        await asyncio.sleep(self.delay)
        if self.fail:
            raise TransportError(self.fail, f"{self.fail} failure")
        return Response(200, b"ok")

    async def aclose(self) -> None:
        return None


class Boom:
    def build(self, i: int) -> Request:
        if i % 2:
            raise KeyError(i)
        return Request(path=f"/{i}")

    def check(self, response: Response) -> bool:
        return True


def run_step(
    server: SlowServer, *, rate: float, concurrency: int, task: Task | None = None, shard: Shard = WHOLE
) -> StepRecord:
    async def main() -> StepRecord:
        sender = Sender(server, task or HttpGet(), concurrency=concurrency, timeout=2.0)
        p = StepPlan(rate, time.monotonic() + 0.02, 0.2, 1.0, shard=shard, drain=0.5)
        return await sender.run_step(p)

    return asyncio.run(main())


def test_a_server_that_keeps_up_is_held_and_every_due_request_is_counted() -> None:
    rec = run_step(SlowServer(0.005), rate=200.0, concurrency=8)
    step = judge(rec, index=0, rule=HeldRule())
    assert rec.scheduled == 200  # 1 s window at 200/s
    assert 190 <= rec.completed <= 210 and rec.ok == rec.completed
    assert step.held, step.reasons
    assert 5.0 <= step.service_latency_ms["p50"] < 30.0
    assert rec.timeline and sum(b.scheduled for b in rec.timeline.values()) == 240  # warm-up too


def test_open_loop_a_slow_server_cannot_slow_the_sender_or_hide_its_latency() -> None:
    """2 slots of 50 ms serve 40/s; offered 200/s the backlog grows and latency counts from due."""
    rec = run_step(SlowServer(0.05), rate=200.0, concurrency=2)
    step = judge(rec, index=0, rule=HeldRule())
    assert not step.held and step.outstanding_slope > 100
    assert 30 <= step.throughput <= 45
    assert step.service_latency_ms["p50"] == pytest.approx(50, rel=0.3)
    assert step.latency_ms["p50"] > 200  # waiting for a free connection counts against the server
    assert step.unsent_at_end > 0  # the backlog was dropped, not sent late into the next step
    assert step.workers_saturated > 0.9
    held = judge(run_step(SlowServer(0.05), rate=20.0, concurrency=2), index=0, rule=HeldRule())
    owner, why = knee_owner([held, step], 20.0)
    assert owner == "sender-connections" and "raise --concurrency" in why


def test_shards_of_one_step_send_disjoint_requests_that_merge_to_the_whole() -> None:
    servers = [SlowServer(0.002), SlowServer(0.002)]
    recs = [
        run_step(srv, rate=100.0, concurrency=4, shard=shard)
        for srv, shard in zip(servers, Shard().split(2), strict=True)
    ]
    whole = merge(recs)
    assert whole.scheduled == 100 and recs[0].scheduled == recs[1].scheduled == 50
    assert judge(whole, index=0, rule=HeldRule()).held


def test_task_errors_are_counted_with_the_first_message() -> None:
    rec = run_step(SlowServer(0.001), rate=100.0, concurrency=4, task=Boom())
    assert rec.errors["task"] == pytest.approx(rec.completed / 2, abs=2)
    assert "KeyError" in rec.error_examples["task"]
    assert any("the task raised" in n for n in rec.notes)


def test_a_target_that_refuses_everything_stops_the_step() -> None:
    t0 = time.monotonic()
    rec = run_step(SlowServer(0.001, fail="connect"), rate=200.0, concurrency=4)
    assert rec.abort is not None and "target is down" in rec.abort
    assert time.monotonic() - t0 < 1.0  # it did not wait out the window
    assert not judge(rec, index=0, rule=HeldRule()).held
