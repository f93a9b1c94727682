"""The result of a run: one JSON document, and a short text rendering of it.

The JSON is the interface between commands: ``classify`` reads ``instances``, ``capacity_qps``
and ``knee.server_cpu_cores`` from it, and the capacities file for ``compare`` is meant to be
filled from it. It is therefore versioned (``kind``) and self-describing: it carries the search
and held-rule settings, so a number can be judged later without the command line that made it.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from loadtest.arrivals import WHOLE, Shard
from loadtest.runner import RunConfig
from loadtest.search import SearchConfig, SearchResult

RESULT_KIND = "gpuplan.loadtest/v1"


def build_result(
    *,
    target: str,
    task: str,
    search_config: SearchConfig,
    run_config: RunConfig,
    search: SearchResult,
    timeline: Sequence[Mapping[str, Any]],
    started: dt.datetime,
    duration_s: float,
    instances: int | None = None,
    server_pids: Sequence[int] = (),
    server_stats: Sequence[str] = (),
    extra_notes: Sequence[str] = (),
    shard: Shard = WHOLE,
    start_at: float | None = None,
    headers: Mapping[str, str] | None = None,
    merged_from: Sequence[str] = (),
    senders: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble the JSON document of one run."""
    knee_step = None
    if search.capacity_qps is not None:
        knee_step = next(s for s in reversed(search.steps) if s.held and s.rate == search.capacity_qps)
    knee = None
    if knee_step is not None:
        knee = {
            "rate": knee_step.rate,
            "throughput": knee_step.throughput,
            "error_rate": knee_step.error_rate,
            "latency_ms": dict(knee_step.latency_ms),
            "server_cpu_cores": knee_step.server_cpu_cores,
            "server_rss_mib": knee_step.server_rss_mib,
            "sender_cpu_cores": list(knee_step.sender_cpu_cores),
        }
    return {
        "kind": RESULT_KIND,
        "target": target,
        "task": task,
        "instances": instances,
        "started": started.astimezone(dt.UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 3),
        "capacity_qps": search.capacity_qps,
        "failed_qps": search.failed_qps,
        "stopped": search.stopped,
        "sender_kept_up": all(s.sender_kept_up for s in search.steps),
        "limited_by": search.limited_by,
        "limited_because": search.limited_because,
        "knee": knee,
        # the CPUs this process may run on: what a local server and the senders shared
        "host": {
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        },
        "shard": {"index": shard.offset, "count": shard.stride, "start_at": start_at},
        "merged_from": list(merged_from),
        "headers": dict(headers or {}),
        "notes": [*search.notes, *extra_notes],
        "search": {**asdict(search_config), "rates": list(search_config.rates)},
        "run": asdict(run_config),
        "server": {
            "pids": list(server_pids),
            "stats_urls": list(server_stats),
            "probed": bool(server_pids or server_stats),
        },
        "senders": dict(senders or {}),
        "steps": [s.to_dict() for s in search.steps],
        "timeline": list(timeline),
    }


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render_text(result: Mapping[str, Any]) -> str:
    """A few lines for a person: the answer first, then one row per step."""
    lines = [f"target {result['target']}  task {result['task']}"]
    if result.get("instances") is not None:
        lines[0] += f"  instances {result['instances']}"
    shard = result.get("shard") or {}
    if shard.get("count", 1) > 1:
        lines[0] += f"  shard {shard['index']}/{shard['count']} (merge the shards' JSON for the whole rate)"
    if result.get("merged_from"):
        lines[0] += f"  merged from {len(result['merged_from'])} shards"
    cap = result.get("capacity_qps")
    failed = result.get("failed_qps")
    n = len(result.get("steps", []))
    how = f"stopped: {result['stopped']} after {n} steps in {result['duration_s']:.1f}s"
    if cap is None:
        lines.append(f"capacity: no rate held ({how})")
    else:
        tail = f"; lowest failed {failed:g}/s" if failed is not None else ""
        lines.append(f"capacity {cap:g} req/s (highest held rate{tail}; {how})")
    knee = result.get("knee")
    if knee:
        lat = knee["latency_ms"]
        lines.append(
            f"at {knee['rate']:g}/s: p50 {lat['p50']:.2f} ms, p90 {lat['p90']:.2f} ms, "
            f"p99 {lat['p99']:.2f} ms, p99.9 {lat.get('p99.9', 0.0):.2f} ms, max {lat['max']:.2f} ms, "
            f"errors {knee['error_rate']:.2%}, server cpu "
            f"{_num(knee['server_cpu_cores'], '.2f')} cores, rss "
            f"{_num(knee['server_rss_mib'], '.0f')} MiB"
        )
    owner = result.get("limited_by")
    if owner:
        who = {"server": "the server's", "sender": "the sender's", "sender-connections": "the sender's"}
        lines.append(f"knee: {who.get(owner, owner)} ({result.get('limited_because', '')})")
    lines.append(
        f"{'step':>4} {'rate/s':>8} {'done/s':>8} {'err%':>6} {'p50ms':>7} {'p99ms':>7} "
        f"{'p99.9ms':>8} {'maxms':>7} {'queue':>6} {'out/s':>7} {'cpu':>5} {'senders':>9}  verdict"
    )
    for s in result.get("steps", []):
        lat = s["latency_ms"]
        senders = "/".join(f"{c:.2f}" for c in s.get("sender_cpu_cores", [])) or "-"
        lines.append(
            f"{s['index']:>4} {s['rate']:>8g} {s['throughput']:>8.1f} "
            f"{s['error_rate'] * 100:>6.2f} "
            f"{lat['p50']:>7.2f} {lat['p99']:>7.2f} {lat.get('p99.9', 0.0):>8.2f} {lat['max']:>7.1f} "
            f"{s['queue_max']:>6} {s['outstanding_slope']:>+7.1f} "
            f"{_num(s['server_cpu_cores'], '>5.2f')} {senders:>9}  "
            f"{'held' if s['held'] else 'NOT held: ' + '; '.join(s['reasons'])}"
        )
    for note in result.get("notes", []):
        lines.append(f"note: {note}")
    if not result.get("sender_kept_up", True):
        lines.append("note: the sender fell behind in some steps (see steps[].notes)")
    return "\n".join(lines)


def _usable_cpus() -> int | None:
    """The CPUs this process may run on (its affinity, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()
