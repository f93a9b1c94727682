"""Files for other tools: a CSV of the steps and an HdrHistogram interval log of the run.

* ``--csv FILE``: one row per step (rate, throughput, errors, latency percentiles up to p99.9 and
  max, backlog growth, CPU, verdict) - what a spreadsheet or a plotting script wants.
* ``--hlog FILE``: the HdrHistogram log format (``HistogramLogWriter``'s: a header, then one line
  per second ``start,length,max,compressed-histogram``), latencies in microseconds from the due
  time, max in milliseconds. HdrHistogram's own tools (``HistogramLogProcessor``, HdrHistogram
  Plotter, ``hdr-plot``) read it, and unlike a column of percentiles its intervals can be added
  up again exactly.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CSV_COLUMNS = (
    "step",
    "rate",
    "throughput",
    "scheduled",
    "completed",
    "errors",
    "error_rate",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "p99.9_ms",
    "max_ms",
    "mean_ms",
    "outstanding_slope",
    "growth_limit",
    "sender_kept_up",
    "sender_cpu_cores",
    "server_cpu_cores",
    "held",
    "reasons",
)


def render_csv(result: Mapping[str, Any]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for s in result.get("steps", []):
        lat = s["latency_ms"]
        w.writerow(
            [
                s["index"],
                s["rate"],
                s["throughput"],
                s["scheduled"],
                s["completed"],
                s["errors"],
                s["error_rate"],
                lat["p50"],
                lat["p90"],
                lat["p99"],
                lat.get("p99.9", ""),
                lat["max"],
                lat["mean"],
                s["outstanding_slope"],
                s["growth_limit"],
                s["sender_kept_up"],
                " ".join(f"{c:g}" for c in s.get("sender_cpu_cores", [])),
                "" if s.get("server_cpu_cores") is None else s["server_cpu_cores"],
                s["held"],
                "; ".join(s["reasons"]),
            ]
        )
    return out.getvalue()


def render_hlog(result: Mapping[str, Any]) -> str:
    """The run's per-second latency histograms as an HdrHistogram log (format 1.2)."""
    lines = [
        "#[Histogram log format version 1.2]",
        f"#[gpuplan loadtest {result.get('target', '')}: latency from due time in microseconds]",
        f"#[StartTime: 0.000 (seconds since the first step), {result.get('started', '')}]",
    ]
    for step in result.get("steps", []):
        rec = step.get("record") or {}
        if "offset_s" in rec:
            start = rec["offset_s"] + rec["warmup_s"]
            lines.append(
                f"#[step {step['index']} at {step['rate']:g}/s: warm-up from {rec['offset_s']:.3f}, "
                f"measured {start:.3f}-{start + rec['window_s']:.3f}]"
            )
    lines.append('"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"')
    for row in result.get("timeline", []):
        payload = row.get("latency_hist")
        if not payload or not row.get("throughput"):
            continue
        lines.append(f"{row['t']:.3f},1.000,{row['max_ms']:.3f},{payload}")
    return "\n".join(lines) + "\n"


def write_outputs(result: Mapping[str, Any], *, csv_path: str | None, hlog_path: str | None) -> None:
    if csv_path:
        Path(csv_path).write_text(render_csv(result))
    if hlog_path:
        Path(hlog_path).write_text(render_hlog(result))
