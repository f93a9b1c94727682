"""vegeta as a step of the capacity search, judged by the load tester's own code.

:func:`vegeta_step` is a ``run_step`` for :func:`loadtest.search.search_capacity`: it attacks at
the step's rate for warm-up + window, reads vegeta's per-request log (``vegeta encode --to csv``:
send time, latency, status, error, sequence number) and turns it into the same
:class:`~loadtest.record.StepRecord` our senders produce, with the due time of hit ``seq`` at
``t0 + seq / rate`` and the backlog (due minus sent, sent minus answered) on the same 50 ms grid.
:func:`loadtest.record.judge` then applies the same held rule to both tools.
"""

from __future__ import annotations

import asyncio
import bisect
import csv
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest_env import timed

from loadtest.arrivals import Schedule
from loadtest.record import judge
from loadtest.sender import StepPlan, build_record
from loadtest.stats import HeldRule, StepResult


def vegeta_step(
    vegeta: str, url: str, warmup: float, window: float, work: Path, connections: int
) -> Callable[..., Any]:
    """A ``run_step`` for :func:`search_capacity` that attacks with vegeta and judges its log."""
    usage: list[dict[str, float]] = []

    async def run(index: int, rate: float) -> StepResult:
        targets = work / "vegeta-targets.txt"
        targets.write_text(f"GET {url}\n")
        raw = work / f"vegeta-{index}.bin"
        attack = [
            vegeta,
            "attack",
            f"-rate={round(rate * 1000)}/1000s",  # vegeta takes whole requests per period
            f"-duration={warmup + window:g}s",
            f"-max-workers={connections}",
            "-timeout=5s",
            "-http2=false",
            f"-targets={targets}",
            f"-output={raw}",
        ]
        t = await asyncio.to_thread(timed, attack)
        if t.returncode != 0:
            raise SystemExit(f"vegeta attack failed: {t.stderr[-1000:]}")
        enc = await asyncio.to_thread(
            subprocess.run, [vegeta, "encode", "--to", "csv", str(raw)], capture_output=True, check=True
        )
        raw.unlink()
        usage.append({"rate": rate, "wall_s": t.wall_s, "cpu_s": t.cpu_s, "peak_rss_mb": t.peak_rss_mb})
        cores = t.cpu_s / max(t.wall_s, 1e-9)
        return judge_vegeta(enc.stdout.decode(), rate, warmup, window, index, cores, connections)

    run.usage = usage  # type: ignore[attr-defined]
    return run


def judge_vegeta(
    text: str, rate: float, warmup: float, window: float, index: int, cores: float, connections: int
) -> StepResult:
    """vegeta's per-request CSV -> the same record and verdict as one of our steps."""
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise SystemExit("vegeta wrote no results")
    hits = sorted((int(r[8]), int(r[0]) / 1e9, int(r[2]) / 1e9, int(r[1]), r[5]) for r in rows)
    t0 = hits[0][1] - hits[0][0] / rate  # hit `seq` was due at t0 + seq/rate
    plan = StepPlan(rate, t0, warmup, window, interval=0.05)
    due, sent, done, code, status = [], [], [], [], []
    for seq, ts, latency, st, err in hits:
        due.append(t0 + seq / rate)
        sent.append(ts)
        done.append(ts + latency)
        status.append(st)
        if not err and 200 <= st < 300:
            code.append(0)
        elif "timeout" in err.lower() or "deadline" in err.lower():
            code.append(3)
        elif "refused" in err.lower():
            code.append(2)
        else:
            code.append(1 if not err else 4)
    # The backlog on the same grid as our senders: due (from the schedule) minus sent, and sent
    # minus done, at each grid point; a hit never sent stays due and never done.
    schedule = Schedule(rate, t0, warmup + window)
    n_grid = round((warmup + window) / plan.interval)
    sent_sorted, done_sorted = sorted(sent), sorted(done)
    queue, flight = [], []
    for j in range(n_grid):
        t = t0 + j * plan.interval
        n_due = schedule.due(t)
        n_sent = bisect.bisect_right(sent_sorted, t)
        n_done = bisect.bisect_right(done_sorted, t)
        queue.append(max(0, n_due - n_sent))
        flight.append(max(0, n_sent - n_done))
    ws, we = t0 + warmup, t0 + warmup + window
    lag = [s - d for s, d in zip(sent, due, strict=True) if ws <= d < we]
    record = build_record(plan, connections, (due, sent, done, code, status), lag, [], queue, flight)
    record.unsent_at_end = max(0, schedule.count - len(hits))
    step = judge(record, index=index, rule=HeldRule())
    print(
        f"  vegeta step {index} {rate:g}/s: {'HELD' if step.held else 'not held'}: throughput "
        f"{step.throughput:.0f}/s, errors {step.error_rate:.2%}, p99 {step.latency_ms['p99']:.1f} ms, "
        f"send lag p99 {step.release_lag_p99_ms:.1f} ms, vegeta cpu {cores:.2f} cores",
        flush=True,
    )
    return step
