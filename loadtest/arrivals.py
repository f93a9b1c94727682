"""Constant-rate, open-loop arrivals: the seeds' "pressure controller".

The pressure controller puts one token per request into a queue at a fixed rate, whatever the
server does; workers take tokens and send. This is the *open loop* that makes a load test honest.
A closed loop (each worker sends its next request when the previous answer arrives) slows down
exactly when the server does, so an overloaded server is offered less load and its latency looks
fine - the "coordinated omission" that hides the knee. Here:

* arrival ``k`` of a step is due at ``start + k / rate``, computed from the step's start, not from
  the previous arrival, so sleeping late never accumulates drift (the seed's loop does the same
  with ``int((now - t0) * QPS - sent)``);
* when the feeder wakes late it releases every arrival that is due at once, each stamped with the
  time it *should* have been sent; the runner measures latency from that stamp, so time a request
  spent waiting for a free worker counts against the server, as it would for a real user;
* how late the feeder itself was (``now - scheduled`` at release) is recorded, so a run can say
  when the *sender* could not keep up instead of blaming the server.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Arrival:
    """One request to send: its run-wide index (for ``Task.build``) and when it was due."""

    index: int
    scheduled: float


@dataclass(frozen=True)
class Schedule:
    """Arrivals at a constant ``rate`` per second from ``start`` for ``duration`` seconds."""

    rate: float
    start: float
    duration: float

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number, got {self.rate}")
        if self.duration < 0:
            raise ValueError(f"duration must not be negative, got {self.duration}")

    @property
    def count(self) -> int:
        """How many arrivals fall in ``[start, start + duration)``."""
        return math.ceil(self.duration * self.rate - 1e-9)

    def time_of(self, k: int) -> float:
        """When arrival ``k`` is due."""
        return self.start + k / self.rate

    def due(self, now: float) -> int:
        """How many arrivals are due at ``now`` (those with ``time_of(k) <= now``), capped."""
        if now < self.start:
            return 0
        return min(self.count, math.floor((now - self.start) * self.rate + 1e-9) + 1)


async def feed(
    queue: asyncio.Queue[Arrival | None],
    schedule: Schedule,
    *,
    first_index: int,
    clock: Callable[[], float],
    on_release: Callable[[Arrival, float], None],
    stop: asyncio.Event | None = None,
) -> int:
    """Put the schedule's arrivals into ``queue`` on time; returns how many were put.

    ``on_release(arrival, lag_seconds)`` is called for each arrival with how late it was released;
    setting ``stop`` ends the feed early (the liveness check does, when the target is gone). The
    queue is unbounded on purpose: its depth *is* the measurement (work the server has not taken
    yet), and the schedule itself bounds it to ``schedule.count``.
    """
    k = 0
    total = schedule.count
    while k < total and not (stop is not None and stop.is_set()):
        now = clock()
        due = schedule.due(now)
        while k < due:
            arrival = Arrival(first_index + k, schedule.time_of(k))
            queue.put_nowait(arrival)
            on_release(arrival, max(0.0, now - arrival.scheduled))
            k += 1
        if k >= total:
            break
        await asyncio.sleep(max(0.0, schedule.time_of(k) - clock()))
    return k
