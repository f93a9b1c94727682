"""Capacity search: which is the highest rate the server holds?

Three modes, all bounded by ``max_steps`` and ``max_time``:

* ``step`` - the classic way: start, start+step, start+2·step, ... until the first rate that is not
  held; the answer is the last held rate. Simple and easy to read, but the resolution is the step.
* ``bisect`` (default) - grow geometrically (``start``, ``start·growth``, ...) until a rate fails,
  then bisect between the highest held and the lowest failed rate until they are within
  ``resolution`` of each other.
* ``fixed`` - one step at ``start``: "does it hold 800/s?". A fixed rate sets its own bounds:
  ``max_qps`` and ``min_qps`` only bound the searches.
* ``list`` - the given ``rates`` in order, whatever each verdict: the ladder that shards of an
  Indexed Job run in step with each other (no shard can see the whole verdict, so none may decide
  the next rate).

Bisect uses one extra piece of evidence: while overloaded, an open-loop server still answers at its
capacity, so the throughput measured at a failed rate is an estimate of the knee. The next probe
goes just under that estimate, and, when that holds, one resolution above it rather than to the
midpoint of a wide bracket; this usually saves two or three steps.
The answer is never the estimate itself - only a rate that was actually run and held is reported.

:class:`Bisector` and :class:`Stepper` are pure (rate in, verdict in, next rate out), so the
search logic is tested against simulated servers without any network.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from loadtest.stats import StepResult

Mode = Literal["bisect", "step", "fixed", "list"]
HINT_MARGIN = 0.97  # probe this far under the overload throughput


@dataclass(frozen=True)
class SearchConfig:
    """Where to start, how to move, and the bounds; validated on construction."""

    mode: Mode = "bisect"
    start: float = 10.0
    growth: float = 2.0
    step: float = 10.0
    max_qps: float = 1_000_000.0
    min_qps: float = 0.5
    resolution: float = 0.1
    max_steps: int = 12
    max_time: float = 300.0
    rates: tuple[float, ...] = ()
    retry_doubtful: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("bisect", "step", "fixed", "list"):
            raise ValueError(f"search mode must be bisect, step, fixed or list, not {self.mode!r}")
        if self.mode == "list" and not self.rates:
            raise ValueError("search mode list needs rates")
        if any(not r > 0 for r in self.rates):
            raise ValueError(f"rates must be positive, got {list(self.rates)}")
        if self.mode in ("fixed", "list"):
            if not self.start > 0:
                raise ValueError(f"rate must be positive, got {self.start}")
        elif not 0 < self.min_qps <= self.start <= self.max_qps:
            raise ValueError(
                f"need 0 < min-qps ({self.min_qps}) <= start ({self.start}) <= max-qps ({self.max_qps})"
            )
        if self.growth <= 1.0:
            raise ValueError(f"growth must be above 1, got {self.growth}")
        if self.step <= 0:
            raise ValueError(f"step must be positive, got {self.step}")
        if not 0 < self.resolution < 1:
            raise ValueError(f"resolution must be between 0 and 1, got {self.resolution}")
        if not 1 <= self.max_steps <= 100:
            raise ValueError(f"max-steps must be between 1 and 100, got {self.max_steps}")
        if self.max_time <= 0:
            raise ValueError(f"max-time must be positive, got {self.max_time}")


class Strategy(Protocol):
    """Proposes rates and learns from verdicts; ``stopped`` says why it has no more."""

    stopped: str | None

    def propose(self) -> float | None: ...

    def observe(self, rate: float, held: bool, throughput: float) -> None: ...


@dataclass
class Bisector:
    """Geometric ramp, then bisection guided by the overload throughput (see module docstring)."""

    cfg: SearchConfig
    lo: float | None = None
    hi: float | None = None
    hint: float | None = None
    tried: list[float] = field(default_factory=list)
    near_tried: bool = False
    stopped: str | None = None

    def observe(self, rate: float, held: bool, throughput: float) -> None:
        self.tried.append(rate)
        if held:
            self.lo = rate if self.lo is None else max(self.lo, rate)
        else:
            self.hi = rate if self.hi is None else min(self.hi, rate)
            self.hint = throughput if throughput > 0 else None

    def _fresh(self, rate: float) -> bool:
        return all(abs(rate - t) > 0.25 * self.cfg.resolution * t for t in self.tried)

    def propose(self) -> float | None:
        cfg = self.cfg
        if not self.tried:
            return cfg.start
        if self.hi is None:  # everything held so far: keep climbing
            assert self.lo is not None
            if self.lo >= cfg.max_qps:
                self.stopped = "max_qps"
                return None
            return min(self.lo * cfg.growth, cfg.max_qps)
        if self.lo is None:  # nothing held yet: come down, guided by the hint
            down = self.hi / cfg.growth
            if self.hint is not None and self.hint * HINT_MARGIN < self.hi * (1 - cfg.resolution):
                down = self.hint * HINT_MARGIN
            if down < cfg.min_qps:
                self.stopped = "below_min_qps"
                return None
            return down
        if self.hi - self.lo <= cfg.resolution * self.hi:
            self.stopped = "converged"
            return None
        lo_edge = self.lo * (1 + cfg.resolution / 2)
        hi_edge = self.hi * (1 - cfg.resolution / 2)
        mid = (self.lo + self.hi) / 2
        if self.hint is not None:
            guess = self.hint * HINT_MARGIN
            if lo_edge <= guess <= hi_edge and self._fresh(guess):
                return guess
            # The estimate held (or the overload throughput is no higher than a rate that held):
            # the knee is likely just above the held rate. Probe one resolution higher, so that a
            # failure there ends the search instead of halving a wide bracket.
            near = self.lo / (1 - cfg.resolution) * 0.99
            just_held = self.tried[-1] == self.lo
            if near < hi_edge and (guess < lo_edge or (just_held and not self.near_tried)):
                self.near_tried = True
                return near
        return mid


@dataclass
class Stepper:
    """start, start+step, ... until the first failure or ``max_qps``."""

    cfg: SearchConfig
    lo: float | None = None
    hi: float | None = None
    last: float | None = None
    stopped: str | None = None

    def observe(self, rate: float, held: bool, throughput: float) -> None:
        self.last = rate
        if held:
            self.lo = rate
        else:
            self.hi = rate

    def propose(self) -> float | None:
        if self.last is None:
            return self.cfg.start
        if self.hi is not None:
            self.stopped = "knee_found"
            return None
        if self.last >= self.cfg.max_qps:
            self.stopped = "max_qps"
            return None
        return min(self.last + self.cfg.step, self.cfg.max_qps)


@dataclass
class Fixed:
    """One step at ``start``."""

    cfg: SearchConfig
    lo: float | None = None
    hi: float | None = None
    done: bool = False
    stopped: str | None = None

    def observe(self, rate: float, held: bool, throughput: float) -> None:
        self.done = True
        if held:
            self.lo = rate
        else:
            self.hi = rate

    def propose(self) -> float | None:
        if self.done:
            self.stopped = "done"
            return None
        return self.cfg.start


@dataclass
class Ladder:
    """The configured ``rates`` in order, whatever the verdicts."""

    cfg: SearchConfig
    i: int = 0
    stopped: str | None = None

    def observe(self, rate: float, held: bool, throughput: float) -> None:
        self.i += 1

    def propose(self) -> float | None:
        if self.i >= len(self.cfg.rates):
            self.stopped = "done"
            return None
        return self.cfg.rates[self.i]


def make_strategy(cfg: SearchConfig) -> Bisector | Stepper | Fixed | Ladder:
    if cfg.mode == "step":
        return Stepper(cfg)
    if cfg.mode == "fixed":
        return Fixed(cfg)
    if cfg.mode == "list":
        return Ladder(cfg)
    return Bisector(cfg)


def knee_owner(steps: list[StepResult], capacity: float | None) -> tuple[str | None, str]:
    """Whose limit the knee is - ``server``, ``sender`` or ``sender-connections`` - and why.

    The evidence is the lowest failed rate above the capacity:

    * the sender fell behind there (its release of due requests or its event loop lagged, or a
      sender process was CPU-bound): the knee may be the client's;
    * every connection was busy most of the time while the server answered about as fast as
      when lightly loaded (service p50 under twice the lowest p50 of a held step): the server
      was not slowed down, the sender simply had too few connections for that latency (Little's
      law: connections / latency < rate);
    * otherwise the sender kept up and the server did not: the knee is the server's.
    """
    failed = [s for s in steps if not s.held and (capacity is None or s.rate > capacity)]
    if not failed:
        return None, "no rate above the capacity failed"
    lowest = min(s.rate for s in failed)
    at = [s for s in failed if s.rate == lowest][-1]
    if not at.sender_kept_up:
        cpu = "/".join(f"{c:.2f}" for c in at.sender_cpu_cores) or "-"
        return "sender", (
            f"at {at.rate:g}/s the sender fell behind (release lag p99 {at.release_lag_p99_ms:.0f} ms, "
            f"loop lag p99 {at.loop_lag_p99_ms:.0f} ms, sender cpu {cpu}): the knee may be the client's"
        )
    held = [s.service_latency_ms["p50"] for s in steps if s.held]
    base = min(held) if held else None
    svc = at.service_latency_ms["p50"]
    if at.workers_saturated > 0.5 and base is not None and svc <= 2 * max(base, 0.05):
        return "sender-connections", (
            f"at {at.rate:g}/s all connections were busy while the server answered in "
            f"{svc:.1f} ms (p50; {base:.1f} ms at the lightest held rate): raise --concurrency"
        )
    return "server", (
        f"at {at.rate:g}/s the sender kept up (release lag p99 {at.release_lag_p99_ms:.0f} ms, "
        f"loop lag p99 {at.loop_lag_p99_ms:.0f} ms) and the server did not "
        f"({'; '.join(at.reasons)})"
    )


def _doubtful(step: StepResult) -> bool:
    """A failed step whose verdict could be noise: the sender fell behind, or the backlog grew by
    less than twice what is allowed (and errors stayed within the rule)."""
    if step.held:
        return False
    limit = step.growth_limit
    marginal = limit < step.outstanding_slope < 2 * limit and step.error_rate <= 0.01
    return marginal or not step.sender_kept_up


@dataclass
class SearchResult:
    """The steps run, the highest held rate, the lowest failed one, and why it stopped."""

    steps: list[StepResult] = field(default_factory=list)
    capacity_qps: float | None = None
    failed_qps: float | None = None
    stopped: str = "running"
    notes: list[str] = field(default_factory=list)
    limited_by: str | None = None
    limited_because: str = ""


async def search_capacity(
    run_step: Callable[[int, float], Awaitable[StepResult]],
    cfg: SearchConfig,
    *,
    step_seconds: float,
    aborted: Callable[[], str | None] = lambda: None,
    clock: Callable[[], float] = time.monotonic,
    result: SearchResult | None = None,
) -> SearchResult:
    """Run steps until the strategy stops or a bound is hit.

    ``result`` may be passed in so that a caller interrupted with Ctrl-C still has the steps that
    finished. ``step_seconds`` is the worst-case length of one step: a step that would not fit in
    what is left of ``max_time`` is not started.
    """
    out = result if result is not None else SearchResult()
    strategy = make_strategy(cfg)
    started = clock()
    while True:
        if len(out.steps) >= cfg.max_steps:
            out.stopped = "max_steps"
            break
        rate = strategy.propose()
        if rate is None:
            out.stopped = strategy.stopped or "done"
            break
        if clock() - started + step_seconds > cfg.max_time:
            out.stopped = "max_time"
            break
        step = await run_step(len(out.steps), round(rate, 3))
        out.steps.append(step)
        if (
            cfg.retry_doubtful
            and cfg.mode != "list"
            and _doubtful(step)
            and len(out.steps) < cfg.max_steps
            and (clock() - started + step_seconds <= cfg.max_time)
        ):
            # A failure the sender caused, or one by a hair, is measured once more before it
            # counts: on a busy machine one slow second must not move the knee.
            out.notes.append(f"step {step.index} at {step.rate}/s failed narrowly: measured again")
            step = await run_step(len(out.steps), step.rate)
            out.steps.append(step)
        held_tp = step.ok / step.window_s if step.window_s > 0 else step.throughput
        strategy.observe(step.rate, step.held, held_tp)
        if step.held and step.rate > (out.capacity_qps or 0.0):
            out.capacity_qps = step.rate
        if not step.held and (out.failed_qps is None or step.rate < out.failed_qps):
            out.failed_qps = step.rate
        if not step.sender_kept_up and not step.held:
            out.notes.append(
                f"step {step.index} at {step.rate}/s failed while the sender itself fell behind: "
                "the knee may be the client's, not the server's"
            )
        reason = aborted()
        if reason:
            out.stopped = "aborted"
            out.notes.append(reason)
            break
    if out.capacity_qps is None and out.steps:
        out.notes.append("no rate was held: lower --start (or --min-qps) to find the knee")
    if out.stopped == "max_qps" and out.capacity_qps is not None:
        out.notes.append(f"held the maximum rate {cfg.max_qps}/s: the knee is higher")
    out.limited_by, out.limited_because = knee_owner(out.steps, out.capacity_qps)
    return out
