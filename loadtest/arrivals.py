"""Constant-rate, open-loop arrivals: the "pressure controller", split over senders.

The pressure controller puts one token per request into a queue at a fixed rate, whatever the
server does; workers take tokens and send. This is the *open loop* that makes a load test honest.
A closed loop (each worker sends its next request when the previous answer arrives) slows down
exactly when the server does, so an overloaded server is offered less load and its latency looks
fine - the "coordinated omission" that hides the knee. Here:

* arrival ``k`` of a step is due at ``start + k / rate``, computed from the step's start, not from
  the previous arrival, so sleeping late never accumulates drift (the original framework's loop does the same
  with ``int((now - t0) * QPS - sent)``);
* when the feeder wakes late it releases every arrival that is due at once, each stamped with the
  time it *should* have been sent; the sender measures latency from that stamp, so time a request
  spent waiting for a free worker counts against the server, as it would for a real user;
* how late the feeder itself was (``now - scheduled`` at release) is recorded, so a run can say
  when the *sender* could not keep up instead of blaming the server.

**One schedule, many senders.** A rate too high for one process is split by *shard*: sender
``offset`` of ``stride`` takes arrivals ``offset, offset + stride, offset + 2·stride, ...`` of the
one global schedule. The union over all offsets is exactly the global schedule - no rounding of
``rate / senders``, no two senders with the same phase - and each arrival keeps its global index
and due time. Shards nest: pod ``i`` of ``n`` (an Indexed Job) with ``p`` processes gives process
``j`` the offset ``i + n·j`` and the stride ``n·p``, whatever the other pods' process counts.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request to send: its run-wide index (for ``Task.build``) and when it was due."""

    index: int
    scheduled: float


@dataclass(frozen=True)
class Shard:
    """Which arrivals of the global schedule a sender takes: ``k ≡ offset (mod stride)``."""

    offset: int = 0
    stride: int = 1

    def __post_init__(self) -> None:
        if self.stride < 1 or not 0 <= self.offset < self.stride:
            raise ValueError(f"shard offset {self.offset} must be in [0, {self.stride})")

    def split(self, parts: int) -> list[Shard]:
        """This shard cut into ``parts`` sub-shards whose union is exactly this one."""
        return [Shard(self.offset + self.stride * j, self.stride * parts) for j in range(parts)]


WHOLE = Shard()  # every arrival: the default shard


@dataclass(frozen=True)
class Schedule:
    """Arrivals at a constant ``rate`` per second from ``start`` for ``duration`` seconds.

    ``shard`` restricts it to one sender's share; ``count``, ``time_of`` and ``due`` then count
    that sender's arrivals (local index ``j`` is global arrival ``offset + j·stride``).
    """

    rate: float
    start: float
    duration: float
    shard: Shard = WHOLE

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number, got {self.rate}")
        if self.duration < 0:
            raise ValueError(f"duration must not be negative, got {self.duration}")

    @property
    def total(self) -> int:
        """How many arrivals of the global schedule fall in ``[start, start + duration)``."""
        return math.ceil(self.duration * self.rate - 1e-9)

    @property
    def count(self) -> int:
        """How many of them are this shard's."""
        off, stride = self.shard.offset, self.shard.stride
        return max(0, -(-(self.total - off) // stride))

    def global_index(self, j: int) -> int:
        return self.shard.offset + j * self.shard.stride

    def time_of(self, j: int) -> float:
        """When this shard's arrival ``j`` is due."""
        return self.start + (self.shard.offset + j * self.shard.stride) / self.rate

    def due(self, now: float) -> int:
        """How many of this shard's arrivals are due at ``now`` (``time_of(j) <= now``), capped."""
        if now < self.start:
            return 0
        global_due = math.floor((now - self.start) * self.rate + 1e-9) + 1  # arrivals 0..due-1
        off, stride = self.shard.offset, self.shard.stride
        return min(self.count, max(0, -(-(global_due - off) // stride)))


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
    yet), and the schedule itself bounds it to ``schedule.count``. Arrival indexes are
    ``first_index`` plus the global index, so shards of one step never build the same request.
    """
    j = 0
    total = schedule.count
    while j < total and not (stop is not None and stop.is_set()):
        now = clock()
        due = schedule.due(now)
        while j < due:
            arrival = Arrival(first_index + schedule.global_index(j), schedule.time_of(j))
            queue.put_nowait(arrival)
            on_release(arrival, max(0.0, now - arrival.scheduled))
            j += 1
        if j >= total:
            break
        await asyncio.sleep(max(0.0, schedule.time_of(j) - clock()))
    return j
