"""An optional PNG of a run: offered vs answered rate, latency, errors and backlog over time.

The figure is drawn on matplotlib's Agg canvas directly (no pyplot), so it works without a display
and leaves no global figure state behind in a long-lived process or a test run. matplotlib is
imported only here, and only when ``--plot`` is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def write_plot(result: Mapping[str, Any], path: str | Path) -> None:
    """Write the timeline of ``result`` (as built by :func:`loadtest.report.build_result`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = list(result.get("timeline", []))
    t = [r["t"] for r in rows]
    fig = Figure(figsize=(10, 9), layout="constrained")
    FigureCanvasAgg(fig)
    ax_rate, ax_lat, ax_err, ax_q = fig.subplots(4, 1, sharex=True)

    ax_rate.plot(t, [r["target_rate"] for r in rows], label="target rate", drawstyle="steps-post")
    ax_rate.plot(t, [r["offered"] for r in rows], label="offered", alpha=0.7)
    ax_rate.plot(t, [r["throughput"] for r in rows], label="answered")
    cap = result.get("capacity_qps")
    if cap is not None:
        ax_rate.axhline(cap, color="grey", linestyle="--", label=f"capacity {cap:g}/s")
    ax_rate.set_ylabel("requests/s")
    ax_rate.legend(loc="upper left", fontsize="small")
    cpu = [(r["t"], r["server_cpu_cores"]) for r in rows if r.get("server_cpu_cores") is not None]
    if cpu:
        ax_cpu = ax_rate.twinx()
        ax_cpu.plot([c[0] for c in cpu], [c[1] for c in cpu], color="tab:red", alpha=0.5, linestyle=":")
        ax_cpu.set_ylabel("server cpu (cores, dotted)", color="tab:red")
        ax_cpu.set_ylim(bottom=0)

    ax_lat.plot(t, [r["p50_ms"] for r in rows], label="p50")
    ax_lat.plot(t, [r["p99_ms"] for r in rows], label="p99")
    ax_lat.set_ylabel("latency from due time (ms)")
    ax_lat.set_ylim(bottom=0)
    ax_lat.legend(loc="upper left", fontsize="small")

    errors = [r["errors"] for r in rows]
    ax_err.bar(t, errors, width=0.8, color="tab:red")
    ax_err.set_ylim(0, max([1, *errors]) * 1.1)
    ax_err.set_ylabel("errors / interval")

    ax_q.plot(t, [r["queue_max"] for r in rows], label="queue (max)")
    ax_q.plot(t, [r["outstanding_max"] for r in rows], label="outstanding (max)")
    ax_q.set_ylabel("requests")
    ax_q.set_xlabel("seconds since start")
    ax_q.legend(loc="upper left", fontsize="small")

    fig.suptitle(f"{result.get('target', '')}  capacity {cap if cap is not None else '-'}/s")
    fig.savefig(str(path), format="png", dpi=90)
